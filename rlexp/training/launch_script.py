"""A launch script's launch command, as an argv, read without running anything.

What a researcher's ``train_grpo.sh`` usually is: variables (``NAME=value``, ``export``, arrays,
``$((1024 * 2))``), ``set -x``, ``mkdir``/``echo`` lines, comments, and one launch command broken
over lines with ``\\``, often ending in ``$@``. :func:`read_script` parses the script with
tree-sitter's bash grammar and evaluates what can be known statically, as bash would expand it:
assignments and ``export``, environment prefixes (``VAR=v python3 -m ...``), ``${VAR:-default}``
and its relatives, arithmetic expansion, arrays and ``"${ARR[@]}"``, word splitting of unquoted
expansions, ``$@``/``$*`` as empty (the script run without arguments), here-strings and
``bash -c`` that hold the command, and ``if``/``case`` statements whose choice is known from those
values (the branch bash would take is read; the others are not). :func:`launch_of` then finds the trainer's own argv inside the
launcher (``python -m``, ``torchrun``, ``deepspeed``, ``accelerate launch``, ``ray job submit … --``).

Nothing is run: no subprocess, no ``eval``, no ``source``. What only running could tell (``$(…)``,
a variable neither the script nor ``--env`` sets, a variable assigned inside a loop or a
conditional whose choice is not known) becomes an :class:`Unknown` argument that says where it came from; the caller
refuses it only where it reaches a value plan needs. Sizes are bounded (:data:`MAX_SCRIPT_BYTES`,
:data:`MAX_VALUE_CHARS`, :data:`MAX_EXPANDED_CHARS`, :data:`MAX_DEPTH`): an expansion bomb is
refused by its size before it is built, so time and memory stay proportional to the script.
"""

from __future__ import annotations

import fnmatch
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# The stated bounds: a launch script is a few kilobytes; these are generous and keep any input
# (a 10 MB argument, a variable doubled until it is gigabytes, deep nesting) a fast refusal.
MAX_SCRIPT_BYTES = 1 << 20        # the script file itself
MAX_VALUE_CHARS = 1 << 20         # one variable's value or one argument
MAX_EXPANDED_CHARS = 8 << 20      # everything expanded while reading one script
MAX_DEPTH = 100                   # nesting of expansions, substitutions and here-strings
MAX_WORDS = 100_000               # words of one command or elements of one array
_INT64 = 1 << 64

# commands that are not the launch (left out and noted), and those that change what follows
_LAUNCHERS = re.compile(r"^(python(\d(\.\d+)?)?|torchrun|deepspeed|accelerate|ray|trl|uv)$")
_UV_RUN_VALUES = {"--with", "--python", "-p", "--project", "--directory", "--env-file", "--extra", "--group",
                  "--package", "--index", "--index-url"}
_CHANGES_CONTEXT = ("cd", "pushd", "popd", "source", ".", "eval", "alias")
# commands that run the rest of their words as the command: `nohup python -m ...`, `exec ...`,
# `time ...`, `env A=1 python ...`
_WRAPPERS = ("nohup", "exec", "time", "env")
_DEFAULT_OPERATORS = (":-", "-", ":=", "=", ":+", "+", ":?", "?")  # ${name<op>word} with a word to expand
_CONSTRUCTS = {"for_statement": "a for loop", "c_style_for_statement": "a for loop",
               "while_statement": "a while/until loop", "if_statement": "an if statement",
               "case_statement": "a case statement", "function_definition": "a function definition",
               "test_command": "a test ([ ... ])", "negated_command": "a negated command (! ...)"}


class ScriptError(ValueError):
    """A script that cannot be read: ``line`` names where."""

    def __init__(self, line: int | None, message: str):
        self.line = line
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Unknown:
    """An argument whose value only running the script would tell. ``known`` is the text around
    the unknown part with it left empty (``data.train_files=`` for ``data.train_files=$(ls)``),
    so that the caller can name the flag or key it belongs to; ``what`` says what is unknown."""

    line: int
    what: str
    known: str = ""

    def __str__(self) -> str:  # what a message shows for it
        return f"<unknown: {self.what}>"

    @property
    def cause(self) -> str:
        """``what`` without the advice to give the value (for a value import leaves out anyway: a
        credential is not to be typed on a command line for it)."""
        return re.sub(r"; give it with --env [A-Za-z_]\w*=VALUE", "", self.what)


Arg = str | Unknown


@dataclass
class Script:
    argv: list[Arg]                   # the launch command, expanded (Unknown where it cannot be known)
    line: int                         # where it starts
    variables: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)   # the command's own prefix (CUDA_VISIBLE_DEVICES=...)


def _parser():
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def read_script(text: str, env: dict[str, str] | None = None, *, script_name: str = "script.sh",
                script_dir: str | None = None) -> Script:
    """The script's launch command (see the module doc): ``env`` is what the script would find in
    its environment (``--env``); ``script_dir`` the folder the script is in (the value of the idiom
    ``$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)``, unknown without it); a :class:`ScriptError` naming the line when the script is not bash
    the grammar can read, has no launch command or two, or exceeds a bound."""
    if "\0" in text:
        raise ScriptError(None, "a NUL byte: not a shell script")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_SCRIPT_BYTES:
        raise ScriptError(None, f"{size} bytes: a launch script rlexp reads is at most {MAX_SCRIPT_BYTES} bytes")
    # a last line ending in `\` continues into the end of the file, which bash reads as nothing; the
    # grammar would call it an error, so that backslash becomes a blank (lines keep their numbers)
    end = re.search(r"\\(\r?\n)?[ \t]*\Z", text)
    if end is not None and not re.search(r"(?<!\\)(\\\\)+(\r?\n)?[ \t]*\Z", text):
        text = text[:end.start()] + " " + text[end.start() + 1:]
    reader = _Reader(text, dict(env or {}), script_name)
    reader.script_dir = script_dir
    reader.run()
    return reader.result()


class _Words:
    """Builds the words of one shell word as bash would: quoted parts join, unquoted expansions
    split on whitespace, ``"${A[@]}"`` gives one word per element."""

    def __init__(self, reader: _Reader):
        self.reader = reader
        self.words: list[Arg] = []
        self.parts: list[str] | None = None
        self.unknown: tuple[int, str] | None = None

    def _start(self) -> None:
        if self.parts is None:
            self.parts = []

    def end(self) -> None:
        if self.parts is not None:
            known = "".join(self.parts)
            if self.unknown is not None:
                self.words.append(Unknown(self.unknown[0], self.unknown[1], known))
            else:
                self.words.append(known)
        self.parts, self.unknown = None, None

    def literal(self, text: str) -> None:
        self.reader.count(len(text))
        self._start()
        self.parts.append(text)

    def split(self, text: str) -> None:
        """An unquoted expansion: split on blanks (IFS as bash sets it by default)."""
        self.reader.count(len(text))
        pieces = text.split()
        if not pieces:
            return
        if text[:1].isspace():
            self.end()
        for i, piece in enumerate(pieces):
            if i:
                self.end()
            self._start()
            self.parts.append(piece)
        if text[-1:].isspace():
            self.end()

    def elements(self, items: list[Arg], quoted: bool) -> None:
        if len(items) + len(self.words) > MAX_WORDS:
            raise ScriptError(self.reader.line, f"more than {MAX_WORDS} words from one array: refused by size, not run")
        self.reader.count(len(items))
        for i, item in enumerate(items):
            if i:
                self.end()
            if isinstance(item, Unknown):
                self.literal(item.known)
                self.mark_unknown(item.line, item.what)
            elif quoted:
                self.literal(item)
            else:
                self.split(item)

    def mark_unknown(self, line: int, what: str) -> None:
        self._start()
        if self.unknown is None:
            self.unknown = (line, what)

    def done(self) -> list[Arg]:
        self.end()
        return self.words


