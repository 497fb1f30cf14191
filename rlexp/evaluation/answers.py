"""Answer extraction and grading: the canonical parser (boxed → last number → unparsed / none).

``extract_answer(text)`` returns ``(answer, method)``. The method says where the answer came from,
so G2 and the parser audit see every fallback:

``boxed``
    The content of the *last* ``\\boxed{...}`` / ``\\fbox{...}`` (brace-matched, so
    ``\\boxed{\\frac{1}{2}}`` survives; ``\\boxed{{12}}`` and a bare ``\\boxed 7`` count too) is
    exactly one number. Units (``\\text{ cm}``, ``^\\circ``, ``\\%``, ``\\$``, ``12 dollars``)
    and a leading ``x =`` are stripped first; what remains must be ONE number: an integer (thousands
    written ``1,000``, ``1{,}000``, ``1\\,000`` or ``1 000``), a decimal, or a fraction of integers.
``last_number``
    The fallback tier: no complete box, or an explicit "the (final) answer is N" after the last box
    that names a different number (models that box intermediate results and state the answer in
    prose). Without a box, the last bold span that is one number (``**12**``, ``**Answer: 12**``)
    wins over trailing incidental numbers ("... in base 7"); else the last number in the text,
    provided it stands alone: not one operand of an expression (``\\frac{1+\\sqrt{5}}{2}`` is not
    2, ``3-5`` is not 5), not an element of a list (``1, 2, 3``), not the right side of an equation
    between unknowns (``2x + z = 1``).
``unparsed``
    There was an answer, but it is not one number: the last box holds ``3 \\text{ and } 4``,
    ``12, 345`` (a list), ``\\pm 2021``, ``2\\sqrt{3}``; the last box is unclosed (a truncated
    output: no fallback to an earlier number); or the last number is part of an expression. The
    answer is the raw box content (None for an unclosed box or a bare expression), so
    ``math_verify`` mode can still judge symbolic answers. Exact mode never grades it correct, and
    G2 and the parser audit count it as a parse failure.
``none``
    Nothing numeric anywhere.

Decided on purpose: a final "the answer is $10,455$" after earlier boxes overrides the boxes (the
boxes were intermediate results) and is reported as ``last_number``; when the statement repeats the
last box's number the method stays ``boxed``. A statement that has a number but is not one number
(``the answer is 3 or 4``) makes the output ``unparsed``.

Full-width digits, digits of other scripts and the unicode minus are normalised first. The scan is
linear in the text length (one pass over braces with a stack of open boxes; the old per-box rescan
was quadratic on repeated unclosed ``\\boxed{``). The module is pure and imports only the standard
library: the OpenRLHF reward file embeds this source verbatim, so training rewards and
``rlexp eval`` grade with byte-identical code. ``PARSER_VERSION`` is part of every eval record's
identity; change it whenever a change here can change a verdict.

``is_correct(answer, gold, mode="math_verify")`` delegates to HF ``math-verify`` (imported
lazily) for datasets whose golds are not integers.
"""

from __future__ import annotations

import math
import re
import unicodedata
from fractions import Fraction
from typing import Literal, NamedTuple

PARSER_VERSION = "2"
ParseMethod = Literal["boxed", "last_number", "unparsed", "none"]
PARSE_METHODS: tuple[str, ...] = ("boxed", "last_number", "unparsed", "none")
PARSE_FAILURES: tuple[str, ...] = ("unparsed", "none")  # what G2 and the parser audit count as failures
ANSWERED_METHODS: tuple[str, ...] = ("boxed", "last_number")  # the answer is one canonical number

# Box contents longer than this are not one number with units; they are reported as unparsed (and
# kept only up to this length), which also bounds the work per box.
MAX_ANSWER_CHARS = 500

# --------------------------------------------------------------------------- characters

_SPACES = "\u00a0\u2007\u2009\u202f\u3000"  # no-break, figure, thin, narrow no-break, ideographic
_CHAR_FOLD = {ord(c): "-" for c in "\u2212\ufe63\uff0d"}  # minus sign, small and full-width hyphen-minus
_CHAR_FOLD.update({ord("\uff0b"): "+", ord("\uff0c"): ",", ord("\uff0e"): ".", ord("\uff04"): "$"})
_CHAR_FOLD.update({ord(c): " " for c in _SPACES})


