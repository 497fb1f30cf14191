"""A Python training script read without running it: the config it builds in its own code.

Many training scripts build their trainer's config in code, from command-line flags of their own::

    parser.add_argument("--learning-rate", type=float, default=5e-6)
    ...
    args = parser.parse_args()
    trainer = GRPOTrainer(model=args.model, train_dataset=dataset,
                          args=GRPOConfig(learning_rate=args.learning_rate, num_generations=4, ...))

The command that launches such a script states none of the config, so the config can only be known
from the script's code. This module reads that code with Python's own grammar (:mod:`ast`) and
follows, statement by statement from the top of the module, what it would compute from the command's
words, without running any of it: no module is imported, no function of the script is called (its
body is read with its arguments bound), no file is opened. The one piece of code that runs is
Python's own :mod:`argparse`, on a parser rebuilt from the script's ``add_argument`` calls whose
arguments are literals (a ``type=`` that is a function of the script's gives an unknown value).

What is followed: assignments (names, tuple unpacking with a starred name, a dict's or list's item,
an attribute of the config or of the parsed arguments, ``setattr``), ``global``/``nonlocal`` and
functions defined inside functions, the script's own functions called with known arguments (their
defaults evaluated where they are defined), an ``if`` whose test is known (the branch Python takes),
literals, arithmetic, comparisons, ``and``/``or``, conditional expressions, f-strings,
``len``/``int``/``float``/``str``/``min``/``max``/``round``/``sorted``/``sum``, a few methods of
strings, ``append``/``extend``/``insert`` of lists and ``get``/``update``/``setdefault``/``pop`` of
dicts, ``os.environ`` (from the environment import is given, and what the script sets in it),
``Dataset.from_dict`` of columns whose length is known (``[prompt] * args.dataset_size``,
``[... for _ in range(1000)]``), ``load_dataset(name)``, ``trainer.args``. A ``try`` body is followed
as far as Python would run it: an exception Python raises there (``10 // 0``, a missing key, a
``raise``) sends the reader to the handlers, which may or may not catch it. Everything else is an
:class:`Unknown` that keeps its line and why: a call of anything else (and the lists, dicts, arguments
and config it is given, which it may change), a name assigned inside a loop or under a condition that
is not known, a function's value after a ``return`` under such a condition, a value read from a file.
Where a list or dict is changed in a way not followed, all of it becomes unknown (its items, its
length, its keys), for every name that holds it. An unknown becomes an error only where it reaches a
value the caller needs.

The reader is checked against CPython itself (tests/test_python_script.py): scripts run for real
with stand-in ``trl``/``datasets`` modules must give every value the reader states. A script cannot
make it work long or hold much: steps, call depth, the size and depth of any one value, the numbers'
digits, format widths and the total computed are bounded (the constants below); past them a value is
unknown, or the read stops with a :class:`ReadError`.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Any

MAX_SOURCE = 256 << 10       # characters of a script (training scripts are tens of KB; Python's own parser
                             # takes seconds over a MiB, before any step is counted)
MAX_STEPS = 50_000           # expressions and statements followed while reading one script (the TRL
                             # examples take at most 600; mutual recursion is stopped here)
MAX_CALL_DEPTH = 40          # the script's own functions calling each other
MAX_ITEMS = 10_000           # items of a list built by repetition that are kept (longer: only its length)
MAX_TEXT = 1 << 20           # characters of a string built while reading (and the size of any one value)
MAX_INT_BITS = 1 << 15       # bits of an integer computed while reading (Python's str() stops at 4,300 digits)
MAX_DEPTH = 40               # lists/dicts nested in one value (deeper: unknown, so no walk of it recurses far)
MAX_WALKED = 1_000_000       # items of values looked at (known(), sizes) while reading one script (the
                             # TRL examples: at most 64,000)
MAX_PRODUCED = 64 << 20      # characters / items of all the values computed while reading one script


class ReadError(ValueError):
    """The script cannot be read, or its own code refuses the command (``line`` names where)."""

    def __init__(self, line: int | None, message: str):
        self.line = line
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Unknown:
    """A value only running the script would tell: where (``line``) and why."""

    line: int
    why: str


@dataclass(frozen=True)
class _Spoiled(Unknown):
    """Put in a list or dict that the script changes in a way rlexp does not follow: its items, its
    length and its keys are then all unknown (every name bound to it sees the same object)."""


@dataclass(frozen=True)
class _Failed(Unknown):
    """What an operation gives that Python refuses with an exception (``10 // 0``, ``int("x")``, a
    missing key): inside a ``try`` the exception goes to its handlers (_Reader.expr sees each one made)."""

    def __post_init__(self) -> None:
        _failures[0] += 1


_failures = [0]   # _Failed values made since the read began


_SPOILED_KEY = ("rlexp", "spoiled")   # the key a spoiled dict holds its _Spoiled under (no script has it)


@dataclass(frozen=True)
class Sized:
    """A list whose length is known and whose items are not (``[prompt] * n`` with an unknown prompt)."""

    length: int


@dataclass(frozen=True)
class Name:
    """Something the script imported or Python provides, by its dotted name (``trl.GRPOConfig``)."""

    dotted: str
    module: bool = False   # imported by `import x` (a module: true, not None); else it may be any value

    @property
    def last(self) -> str:
        return self.dotted.rsplit(".", 1)[-1]


@dataclass
class Dataset:
    """A training set the script builds: ``size`` its rows (None: not known), ``source`` in words."""

    size: int | None
    source: str
    line: int
    hub_name: str | None = None


@dataclass
class ConfigCall:
    """One evaluated ``<Class>(field=value, ...)`` of a config class: each stated field's value (an
    :class:`Unknown` where it cannot be known); ``all_unknown`` where ``**kwargs`` hides which fields."""

    cls: str
    line: int
    fields: dict[str, Any] = field(default_factory=dict)
    all_unknown: Unknown | None = None
    conditional: Unknown | None = None   # built under a condition or in a loop rlexp cannot follow


@dataclass
class TrainerCall:
    cls: str
    line: int
    arguments: dict[str, Any]


@dataclass
class ScriptRead:
    """What the script builds: its config calls and trainer calls, in the order they were reached."""

    configs: list[ConfigCall]
    trainers: list[TrainerCall]


@dataclass
class _Parser:
    line: int
    options: list[tuple[tuple[str, ...], dict[str, Any], int, int | None]] = field(default_factory=list)
    exclusive: list[tuple[dict[str, Any], int | None]] = field(default_factory=list)   # settings, group it is in
    defaults: dict[str, Any] = field(default_factory=dict)
    allow_abbrev: bool = True
    add_help: bool = True   # -h/--help: also what `--he` abbreviates, or makes ambiguous
    prefix_chars: str = "-"
    conflict_handler: str = "error"
    broken: Unknown | None = None


# ArgumentParser(...) settings read (the others change only its help text)
_PARSER_FOLLOWED = ("allow_abbrev", "add_help", "prefix_chars", "conflict_handler")
_PARSER_SETTINGS = ("prog", "usage", "description", "epilog", "formatter_class", "exit_on_error", *_PARSER_FOLLOWED)


@dataclass
class _Group:
    """A mutually exclusive group of a parser (``index`` in its ``exclusive``)."""

    parser: _Parser
    index: int


@dataclass
class _Action:
    """What ``add_argument`` returns: changing it (``action.default = …``) is not followed."""

    parser: _Parser


@dataclass
class _Namespace:
    values: dict[str, Any]


@dataclass(frozen=True)
class _Bound:
    obj: Any
    method: str


@dataclass
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    scope: dict[Any, Any]              # where it is defined: the names it sees besides its own
    defaults: list[Any]                # evaluated where it is defined, as Python does
    kw_defaults: list[Any]
    generator: bool                    # an async def or a `yield` in it: a call returns an object, runs nothing


_OUTER = ("rlexp", "outer")            # a function's scope: the scope it was defined in
_GLOBAL = ("rlexp", "global")          # a function's scope: its `global` names
_NONLOCAL = ("rlexp", "nonlocal")      # a function's scope: its `nonlocal` names
_NO_DEFAULT = object()                 # a parameter without a default
_NOT_FOLLOWED = object()               # a change of a container that is not followed


def _generator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether calling the function returns a generator (a ``yield`` in its own body) instead of running it."""
    stack: list[ast.AST] = list(node.body)
    while stack:
        item = stack.pop()
        if isinstance(item, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(item))
    return False


class _Return(Exception):
    def __init__(self, value: Any):
        self.value = value


class _BranchEnds(Exception):
    """A ``raise`` on a path whose condition is not known: that path ends there."""