class _Reader:
    """One script read: its variables as they stand, the launch commands met, the notes."""

    def __init__(self, text: str, env: dict[str, str], script_name: str):
        self.source = text.encode("utf-8", "surrogateescape")
        self.vars: dict[str, Any] = dict(env)   # str, list[Arg] (an array) or Unknown
        self.script_name = script_name
        self.line: int | None = None  # the line being read, for the messages
        self.notes: list[str] = []
        self.launches: list[tuple[int, list[Arg], dict[str, str]]] = []
        self.expanded = 0
        self.depth = 0
        self.sourced: int | None = None   # the line of a `source` that was not read
        self.hidden: list[tuple[int, int, str, int]] = []  # launches inside loops etc.: line, its line, what
        self.inner_line: int | None = None  # inside a here-string or bash -c: the line that holds it
        self.script_dir: str | None = None  # the folder the script is in, when import knows it

    # --- bounds -------------------------------------------------------------------------------
    def count(self, n: int) -> None:
        if n > MAX_VALUE_CHARS:
            raise ScriptError(self.line, f"a value of {n} characters: rlexp reads values of at most "
                              f"{MAX_VALUE_CHARS} (refused by size, not run)")
        self.expanded += n
        if self.expanded > MAX_EXPANDED_CHARS:
            raise ScriptError(self.line, f"the script expands to more than {MAX_EXPANDED_CHARS} characters "
                              "(an expansion that multiplies a value): refused by size, not run")

    @contextmanager
    def nested(self):
        """One level deeper (a statement inside another, an expansion inside a word): bounded, so
        that no input reaches Python's recursion limit."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ScriptError(self.line, f"statements or expansions nested more than {MAX_DEPTH} levels deep: "
                                  "refused by size, not run")
            yield
        finally:
            self.depth -= 1

    # --- the tree -------------------------------------------------------------------------------
    def text(self, node) -> str:
        return node.text.decode("utf-8", "surrogateescape")

    def short(self, node, limit: int = 60) -> str:
        """A node's text on one line, for a note."""
        return " ".join(self.text(node).replace("\\\n", " ").split())[:limit]

    def run(self) -> None:
        tree = _parser().parse(self.source)
        self.check_tree(tree.root_node)
        self.statements(tree.root_node)

    def check_tree(self, root) -> None:
        if not root.has_error:
            return
        stack, reread = [root], False
        while stack:
            node = stack.pop()
            if node.type == "expansion" and self.reparsed_argument(node) is not None:
                reread = True  # the grammar misread its default word, read again on its own (reparsed_argument)
                continue
            if node.type == "command" and _misread_pipe(node) is not None:
                reread = True  # `VAR=v 2>&1 | cmd`: a pipeline the grammar misreads (command() reads it)
                continue
            if node.type == "ERROR" or node.is_missing:
                line = node.start_point[0] + 1
                snippet = self.text(node).splitlines()[0][:40] if self.text(node) else node.type
                raise ScriptError(line, f"not bash that the grammar can read (near {snippet!r})")
            if node.has_error:
                stack.extend(reversed(node.children))
        if not reread:
            raise ScriptError(None, "not bash that the grammar can read")

    def statements(self, node) -> None:
        for child in node.named_children:
            self.statement(child)

    def statement(self, node) -> None:
        with self.nested():
            self._statement(node)

    def _statement(self, node) -> None:
        self.line = self.inner_line or node.start_point[0] + 1
        kind = node.type
        if kind == "comment":
            return
        if kind == "variable_assignment":
            self.assign(node)
        elif kind == "variable_assignments":
            for child in node.named_children:
                self.assign(child)
        elif kind == "declaration_command":
            self.declaration(node)
        elif kind == "unset_command":
            for child in node.named_children[0:]:
                if child.type in ("variable_name", "word"):
                    self.vars.pop(self.text(child), None)
        elif kind == "command":
            self.command(node, [])
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind == "pipeline":
            parts = [c for c in node.named_children if c.type != "comment"]
            self.statement(parts[0])
            for rest in parts[1:]:
                self.notes.append(f"line {rest.start_point[0] + 1}: | {self.short(rest)} left out "
                                  "(where the output went)")
        elif kind == "list":
            for child in node.named_children:
                self.statement(child)
        elif kind in ("subshell", "compound_statement"):
            self.statements(node)
        elif (kind == "if_statement" and self.if_statement(node)) or \
                (kind == "case_statement" and self.case_statement(node)):
            return  # a conditional whose branch is known: read as bash would run it
        elif kind in _CONSTRUCTS:
            self.construct(node, _CONSTRUCTS[kind])
        else:
            self.notes.append(f"line {self.line}: {self.short(node, 40)!r} ({kind}) left out")

    def construct(self, node, name: str) -> None:
        """A loop, a conditional, a function: not evaluated. What it assigns becomes unknown; a
        launch command inside it cannot be read as one command."""
        line = node.start_point[0] + 1
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type == "variable_assignment":
                target = n.child_by_field_name("name")
                if target is not None:
                    var = self.text(target).split("[", 1)[0]
                    self.vars[var] = Unknown(line, f"${var} (assigned inside {name} at line {line}, not run)")
            if n.type == "for_statement":
                var = n.child_by_field_name("variable")
                if var is not None:
                    self.vars[self.text(var)] = Unknown(line, f"${self.text(var)} (the variable of the for loop at "
                                                        f"line {line})")
            if n.type == "command":
                strength = _launch_strength(self.text(n).replace("\\\n", " ").split())
                if strength:
                    self.hidden.append((n.start_point[0] + 1, line, name, strength))
            stack.extend(n.named_children)
        self.notes.append(f"line {line}: {name} not run (nothing in the script is run)")

    def if_statement(self, node) -> bool:
        """An ``if`` whose conditions can be known (``[ "$x" = y ]``, ``[[ $n -gt 1 ]]``, ``-z``, ``-n``,
        ``&&``/``||``/``!`` of those) runs the branch bash would run; False: not known, left to
        :meth:`construct`."""
        branches: list[tuple[Any, list]] = []  # (condition node or None for else, statements)
        condition, body, in_body = node.child_by_field_name("condition"), [], False
        for child in node.children:
            if child.type == "then":
                in_body = True
            elif child.type in ("elif_clause", "else_clause", "fi"):
                break
            elif in_body and child.is_named and child.type != "comment":
                body.append(child)
        branches.append((condition, body))
        for clause in node.named_children:
            if clause.type == "elif_clause":
                test = next((c for c in clause.named_children if c.type != "comment"), None)
                statements, seen = [], False
                for c in clause.children:
                    if c.type == "then":
                        seen = True
                    elif seen and c.is_named and c.type != "comment":
                        statements.append(c)
                branches.append((test, statements))
            elif clause.type == "else_clause":
                branches.append((None, [c for c in clause.named_children if c.type != "comment"]))
        chosen = None
        for test, statements in branches:
            if test is None:
                chosen = statements
                break
            value = self.condition(test)
            if value is None:
                return False
            if value:
                chosen = statements
                break
        line = node.start_point[0] + 1
        self.notes.append(f"line {line}: if statement read (its conditions are known without running anything)")
        for statement in chosen or []:
            self.statement(statement)
        return True

    def case_statement(self, node) -> bool:
        """A ``case`` whose word and patterns can be known runs the item bash would run: the first
        whose pattern matches (a glob; ``|`` between patterns; quoted parts match as text), up to
        its ``;;``. False (left to :meth:`construct`): an unknown word or pattern, an extended glob
        (``@(…)``), or an item that falls through (``;&``, ``;;&``)."""
        subject = node.child_by_field_name("value")
        word = self.operand(subject) if subject is not None else None
        if word is None:
            return False
        chosen = None
        for item in node.named_children:
            if item.type != "case_item":
                continue
            patterns, body, in_body = [], [], False
            for child in item.children:
                if child.type == ")" and not in_body:
                    in_body = True
                elif child.type in (";&", ";;&"):
                    return False
                elif not in_body and child.is_named:
                    patterns.append(child)
                elif in_body and child.is_named and child.type != "comment":
                    body.append(child)
            for pattern in patterns:
                matched = self.case_pattern(pattern, word)
                if matched is None:
                    return False
                if matched:
                    chosen = body
                    break
            if chosen is not None:
                break
        self.notes.append(f"line {node.start_point[0] + 1}: case statement read (its word and patterns are known "
                          "without running anything)")
        for statement in chosen or []:
            self.statement(statement)
        return True

    def case_pattern(self, node, word: str) -> bool | None:
        """Whether a case pattern matches ``word``; None where it cannot be known."""
        text = self.text(node)
        if node.type in ("string", "raw_string", "ansi_c_string"):
            value = self.operand(node)  # quoted: matched as text
            return None if value is None else value == word
        if re.search(r"[@!+?*]\(", text) or "\\" in text:
            return None  # an extended glob or an escaped character: not read here
        if "$" in text or "`" in text or '"' in text or "'" in text:
            value = self.operand(node)
            if value is None:
                return None
            text = value
        return fnmatch.fnmatchcase(word, text)

    def condition(self, node) -> bool | None:
        """A condition's truth where it is known from the script's values; None otherwise."""
        kind = node.type
        if kind == "test_command":
            inner = [c for c in node.named_children if c.type != "comment"]
            return self.test(inner[0]) if len(inner) == 1 else None
        if kind == "list" and len(node.named_children) == 2:
            operator = next((c.type for c in node.children if c.type in ("&&", "||")), None)
            left, right = (self.condition(c) for c in node.named_children)
            if operator == "&&":
                return False if False in (left, right) else (None if None in (left, right) else True)
            if operator == "||":
                return True if True in (left, right) else (None if None in (left, right) else False)
            return None
        if kind == "negated_command" and node.named_children:
            value = self.condition(node.named_children[-1])
            return None if value is None else not value
        return None

    def test(self, node) -> bool | None:
        kind = node.type
        if kind == "parenthesized_expression" and node.named_children:
            return self.test(node.named_children[0])
        if kind == "unary_expression":
            operator = self.text(node.child_by_field_name("operator") or node.children[0])
            if operator == "!":
                value = self.test(node.named_children[-1])
                return None if value is None else not value
            if operator not in ("-z", "-n"):
                return None  # file tests and the like: only the machine that runs it knows
            value = self.operand(node.named_children[-1])
            return None if value is None else ((value == "") == (operator == "-z"))
        if kind == "binary_expression":
            operator = self.text(node.child_by_field_name("operator"))
            if operator in ("&&", "||", "-a", "-o"):
                left = self.test(node.child_by_field_name("left"))
                right = self.test(node.child_by_field_name("right"))
                if operator in ("&&", "-a"):
                    return False if False in (left, right) else (None if None in (left, right) else True)
                return True if True in (left, right) else (None if None in (left, right) else False)
            left, right = self.operand(node.child_by_field_name("left")), self.operand(node.child_by_field_name("right"))
            if left is None or right is None:
                return None
            if operator in ("=", "=="):
                return left == right
            if operator == "!=":
                return left != right
            numeric = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
                       "-gt": int.__gt__, "-ge": int.__ge__}
            if operator in numeric and re.fullmatch(r"-?\d+", left.strip()) and re.fullmatch(r"-?\d+", right.strip()):
                return numeric[operator](int(left), int(right))
            return None
        value = self.operand(node)
        return None if value is None else value != ""

    def operand(self, node) -> str | None:
        if node is None or node.type == "regex":
            return self.text(node) if node is not None else None
        words = self.words(node, split=False)
        if len(words) != 1 or isinstance(words[0], Unknown):
            return "" if not words else None
        return words[0]

    def declaration(self, node) -> None:
        """``export``/``declare``/``readonly``/``local``: their assignments (whether a variable is
        exported does not matter: the launch command sees the script's values either way)."""
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child)

    def assign(self, node) -> None:
        target = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        name = self.text(target)
        appending = any(c.type == "+=" for c in node.children)
        index = None
        if target.type == "subscript":
            name = self.text(target.child_by_field_name("name"))
            index = target.child_by_field_name("index")
        if value is None:
            new: Any = ""
        elif value.type == "array":
            items: list[Arg] = []
            for element in value.named_children:
                if element.type != "comment":
                    items += self.words(element)  # an unknown element stays one unknown element
                if len(items) > MAX_WORDS:
                    raise ScriptError(self.line, f"an array of more than {MAX_WORDS} elements: refused by size, not run")
            new = items
        else:
            new = self.scalar(value, name)
        old = self.vars.get(name)
        if index is not None:
            position = self.arith_of(index)
            if isinstance(old, Unknown) or isinstance(position, Unknown) or isinstance(new, Unknown):
                new = Unknown(self.line, f"${name} (an element assigned from an unknown value)")
            else:
                array = list(old) if isinstance(old, list) else ([old] if isinstance(old, str) else [])
                array += [""] * (position + 1 - len(array))
                array[position] = new
                new = array
        elif appending and old is not None:
            if isinstance(old, Unknown) or isinstance(new, Unknown):
                new = old if isinstance(old, Unknown) else new
            elif isinstance(old, list):
                new = old + (new if isinstance(new, list) else [new])
            else:
                new = old + (new if isinstance(new, str) else " ".join(new))
        self.vars[name] = new

    def scalar(self, node, name: str) -> str | Unknown:
        """An assignment's value: no word splitting (bash does not split there)."""
        words = self.words(node, split=False)
        word = words[0] if words else ""
        if isinstance(word, Unknown):
            return Unknown(word.line, word.what, word.known)
        self.count(len(word))
        return word

    # --- commands ---------------------------------------------------------------------------
    def redirected(self, node) -> None:
        body = node.child_by_field_name("body")
        herestrings = [c for c in node.named_children if c.type == "herestring_redirect"]
        others = [c for c in node.named_children if (body is None or c.id != body.id) and c.type != "herestring_redirect"]
        if others:
            self.notes.append(f"line {self.line}: {' '.join(self.short(c) for c in others)[:60]} left out "
                              "(where the output went)")
        if body is None:
            return
        if body.type == "command":
            self.command(body, herestrings)
        else:
            self.statement(body)

    def command(self, node, herestrings: list) -> None:
        line = node.start_point[0] + 1
        pipe = _misread_pipe(node)
        if pipe is not None:
            # bash runs each element of a pipeline in a subshell: the assignments before the `|` set
            # nothing in the script, and what follows it only takes their output
            rest = self.text(node)[pipe.end_byte - node.start_byte:]
            self.notes.append(f"line {line}: {self.short(node)} left out (assignments in a pipeline's "
                              f"subshell, and where the output went: |{' '.join(rest.replace(chr(92) + chr(10), ' ').split())[:40]})")
            return
        prefix: dict[str, str] = {}
        argv: list[Arg] = []
        for child in node.named_children:
            if child.type == "variable_assignment":
                target = self.text(child.child_by_field_name("name"))
                value = child.child_by_field_name("value")
                got = self.scalar(value, target) if value is not None else ""
                prefix[target] = got if isinstance(got, str) else str(got)
            elif child.type == "herestring_redirect":
                herestrings.append(child)
            elif child.type in ("file_redirect", "heredoc_redirect"):
                self.notes.append(f"line {line}: {self.short(child)} left out (where the output went)")
            elif child.type == "comment":
                continue
            elif child.type in ("number", "word") and self.text(child).isdigit() and \
                    self.source[child.end_byte:child.end_byte + 1] in (b">", b"<"):
                # `2>&1` right after a line continuation: the grammar reads the 2 as a word, bash as
                # the redirect's file descriptor (digits written against `>` or `<` always are)
                continue
            else:
                target = child.named_children[0] if child.type == "command_name" else child
                argv += self.words(target)
        if not argv:  # VAR=value alone with a redirect: an assignment
            for name, value in prefix.items():
                self.vars[name] = value
            return
        head = argv[0]
        if isinstance(head, Unknown):
            self.notes.append(f"line {line}: a command named by {head.what} left out (not run)")
            return
        word = head.rsplit("/", 1)[-1]
        while word in _WRAPPERS and len(argv) > 1:
            argv = argv[1:]
            while word == "env" and argv and isinstance(argv[0], str) and (
                    argv[0].startswith("-") or re.match(r"^[A-Za-z_]\w*=", argv[0])):
                if "=" in argv[0] and not argv[0].startswith("-"):
                    name, _, value = argv[0].partition("=")
                    prefix[name] = value
                argv = argv[2:] if argv[0] in ("-u", "--unset", "-C", "--chdir") else argv[1:]
            if not argv or isinstance(argv[0], Unknown):
                self.notes.append(f"line {line}: {word} with nothing known to run left out")
                return
            word = argv[0].rsplit("/", 1)[-1]
        if word in ("bash", "sh") and (herestrings or "-c" in argv[1:]):
            inner = None
            if herestrings:
                words = self.words(herestrings[0].named_children[-1], split=False)
                inner = words[0] if words else ""
            else:
                position = argv.index("-c")
                inner = argv[position + 1] if position + 1 < len(argv) else ""
            if isinstance(inner, Unknown):
                self.notes.append(f"line {line}: {word} running {inner.what} left out (not known)")
                return
            with self.nested():
                self.inner_script(inner, line)
            return
        if word in _CHANGES_CONTEXT:
            if word in ("source", "."):
                self.sourced = line
                self.notes.append(f"line {line}: {word} {' '.join(map(str, argv[1:]))[:60]} not read (nothing is "
                                  "run): what it would set is unknown")
            else:
                self.notes.append(f"line {line}: {' '.join(map(str, argv))[:60]} left out (not run)")
            return
        if word == "shift" or word == "set" and len(argv) > 1 and str(argv[1]) == "--":
            self.notes.append(f"line {line}: {word} left out (the script is read as run without arguments)")
            return
        if _LAUNCHERS.match(word) and _is_launch(argv):
            self.launches.append((line, argv, prefix))
            return
        self.notes.append(f"line {line}: {' '.join(map(str, argv))[:50]} left out (not the launch command)")

    @contextmanager
    def reading(self, source: bytes, line: int):
        """Nodes of another parse (a here-string, a word parsed again): byte offsets are into
        ``source``, and what they report is on ``line`` of the script."""
        saved = (self.source, self.inner_line)
        self.source, self.inner_line = source, line
        try:
            yield
        finally:
            self.source, self.inner_line = saved

    def reparsed_argument(self, node) -> tuple[bytes, list] | None:
        """The word of ``${name<op>word}`` parsed again on its own where the grammar cannot read it
        in place: (the text parsed, the word's nodes in that parse), or None.

        tree-sitter's bash grammar has no arithmetic expansion in that word: ``$((`` there opens a
        command substitution around a ``((`` command, so ``${x:-$(((a + b) * 2))}`` becomes an
        ERROR node (``$((( a + b``) and a stray word (``) * 2))``), though bash reads it (an
        arithmetic expansion, tried first after ``$((``). The same characters as a command's
        argument (``: word``) are read correctly, with the quoting and expansions of an unquoted
        word. So exactly this shape is read again that way: the expansion is well formed up to its
        operator, closed by a real ``}``, and its word holds ``$((``; the new parse must be clean
        and one simple command whose arguments cover the whole word (a ``;``, ``|``, ``#`` or
        newline there, which bash would take as text, makes it fail: still refused). This reads the
        characters again with the same grammar; nothing is run."""
        if not node.has_error:
            return None
        children = node.children
        if len(children) < 4 or children[0].type != "${" or children[-1].type != "}" or children[-1].is_missing:
            return None
        operator = next((i for i, c in enumerate(children) if c.type in _DEFAULT_OPERATORS), None)
        if operator is None or any(c.has_error or c.is_missing for c in children[:operator + 1]):
            return None
        word = self.source[children[operator].end_byte:children[-1].start_byte]
        if b"$((" not in word:
            return None
        source = b": " + word
        root = _parser().parse(source).root_node
        if root.has_error or len(root.named_children) != 1 or root.named_children[0].type != "command":
            return None
        command = root.named_children[0]
        parts = command.named_children
        if command.end_byte != len(source) or not parts or parts[0].type != "command_name" or \
                any(p.type in ("comment", "variable_assignment") or "redirect" in p.type for p in parts[1:]):
            return None
        return source, parts[1:]

    def inner_script(self, text: str, line: int) -> None:
        """A here-string or ``bash -c`` that holds commands: read as a script of its own, in this
        script's variables; its lines are reported as the outer line."""
        source = text.encode("utf-8", "surrogateescape")
        tree = _parser().parse(source)
        start = len(self.launches)
        with self.reading(source, line):
            try:
                self.check_tree(tree.root_node)
            except ScriptError as exc:
                raise ScriptError(line, f"the command text passed to bash: {exc.message}") from None
            self.statements(tree.root_node)
        self.launches[start:] = [(line, argv, env) for _, argv, env in self.launches[start:]]

    # --- words -----------------------------------------------------------------------------
    def words(self, node, *, split: bool = True) -> list[Arg]:
        builder = _Words(self)
        with self.nested():
            self.word_into(node, builder, quoted=not split)
        return builder.done()

    def word_into(self, node, out: _Words, *, quoted: bool) -> None:
        kind = node.type
        if kind in ("word", "number", "command_name", "variable_name"):
            # variable_name: the grammar's name for the leading letters of a ${V:-1e-6} or
            # ${V:-org/model} default (`1e`, `org`): text there, as bash reads it
            if kind == "command_name":
                for child in node.named_children:
                    self.word_into(child, out, quoted=quoted)
                return
            out.literal(_unescape_word(self.text(node)))
        elif kind == "raw_string":
            out.literal(self.text(node)[1:-1])
        elif kind == "regex":  # the pattern of ${v%%pattern}: a glob, taken as written
            out.literal(self.text(node))
        elif kind == "ansi_c_string":
            out.literal(_ansi_c(self.text(node)[2:-1]))
        elif kind in ("string", "translated_string"):
            inner = node if kind == "string" else node.named_children[0]
            if not _only_all_elements(self.text(inner)):  # "$@" and "${A[@]}" alone can be no word at all
                out._start()
            # the grammar leaves some text between a string's parts out of every node (and puts a
            # blank before `$` into the expansion's node): what no part covers is literal text
            position, end = inner.start_byte + 1, inner.end_byte - 1
            for child in inner.children:
                if child.type == '"':
                    continue
                if child.start_byte > position:
                    out.literal(_unescape_double(self.source[position:child.start_byte].decode("utf-8",
                                                                                              "surrogateescape")))
                if child.type == "string_content":
                    out.literal(_unescape_double(self.text(child)))
                else:
                    text = self.text(child)
                    lead = len(text) - len(text.lstrip())
                    if lead and text.lstrip().startswith("$"):
                        out.literal(text[:lead])
                    self.word_into(child, out, quoted=True)
                position = max(position, child.end_byte)
            if end > position:
                out.literal(_unescape_double(self.source[position:end].decode("utf-8", "surrogateescape")))
        elif kind == "concatenation":
            for child in node.children:
                self.word_into(child, out, quoted=quoted)
        elif kind in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion") and \
                self.inner_line is None:
            self.line = node.start_point[0] + 1  # an unknown names the line it is on
            self.word_into_expansion(node, out, quoted=quoted)
        else:
            self.word_into_expansion(node, out, quoted=quoted)

    def word_into_expansion(self, node, out: _Words, *, quoted: bool) -> None:
        kind = node.type
        if kind == "simple_expansion":
            names = [c for c in node.named_children if c.type in ("variable_name", "special_variable_name")]
            name = self.text(names[0]) if names else self.text(node).strip()[1:]
            self.emit(name, self.lookup(name, None), out, quoted=quoted)
        elif kind == "expansion":
            self.expansion(node, out, quoted=quoted)
        elif kind == "arithmetic_expansion":
            value = self.arith_of(node.named_children[0] if node.named_children else None)
            if isinstance(value, Unknown):
                out.mark_unknown(value.line, value.what)
            else:
                out.literal(str(value))
        elif kind == "command_substitution" and self.text(node).startswith("$((") and \
                self.text(node).endswith("))"):
            # the grammar reads `$((1024 * 2))` inside `${V:-…}` as `$(` + a subshell: bash reads
            # `$((…))` as arithmetic
            value = self.arith_text(self.text(node)[3:-2])
            if isinstance(value, Unknown):
                out.mark_unknown(value.line, value.what)
            else:
                out.literal(str(value))
        elif kind == "command_substitution" and self.script_dir is not None and \
                _SCRIPT_DIR_IDIOM.match(self.text(node)):
            out.literal(self.script_dir)  # the folder the script is in, which that idiom prints
        elif kind == "command_substitution":
            out.mark_unknown(self.line, f"{self.text(node)[:40]} (a command substitution: only running it tells "
                                        "its value)")
        elif kind == "process_substitution":
            out.mark_unknown(self.line, f"{self.text(node)[:40]} (a process substitution)")
        elif kind == "brace_expression":
            out.mark_unknown(self.line, f"{self.text(node)[:40]} (a brace expansion)")
        else:
            out.mark_unknown(self.line, f"{self.text(node)[:40]!r} ({kind.replace('_', ' ')})")

    def lookup(self, name: str, index: str | None):
        """A variable's value: str, list[str] for ``[@]``/``[*]``, None when unset, or Unknown."""
        if name in ("@", "*"):
            return []  # the script is read as run without arguments
        if name == "#":
            return "0"
        if name == "0":
            return self.script_name
        if name in ("$", "!", "?", "-", "RANDOM", "SECONDS", "BASHPID", "PPID", "LINENO"):
            return Unknown(self.line, f"${name} (known only when the script runs)")
        value = self.vars.get(name)
        if isinstance(value, Unknown):
            return value
        if index is None:
            if isinstance(value, list):
                return value[0] if value else None
            return value
        if index in ("@", "*"):
            return [] if value is None else (list(value) if isinstance(value, list) else [value])
        position = self.arith_text(index)
        if isinstance(position, Unknown):
            return position
        array = value if isinstance(value, list) else ([value] if isinstance(value, str) else [])
        return array[position] if -len(array) <= position < len(array) else None

    def unset(self, name: str) -> Unknown:
        why = "not assigned in the script"
        if self.sourced is not None:
            why += f" (line {self.sourced} sources a file, which is not read)"
        hint = f"give it with --env {name}=VALUE" if re.match(r"^[A-Za-z_]\w*$", name) else "the script's argument"
        return Unknown(self.line, f"${name} ({why}; {hint})")

    def emit(self, name: str, value, out: _Words, *, quoted: bool) -> None:
        if isinstance(value, Unknown):
            out.mark_unknown(value.line, value.what)
        elif value is None:
            if name.isdigit():  # an argument the script was not given: empty, as bash has it
                return
            unknown = self.unset(name)
            out.mark_unknown(unknown.line, unknown.what)
        elif isinstance(value, list):
            out.elements(value, quoted)
        elif quoted:
            out.literal(value)
        else:
            out.split(value)

    def expansion(self, node, out: _Words, *, quoted: bool) -> None:
        children = [c for c in node.children if c.type not in ("${", "}")]
        length = bool(children) and children[0].type == "#" and len(children) > 1
        if length:
            children = children[1:]
        if not children:
            out.mark_unknown(self.line, "${} (an empty expansion)")
            return
        target = children[0]
        index = None
        if target.type == "subscript":
            name = self.text(target.child_by_field_name("name"))
            index = self.text(target.child_by_field_name("index"))
        elif target.type in ("variable_name", "special_variable_name", "number", "word"):
            name = self.text(target)
        else:
            out.mark_unknown(self.line, f"{self.text(node)[:40]} (an indirect or unusual expansion)")
            return
        value = self.lookup(name, index)
        rest = children[1:]
        if length:
            if isinstance(value, Unknown):
                out.mark_unknown(value.line, value.what)
            elif isinstance(value, list):
                out.literal(str(len(value)))
            else:
                out.literal(str(len(value or "")))
            return
        if not rest:
            self.emit(name, value, out, quoted=quoted)
            return
        operator = self.text(rest[0])
        argument_nodes = rest[1:]
        reparsed = self.reparsed_argument(node)

        def argument() -> str | Unknown:
            inner = _Words(self)
            with self.nested():
                if reparsed is None:
                    for n in argument_nodes:
                        self.word_into(n, inner, quoted=True)
                else:  # the word parsed again: the blanks between its parts are its own text
                    source, parts = reparsed
                    with self.reading(source, self.line):
                        for i, n in enumerate(parts):
                            if i:
                                inner.literal(_unescape_word(source[parts[i - 1].end_byte:n.start_byte].decode(
                                    "utf-8", "surrogateescape")))
                            self.word_into(n, inner, quoted=True)
            got = inner.done()
            return got[0] if got else ""

        unset = value is None or (isinstance(value, list) and not value)
        empty = unset or value == ""
        if operator in (":-", "-", ":=", "="):
            use_default = empty if operator.startswith(":") else unset
            if isinstance(value, Unknown):
                out.mark_unknown(value.line, value.what)
                return
            if use_default:
                default = argument()
                if operator in (":=", "="):
                    self.vars[name] = default
                self.emit(name, default, out, quoted=quoted)
            else:
                self.emit(name, value, out, quoted=quoted)
        elif operator in (":+", "+"):
            if isinstance(value, Unknown):
                out.mark_unknown(value.line, value.what)
                return
            if not (empty if operator == ":+" else unset):
                self.emit(name, argument(), out, quoted=quoted)
        elif operator in (":?", "?"):
            if isinstance(value, Unknown) or (empty if operator == ":?" else unset):
                unknown = value if isinstance(value, Unknown) else self.unset(name)
                out.mark_unknown(unknown.line, unknown.what)
            else:
                self.emit(name, value, out, quoted=quoted)
        elif operator in ("#", "##", "%", "%%"):
            if isinstance(value, Unknown) or value is None:
                self.emit(name, value, out, quoted=quoted)
                return
            pattern = argument()
            if isinstance(pattern, Unknown):
                out.mark_unknown(pattern.line, pattern.what)
                return
            values = value if isinstance(value, list) else [value]
            cut = [_remove(v, pattern, operator) for v in values]
            self.emit(name, cut if isinstance(value, list) else cut[0], out, quoted=quoted)
        else:
            out.mark_unknown(self.line, f"{self.text(node)[:40]} (a ${{...{operator}...}} expansion rlexp does not "
                                        "evaluate)")

    # --- arithmetic (bash's: 64-bit integers that wrap) --------------------------------------
    def arith_text(self, text: str) -> int | Unknown:
        if re.fullmatch(r"-?\d+", text.strip()):
            return int(text)
        tree = _parser().parse(f"x=$(({text}))".encode("utf-8", "surrogateescape"))
        if tree.root_node.has_error:
            return Unknown(self.line, f"{text[:40]!r} (arithmetic rlexp cannot read)")
        expansion = tree.root_node.named_children[0].child_by_field_name("value")
        return self.arith_of(expansion.named_children[0] if expansion.named_children else None)

    def arith_of(self, node) -> int | Unknown:
        if node is None:
            return 0
        with self.nested():
            return self._arith(node)

    def _arith(self, node) -> int | Unknown:
        kind = node.type
        if kind == "number":
            text = self.text(node)
            try:
                return _wrap(int(text, 0) if not re.fullmatch(r"0\d+", text) else int(text, 8))
            except ValueError:
                return Unknown(self.line, f"{text!r} (not a number bash reads)")
        if kind in ("variable_name", "word"):
            return self.arith_variable(self.text(node))
        if kind in ("simple_expansion", "expansion"):
            words = self.words(node, split=False)
            word = words[0] if words else ""
            return word if isinstance(word, Unknown) else self.arith_value(word)
        if kind == "parenthesized_expression":
            inner = [c for c in node.named_children]
            return self.arith_of(inner[0]) if inner else 0
        if kind == "unary_expression":
            operator = self.text(node.children[0])
            value = self.arith_of(node.named_children[-1])
            if isinstance(value, Unknown):
                return value
            return _wrap({"-": -value, "+": value, "!": int(not value), "~": ~value}.get(operator, value))
        if kind == "binary_expression":
            left = self.arith_of(node.child_by_field_name("left"))
            right = self.arith_of(node.child_by_field_name("right"))
            operator = self.text(node.child_by_field_name("operator"))
            if isinstance(left, Unknown):
                return left
            if isinstance(right, Unknown):
                return right
            return _binary(operator, left, right, self.line)
        if kind in ("command_substitution", "process_substitution"):
            return Unknown(self.line, f"{self.text(node)[:40]} (a command substitution: only running it tells its value)")
        if kind == "ternary_expression":
            parts = node.named_children
            condition = self.arith_of(parts[0])
            if isinstance(condition, Unknown):
                return condition
            return self.arith_of(parts[1] if condition else parts[2])
        return Unknown(self.line, f"{self.text(node)[:40]!r} (arithmetic rlexp does not evaluate)")

    def arith_variable(self, name: str) -> int | Unknown:
        value = self.lookup(name, None)
        if isinstance(value, Unknown):
            return value
        if value is None:
            return 0  # bash: an unset variable is 0 in arithmetic
        return self.arith_value(value)

    def arith_value(self, text: str) -> int | Unknown:
        text = text.strip()
        if not text:
            return 0
        if re.fullmatch(r"[-+]?\d+", text):
            return _wrap(int(text))
        if re.fullmatch(r"[A-Za-z_]\w*", text):
            with self.nested():
                return self.arith_variable(text)
        return self.arith_text(text)

    def result(self) -> Script:
        # a trainer's own module (2) outranks a bare Python script (1, e.g. a data preparation step)
        strongest = max([_launch_strength(argv) for _, argv, _ in self.launches] + [h[3] for h in self.hidden],
                        default=0)
        for line, construct_line, name, strength in self.hidden:
            if strength == strongest:
                raise ScriptError(line, f"the launch command is inside {name} (line {construct_line}): its values "
                                  "depend on running it; import a script with the launch command outside it")
        if strongest == 2:
            for line, argv, _ in [entry for entry in self.launches if _launch_strength(entry[1]) == 1]:
                self.notes.append(f"line {line}: {' '.join(map(str, argv))[:50]} left out (a script run before "
                                  "the trainer's launch)")
            self.launches = [entry for entry in self.launches if _launch_strength(entry[1]) == 2]
        if not self.launches:
            raise ScriptError(None, "no launch command in the script (python -m, torchrun, deepspeed, accelerate "
                              "launch, ray job submit -- ..., trl grpo)")
        if len(self.launches) > 1:
            first, second = self.launches[0][0], self.launches[1][0]
            raise ScriptError(second, f"a second launch command (the first is at line {first}): only a script with "
                              "one launch command can be imported")
        line, argv, env = self.launches[0]
        variables = {k: v for k, v in self.vars.items() if not isinstance(v, Unknown)}
        return Script(argv, line, variables, self.notes, env)


