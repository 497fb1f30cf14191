"""A launch script's one command, as an argv (pure: the caller reads the file; nothing is run).

What a researcher's ``train_grpo.sh`` usually is: a few ``NAME=value`` (or ``export NAME=value``)
assignments, ``set -e``-style options, comments, and one launch command broken over lines with
``\\``. :func:`read_script` returns that command's argv with ``$NAME`` / ``${NAME}`` /
``${NAME:-default}`` filled from the script's own assignments, split as the shell would
(:mod:`shlex`), and then :func:`launch_of` finds the trainer's own argv inside the launcher
(``python -m``, ``torchrun``, ``deepspeed``, ``accelerate launch``, ``ray job submit … --``).

Anything a script can do that cannot be read without running it is refused, naming the line:
loops and conditionals, ``$(…)`` and backticks, ``&&``/``||``/``;``, a variable the script does not
assign, a second command. A trailing ``| tee FILE`` or ``> FILE 2>&1`` (where the log goes) is
left out and noted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_CONTROL = ("for", "while", "until", "if", "then", "else", "elif", "fi", "do", "done", "case", "esac",
            "function", "select", "{", "}")
_IGNORED = ("set", "ulimit", "echo", "printf", "mkdir", "trap", "wait", "sleep", "nvidia-smi", "true")
_CHANGES_MEANING = ("cd", "pushd", "source", ".", "eval", "exec", "alias")


class ScriptError(ValueError):
    """A script that cannot be read without running it: ``line`` names where."""

    def __init__(self, line: int | None, message: str):
        self.line = line
        self.message = message
        super().__init__(message)


@dataclass
class Script:
    argv: list[str]                   # the command, split and with variables filled in
    line: int                         # where it starts
    variables: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with ``\\`` continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not buffer:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += line
        if buffer.strip() and not buffer.lstrip().startswith("#"):
            out.append((start, buffer))
        buffer = ""
    if buffer.strip():
        raise ScriptError(start, "the script ends inside a line continuation (a trailing \\)")
    return out


def _fill(text: str, variables: dict[str, str], line: int) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:
            return m.group(2)
        raise ScriptError(line, f"${name} is not assigned in the script: assign it there (or give its value in "
                          "the command) so the import does not guess it")
    return _VAR.sub(one, text)


def _refuse_constructs(text: str, line: int) -> None:
    if "$(" in text or "`" in text:
        raise ScriptError(line, "command substitution ($(...) or backticks): its value is only known by running it")
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as exc:
        raise ScriptError(line, f"cannot split the line as the shell would ({exc})") from None
    if tokens and tokens[0] in _CONTROL:
        raise ScriptError(line, f"a shell construct ({tokens[0]} ...): only one plain launch command can be imported")
    for token in tokens:
        if token in (";", "&&", "||", "&", ";;", "(", ")"):
            raise ScriptError(line, f"{token!r} joins several commands: keep the launch command alone on its line(s)")


def read_script(text: str) -> Script:
    """The script's one command (see the module doc); a :class:`ScriptError` naming the line otherwise."""
    if "\0" in text:
        raise ScriptError(None, "a NUL byte: not a shell script")
    variables: dict[str, str] = {}
    command: Script | None = None
    notes: list[str] = []
    for number, line in _logical_lines(text):
        body = line.strip()
        if body.startswith("#!"):
            continue
        _refuse_constructs(body, number)
        if m := _ASSIGN.match(body):
            try:
                values = shlex.split(_fill(m.group(2), variables, number))
            except ValueError as exc:
                raise ScriptError(number, f"cannot read the value of {m.group(1)} ({exc})") from None
            if len(values) > 1:
                raise ScriptError(number, f"{m.group(1)}: several words without quotes")
            variables[m.group(1)] = values[0] if values else ""
            continue
        word = body.split()[0]
        if word in _CHANGES_MEANING:
            raise ScriptError(number, f"{word!r} changes what the command means (paths, variables): "
                              "import a script without it, with paths as the run saw them")
        if word in _IGNORED:
            notes.append(f"line {number}: {word} ... left out (not the launch command)")
            continue
        if command is not None:
            raise ScriptError(number, f"a second command (the first is at line {command.line}): "
                              "only a script with one launch command can be imported")
        try:
            argv = shlex.split(_fill(body, variables, number))
        except ValueError as exc:
            raise ScriptError(number, f"cannot split the command as the shell would ({exc})") from None
        argv, tail = _strip_output(argv)
        if tail:
            notes.append(f"line {number}: {' '.join(tail)} left out (where the output went)")
        while argv and _ASSIGN.match(argv[0]):  # VAR=value cmd ...: an environment for the command
            name, _, value = argv.pop(0).partition("=")
            variables[name] = value
        if not argv:
            raise ScriptError(number, "no command after the assignments")
        command = Script(argv, number)
    if command is None:
        raise ScriptError(None, "no launch command in the script")
    command.variables = variables
    command.notes = notes
    return command


def _strip_output(argv: list[str]) -> tuple[list[str], list[str]]:
    """A trailing ``| tee FILE`` or redirections of the output: left out, returned apart."""
    for i, token in enumerate(argv):
        if token == "|":
            if i + 1 < len(argv) and argv[i + 1] == "tee" and "|" not in argv[i + 1:]:
                return argv[:i], argv[i:]
            raise ScriptError(None, "a pipe into something other than tee: several commands")
        if re.match(r"^\d*>>?(&\d+)?$|^&>$|^<$", token) or re.match(r"^\d*>>?\S+$", token):
            rest = argv[i:]
            return argv[:i], rest
    return argv, []


# --- the launcher around the trainer ---------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    trainer: str            # a trainer.name (rlexp.trainers)
    module: str             # the Python module or script the launcher runs
    args: list[str]         # the trainer's own arguments
    launcher: list[str]     # what ran it (python, torchrun ..., ray job submit ... --)


RAY_JOB_SUBMIT = ("ray", "job", "submit")  # the launcher in front of a Ray job's entrypoint


def launch_of(argv: list[str]) -> Launch:
    """The trainer, its module and its own arguments inside ``argv``; a :class:`ScriptError` when
    the launcher or the module is not one rlexp knows."""
    rest = list(argv)
    launcher: list[str] = []
    if tuple(rest[:3]) == RAY_JOB_SUBMIT:
        if "--" not in rest:
            raise ScriptError(None, "ray job submit without `--` before the entrypoint")
        cut = rest.index("--")
        launcher, rest = rest[: cut + 1], rest[cut + 1:]
    if not rest:
        raise ScriptError(None, "no command to run")
    from rlexp.trainers import names, rules

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
    from rlexp.core.spec import is_credential_key

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
    if text.startswith("["):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return raw
        return [argument_value(str(v)) if isinstance(v, str) else v for v in value] if isinstance(value, list) else raw
    return raw


def dataset_argument(path: str, flag: str) -> dict[str, Any]:
    """A training set named by a launch argument: its path, and the flag (for messages; dropped once read)."""
    return {"path": path, "flag": flag}
