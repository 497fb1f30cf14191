"""Answer extraction and grading — the seed's canonical parser (SOP §1: boxed → last number → none).

``extract_answer(text)`` returns ``(answer, method)``:

1. ``boxed`` — the content of the *last* ``\\boxed{...}`` (or ``\\fbox{...}``), found by brace
   matching so nested braces (``\\boxed{\\frac{1}{2}}``) survive; an unclosed box (a truncated
   output) does not count.
2. ``last_number`` — the fallback tier when there is no box. Lesson from §11.26: models that write
   ``**12**`` instead of ``\\boxed{12}`` lost their answer to a trailing incidental number
   ("... in base 7", "7 seats"). So the fallback first takes the last *bold* span that is just a
   number (optionally labelled "Answer:"), and only then the last number in the text. Both are
   the fallback tier and are reported as ``last_number`` (the parser audit looks at these).
3. ``none`` — nothing numeric anywhere.

The answer is normalised (:func:`normalize_answer`): ``$`` and spaces dropped, ``\\text{...}``
units removed (``40\\text{ cm}`` → ``40``), thousands commas, ``+``/unicode minus, trailing
period, ``5.0`` → ``5``, and ``\\frac``/``\\dfrac``/``a/b`` of integers → an integer when it divides,
else the reduced ``a/b``.

The trainer's reward calls this on every rollout, so it is pure, regex-only and never raises.
``is_correct(answer, gold, mode="math_verify")`` delegates to HF ``math-verify`` (imported lazily)
for datasets whose golds are not integers.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Literal

ParseMethod = Literal["boxed", "last_number", "none"]
PARSE_METHODS: tuple[str, ...] = ("boxed", "last_number", "none")

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed\s+([^\s$\\{}]+)")  # "\boxed 5" (valid LaTeX, seen in outputs)
# A number in prose: optional sign (not glued to a preceding word/digit, so "3-5" gives 5 not -5),
# thousands groups "1,234,567" or plain digits, optional decimals.
_PROSE_NUMBER = re.compile(r"(?<![\w.])([-−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?)")
_BOLD = re.compile(r"\*\*([^*\n]{1,80}?)\*\*")
_ANSWER_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.IGNORECASE)
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox|mathbf|textnormal|operatorname)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"^\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*([-+]?\d+)\s*\}$")
_FRAC_SHORT = re.compile(r"^\\[dt]?frac\s*(\d)\s*(\d)$")  # \frac12
_SLASH = re.compile(r"^([-+]?\d+)\s*/\s*([-+]?\d+)$")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?$|^[-+]?\.\d+$")
_UNIT_WORDS = re.compile(r"^(.*?\d\.?)\s*[A-Za-z][A-Za-z ]*\.?$")
_UNIT_POWER = re.compile(r"\^\s*\{?\s*[23]\s*\}?$")
_VAR_EQUALS = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?!=)")


def extract_answer(text: object) -> tuple[str | None, ParseMethod]:
    """``(answer, method)`` for a model output; never raises (non-strings give ``(None, "none")``)."""
    if not isinstance(text, str) or not text:
        return None, "none"
    try:
        boxed = last_boxed(text)
        if boxed is not None:
            answer = normalize_answer(boxed)
            if answer:
                return answer, "boxed"
        bold = _last_bold_number(text)
        if bold is not None:
            return bold, "last_number"
        number = last_number(text)
        if number is not None:
            return number, "last_number"
    except Exception:  # a parser bug must cost one answer, never a training step or an eval run
        return None, "none"
    return None, "none"


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (brace-matched), or of a bare ``\\boxed 5``."""
    best: tuple[int, str] | None = None
    for match in _BOX_OPEN.finditer(text):
        depth, start = 1, match.end()
        i = start
        while i < len(text) and depth:
            ch = text[i]
            if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2  # an escaped brace \{ \} does not open or close the box
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        if depth == 0:
            content = text[start : i - 1]
            if content.strip():
                best = (match.start(), content)
    for match in _BOX_BARE.finditer(text):
        if best is None or match.start() > best[0]:
            best = (match.start(), match.group(1))
    return None if best is None else best[1]


def last_number(text: str) -> str | None:
    """The last number in prose, normalised ("1,234" → "1234", "5.0" → "5"), or None."""
    matches = _PROSE_NUMBER.findall(text)
    if not matches:
        return None
    return normalize_answer(matches[-1]) or None


def _last_bold_number(text: str) -> str | None:
    for content in reversed(_BOLD.findall(text)):
        candidate = _ANSWER_LABEL.sub("", content).strip()
        candidate = candidate.strip("$ ").rstrip(".")
        normal = normalize_answer(candidate)
        if normal is not None and _is_numeric(normal):
            return normal
    return None