def _only_all_elements(quoted: str) -> bool:
    return bool(re.fullmatch(r'"(\$[@*]|\$\{[@*]\}|\$\{[A-Za-z_]\w*\[[@*]\]\})"', quoted))


def _is_launch(argv: list[Arg]) -> bool:
    return _launch_strength(argv) > 0



# `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)` (also with `$0`, `-P`, `>/dev/null`): the folder the
# script is in, the usual way a script finds files beside it
_SCRIPT_DIR_IDIOM = re.compile(
    r'^\$\(\s*cd\s+(?:--\s+)?"?\$\(\s*dirname\s+(?:--\s+)?"?\$(?:\{BASH_SOURCE(?:\[0\])?\}|BASH_SOURCE|0|\{0\})"?\s*\)"?'
    r'\s*(?:(?:&>|>)\s*/dev/null\s*(?:2>&1\s*)?)?&&\s*pwd(?:\s+-P)?\s*\)$')


def _misread_pipe(node):
    """The ``|`` inside a ``command`` node where tree-sitter-bash misreads a pipeline whose first
    element has assignments and redirects but no command (``max_turns=10 2>&1 | tee log``, which bash
    runs: ``bash -n`` accepts it): the ERROR node holding the ``|``, or None for any other tree."""
    before = []
    for child in node.children:
        if child.type == "ERROR":
            if child.text.strip() not in (b"|", b"|&") or not before:
                return None
            return child if all(c.type in ("variable_assignment", "file_redirect") for c in before) else None
        if child.is_named:
            before.append(child)
    return None