class _Fold(dict):
    """``str.translate`` table: the fixed map above, and every non-ASCII decimal digit (full-width
    ``１２``, Arabic-Indic, Devanagari, ...) to its ASCII digit. Superscripts are not decimal digits
    (``unicodedata.decimal`` refuses them), so ``10²`` never becomes ``102``."""

    def __missing__(self, code: int) -> int | str:
        char = chr(code)
        value: int | str = code
        if code > 127 and char.isdecimal():
            value = str(unicodedata.decimal(char))
        self[code] = value
        return value


_FOLD = _Fold(_CHAR_FOLD)


def fold_characters(text: str) -> str:
    """Unicode minus and full-width forms to ASCII; linear, and a no-op on ASCII text."""
    return text if text.isascii() else text.translate(_FOLD)


# --------------------------------------------------------------------------- one number

_TEXT_COMMANDS = r"text|textbf|textrm|textit|textnormal|mathrm|mathbf|mathit|mbox|operatorname"
_TEXT_WHOLE = re.compile(rf"^\\(?:{_TEXT_COMMANDS})\s*\{{([^{{}}]*)\}}$")
_POWER = r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?"  # cm^2, \text{ m}^3
# Suffixes stripped from the end of a box, one at a time: degrees, percent, dollars, a full stop,
# a \text{...} unit, or up to three unit words right after the number ("18 dollars", "40 square cm").
_TRAILING_DECORATION = re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°|\\%|%|\\\$|\$|\.)$")
_TRAILING_TEXT_UNIT = re.compile(rf"\\(?:{_TEXT_COMMANDS})\s*\{{(?P<unit>[^{{}}]*)\}}{_POWER}$")
_TRAILING_WORDS = re.compile(rf"(?<=[0-9}}])\s*(?P<unit>[A-Za-z]{{2,}}(?:\s+[A-Za-z]{{2,}}){{0,2}}){_POWER}$")
# Words that join two quantities: "4 or more" and "3 \text{ and } 4" are not a number with a unit.
_CONNECTIVES = frozenset((
    "and", "or", "to", "than", "more", "less", "plus", "minus", "times", "over", "by", "per", "of", "out",
    "not", "nor", "from", "between", "through", "at", "least", "most", "about", "approximately", "roughly",
    "nearly", "almost", "only", "if", "else", "each",
))
_LEADING_DECORATION = re.compile(r"^(?:\\\$|\$)")
_VAR_EQUALS = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*(?!=)")
# One number: sign, then an integer with one consistent thousands separator (the first group has
# no leading zero, so "0,111" is not a thousands number) or plain digits, then decimals.
_ONE_NUMBER = re.compile(
    r"^(?P<sign>[-+]?)\s*"
    r"(?P<int>[1-9][0-9]{0,2}(?P<sep>,| )[0-9]{3}(?:(?P=sep)[0-9]{3})*|[0-9]+)?"
    r"(?:\.(?P<frac>[0-9]+))?$"
)
_BRACED_INT = r"(?:\{\s*([-+]?[0-9]+)\s*\}|([0-9]))"
_FRACTION = re.compile(rf"^(?P<sign>[-+]?)\s*\\[dtc]?frac\s*{_BRACED_INT}\s*{_BRACED_INT}$")
_SLASH = re.compile(r"^(?P<sign>[-+]?)\s*([0-9]+)\s*/\s*([0-9]+)$")