def _is_numeric(answer: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(?:\.\d+)?|-?\d+/\d+", answer))


def normalize_answer(raw: object) -> str | None:
    """Canonical string for comparing answers; integers come out as plain ``-?\\d+``.

    Non-numeric answers (``\\sqrt{2}``, ``(B)``) are returned cleaned but otherwise intact, so
    math-verify mode can still read them. Returns None for empty input; never raises.
    """
    if not isinstance(raw, str | int) or isinstance(raw, bool):
        return None
    s = str(raw).strip()
    if not s:
        return None
    s = s.replace("−", "-").replace("\\$", "").replace("$", "").replace("{,}", ",")
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "~"):
        s = s.replace(token, "" if token not in ("\\ ", "~", "\\,", "\\;", "\\:") else " ")
    s = _strip_text_commands(s)
    s = re.sub(r"\^\s*\{?\\circ\}?|\\%|%|\\degree|°", "", s)
    s = s.strip()
    s = _VAR_EQUALS.sub("", s)  # "x = 5" → "5"
    s = s.strip().rstrip(".").strip()
    if not s:
        return None
    compact = s.replace(" ", "")
    number = _as_number(compact)
    if number is not None:
        return number
    unit = _UNIT_WORDS.match(s)  # "40 cm", "12 dollars"
    if unit:
        number = _as_number(unit.group(1).replace(" ", "").rstrip("."))
        if number is not None:
            return number
    return compact


def _strip_text_commands(s: str) -> str:
    """``\\text{...}`` keeps its content when that is the whole answer, else is a unit to drop."""
    for _ in range(4):  # nested \text{\textbf{..}} — bounded, never loops forever
        whole = _TEXT_CMD.fullmatch(s.strip()) is not None
        new = _TEXT_CMD.sub(lambda m, keep=whole: m.group(1) if keep else "", s)
        if not whole and new != s:
            new = _UNIT_POWER.sub("", new.strip())  # "12\text{ cm}^2" → "12"
        if new == s:
            break
        s = new
    return s


def _as_number(s: str) -> str | None:
    if s.startswith("+"):
        s = s[1:]
    if _PLAIN_NUMBER.match(s):
        digits = s.replace(",", "")
        if digits.endswith("."):
            digits = digits[:-1]
        return _canonical_decimal(digits)
    for pattern in (_FRAC, _FRAC_SHORT, _SLASH):
        m = pattern.match(s)
        if m:
            num, den = int(m.group(1)), int(m.group(2))
            if den == 0:
                return None
            value = Fraction(num, den)
            if value.denominator == 1:
                return str(value.numerator)
            return f"{value.numerator}/{value.denominator}"
    return None


def _canonical_decimal(digits: str) -> str | None:
    negative = digits.startswith("-")
    body = digits.lstrip("-+")
    if not body or len(body) > 400:  # absurd digit strings stay as text rather than big ints
        return digits
    if "." in body:
        whole, frac = body.split(".", 1)
        frac = frac.rstrip("0")
        whole = whole.lstrip("0") or "0"
        text = whole if not frac else f"{whole}.{frac}"
    else:
        text = body.lstrip("0") or "0"
    if text == "0":
        return "0"
    return f"-{text}" if negative else text


def is_correct(answer: str | None, gold: object, mode: str = "exact") -> bool:
    """Whether an extracted answer matches the gold.

    ``exact``: normalised strings are equal (integers compare by value: "1,000" == "1000.0").
    ``math_verify``: HF math-verify decides equivalence (``verify(parse(gold), parse(answer))`` —
    gold first: math-verify's verify is not symmetric).
    """
    if answer is None or gold is None:
        return False
    if mode == "exact":
        gold_text = gold if isinstance(gold, str) else _gold_to_text(gold)
        if gold_text is None:
            return False
        a, g = normalize_answer(answer), normalize_answer(gold_text)
        return a is not None and a == g
    if mode == "math_verify":
        return _math_verify_equal(str(answer), str(gold))
    raise ValueError(f"unknown grading mode {mode!r} (exact | math_verify)")


def grade_output(output: str, gold: object, mode: str = "exact") -> tuple[str | None, str, bool]:
    """``(answer, method, correct)`` for a full model output — what every eval record stores.

    ``exact`` grades our extracted answer. ``math_verify`` lets math-verify extract from the whole
    output as well (it understands LaTeX environments our integer parser does not), so a dataset
    with symbolic golds is graded the way math-verify's own examples expect.
    """
    answer, method = extract_answer(output)
    if mode == "math_verify":
        correct = _math_verify_equal(output, str(gold), wrap=False) or is_correct(answer, gold, "math_verify")
        return answer, method, correct
    return answer, method, is_correct(answer, gold, mode)


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