def _launch_strength(argv: list[Arg]) -> int:
    """2: a trainer's own module or command; 1: a Python script a trainer may run (TRL's); 0: none."""
    try:
        launch = launch_of(argv)
    except ScriptError:
        return 0
    if launch.module.endswith(".py"):
        words = [w.rsplit("/", 1)[-1] for w in launch.launcher if isinstance(w, str)]
        return 2 if any(w in ("accelerate", "torchrun", "deepspeed") for w in words) else 1
    return 2


def _wrap(value: int) -> int:
    value %= _INT64
    return value - _INT64 if value >= _INT64 // 2 else value


def _binary(operator: str, left: int, right: int, line: int | None) -> int:
    if operator in ("/", "%") and right == 0:
        raise ScriptError(line, "division by zero in an arithmetic expansion")
    if operator == "/":
        quotient = abs(left) // abs(right)
        return _wrap(quotient if (left < 0) == (right < 0) else -quotient)
    if operator == "%":
        return _wrap(left - right * int(left / right) if abs(left) < 2 ** 52 else
                     (abs(left) % abs(right)) * (1 if left >= 0 else -1))
    if operator == "**":
        if right < 0:
            raise ScriptError(line, "a negative exponent in an arithmetic expansion")
        return _wrap(pow(left, right, _INT64))
    table = {"+": lambda: left + right, "-": lambda: left - right, "*": lambda: left * right,
             "<<": lambda: left << (right % 64), ">>": lambda: left >> (right % 64), "&": lambda: left & right,
             "|": lambda: left | right, "^": lambda: left ^ right, "<": lambda: int(left < right),
             ">": lambda: int(left > right), "<=": lambda: int(left <= right), ">=": lambda: int(left >= right),
             "==": lambda: int(left == right), "!=": lambda: int(left != right),
             "&&": lambda: int(bool(left and right)), "||": lambda: int(bool(left or right))}
    if operator not in table:
        raise ScriptError(line, f"the arithmetic operator {operator!r} is not one rlexp evaluates")
    return _wrap(table[operator]())