class _Raised(ReadError):
    """A ``raise`` reached on a known path (a ``try`` around it may catch it)."""


_BUILTINS = ("len", "int", "float", "str", "bool", "min", "max", "abs", "round", "range", "list", "tuple", "dict",
             "sorted", "sum", "print", "isinstance", "ValueError", "TypeError", "RuntimeError", "SystemExit",
             # not followed, but known not to change the lists and dicts they are given
             "iter", "enumerate", "zip", "reversed", "repr", "type", "id", "hash", "hasattr", "getattr",
             "issubclass", "any", "all", "map", "filter", "next", "set", "frozenset", "open", "callable", "format",
             "divmod", "pow", "ord", "chr", "hex", "bin", "oct", "setattr", "exit", "quit")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_STR_METHODS = ("split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "replace", "startswith",
                "endswith", "join", "format", "removeprefix", "removesuffix")
_SAME_SIZE = ("shuffle", "map", "rename_column", "rename_columns", "remove_columns", "cast", "cast_column",
              "with_format", "flatten")
PLACEHOLDER_PREFIX = "rlexp-unknown-value"


# Items known() and _size() have looked at since the read began: _Reader._count adds them to its
# budget, so a script cannot make rlexp walk one large value over and over for free (a script's
# `if x:` repeated 50,000 times over a list of 10,000 items would otherwise take minutes).
_walked = [0]


def known(value: Any) -> bool:
    """Whether ``value`` is wholly known (no :class:`Unknown` or :class:`Sized` anywhere inside)."""
    if isinstance(value, (Unknown, Sized, Dataset, _Parser, _Namespace, _Bound, _Function, Name, ConfigCall,
                          TrainerCall, _Group, _Action)):
        return False
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        items = value.values() if isinstance(value, dict) else value
        _walked[0] += len(items)
        return all(known(v) for v in items)
    return True


def first_unknown(value: Any, line: int) -> Unknown:
    """The :class:`Unknown` inside ``value`` (or one saying what kind of thing it is)."""
    if isinstance(value, Unknown):
        return value
    for inner in (value if isinstance(value, (list, tuple)) else value.values() if isinstance(value, dict) else ()):
        if not known(inner):
            return first_unknown(inner, line)
    if isinstance(value, Name):
        return Unknown(line, f"{value.dotted.lstrip('.')}, an object of the running script, not a value")
    kind = {Sized: "a list whose items are not known", Dataset: "a dataset", TrainerCall: "a trainer",
            _Function: "a function of the script"}.get(type(value), "an object of the script")
    return Unknown(line, kind)