def parse_number(raw: object) -> str | None:
    """The canonical form of ``raw`` if it is exactly one number (with units and a leading
    ``x =`` stripped), else None. Integers come out as ``-?\\d+``, decimals without trailing zeros
    (``5.0`` → ``5``), fractions reduced (``\\frac{6}{3}`` → ``2``, ``\\frac{2}{4}`` → ``1/2``)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    s = fold_characters(str(raw)).strip()
    if not s or len(s) > MAX_ANSWER_CHARS:
        return None
    s = _strip_redundant_braces(s)
    # spacing commands: \! (a kern, as in 49,\!479) disappears; the others are one space, which
    # the grammar below accepts only as a thousands separator between digit groups.
    s = s.replace("\\!", "").replace("{,}", ",")
    for token in ("\\,", "\\;", "\\:", "\\ ", "~", "\\quad", "\\qquad"):
        s = s.replace(token, " ")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\s+", " ", s).strip()
    for _ in range(3):  # \text{40}, \textbf{\text{12}}: the whole answer is text → its content
        whole = _TEXT_WHOLE.match(s)
        if not whole:
            break
        s = whole.group(1).strip()
    s = _VAR_EQUALS.sub("", s, count=1)
    s = _LEADING_DECORATION.sub("", s).strip()
    s = _strip_units(s)
    s = _strip_redundant_braces(s)
    return _canonical(s)


def _strip_units(s: str) -> str:
    """``12\\text{ cm}^2`` → ``12``, ``90^\\circ`` → ``90``, ``18 dollars.`` → ``18``; a unit that
    holds a digit or a connective (``\\text{ or more}``) is not a unit and stays."""
    for _ in range(8):
        s = s.rstrip()
        m = _TRAILING_DECORATION.search(s)
        if m is None:
            m = _TRAILING_TEXT_UNIT.search(s) or _TRAILING_WORDS.search(s)
            if m is None or not _is_unit(m.group("unit")):
                return s
        s = s[: m.start()]
    return s


def _is_unit(unit: str) -> bool:
    words = unit.lower().replace(".", " ").split()
    return bool(re.fullmatch(r"[A-Za-z .]*", unit)) and not any(w in _CONNECTIVES for w in words)


def _strip_redundant_braces(s: str) -> str:
    """``{{12}}`` → ``12``: outer braces that match each other carry nothing."""
    for _ in range(4):
        if not (s.startswith("{") and s.endswith("}")):
            return s
        depth = 0
        for i, ch in enumerate(s):
            depth += 1 if ch == "{" else -1 if ch == "}" else 0
            if depth == 0 and i < len(s) - 1:
                return s  # "{1}{2}": the first brace closes early
        s = s[1:-1].strip()
    return s


def _canonical(s: str) -> str | None:
    m = _ONE_NUMBER.match(s)
    if m and (m.group("int") or m.group("frac")):
        digits = (m.group("int") or "0").replace(",", "").replace(" ", "").lstrip("0") or "0"
        decimals = (m.group("frac") or "").rstrip("0")
        text = f"{digits}.{decimals}" if decimals else digits
        return f"-{text}" if m.group("sign") == "-" and text != "0" else text
    for pattern in (_FRACTION, _SLASH):
        m = pattern.match(s)
        if m:
            parts = [g for g in m.groups()[1:] if g is not None]
            num, den = int(parts[0]), int(parts[1])
            if den == 0:
                return None
            value = Fraction(num, den) * (-1 if m.group("sign") == "-" else 1)
            return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return None


# --------------------------------------------------------------------------- boxes


class BoxScan(NamedTuple):
    """The last box in a text: ``content`` (None when it is unclosed), where it starts and ends."""

    content: str | None
    start: int
    end: int


# A box opener (\boxed{, \boxed 7, \fbox{), an escaped brace, or a brace: everything else is skipped
# by the regex engine, so the Python loop runs once per brace, not once per character.
_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*(\{)?|\\[{}]|[{}]")
_BARE_CONTENT = re.compile(r"[^\s$\\{}]+")


def last_box(text: str) -> BoxScan | None:
    """The box that opens last (complete, unclosed, or bare ``\\boxed 7``); empty boxes are ignored.

    One pass: a brace depth counter and a stack of open boxes (a box closes when the depth falls
    below the level its brace opened). Linear in ``len(text)``, however many boxes never close.
    """
    depth = 0
    stack: list[tuple[int, int, int]] = []  # (opener start, content start, depth inside the box)
    best: BoxScan | None = None
    for m in _BOX_TOKEN.finditer(text):
        token = m.group(0)
        if token[0] == "\\" and len(token) > 2:  # an opener
            if m.group(1):
                depth += 1
                stack.append((m.start(), m.end(), depth))
                continue
            bare = _BARE_CONTENT.match(text, m.end())
            if bare and (best is None or m.start() > best.start):
                best = BoxScan(bare.group(0), m.start(), bare.end())
        elif token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if stack and depth < stack[-1][2]:
                start, content_start, _level = stack.pop()
                content = text[content_start : m.start()]
                if content.strip() and (best is None or start > best.start):
                    best = BoxScan(content, start, m.end())
    if stack and (best is None or stack[-1][0] > best.start):
        return BoxScan(None, stack[-1][0], len(text))
    return best


def last_boxed(text: str) -> str | None:
    """Content of the last complete box (None when there is none or the last one is unclosed)."""
    box = last_box(fold_characters(text)) if isinstance(text, str) else None
    return None if box is None else box.content


# --------------------------------------------------------------------------- prose

_SEPARATED = r"[1-9][0-9]{0,2}(?P<sep>,\\!|,|\{,\}|\\,|\\ | )[0-9]{3}(?:(?P=sep)[0-9]{3})*(?![0-9])"
_PROSE_NUMBER = re.compile(
    r"(?<![\w.\\])-?(?:\\[dtc]?frac\s*" + _BRACED_INT + r"\s*" + _BRACED_INT
    + r"|(?:" + _SEPARATED + r"|[0-9]+)(?:\.[0-9]+)?(?![0-9]))"
)
_BOLD = re.compile(r"\*\*([^*\n]{1,80}?)\*\*")
_ANSWER_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.IGNORECASE)
_FINAL_STATEMENT = re.compile(r"\b(?:final\s+answer\s*(?:is\b|:)|the\s+answer\s+is\b)\s*:?\s*", re.IGNORECASE)
_STATEMENT_SPAN = re.compile(
    r"\$\$(.{1,200}?)\$\$|\$(.{1,200}?)\$|\\\((.{1,200}?)\\\)|\\\[(.{1,200}?)\\\]|([^\n$]{1,200}?)(?=\.\s|\.$|\n|$|,\s|;)",
    re.DOTALL,
)
_RIGHT_DELIMITERS = ("$", "\\)", "\\]", "**", "\\\\", "<|", "\\end", "\\%", "%", "°", "\\degree", '"', "'",
                     "\\,", "\\;", "\\:", "\\ ", "\\quad", "\\qquad")
_RIGHT_COMMAND = re.compile(rf"\^\s*\{{?\s*\\circ|\\(?:{_TEXT_COMMANDS})(?![A-Za-z])")
_LEFT_DELIMITERS = ("$", "\\(", "\\[", "**", ":", "\\\\", '"', "'", "#", ".", "?", "!", ";")
_SIDE_BOUNDARY = re.compile(r"[=<>$\n:;]|\\[(\[]|\\approx|\.\s|,\s|(?<![\\A-Za-z{])[A-Za-z]{2,}(?![A-Za-z])")
_SINGLE_VARIABLE = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?$|^[A-Za-z]\([^()]{0,20}\)$")
_TEXT_COMMAND_ANY = re.compile(rf"\\(?:{_TEXT_COMMANDS})\s*\{{[^{{}}]*\}}")


def _last_bold_number(text: str) -> str | None:
    """The last bold span that names a number, if it is one number (``**Final answer:**`` labels
    are skipped; ``**5**, no: **6 or 7**`` does not fall back to 5)."""
    for content in reversed(_BOLD.findall(text)):
        if not re.search(r"[0-9]", content):
            continue
        return parse_number(_ANSWER_LABEL.sub("", content).strip().strip("$ "))
    return None


def _last_match(pattern: re.Pattern[str], text: str, pos: int = 0) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text, pos):  # noqa: B007 - only the last match is wanted
        pass
    return last


def _prose_number(text: str) -> tuple[str | None, bool]:
    """``(number, found)``: the last number in ``text`` if it stands alone; ``found`` says whether
    there was any number at all (a last number that is part of an expression gives ``(None, True)``)."""
    last = _last_match(_PROSE_NUMBER, text)
    if last is None:
        return None, False
    if not _stands_alone(text, last.start(), last.end()):
        return None, True
    return parse_number(last.group(0)), True


def _stands_alone(text: str, start: int, end: int) -> bool:
    """Whether the number at ``text[start:end]`` is an answer rather than one part of something:
    an operand (``3-5``, ``\\frac{..}{2}``, ``(0,1)``, ``4x``, ``\\pm 2021``), an element of a list
    (``1, 2, 3``), one of two alternatives (``3 or 4``) or an equation between unknowns."""
    return _right_ok(text[end : end + 40]) and _left_ok(text[max(0, start - 80) : start])


def _right_ok(right: str) -> bool:
    r = right.lstrip(" \t")
    if not r or r[0] == "\n":
        return True
    if r[0] in ".,;:?":  # sentence punctuation, but not "5,6" or "5.x"
        rest = r[1:]
        return not rest or rest[0] in " \t\n*$\"')" or rest.startswith(("\\)", "\\]", "\\\\"))
    if r.startswith(_RIGHT_DELIMITERS) or _RIGHT_COMMAND.match(r):
        return True
    word = re.match(r"[A-Za-z]+", r)
    if word is None:
        return False  # an operator, a bracket, a brace, another number
    if r is right and len(word.group(0)) < 2:
        return False  # "4x": a coefficient
    # "3 or 4", "3 and 4": one of two quantities
    return not (word.group(0).lower() in _CONNECTIVES and re.search(r"[0-9]", r[: len(word.group(0)) + 20]))


def _left_ok(left: str) -> bool:
    window = left.rstrip(" \t")
    if not window or window.endswith("\n"):
        return True
    if window.endswith("="):
        return _plain_left_side(window[:-1])
    if window.endswith(","):
        return not re.search(r"[0-9]\s*$", window[:-1])  # "1, 2, 3": an element of a list
    if re.search(r"[0-9]:$", window):
        return False  # "1:1", "12:00": a ratio or a time
    if re.search(r"\\[A-Za-z]+$", window):
        return False  # \pm 2021, \times 5, \approx 11, \sqrt 2
    if window[-1].isalpha():  # "the answer is 42", but not "3 and 4", "5 or 6"
        word = re.search(r"[A-Za-z]+$", window)
        joined = word is not None and word.group(0).lower() in _CONNECTIVES
        return not (joined and re.search(r"[0-9]", window[-(len(word.group(0)) + 20) : -len(word.group(0))]))
    if window.endswith("*") and not window.endswith("**"):
        return False  # a product
    return window.endswith(_LEFT_DELIMITERS)


def _plain_left_side(left: str) -> bool:
    """Whether ``<left> = N`` states N as a value: the side before ``=`` is one variable (``x``,
    ``a_1``, ``f(3)``) or arithmetic on numbers (``3 + 5``); not an equation between unknowns."""
    boundary = _last_match(_SIDE_BOUNDARY, left)
    side = left[boundary.end() if boundary else 0 :].strip()
    if not side or _SINGLE_VARIABLE.match(side):
        return True
    bare = _TEXT_COMMAND_ANY.sub(" ", side)  # \text{Area} = 189: a label
    bare = re.sub(r"\\[A-Za-z]+", " ", bare)  # \times, \cdot, \frac: operators, not unknowns
    return not re.search(r"[A-Za-z]", bare)


def _final_statement(text: str) -> tuple[str | None, str] | None:
    """After the last box: the last "the answer is X" / "final answer: X" that names a number, as
    ``(number or None, raw X)``; None when there is no such statement."""
    last = _last_match(_FINAL_STATEMENT, text)
    if last is None:
        return None
    span = _STATEMENT_SPAN.match(text, last.end())
    if span is None:
        return None
    raw = next(g for g in span.groups() if g is not None).strip().strip("*").strip()
    if not re.search(r"[0-9]", raw):
        return None  # "the answer is correct": no number named
    number = parse_number(raw)
    if number is None and span.group(5) is not None:  # prose: "12,000,023. I hope", "4 because ..."
        head = _PROSE_NUMBER.match(raw)
        if head is not None and _right_ok(raw[head.end() :]):
            number = parse_number(head.group(0))
    return number, raw


# --------------------------------------------------------------------------- extraction


def extract_answer(text: object) -> tuple[str | None, ParseMethod]:
    """``(answer, method)`` for a model output; never raises (non-strings give ``(None, "none")``)."""
    if not isinstance(text, str) or not text:
        return None, "none"
    try:
        return _extract(fold_characters(text))
    except Exception:  # a parser bug must cost one answer, never a training step or an eval run
        return None, "unparsed"


def _extract(text: str) -> tuple[str | None, ParseMethod]:
    box = last_box(text)
    if box is not None:
        if box.content is None:
            return None, "unparsed"  # truncated inside the box: no fallback to an earlier number
        number = parse_number(box.content)
        statement = _final_statement(text[box.end :])
        if statement is not None and statement[0] != number:
            if statement[0] is None:
                return statement[1], "unparsed"
            return statement[0], "last_number"
        if number is None:
            raw = box.content.strip()
            return (raw if len(raw) <= MAX_ANSWER_CHARS else None), "unparsed"
        return number, "boxed"
    bold = _last_bold_number(text)
    if bold is not None:
        return bold, "last_number"
    number, found = _prose_number(text)
    if number is not None:
        return number, "last_number"
    return None, ("unparsed" if found else "none")


def normalize_answer(raw: object) -> str | None:
    """Canonical number for ``raw`` (see :func:`parse_number`), or the stripped text when it is not
    one number (so two spellings of one number compare equal); None for empty input."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    number = parse_number(raw)
    if number is not None:
        return number
    text = fold_characters(str(raw)).strip()
    return text or None