def _remove(value: str, pattern: str, operator: str) -> str:
    """``${v#p}`` / ``${v##p}`` / ``${v%p}`` / ``${v%%p}``: the shortest/longest match of a glob removed."""
    cuts = range(len(value) + 1)
    if operator.startswith("#"):
        order = reversed(cuts) if operator == "##" else cuts
        for i in order:
            if fnmatch.fnmatchcase(value[:i], pattern):
                return value[i:]
    else:
        order = cuts if operator == "%%" else reversed(cuts)
        for i in order:
            if fnmatch.fnmatchcase(value[i:], pattern):
                return value[:i]
    return value


def _unescape_word(text: str) -> str:
    """An unquoted word: ``\\x`` is ``x``; ``\\`` + newline (a continuation inside a word) is nothing."""
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def _unescape_double(text: str) -> str:
    """Inside double quotes only ``\\$ \\` \\" \\\\`` and ``\\`` + newline are escapes."""
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    escapes = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "a": "\a", "b": "\b", "e": "\x1b"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), "\\" + m.group(1)), text)


# --- the launcher around the trainer ---------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    trainer: str            # a trainer.name (rlexp.trainers)
    module: str             # the Python module or script the launcher runs
    args: list[str]         # the trainer's own arguments
    launcher: list[str]     # what ran it (python, torchrun ..., ray job submit ... --)