def parse(source: str) -> ast.Module:
    """The script's syntax tree: ReadError where it is longer than :data:`MAX_SOURCE`, is not Python, or
    nests deeper than Python's parser goes."""
    if len(source) > MAX_SOURCE:
        raise ReadError(None, f"{len(source)} characters: rlexp reads training scripts of at most {MAX_SOURCE}")
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise ReadError(exc.lineno, f"not Python that parses: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ReadError(None, "nested too deeply to read") from None


def read(source: str | ast.Module, argv: list[str], *, env: dict[str, str] | None = None,
         configs: tuple[str, ...] = (), trainers: tuple[str, ...] = (), library: str = "",
         unknown_words: dict[str, Unknown] | None = None) -> ScriptRead:
    """Follow ``source`` (its text, or the tree :func:`parse` made of it) run as ``python script.py
    *argv`` and return the calls of the classes named in ``configs`` and ``trainers`` it reaches,
    classes of the package ``library`` (imported from it or from one of its modules: ``from trl import
    GRPOConfig``, ``trl.trainer.grpo_config.GRPOConfig``). ``unknown_words``: words of ``argv`` that
    stand for a value the launch script leaves unknown (the word -> why). ReadError where the source is
    not Python or its own argument parser refuses ``argv``."""
    tree = source if isinstance(source, ast.Module) else parse(source)
    reader = _Reader(argv, env or {}, configs, trainers, library, unknown_words or {})
    _walked[0] = 0
    try:
        reader.block(tree.body, reader.module)
    except _Return:
        pass
    except _BranchEnds:
        pass
    except RecursionError:
        raise ReadError(None, "nested too deeply to read") from None
    return ScriptRead(reader.configs, reader.trainers)


class _Reader:
    def __init__(self, argv: list[str], env: dict[str, str], configs: tuple[str, ...], trainers: tuple[str, ...],
                 library: str, unknown_words: dict[str, Unknown]):
        self.argv = argv
        self.env = env
        self.config_names = configs
        self.trainer_names = trainers
        self.library = library   # the package the config and trainer classes come from
        self.unknown_words = unknown_words
        self.module: dict[str, Any] = {"__name__": "__main__"}
        self.configs: list[ConfigCall] = []
        self.trainers: list[TrainerCall] = []
        self.steps = 0
        self.depth = 0
        self.uncertain: list[Unknown] = []   # why the statements being read may not run (innermost last)
        self.frames: list[list[Unknown | None]] = []   # per function being read: a return on a path not known
        self.produced = 0                    # size of the values computed so far (MAX_PRODUCED)
        # per `try` with handlers whose body is being read: len(uncertain) at its start, and why an
        # exception may have been raised on a path not known to run (then its handlers may run)
        self.guards: list[list[Any]] = []
        self.env_changed: Unknown | None = None   # os.environ changed in a way not followed
        # sys.argv, one list as in Python (a script may change it before parse_args() reads it)
        self.sys_argv: list[Any] = [Unknown(0, "sys.argv[0], the script's path as it was run"), *argv]

    # ---- statements
    def block(self, body: list[ast.stmt], scope: dict[str, Any]) -> None:
        for stmt in body:
            self.statement(stmt, scope)

    def statement(self, node: ast.stmt, scope: dict[str, Any]) -> None:
        self._count(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spec = node.args
            function = _Function(node, scope, [self.expr(d, scope) for d in spec.defaults],
                                 [_NO_DEFAULT if d is None else self.expr(d, scope) for d in spec.kw_defaults],
                                 isinstance(node, ast.AsyncFunctionDef) or _generator(node))
            value: Any = function
            for decorator in reversed(node.decorator_list):   # `@d def f` binds f = d(f)
                wrapper = self.expr(decorator, scope)
                if isinstance(wrapper, _Function):
                    value = self._run(wrapper, [value], {}, node.lineno)
                else:
                    self._unfollowed_call([value], {}, node.lineno)
                    value = Unknown(node.lineno, f"{node.name}, decorated by {ast.unparse(decorator)[:60]}")
            # defined on a path not known to run: which definition a later call meets is not known
            scope[node.name] = self.uncertain[-1] if self.uncertain else value
        elif isinstance(node, ast.ClassDef):
            # its body runs once, now: read (under uncertainty, in a scope of its own) for what it changes
            self._uncertain(Unknown(node.lineno, f"set in the body of class {node.name}"), node.body,
                            {_OUTER: scope})
            scope[node.name] = Unknown(node.lineno, f"an object of the script's class {node.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                scope[alias.asname or alias.name.split(".")[0]] = Name(alias.name if alias.asname
                                                                       else alias.name.split(".")[0], module=True)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                dotted = f"{node.module or ''}.{alias.name}"
                scope[alias.asname or alias.name] = self.sys_argv if dotted == "sys.argv" else Name(dotted)
        elif isinstance(node, ast.Assign):
            value = self.expr(node.value, scope)
            for target in node.targets:
                self.assign(target, value, scope, node.lineno)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.expr(node.value, scope), scope, node.lineno)
        elif isinstance(node, ast.AugAssign):
            current = self.expr(_as_load(node.target), scope)
            value = self.expr(node.value, scope)
            if isinstance(current, (list, dict)):
                # `x += y` changes the list (dict) itself, which other names may hold too
                if not self.uncertain and isinstance(current, list) and isinstance(node.op, ast.Add) \
                        and isinstance(value, (list, tuple)) and not _spoiled(current) and not _spoiled(value):
                    current.extend(value)
                else:
                    self._spoil(current, node.lineno, f"changed by `{ast.unparse(node)[:60]}`")
                self.assign(node.target, current, scope, node.lineno)
            else:
                self.assign(node.target, self._bounded(self._binary(node.op, current, value, node.lineno),
                                                       node.lineno), scope, node.lineno)
        elif isinstance(node, ast.Expr):
            self.expr(node.value, scope)
        elif isinstance(node, ast.If):
            self._if(node, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            # what it loops over (a while's first test) Python evaluates once for sure: what that changes
            head = self.expr(node.test if isinstance(node, ast.While) else node.iter, scope)
            if (isinstance(node, ast.While) and _decided(head) and not _truth(head)) or (
                    not isinstance(node, ast.While) and _countable(head) and _length(head) == 0):
                self.block(node.orelse, scope)   # no pass at all: only its else runs
                return
            self._uncertain(Unknown(node.lineno, f"set in the loop on line {node.lineno}"),
                            [*([ast.Assign(targets=[node.target], value=ast.Constant(None), lineno=node.lineno)]
                               if isinstance(node, (ast.For, ast.AsyncFor)) else []), *node.body,
                             # a while's test again, after each pass
                             *([ast.Expr(node.test, lineno=node.lineno)] if isinstance(node, ast.While) else []),
                             *node.orelse],
                            scope)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.expr(item.context_expr, scope)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, Unknown(node.lineno, "the value of a `with` statement"), scope,
                                node.lineno)
            self.block(node.body, scope)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self._try(node, scope)
        elif isinstance(node, ast.Return):
            raise _Return(None if node.value is None else self.expr(node.value, scope))
        elif isinstance(node, ast.Raise):
            self._stop(node.lineno, ast.unparse(node.exc)[:120] if node.exc is not None else "raise")
        elif isinstance(node, ast.Assert):   # `if not test: raise AssertionError` (Python run without -O)
            check = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=node.test),
                           body=[ast.Raise(exc=ast.Name(id="AssertionError", ctx=ast.Load()), cause=None)], orelse=[])
            self._if(ast.fix_missing_locations(ast.copy_location(check, node)), scope)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            scope.setdefault(_GLOBAL if isinstance(node, ast.Global) else _NONLOCAL, set()).update(node.names)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._delete(target, scope, node.lineno)
        elif isinstance(node, ast.Match):
            why = Unknown(node.lineno, f"set in the `match` on line {node.lineno}")
            for case in node.cases:
                self._uncertain(why, case.body, scope)
        # pass, break, continue: nothing to follow

    def _stop(self, line: int, shown: str) -> None:
        """A ``raise`` (``sys.exit()``, ``parser.error()``) reached: a ReadError on a known path, the end of
        the path on one not known to run, the handlers of the ``try`` around it."""
        if self.guards:
            self._raises(Unknown(line, f"the exception raised on line {line}"))
        if self.uncertain:
            raise _BranchEnds()
        raise _Raised(line, f"the script's own code stops here with these arguments ({shown})")

    def _try(self, node: ast.Try, scope: dict[Any, Any]) -> None:
        guard: list[Any] = [len(self.uncertain), None]
        if node.handlers:
            self.guards.append(guard)
        raised: _Raised | None = None
        try:
            self.block(node.body, scope)
        except _Raised as exc:
            if not node.handlers:
                if self.uncertain:
                    raise _BranchEnds() from None
                raise
            raised = exc
        finally:
            if node.handlers:
                self.guards.pop()
        if raised is not None:
            # a handler may catch it (which one, Python's exception types say): what it sets is not known
            why = Unknown(raised.line or node.lineno, f"set after the exception raised on line {raised.line}")
            for handler in node.handlers:
                self._uncertain(why, handler.body, scope)
        elif guard[1] is not None:   # raised on a path not known to run: handlers or else, either may run
            why = Unknown(guard[1].line, f"set after the exception that line {guard[1].line} may raise")
            for body in (*(h.body for h in node.handlers), node.orelse):
                self._uncertain(why, body, scope)
        else:
            self.block(node.orelse, scope)
        self.block(node.finalbody, scope)

    def _if(self, node: ast.If, scope: dict[str, Any]) -> None:
        test = self.expr(node.test, scope)
        if _decided(test):
            self.block(node.body if _truth(test) else node.orelse, scope)
            return
        why = Unknown(node.lineno, f"set under the condition on line {node.lineno}, which is not known "
                      f"({first_unknown(test, node.lineno).why})")
        self._uncertain(why, node.body, scope)
        self._uncertain(why, node.orelse, scope)

    def _uncertain(self, why: Unknown, body: list[ast.stmt], scope: dict[str, Any]) -> None:
        entry = len(self.uncertain)
        self.uncertain.append(why)
        try:
            self.block(body, scope)
        except _BranchEnds:
            pass
        except _Return:
            # a return on a path not known to run: what the function returns, and whether the rest of
            # its body runs, are not known from here on
            if self.frames and self.frames[-1][0] is None:
                self.frames[-1][0] = Unknown(why.line, f"returned early under the condition on line {why.line}")
        finally:
            del self.uncertain[entry:]
        if self.frames and self.frames[-1][0] is not None:
            self.uncertain.append(self.frames[-1][0])

    def _spoil(self, container: Any, line: int, why: str) -> None:
        """``container`` (a list, dict or set of the script) changed in a way not followed: all of it unknown."""
        mark = _Spoiled(line, why)
        if isinstance(container, list):
            container[:] = [mark]
        elif isinstance(container, dict):
            container.clear()
            container[_SPOILED_KEY] = mark
        elif isinstance(container, set):
            container.clear()
            container.add(mark)

    def _delete(self, target: ast.expr, scope: dict[Any, Any], line: int) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = Unknown(line, f"{target.id}, deleted on line {line}")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._delete(element, scope, line)
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value, scope)
            key = self.expr(target.slice, scope)
            if isinstance(container, dict) and not self.uncertain and known(key) and not _spoiled(container) \
                    and not isinstance(key, (list, dict)) and key in container:
                del container[key]
            else:
                self._spoil(container, line, f"an item deleted on line {line}")
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value, scope)
            if isinstance(obj, ConfigCall):
                obj.fields[target.attr] = Unknown(line, f"{target.attr}, deleted on line {line}")

    def assign(self, target: ast.expr, value: Any, scope: dict[str, Any], line: int) -> None:
        if self.uncertain:
            value = self.uncertain[-1]
        if isinstance(target, ast.Name):
            self._scope_of(target.id, scope)[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            starred = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
            count = len(target.elts)
            items = list(value) if isinstance(value, (tuple, list)) and not _spoiled(value) and (
                len(value) == count or (starred and len(value) >= count - 1)) else None
            if items is not None and starred:   # `a, *rest, b = …`: the starred name takes a list of the middle
                at, tail = starred[0], count - starred[0] - 1
                items = [*items[:at], items[at:len(items) - tail], *items[len(items) - tail:]]
            for i, element in enumerate(target.elts):
                inner = items[i] if items is not None else (
                    value if isinstance(value, Unknown) else Unknown(line, "one of several values unpacked"))
                self.assign(element.value if isinstance(element, ast.Starred) else element, inner, scope, line)
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value, scope)
            key = self.expr(target.slice, scope)
            # an item set on a path not known to run, under a key not known, or a list's item by an index
            # not known: which items (keys, length) the list or dict has is then not known
            settable = not _spoiled(container) and (
                (isinstance(container, dict) and known(key) and not isinstance(key, (list, dict, set))
                 and (not self.uncertain or key in container))
                or (isinstance(container, list) and not self.uncertain and type(key) is int
                    and -len(container) <= key < len(container)))
            if settable:
                container[key] = value
            elif isinstance(container, (list, dict)):
                self._spoil(container, line, f"an item set on line {line}")
            elif isinstance(container, Name) and container.dotted == "os.environ":
                if isinstance(key, str) and isinstance(value, str) and not self.uncertain:
                    self.env[key] = value
                elif isinstance(key, str):
                    self.env[key] = Unknown(line, f"${key}, set on line {line} to a value not known")
                else:
                    self.env_changed = Unknown(line, f"the environment, changed on line {line}")
        elif isinstance(target, ast.Attribute):
            self._set_attribute(self.expr(target.value, scope), target.attr, value)

    def _set_attribute(self, obj: Any, attr: str, value: Any) -> None:
        if isinstance(obj, Name) and f"{obj.dotted}.{attr}" == "sys.argv":
            self.sys_argv = value if isinstance(value, list) else [_Spoiled(0, "sys.argv, set to a value not known")]
        elif isinstance(obj, _Action):
            obj.parser.broken = obj.parser.broken or Unknown(0, f"an option whose .{attr} the script changes")
        elif isinstance(obj, _Parser):
            obj.broken = obj.broken or Unknown(obj.line, f"a parser whose .{attr} the script changes")
        elif isinstance(obj, ConfigCall):
            obj.fields[attr] = value
        elif isinstance(obj, _Namespace):
            obj.values[attr] = value

    def _environment(self, key: str, default: Any, line: int, *, required: bool = False) -> Any:
        """``os.environ[key]`` / ``os.environ.get(key, default)``: from the environment import is given."""
        if self.env_changed is not None:
            return self.env_changed
        if key in self.env:
            return self.env[key]
        return Unknown(line, f"${key} from the environment; give it with --env {key}=VALUE")

    # ---- expressions
    def expr(self, node: ast.expr, scope: dict[str, Any]) -> Any:
        failures = _failures[0]
        value = self._expr(node, scope)
        if isinstance(node, _COMPUTES):
            value = self._bounded(value, getattr(node, "lineno", 0))
        if self.guards and _failures[0] != failures:
            # Python raises here, inside a `try`: the rest of its body does not run (its handlers do);
            # outside one the script stops, and no value after it matters
            self._raises(Unknown(getattr(node, "lineno", 0), "an exception Python raises here"))
        return value

    def _raises(self, why: Unknown) -> None:
        """An exception raised at ``why.line`` while a ``try`` with handlers is being read."""
        guard = self.guards[-1]
        if len(self.uncertain) > guard[0]:   # on a path not known to run: that path ends; the handlers may run
            guard[1] = guard[1] or why
            raise _BranchEnds()
        raise _Raised(why.line, why.why)

    def _bounded(self, value: Any, line: int) -> Any:
        """``value``, computed by the script's code, if it is small enough to keep: a script must not
        make rlexp hold gigabytes (``[[0] * 9999] * 9999``, ``x = x * x`` over and over), nor a value
        so deep that walking it recurses far. Counted into what the whole read may compute."""
        why = _too_big(value)
        if why is not None:
            value = Sized(len(value)) if isinstance(value, (list, tuple)) else Unknown(line, why)
        self.produced += _shallow_size(value)
        if self.produced > MAX_PRODUCED:
            raise ReadError(line, f"computes values of more than {MAX_PRODUCED} characters or items in all: too "
                            "much to read")
        return value

    def _expr(self, node: ast.expr, scope: dict[str, Any]) -> Any:
        self._count(node)
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._lookup(node.id, scope, line)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.expr(node.value, scope), node.attr, line)
        if isinstance(node, ast.Subscript):
            return self._subscript(self.expr(node.value, scope), self.expr(node.slice, scope), line)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.expr(p, scope) for p in (node.lower, node.upper, node.step)]
            return slice(*parts) if all(known(p) for p in parts) else Unknown(line, "a slice not known")
        if isinstance(node, ast.BinOp):
            return self._binary(node.op, self.expr(node.left, scope), self.expr(node.right, scope), line)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand, scope)
            if isinstance(node.op, ast.Not):
                return not _truth(operand) if _decided(operand) else Unknown(line, "a `not` of a value not known")
            if not known(operand) or not isinstance(operand, (int, float)):
                return first_unknown(operand, line) if not known(operand) else Unknown(line, "an operation rlexp "
                                                                                        "does not follow")
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](
                operand)
        if isinstance(node, ast.BoolOp):
            return self._bool(node, scope)
        if isinstance(node, ast.Compare):
            return self._compare(node, scope)
        if isinstance(node, ast.IfExp):
            test = self.expr(node.test, scope)
            if _decided(test):
                return self.expr(node.body if _truth(test) else node.orelse, scope)
            why = Unknown(line, f"chosen by a condition not known ({first_unknown(test, line).why})")
            self._maybe_evaluated(why, [node.body, node.orelse], scope)
            return why
        if isinstance(node, ast.JoinedStr):
            return self._fstring(node, scope)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self._sequence(node, scope)
        if isinstance(node, ast.Dict):
            return self._dict(node, scope)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self._comprehension(node, scope)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value, scope)
            self.assign(node.target, value, scope, line)
            return value
        return Unknown(line, f"{type(node).__name__.lower()} expression")

    def _scope_of(self, name: str, scope: dict[Any, Any]) -> dict[Any, Any]:
        """The scope an assignment to ``name`` in ``scope`` binds it in (``global``/``nonlocal``)."""
        if name in scope.get(_GLOBAL, ()):
            return self.module
        if name in scope.get(_NONLOCAL, ()):
            outer = scope.get(_OUTER)
            while outer is not None and outer is not self.module:
                if name in outer:
                    return outer
                outer = outer.get(_OUTER)
        return scope

    def _lookup(self, name: str, scope: dict[str, Any], line: int) -> Any:
        if name in scope.get(_GLOBAL, ()):
            scope = self.module
        while scope is not None:   # its own names, then those of the functions it is defined in
            if name in scope:
                return scope[name]
            scope = scope.get(_OUTER)
        if name in self.module:
            return self.module[name]
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        if name in _BUILTINS:
            return Name(f"builtins.{name}")
        return Unknown(line, f"{name} (not assigned where rlexp reads)")

    def _attribute(self, obj: Any, attr: str, line: int) -> Any:
        if isinstance(obj, Name):
            return self.sys_argv if f"{obj.dotted}.{attr}" == "sys.argv" else Name(f"{obj.dotted}.{attr}")
        if isinstance(obj, _Namespace):
            if attr not in obj.values:
                return Unknown(line, f"args.{attr}, which the script's parser does not define")
            return obj.values[attr]
        if isinstance(obj, ConfigCall):
            return obj.fields.get(attr, Unknown(line, f"{obj.cls}.{attr} at its default"))
        if isinstance(obj, TrainerCall):
            if attr == "args" and isinstance(obj.arguments.get("args"), ConfigCall):
                return obj.arguments["args"]
            return Unknown(line, f"the {obj.cls}'s .{attr}")
        if isinstance(obj, Unknown):
            return obj
        if isinstance(obj, (_Parser, _Group, Dataset, str, dict, list, set)):
            return _Bound(obj, attr)
        return Unknown(line, f".{attr} of a value rlexp does not follow")

    def _subscript(self, obj: Any, key: Any, line: int) -> Any:
        if isinstance(obj, Dataset) and isinstance(key, str):   # a DatasetDict's split
            return Dataset(None, f"{obj.source}, split {key!r}", line, obj.hub_name)
        if not known(key):
            return first_unknown(key, line)
        if _spoiled(obj):   # its keys and length are not known: a missing item is no error here
            return first_unknown(obj, line)
        if isinstance(obj, Name) and obj.dotted == "os.environ" and isinstance(key, str):
            return self._environment(key, None, line, required=True)
        if isinstance(obj, (dict, list, tuple, str)):
            try:
                return obj[key]
            except (KeyError, IndexError, TypeError):
                return _Failed(line, "an item that is not there")
        if isinstance(obj, Unknown):
            return obj
        return Unknown(line, "an item of a value rlexp does not follow")

    def _binary(self, op: ast.operator, left: Any, right: Any, line: int) -> Any:
        if isinstance(op, ast.Mult) and isinstance(right, (list, tuple, Sized, str, bytes)) and isinstance(left, int):
            left, right = right, left   # n * seq is seq * n
        if isinstance(op, (ast.Mult, ast.Add)) and (_spoiled(left) or _spoiled(right)):
            return first_unknown(left if _spoiled(left) else right, line)
        if isinstance(op, ast.Mult) and isinstance(left, (list, tuple, Sized)) and isinstance(right, int) \
                and not isinstance(right, bool):
            length = _length(left) * max(right, 0)
            if length.bit_length() > MAX_INT_BITS:
                return Unknown(line, "a list too long to follow")
            if isinstance(left, Sized) or not known(left) or length > MAX_ITEMS:
                return Sized(length)
            return left * right
        if isinstance(op, ast.Add) and isinstance(left, (list, Sized)) and isinstance(right, (list, Sized)):
            if isinstance(left, list) and isinstance(right, list) and known(left) and known(right):
                return left + right if len(left) + len(right) <= MAX_ITEMS else Sized(len(left) + len(right))
            return Sized(_length(left) + _length(right))
        if not known(left) or not known(right):
            return first_unknown(left if not known(left) else right, line)
        fn = _BINARY.get(type(op))
        if fn is None:
            return Unknown(line, "an operation rlexp does not follow")
        # what would be too large is refused before Python computes it (a gigabyte string, a number
        # of billions of digits): afterwards is too late
        if isinstance(op, ast.Mult) and isinstance(left, (str, bytes)) and isinstance(right, int) \
                and len(left) * right > MAX_TEXT:
            return Unknown(line, "a string too long to follow")
        if isinstance(left, int) and isinstance(right, int):
            if isinstance(op, ast.Mult) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                return Unknown(line, "a number too large to follow")
            if isinstance(op, ast.Pow) and right > 0 and left.bit_length() * right > MAX_INT_BITS:
                return Unknown(line, "a power too large to follow")
        if isinstance(op, ast.Pow) and isinstance(right, int) and abs(right) > MAX_INT_BITS:
            return Unknown(line, "a power too large to follow")
        if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)) and (
                _wide(left) or len(left) + left.count("%" if isinstance(left, str) else b"%") * _size(right) > MAX_TEXT):
            return Unknown(line, "a %-format too wide to follow")
        try:
            result = fn(left, right)
        except Exception:  # noqa: BLE001 - Python would raise here: what the script does then is not followed
            return _Failed(line, "an operation that fails on these values")
        if isinstance(result, str) and len(result) > MAX_TEXT:
            return Unknown(line, "a string too long to follow")
        return result

    def _bool(self, node: ast.BoolOp, scope: dict[str, Any]) -> Any:
        value: Any = None
        for item in node.values:
            value = self.expr(item, scope)
            if not _decided(value):
                why = Unknown(node.lineno, f"an `{'and' if isinstance(node.op, ast.And) else 'or'}` of a value "
                              f"not known ({first_unknown(value, node.lineno).why})")
                self._maybe_evaluated(why, node.values[node.values.index(item) + 1:], scope)
                return why
            if _truth(value) == isinstance(node.op, ast.Or):
                return value
        return value

    def _compare(self, node: ast.Compare, scope: dict[str, Any]) -> Any:
        left = self.expr(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node, scope)
            other = left if right is None else right
            if isinstance(op, (ast.Is, ast.IsNot)) and not any(v is None or isinstance(v, (bool, list, dict, set))
                                                               for v in (left, right)):
                # whether two equal numbers or strings are one object is CPython's affair (its constants,
                # its caches): not followed
                return Unknown(node.lineno, "an `is` of values that are not None, a bool or a container")
            if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None) and (
                    known(left) or known(right)) and not isinstance(other, (Unknown, Sized)) and (
                    not isinstance(other, (Name, Dataset)) or _decided(other)):
                result = (left is right) == isinstance(op, ast.Is)
            elif isinstance(op, (ast.In, ast.NotIn)) and known(left) and isinstance(right, (list, tuple)) \
                    and not _spoiled(right) and any(known(item) and _equal(item, left) for item in right):
                result = isinstance(op, ast.In)   # found among the known items, whatever the others are
            elif not known(left) or not known(right):
                return first_unknown(left if not known(left) else right, node.lineno)
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, range) and type(left) is not int \
                    and len(right) > MAX_ITEMS:
                return Unknown(node.lineno, "a search of a range too long to follow")   # not int: one by one
            else:
                try:
                    result = _COMPARE[type(op)](left, right)
                except Exception:  # noqa: BLE001 - a comparison Python refuses: not followed
                    return _Failed(node.lineno, "a comparison that fails on these values")
            if not result:
                return False
            left = right
        return True

    def _fstring(self, node: ast.JoinedStr, scope: dict[str, Any]) -> Any:
        parts = []
        total = 0
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            inner = self.expr(value.value, scope)
            if not known(inner):
                return first_unknown(inner, node.lineno)
            spec = self._fstring(value.format_spec, scope) if value.format_spec is not None else ""
            if not isinstance(spec, str):
                return spec
            if _wide(spec):   # `{x:1000000000}` would be a gigabyte of spaces
                return Unknown(node.lineno, "an f-string too wide to follow")
            inner = {115: str, 114: repr, 97: ascii}.get(value.conversion, lambda v: v)(inner)
            try:
                parts.append(format(inner, spec))
            except Exception:  # noqa: BLE001 - a format Python refuses: not followed
                return _Failed(node.lineno, "an f-string that fails on these values")
            total += len(parts[-1])
            if total > MAX_TEXT:   # `f"{x}{x}{x}…"` of a long x: stopped as it grows
                return Unknown(node.lineno, "a string too long to follow")
        text = "".join(parts)
        return text if len(text) <= MAX_TEXT else Unknown(node.lineno, "a string too long to follow")

    def _sequence(self, node: ast.List | ast.Tuple | ast.Set, scope: dict[str, Any]) -> Any:
        items: list[Any] = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                inner = self.expr(element.value, scope)
                if isinstance(inner, (list, tuple)):
                    items.extend(inner)
                    continue
                return Sized(len(items) + _length(inner)) if isinstance(inner, Sized) else \
                    Unknown(node.lineno, "a list with items unpacked from a value not known")
            items.append(self.expr(element, scope))
        if len(items) > MAX_ITEMS:
            return Sized(len(items))
        if isinstance(node, ast.Tuple):
            return tuple(items)
        if isinstance(node, ast.Set):
            return Unknown(node.lineno, "a set") if not known(items) else set(items)
        return items

    def _dict(self, node: ast.Dict, scope: dict[str, Any]) -> Any:
        out: dict[Any, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            value = self.expr(value_node, scope)
            if key_node is None:   # {**other}
                if not isinstance(value, dict):
                    return Unknown(node.lineno, "a dict spread from a value not known")
                out.update(value)
                continue
            key = self.expr(key_node, scope)
            if not known(key) or isinstance(key, (list, dict)):
                return Unknown(node.lineno, "a dict with a key not known")
            out[key] = value
        return out

    def _maybe_run(self, why: Unknown, func: _Function, args: list[Any], kwargs: dict[str, Any], line: int) -> None:
        """A function of the script run with arguments not known: read under ``why`` for what it changes."""
        entry = len(self.uncertain)
        self.uncertain.append(why)
        try:
            self._run(func, args, kwargs, line)
        except _BranchEnds:
            pass
        finally:
            del self.uncertain[entry:]

    def _maybe_evaluated(self, why: Unknown, nodes: list[ast.expr], scope: dict[Any, Any]) -> None:
        """Expressions Python may evaluate or not, or many times (the other branch of a conditional
        expression, the rest of an ``and``, a comprehension's items): read once under ``why``, so that
        what they change (a walrus, an ``.append``, a call of the script's function) becomes unknown."""
        entry = len(self.uncertain)
        self.uncertain.append(why)
        try:
            for item in nodes:
                self.expr(item, scope)
        except _BranchEnds:
            pass
        finally:
            del self.uncertain[entry:]

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp,
                       scope: dict[str, Any]) -> Any:
        generator = node.generators[0]
        iterable = self.expr(generator.iter, scope)
        why = Unknown(node.lineno, f"set in the comprehension on line {node.lineno}")
        inner: dict[Any, Any] = {_OUTER: scope}   # its own names; a walrus in it binds the enclosing scope's
        entry = len(self.uncertain)
        self.uncertain.append(why)
        try:
            for i, each in enumerate(node.generators):
                if i:
                    self.expr(each.iter, inner)
                self.assign(each.target, why, inner, node.lineno)
            parts = [*(c for g in node.generators for c in g.ifs),
                     *((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,))]
            for part in parts:
                self.expr(part, inner)
            for walrus in (n for part in parts for n in ast.walk(part) if isinstance(n, ast.NamedExpr)):
                if isinstance(walrus.target, ast.Name):
                    self._scope_of(walrus.target.id, scope)[walrus.target.id] = why
        except _BranchEnds:
            pass
        finally:
            del self.uncertain[entry:]
        if len(node.generators) == 1 and not generator.ifs and isinstance(node, (ast.ListComp, ast.GeneratorExp)) \
                and _countable(iterable):
            return Sized(_length(iterable))
        return Unknown(node.lineno, "a comprehension whose length rlexp does not follow")

    # ---- calls
    def _call(self, node: ast.Call, scope: dict[str, Any]) -> Any:
        line = node.lineno
        func = self.expr(node.func, scope)
        args: list[Any] = []
        hidden: Unknown | None = None   # arguments `*x` / `**x` hides
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                inner = self.expr(arg.value, scope)
                if not isinstance(inner, (list, tuple)) or _spoiled(inner):
                    hidden = Unknown(line, "a call with arguments unpacked from a value not known")
                    continue
                args.extend(inner)
            else:
                args.append(self.expr(arg, scope))
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            value = self.expr(keyword.value, scope)
            if keyword.arg is not None:
                kwargs[keyword.arg] = value
            elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
                kwargs.update(value)
            else:
                hidden = Unknown(line, f"fields passed as **{ast.unparse(keyword.value)[:60]}, which is not known")
        if isinstance(func, _Function):
            if hidden is not None:   # which arguments it is given is not known: what it does, nor its value
                self._maybe_run(hidden, func, args, kwargs, line)
                return hidden
            return self._run(func, args, kwargs, line)
        if hidden is not None and not (isinstance(func, Name) and func.last in (*self.config_names,
                                                                              *self.trainer_names)):
            self._unfollowed_call(args, kwargs, line)   # max(1, *x) is not max(1)
            return hidden
        if isinstance(func, _Bound):
            return self._method(func, args, kwargs, line)
        if isinstance(func, Name):
            return self._named(func, args, kwargs, hidden, line)
        self._unfollowed_call(args, kwargs, line)
        return Unknown(line, f"the value of {ast.unparse(node.func)[:60]}(…), which only running the script gives")

    def _run(self, func: _Function, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        # (on a path not known to run, the body is read all the same: its changes to the script's
        # lists, dicts and globals are then unknown, as are its assignments)
        if self.depth >= MAX_CALL_DEPTH:
            # not followed deeper, and what the deeper calls change (a list they fill) is not known either
            raise ReadError(line, f"{func.node.name}(…) called more than {MAX_CALL_DEPTH} deep: rlexp does not follow "
                            "the script's functions so deep")
        if func.generator:
            return Unknown(line, f"the coroutine or generator {func.node.name}(…) returns, not run by the call")
        local: dict[Any, Any] = {_OUTER: func.scope}
        spec = func.node.args
        positional = [*spec.posonlyargs, *spec.args]
        defaults = [_NO_DEFAULT] * (len(positional) - len(func.defaults)) + list(func.defaults)
        for i, param in enumerate(positional):
            if i < len(args):
                local[param.arg] = args[i]
            elif param.arg in kwargs:
                local[param.arg] = kwargs[param.arg]
            elif defaults[i] is not _NO_DEFAULT:
                local[param.arg] = defaults[i]
            else:
                local[param.arg] = Unknown(line, f"{param.arg}, an argument {func.node.name}() is not given")
        for param, default in zip(spec.kwonlyargs, func.kw_defaults, strict=True):
            local[param.arg] = kwargs.get(param.arg, default if default is not _NO_DEFAULT else
                                          Unknown(line, f"{param.arg}, an argument {func.node.name}() is not given"))
        if spec.vararg is not None:
            local[spec.vararg.arg] = tuple(args[len(positional):])
        if spec.kwarg is not None:
            local[spec.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in {p.arg for p in positional}}
        self.depth += 1
        entry = len(self.uncertain)
        frame: list[Unknown | None] = [None]
        self.frames.append(frame)
        ended = False
        try:
            self.block(func.node.body, local)
            value = None
        except _Return as done:
            value = done.value
        except _BranchEnds:
            if frame[0] is None:
                raise
            ended = True   # it raised after a return on a path not known: it returned there, or raised
        finally:
            self.depth -= 1
            self.frames.pop()
            del self.uncertain[entry:]
        if ended:   # the caller goes on only where it returned early: the rest of the caller is not certain
            self.uncertain.append(frame[0])
        if frame[0] is not None:   # it may have returned earlier, on a path not known
            return Unknown(frame[0].line, f"the value of {func.node.name}(…) called on line {line}: {frame[0].why}")
        return value

    def _named(self, func: Name, args: list[Any], kwargs: dict[str, Any], hidden: Unknown | None, line: int) -> Any:
        dotted = func.dotted
        ours = dotted == self.library or dotted.startswith(f"{self.library}.")
        if func.last in self.config_names and ours:
            call = ConfigCall(func.last, line, dict(kwargs), hidden, self.uncertain[-1] if self.uncertain else None)
            self.configs.append(call)
            return call
        if func.last in self.trainer_names and ours:
            trainer = TrainerCall(func.last, line, dict(kwargs))
            if not self.uncertain:
                self.trainers.append(trainer)
            return trainer   # trainer.args is the config it was given
        if dotted == "argparse.ArgumentParser":
            parser = _Parser(line)
            for key in ("allow_abbrev", "add_help"):
                if key in kwargs and isinstance(kwargs[key], bool):
                    setattr(parser, key, kwargs[key])
            if isinstance(kwargs.get("prefix_chars"), str) and kwargs["prefix_chars"]:
                parser.prefix_chars = kwargs["prefix_chars"]
            if kwargs.get("conflict_handler") in ("error", "resolve"):
                parser.conflict_handler = kwargs["conflict_handler"]
            # anything else that changes what the parser takes (parents=, fromfile_prefix_chars= reading
            # words from a file, argument_default=, a non-literal setting) is not followed
            changes = [k for k in kwargs if k not in _PARSER_SETTINGS or (k in _PARSER_FOLLOWED and not (
                isinstance(kwargs[k], bool) or (isinstance(kwargs[k], str) and kwargs[k])))]
            if len(args) > 3 or changes or (args and not known(args)):
                shown = changes[0] + "=" if changes else "arguments"
                parser.broken = Unknown(line, f"an argument parser built with {shown} rlexp does not follow")
            return parser
        if dotted in ("os.environ.get", "os.getenv"):
            if args and isinstance(args[0], str):
                return self._environment(args[0], args[1] if len(args) > 1 else None, line)
            return Unknown(line, "a variable of the environment not known")
        if dotted == "os.environ.setdefault" and len(args) == 2 and isinstance(args[0], str):
            if self.env_changed is None and args[0] not in self.env:   # the environment's value, else this one
                self.env[args[0]] = Unknown(line, f"${args[0]}, set on line {line} unless the environment has it")
            return self._environment(args[0], None, line)
        if dotted.startswith("os.environ.") or dotted in ("os.putenv", "os.unsetenv"):
            # setdefault of a variable that may be set, update, pop, clear: not followed
            self.env_changed = Unknown(line, f"the environment, changed on line {line} by {dotted}(…)")
            return self.env_changed
        if dotted == "builtins.setattr" and len(args) == 3 and isinstance(args[1], str) and not kwargs:
            self._set_attribute(args[0], args[1], self.uncertain[-1] if self.uncertain else args[2])
            return None
        if dotted == "builtins.setattr":  # a field named by a value not known (`for k, v in d.items(): setattr(cfg, k, v)`)
            self._unfollowed_call(args, kwargs, line)
            return None
        if dotted.endswith("Dataset.from_dict") and dotted.startswith("datasets"):
            return self._from_dict(args, kwargs, line)
        if dotted == "datasets.load_dataset":
            return self._load_dataset(args, kwargs, line)
        if dotted in ("sys.exit", "builtins.exit", "builtins.quit", "os._exit", "os.abort"):
            self._stop(line, f"{dotted.removeprefix('builtins.')}(…)")
        if dotted.startswith("builtins."):
            return _builtin(func.last, args, kwargs, line)
        self._unfollowed_call(args, kwargs, line)
        return Unknown(line, f"the value of {dotted.lstrip('.')}(…), which only running the script gives")

    def _from_dict(self, args: list[Any], kwargs: dict[str, Any], line: int) -> Dataset:
        columns = args[0] if args else kwargs.get("mapping")
        size = None
        if isinstance(columns, dict) and columns:
            lengths = {_length(c) if _countable(c) else None for c in columns.values()
                       if isinstance(c, (list, tuple, Sized))}
            size = lengths.pop() if len(lengths) == 1 and not _spoiled(columns) else None
        return Dataset(size, f"built by Dataset.from_dict on line {line}", line)

    def _load_dataset(self, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        name = args[0] if args and isinstance(args[0], str) else kwargs.get("path")
        hub = name if isinstance(name, str) else None
        shown = f"load_dataset({hub!r})" if hub else "load_dataset(…)"
        split = kwargs.get("split", args[2] if len(args) > 2 else None)
        if isinstance(split, (list, tuple)) and known(split):
            return tuple(Dataset(None, f"{shown}, split {s!r}", line, hub) for s in split)
        return Dataset(None, f"{shown}" + (f", split {split!r}" if known(split) and split else ""), line, hub)

    def _method(self, bound: _Bound, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        obj, method = bound.obj, bound.method
        if isinstance(obj, _Parser):
            return self._parser_method(obj, method, args, kwargs, line)
        if isinstance(obj, _Group):
            return self._parser_method(obj.parser, method, args, kwargs, line, obj.index)
        if isinstance(obj, Dataset):
            if method not in ("select", "shuffle", "rename_column", "rename_columns", "remove_columns", "cast",
                              "cast_column", "with_format", "flatten"):
                self._unfollowed_call(args, kwargs, line)   # .map(fn, fn_kwargs=…) runs the script's code on them
            if method == "select" and args and isinstance(args[0], (range, list, tuple, Sized)) and _countable(args[0]):
                return Dataset(_length(args[0]), f"{obj.source}, selected", line, obj.hub_name)
            if method in _SAME_SIZE and not (method == "map" and kwargs.get("batched", False) is not False):
                return Dataset(obj.size, obj.source, obj.line, obj.hub_name)
            if method == "map":  # a batched map may return any number of rows
                return Dataset(None, f"{obj.source}, mapped in batches", line, obj.hub_name)
            return Unknown(line, f"the dataset's .{method}(…)")
        if isinstance(obj, str) and method in _STR_METHODS and known(args) and known(kwargs):
            if _amplifies(obj, method, args, kwargs):
                return Unknown(line, f"str.{method}(…) giving a string too long to follow")
            try:
                result = getattr(obj, method)(*args, **kwargs)
            except Exception:  # noqa: BLE001 - Python would raise: not followed
                return _Failed(line, f"str.{method} failing on these values")
            return result if not isinstance(result, str) or len(result) <= MAX_TEXT else Unknown(line, "too long")
        if isinstance(obj, (list, dict, set)):
            return self._container_method(obj, method, args, kwargs, line)
        self._unfollowed_call(args, kwargs, line)
        return Unknown(line, f".{method}(…) of a value rlexp does not follow")

    def _container_method(self, obj: list | dict | set, method: str, args: list[Any], kwargs: dict[str, Any],
                          line: int) -> Any:
        """A method of a list, dict or set of the script: followed where it is certain to run and its
        arguments are known; any other change spoils the container (all of it unknown), as it could
        have changed any item, the length or the keys."""
        if _spoiled(obj):
            return first_unknown(obj, line)
        if method in ("get", "copy", "index", "count", "keys", "values", "items"):   # they change nothing
            if method == "get" and isinstance(obj, dict) and args and known(args[0]) and len(args) <= 2 \
                    and not isinstance(args[0], (list, dict, set)):
                return obj.get(args[0], args[1] if len(args) > 1 else None)
            if method == "copy" and not kwargs and not args:
                return obj.copy()
            return Unknown(line, f".{method}(…) of a {type(obj).__name__}")
        followed = self._change(obj, method, args, kwargs, line)
        if followed is not _NOT_FOLLOWED:
            return followed
        self._spoil(obj, line, f"changed by .{method}(…) on line {line}")
        return Unknown(line, f"the value of .{method}(…)")

    def _change(self, obj: list | dict | set, method: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        """The few changes of a container that are followed (``_NOT_FOLLOWED`` for the rest)."""
        if self.uncertain:
            return _NOT_FOLLOWED
        if isinstance(obj, list):
            if method == "append" and len(args) == 1:
                obj.append(args[0])
                return None
            if method == "extend" and len(args) == 1 and isinstance(args[0], (list, tuple)) and not _spoiled(args[0]):
                obj.extend(args[0])
                return None
            if method == "insert" and len(args) == 2 and type(args[0]) is int:
                obj.insert(args[0], args[1])
                return None
        if isinstance(obj, dict):
            if method == "update" and len(args) <= 1 and all(isinstance(k, str) for k in kwargs) and (not args or (isinstance(args[0], dict)
                                                                       and not _spoiled(args[0]))):
                obj.update(*args, **kwargs)
                return None
            if method == "setdefault" and 1 <= len(args) <= 2 and known(args[0]) \
                    and not isinstance(args[0], (list, dict, set)):
                return obj.setdefault(args[0], args[1] if len(args) > 1 else None)
            if method == "pop" and 1 <= len(args) <= 2 and known(args[0]) and not isinstance(args[0], (list, dict, set)) \
                    and (args[0] in obj or len(args) == 2):
                return obj.pop(*args)
        return _NOT_FOLLOWED

    def _unfollowed_call(self, args: list[Any], kwargs: dict[str, Any], line: int) -> None:
        """A call rlexp does not follow may change the lists and dicts it is given, and those inside
        them (``helper({"mods": mods})`` may append to ``mods``): they all become unknown, as do the
        parsed arguments and the config it is given."""
        why = f"given to a call on line {line} that rlexp does not follow"
        stack: list[Any] = [*args, *kwargs.values()]
        seen: set[int] = set()
        while stack and len(seen) < 4 * MAX_ITEMS:
            value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            _walked[0] += 1
            if isinstance(value, (list, dict, set, tuple)) and not _spoiled(value):
                stack.extend(value.values() if isinstance(value, dict) else value)
                if not isinstance(value, tuple):
                    self._spoil(value, line, why)
            elif isinstance(value, _Namespace):
                stack.extend(value.values.values())
                for key in value.values:
                    value.values[key] = Unknown(line, f"args.{key}, {why}")
            elif isinstance(value, TrainerCall):
                stack.append(value.arguments.get("args"))
            elif isinstance(value, ConfigCall):
                stack.extend(value.fields.values())
                if value.all_unknown is None:
                    value.all_unknown = Unknown(line, f"the {value.cls}, {why} (it may set any field)")

    def _parser_method(self, parser: _Parser, method: str, args: list[Any], kwargs: dict[str, Any], line: int,
                       group: int | None = None) -> Any:
        if method == "add_argument_group":
            return parser if group is None else _Group(parser, group)   # its options are the parser's
        if method == "add_mutually_exclusive_group":
            if not known(kwargs) or args:
                parser.broken = Unknown(line, f"an exclusive group with settings not known (line {line})")
            parser.exclusive.append((kwargs, group))
            return _Group(parser, len(parser.exclusive) - 1)
        if method == "add_argument":
            if self.uncertain:
                parser.broken = Unknown(line, f"an option added on a path not known to run (line {line})")
            elif not all(isinstance(a, str) for a in args) or not args:
                parser.broken = Unknown(line, f"an option whose name is not known (line {line})")
            else:
                parser.options.append((tuple(args), kwargs, line, group))
            return _Action(parser)
        if method == "set_defaults":
            if self.uncertain or args:
                parser.broken = Unknown(line, f"defaults set on a path not known to run (line {line})")
            parser.defaults.update(kwargs)
            return None
        if method in ("error", "exit"):
            self._stop(line, f"parser.{method}(…)")
        if group is not None:
            parser.broken = Unknown(line, f"a group's .{method}(…), which rlexp does not follow")
            return Unknown(line, f"the group's .{method}(…)")
        if method in ("parse_args", "parse_known_args"):
            words = args[0] if args else kwargs.get("args")
            if words is None:   # argparse reads sys.argv[1:] when called
                words = self.sys_argv[1:] if isinstance(self.sys_argv, list) and not _spoiled(self.sys_argv) \
                    else None
            if not (isinstance(words, (list, tuple)) and known(words) and all(isinstance(w, str) for w in words)) \
                    or len(args) > 1 or set(kwargs) - {"args"}:   # namespace=: its attributes stay
                return Unknown(line, "arguments parsed from a list not known, or into a namespace given")
            namespace = self._parse(parser, list(words),
                                    method == "parse_known_args", line)
            return (namespace, Unknown(line, "the arguments the parser left")) if method == "parse_known_args" \
                else namespace
        if method not in ("print_help", "print_usage", "format_help", "format_usage", "get_default"):
            # add_subparsers, register, …: the parser takes other words than the rebuilt one would
            parser.broken = Unknown(line, f"a parser whose .{method}(…) rlexp does not follow")
        return Unknown(line, f"the parser's .{method}(…)")

    def _parse(self, spec: _Parser, words: list[str], known_only: bool, line: int) -> Any:
        """``words`` parsed by Python's argparse, rebuilt from the script's options."""
        import argparse

        if spec.broken is not None:
            return spec.broken

        class Refused(Exception):
            pass

        class Parser(argparse.ArgumentParser):
            def error(self, message: str):  # type: ignore[override]
                raise Refused(message)

            def exit(self, status: int = 0, message: str | None = None):  # type: ignore[override]
                raise Refused(message or f"exits with status {status} (help or version)")

            def _print_message(self, message: str, file: Any = None) -> None:
                pass   # help and usage text are not rlexp's output

        parser = Parser(prog="script", add_help=spec.add_help, allow_abbrev=spec.allow_abbrev,
                        prefix_chars=spec.prefix_chars, conflict_handler=spec.conflict_handler)
        unknown = self.unknown_words
        actions = {"argparse.BooleanOptionalAction": argparse.BooleanOptionalAction}

        def converter(kind: Any):
            def convert(text: str) -> Any:
                if text in unknown:
                    return unknown[text]
                if isinstance(kind, _Function):
                    return Unknown(line, f"a value converted by the script's own {kind.node.name}()")
                return kind(text)
            convert.__name__ = getattr(kind, "__name__", "value")
            return convert

        try:
            groups: list[Any] = []
            for settings, outer in spec.exclusive:
                groups.append((parser if outer is None else groups[outer]).add_mutually_exclusive_group(**settings))
            for names, options, where, group in spec.options:
                settings = {k: v for k, v in options.items() if k not in ("help", "metavar")}
                kind = settings.get("type")
                if kind is not None:
                    builtin = kind.last if isinstance(kind, Name) and kind.dotted.startswith("builtins.") else None
                    if builtin in ("int", "float", "str"):
                        settings["type"] = converter({"int": int, "float": float, "str": str}[builtin])
                    elif isinstance(kind, _Function):
                        settings["type"] = converter(kind)
                    else:
                        return Unknown(where, f"an option typed by {getattr(kind, 'dotted', 'a value')}, which rlexp "
                                       "does not follow")
                elif settings.get("action") in (None, "store", "append", "extend"):
                    settings["type"] = converter(str)
                action = settings.get("action")
                if isinstance(action, Name):
                    if action.dotted not in actions:
                        return Unknown(where, f"an option with the action {action.dotted}, which rlexp does not "
                                       "follow")
                    settings["action"] = actions[action.dotted]
                if not known({k: v for k, v in settings.items() if k not in ("type", "action", "default")}):
                    return Unknown(where, "an option whose settings are not known")
                (parser if group is None else groups[group]).add_argument(*names, **settings)
            parser.set_defaults(**spec.defaults)
            if known_only:
                namespace, _ = parser.parse_known_args(words)
            else:
                namespace = parser.parse_args(words)
        except Refused as exc:
            raise ReadError(line, f"the script's own argument parser refuses the command: {exc}") from None
        except (TypeError, ValueError, argparse.ArgumentError) as exc:
            return Unknown(line, f"an argument parser rlexp cannot rebuild ({exc})")
        values = {name: (unknown[value] if isinstance(value, str) and value in unknown else value)
                  for name, value in vars(namespace).items()}
        return _Namespace(values)

    def _count(self, node: ast.AST) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ReadError(getattr(node, "lineno", None), f"more than {MAX_STEPS} steps to follow: too long to read")
        if _walked[0] > MAX_WALKED:
            raise ReadError(getattr(node, "lineno", None), f"looks at more than {MAX_WALKED} items of its values: "
                            "too much to read")


def _builtin(name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
    if name == "len" and len(args) == 1:
        target = args[0]
        if _spoiled(target):
            return first_unknown(target, line)
        if _countable(target):
            return _length(target)
        if isinstance(target, Dataset) and target.size is not None:
            return target.size
        return first_unknown(target, line) if isinstance(target, Unknown) else Unknown(line, "the length of a value "
                                                                                          "not known")
    if name == "range" and known(args) and all(isinstance(a, int) for a in args) and 1 <= len(args) <= 3:
        try:
            numbers = range(*args)
        except ValueError:   # a step of 0
            return _Failed(line, "a range Python refuses")
        try:
            len(numbers)
        except OverflowError:   # more than sys.maxsize numbers
            return Unknown(line, "a range rlexp cannot count")
        return numbers
    if any(isinstance(a, range) and len(a) > MAX_ITEMS for a in args) and name != "len":
        return Unknown(line, f"{name}(…) of a range too long to follow")   # sum(range(10**12)) would take hours
    if name in ("int", "float", "str", "bool", "min", "max", "abs", "round", "sorted", "sum", "list", "tuple",
                "dict", "isinstance") and known(args) and known(kwargs) and name != "isinstance":
        try:
            result = {"int": int, "float": float, "str": str, "bool": bool, "min": min, "max": max, "abs": abs,
                      "round": round, "sorted": sorted, "sum": sum, "list": list, "tuple": tuple,
                      "dict": dict}[name](*args, **kwargs)
        except Exception:  # noqa: BLE001 - Python would raise: not followed
            return _Failed(line, f"{name}(…) failing on these values")
        return result if not isinstance(result, str) or len(result) <= MAX_TEXT else Unknown(line, "too long")
    if name == "dict" and not args:
        return dict(kwargs)
    if name == "print":
        return None
    if not known(args) or not known(kwargs):
        return first_unknown([*args, *kwargs.values()], line)
    return Unknown(line, f"the value of {name}(…), which only running the script gives")


def _length(value: Any) -> int:
    return value.length if isinstance(value, Sized) else len(value)


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` as Python's ``in`` tests it, False where Python's == would raise."""
    try:
        return bool(a is b or a == b)
    except Exception:  # noqa: BLE001 - an __eq__ that fails: not equal here, the caller goes on
        return False


def _countable(value: Any) -> bool:
    """Whether ``value``'s length is known (a spoiled list's is not)."""
    return isinstance(value, (range, list, tuple, str, dict, Sized)) and not _spoiled(value)


def _decided(value: Any) -> bool:
    """Whether ``value``'s truth is known (a known value, or an object that is always true). A name
    imported from a module may be a constant (``from settings import DEBUG``), a dataset is false when
    empty: neither is decided unless known to be a module, a followed library's object, a known size."""
    if isinstance(value, Name):
        return value.module or value.dotted.startswith(_FOLLOWED_LIBRARIES)
    if isinstance(value, Dataset):
        return value.size is not None
    return known(value) or isinstance(value, (_Parser, _Namespace, _Function, ConfigCall, Sized, TrainerCall))


_FOLLOWED_LIBRARIES = ("datasets.", "argparse.", "os.", "builtins.")


def _truth(value: Any) -> bool:
    if isinstance(value, Sized):
        return value.length > 0
    if isinstance(value, Dataset):
        return bool(value.size)
    if isinstance(value, (_Parser, _Namespace, Name, _Function, ConfigCall, TrainerCall)):
        return True
    return bool(value)


def _as_load(target: ast.expr) -> ast.expr:
    copy = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(copy, target)


# expressions whose value is computed (not looked up): what they give is checked by _Reader._bounded
_COMPUTES = (ast.BinOp, ast.UnaryOp, ast.Call, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr, ast.Subscript,
             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_WIDTH = re.compile(r"\d{5,}|\*")   # a width or precision of 10,000 or more, or one given by an argument


def _wide(template: str | bytes) -> bool:
    """Whether a format spec (or %-template) asks for 10,000 characters or more, or takes its width
    from an argument: such a value is not computed."""
    text = template if isinstance(template, str) else template.decode("latin-1")
    return bool(_WIDTH.search(text))


def _measure(value: Any) -> tuple[int, int, int]:
    """(characters, items, depth) of ``value``, walked without recursion; stops once over the limits."""
    units = nodes = depth = 0
    stack = [(value, 1)]
    while stack and units <= MAX_TEXT and nodes <= 2 * MAX_ITEMS and depth <= MAX_DEPTH:
        item, level = stack.pop()
        nodes += 1
        if isinstance(item, (str, bytes)):
            units += len(item)
        elif isinstance(item, int):
            units += item.bit_length() // 3 + 1
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            depth = max(depth, level)
            units += 2
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
        else:
            units += 24
    _walked[0] += nodes
    return units, nodes, depth


def _size(value: Any) -> int:
    """About how many characters ``str(value)`` has (more than MAX_TEXT: at least that)."""
    return _measure(value)[0]


def _too_big(value: Any) -> str | None:
    """Why ``value`` is too large (or deep) to keep; None where it is not."""
    if isinstance(value, (str, bytes)):
        return "a string too long to follow" if len(value) > MAX_TEXT else None
    if isinstance(value, int):
        return "a number too large to follow" if value.bit_length() > MAX_INT_BITS else None
    if isinstance(value, Sized):
        return "a list too long to follow" if value.length.bit_length() > MAX_INT_BITS else None
    if not isinstance(value, (list, tuple, set, frozenset, dict)):
        return None
    units, nodes, depth = _measure(value)
    if depth > MAX_DEPTH:
        return "a value nested too deeply to follow"
    if units > MAX_TEXT or nodes > 2 * MAX_ITEMS:
        return "a value too large to follow"
    return None


def _shallow_size(value: Any) -> int:
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)):
        return len(value)
    if isinstance(value, int):
        return value.bit_length() // 8
    return 1


def _spoiled(value: Any) -> bool:
    """Whether ``value`` is a list or dict the script changed in a way rlexp does not follow."""
    if isinstance(value, dict):
        return _SPOILED_KEY in value
    if isinstance(value, (list, set)):
        _walked[0] += len(value)
        return any(isinstance(item, _Spoiled) for item in value)
    return False


def _amplifies(text: str, method: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether ``text.<method>(*args)`` could give a string too long to keep, checked before Python
    builds it (``sep.join(long)``, ``s.replace("", s)``, ``"{:>1000000000}".format(x)``)."""
    if method == "join" and args and isinstance(args[0], (str, list, tuple, dict, set)):
        return len(text) * len(args[0]) + _size(args[0]) > MAX_TEXT
    if method == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = text.count(args[0]) if args[0] else len(text) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        return len(text) + count * max(0, len(args[1]) - len(args[0])) > MAX_TEXT
    if method == "format":
        largest = max((_size(v) for v in (*args, *kwargs.values())), default=0)
        return _wide(text) or len(text) + text.count("{") * largest > MAX_TEXT
    return False