def is_correct(answer: str | None, gold: object, mode: str = "exact") -> bool:
    """Whether an extracted answer matches the gold.

    ``exact``: both are one number (:func:`parse_number`) and the numbers are equal ("1,000" ==
    "1000.0"); an answer that is not one number is never correct. ``math_verify``: HF math-verify
    decides equivalence (``verify(parse(gold), parse(answer))`` — gold first: math-verify's verify
    is not symmetric).
    """
    if answer is None or gold is None:
        return False
    if mode == "exact":
        gold_text = gold if isinstance(gold, str) else _gold_to_text(gold)
        if gold_text is None:
            return False
        a, g = parse_number(answer), parse_number(gold_text)
        return a is not None and a == g
    if mode == "math_verify":
        return _math_verify_equal(str(answer), str(gold))
    raise ValueError(f"unknown grading mode {mode!r} (exact | math_verify)")


def grade_output(output: str, gold: object, mode: str = "exact") -> tuple[str | None, str, bool]:
    """``(answer, method, correct)`` for a full model output — what every eval record stores.

    ``exact`` grades our extracted answer, and only when it is one number (``boxed`` or
    ``last_number``). ``math_verify`` lets math-verify extract from the whole output as well (it
    understands LaTeX environments our integer parser does not), and judges the raw content of an
    ``unparsed`` box, so a dataset with symbolic golds is graded the way math-verify's own examples
    expect.
    """
    answer, method = extract_answer(output)
    if mode == "math_verify":
        correct = _math_verify_equal(output, str(gold), wrap=False) or is_correct(answer, gold, "math_verify")
        return answer, method, correct
    if mode != "exact":
        raise ValueError(f"unknown grading mode {mode!r} (exact | math_verify)")
    return answer, method, method in ANSWERED_METHODS and is_correct(answer, gold, mode)


def _gold_to_text(gold: object) -> str | None:
    if isinstance(gold, bool):
        return None
    if isinstance(gold, int):
        return str(gold)
    if isinstance(gold, float) and math.isfinite(gold):
        return repr(gold)
    return None


def _math_verify_equal(answer: str, gold: str, *, wrap: bool = True) -> bool:
    from math_verify import parse, verify  # ~0.3 s import (sympy): only when a dataset asks for it

    try:
        gold_parsed = parse(_as_latex(gold))
        answer_parsed = parse(_as_latex(answer) if wrap else answer)
        return bool(verify(gold_parsed, answer_parsed))
    except Exception:
        return False


def _as_latex(text: str) -> str:
    """math-verify extracts from LaTeX environments; a bare extracted answer gets wrapped."""
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"