RAY_JOB_SUBMIT = ("ray", "job", "submit")  # the launcher in front of a Ray job's entrypoint


def launch_of(argv: list[Arg]) -> Launch:
    """The trainer, its module and its own arguments inside ``argv``; a :class:`ScriptError` when
    the launcher or the module is not one rlexp knows."""
    rest = list(argv)
    launcher: list[str] = []
    if len(rest) > 1 and isinstance(rest[0], str) and rest[0].rsplit("/", 1)[-1] == "uv" and rest[1] == "run":
        i = 2  # `uv run [options] CMD ...`: the project's environment around the command
        while i < len(rest) and isinstance(rest[i], str) and rest[i].startswith("-"):
            i += 2 if rest[i] in _UV_RUN_VALUES else 1
        launcher, rest = rest[:i], rest[i:]
    if tuple(rest[:3]) == RAY_JOB_SUBMIT:
        if "--" not in rest:
            raise ScriptError(None, "ray job submit without `--` before the entrypoint")
        cut = rest.index("--")
        launcher, rest = launcher + rest[: cut + 1], rest[cut + 1:]
    if not rest:
        raise ScriptError(None, "no command to run")
    from rlexp.trainers import names, rules

    if isinstance(rest[0], Unknown):
        raise ScriptError(None, f"the command is {rest[0].what}")
    head = rest[0].rsplit("/", 1)[-1]
    # a trainer's own command line (`trl grpo ...`): its rules' launch_commands
    by_command = {command: name for name in names() for command in rules(name).launch_commands}
    if head in ("torchrun", "deepspeed", "accelerate") or re.match(r"^python(\d(\.\d+)?)?$", head):
        module, index = _module_after(rest)
    elif head in by_command and len(rest) > 1:
        return Launch(by_command[head], f"{head} {rest[1]}", rest[2:], launcher + rest[:2])
    else:
        raise ScriptError(None, f"{rest[0]!r}: not a launcher rlexp can read (python -m, torchrun, deepspeed, "
                          "accelerate launch, ray job submit -- ...)")
    if isinstance(module, Unknown):
        raise ScriptError(None, f"the module or script run is {module.what}")
    args = rest[index + 1:]
    launcher = launcher + rest[: index + 1]
    # the module a trainer runs through (its rules' launch_modules: a name, or a prefix ending in a
    # dot), else a Python script of the trainer that runs as one (runs_scripts)
    for name in names():
        if any(module == m or (m.endswith(".") and module.startswith(m)) for m in rules(name).launch_modules):
            return Launch(name, module, args, launcher)
    for name in names():
        if rules(name).runs_scripts and (module.endswith(".py") or module.startswith(rules(name).launch_commands)):
            return Launch(name, module, args, launcher)
    known = ", ".join(f"{rules(n).launch_modules[0]}" for n in names() if rules(n).launch_modules)
    scripts = ", ".join(f"a {n} script" for n in names() if rules(n).runs_scripts)
    raise ScriptError(None, f"module {module!r}: not a trainer rlexp imports ({known}, {scripts})")


_VALUE_OPTIONS = {"--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--master_addr",
                  "--master_port", "--num_gpus", "--num_nodes", "--hostfile", "--include", "--exclude",
                  "--rdzv_backend", "--rdzv_endpoint", "--rdzv-backend", "--rdzv-endpoint", "--config_file",
                  "--num_processes", "--num_machines", "--main_process_port", "--mixed_precision",
                  "--localhost", "--launcher", "--master-port", "--master-addr", "--node-rank"}


def _module_after(argv: list[str]) -> tuple[str, int]:
    """The module (``-m X`` / ``--module X``) or script a launcher runs, and its index in ``argv``."""
    i = 1
    if argv[0].rsplit("/", 1)[-1] == "accelerate":
        if len(argv) < 2 or argv[1] != "launch":
            raise ScriptError(None, "accelerate without `launch`")
        i = 2
    while i < len(argv):
        token = argv[i]
        if isinstance(token, Unknown):  # a launcher option's value only running tells (the GPU count)
            i += 1
            continue
        if token in ("-m", "--module"):
            if i + 1 >= len(argv):
                raise ScriptError(None, f"{token} without a module")
            return argv[i + 1], i + 1
        if token.startswith("-"):
            if "=" not in token and token in _VALUE_OPTIONS:
                i += 2
            else:
                i += 1
            continue
        return token, i
    raise ScriptError(None, "no module or script after the launcher")


# ----------------------------------------------------------------------------- a trainer's arguments
# (each trainer's reader, rlexp.trainers.<name>.script_args, turns its launch arguments into recipe keys)

def secret_argument(key: str) -> bool:
    """A key whose value would be a credential (the spec's own rule; OpenRLHF's --use_wandb takes the key)."""
    from rlexp.spec import is_credential_key

    return is_credential_key(key) or key.startswith("wandb")


_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def argument_value(raw: str) -> Any:
    """A command-line value as Hydra and argparse-with-types read it: 1e-6 is a float (YAML 1.1 would
    keep it a string), true/false, null, [a, b] lists; anything else the string itself."""
    import yaml

    text = raw.strip()
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("null", "none", "~"):
        return None
    if text.startswith(("[", "{")):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return raw
        if isinstance(value, list):
            return [argument_value(v) if isinstance(v, str) else v for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: argument_value(v) if isinstance(v, str) else v for k, v in value.items()}
        return raw
    return raw


def dataset_argument(path: str, flag: str) -> dict[str, Any]:
    """A training set named by a launch argument: its path, and the flag (for messages; dropped once read)."""
    return {"path": path, "flag": flag}


@dataclass(frozen=True)
class UnknownArgument:
    """An unknown argument of the trainer: ``key`` the flag or override key it is the value of
    (None where no flag names it), ``shown`` how the script wrote it."""

    key: str | None
    shown: str
    value: Unknown


PLACEHOLDER = "rlexp-unknown-value"  # what an unknown argument import drops anyway is read as


def unknown_arguments(args: list[Arg], style: str) -> tuple[list[str], list[UnknownArgument]]:
    """The trainer's arguments with each unknown one replaced by :data:`PLACEHOLDER` (its key kept),
    and the unknowns with the key each belongs to: ``style`` ``"hydra"`` (``key=value``) or
    ``"flags"`` (``--flag value`` / ``--flag=value``)."""
    clean: list[str] = []
    unknowns: list[UnknownArgument] = []
    for i, token in enumerate(args):
        if not isinstance(token, Unknown):
            clean.append(token)
            continue
        key, known = None, token.known
        if style == "hydra":
            name, eq, _ = known.partition("=")
            if eq:
                key = name.lstrip("+~")
                clean.append(f"{name}={PLACEHOLDER}")
            else:
                clean.append(PLACEHOLDER)
        else:
            previous = args[i - 1] if i else None
            if known.startswith("--") and "=" in known:
                key = known[2:].split("=", 1)[0]
                clean.append(f"--{key}={PLACEHOLDER}")
            elif isinstance(previous, str) and previous.startswith("--") and "=" not in previous:
                key = previous[2:]
                clean.append(PLACEHOLDER)
            else:
                clean.append(PLACEHOLDER)
        unknowns.append(UnknownArgument(key, known or str(token), token))
    return clean, unknowns


def read_env_file(text: str) -> dict[str, str]:
    """``NAME=VALUE`` lines (``export`` allowed, ``#`` comments, values optionally quoted), read as
    data: nothing in the file is expanded or run. ValueError naming the line otherwise."""
    import shlex

    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        name, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"line {number}: expected NAME=VALUE")
        try:
            words = shlex.split(value, comments=True)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        if len(words) > 1:
            raise ValueError(f"line {number}: {name}'s value is several words: quote it")
        values[name] = words[0] if words else ""
    return values
