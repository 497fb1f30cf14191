"""``rlexp import`` of a TRL launch script: ``--field value`` arguments of a TRL script become
``GRPOConfig`` (``RLOOConfig`` for ``trl rloo``) / ``ModelConfig`` fields; ``rlexp plan`` checks
them against the fields of that class.

The arguments are read as TRL's own parser (transformers' ``HfArgumentParser``) reads them: a field
whose type is a list (``lora_target_modules: list[str] | None``) takes every word up to the next
flag (``nargs="+"``: ``--lora_target_modules q_proj v_proj``), a bool may stand alone
(``--use_peft``), anything else takes one value. ``trl grpo``'s and ``trl rloo``'s own script
arguments (``GRPOScriptArguments``, ``RLOOScriptArguments`` and ``ScriptArguments`` in TRL 1.16;
the two commands' are the same names) are accepted: the dataset fields name
the training data, and the reward (``reward_funcs``, ``reward_model_name_or_path``) is rlexp's own,
so it is left out.

A training script that builds its config in its own code (``GRPOConfig(learning_rate=args.lr, ...)``
under argparse flags of its own) states nothing of it on the command line: :func:`read_source` reads
the script's source, when it is found, and follows its code without running it
(:mod:`rlexp.training.python_script`) to the fields it passes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.training.launch_script import argument_value, dataset_argument, secret_argument

if TYPE_CHECKING:
    import ast

    from rlexp.training.python_script import ReadError

CHECKS_VERSION = False  # a missing --version is refused by the stage (the script does not state the release)
DATA_IN_SCRIPT = True  # a training script may load its data itself
LAUNCH_DEFAULTS: dict[str, Any] = {}
ARGUMENT_STYLE = "flags"
OWNED = ("output_dir", "report_to", "logging_dir", "run_name", "push_to_hub", "hub_model_id", "hub_strategy")
DATASET_FLAGS = ("dataset_name", "dataset_path")
# trl grpo's script arguments (trl/scripts/grpo.py GRPOScriptArguments, trl/scripts/utils.py
# ScriptArguments, TRL 1.16): name -> takes a list (nargs="+")
SCRIPT_ARGUMENTS = {"reward_model_name_or_path": False, "reward_funcs": True, "dataset_name": False,
                    "dataset_config": False, "dataset_train_split": False, "dataset_test_split": False,
                    "dataset_streaming": False, "ignore_bias_buffers": False}
REWARD_ARGUMENTS = ("reward_model_name_or_path", "reward_funcs")
DATASET_DETAILS = ("dataset_config", "dataset_train_split", "dataset_test_split", "dataset_streaming")


def dropped(key: str) -> bool:
    key = key.replace("-", "_")
    return key in OWNED or key in REWARD_ARGUMENTS or secret_argument(key)


def field_of(key: str) -> str:
    key = key.replace("-", "_")
    return "datasets.pool: the data's name or path" if key in DATASET_FLAGS else f"recipe key {key}"


def _kinds() -> dict[str, str]:
    """Each field's kind as HfArgumentParser builds its option: "list" (nargs='+'), "bool" (nargs='?')
    or "one"."""
    from rlexp.trainers.trl.fields import GRPO_CONFIG_FIELDS, MODEL_CONFIG_FIELDS, RLOO_CONFIG_FIELDS

    kinds: dict[str, str] = {}
    # a field both config classes have is typed alike in both (transformers' TrainingArguments, or TRL's own)
    for name, annotation, _ in (*GRPO_CONFIG_FIELDS, *RLOO_CONFIG_FIELDS, *MODEL_CONFIG_FIELDS):
        parts = [p.strip() for p in annotation.split("|") if p.strip() not in ("None", "NoneType")]
        if len(parts) == 1 and parts[0].startswith("list["):
            kinds[name] = "list"
        elif parts == ["bool"]:
            kinds[name] = "bool"
        else:
            kinds[name] = "one"
    for name, is_list in SCRIPT_ARGUMENTS.items():
        kinds[name] = "list" if is_list else ("bool" if name in ("dataset_streaming", "ignore_bias_buffers") else "one")
    return kinds


# the config classes a script may build, and their trainers (AsyncGRPO's: `from trl.experimental.async_grpo import`)
CONFIG_CLASSES = {"GRPOConfig": "grpo", "RLOOConfig": "rloo", "AsyncGRPOConfig": "async_grpo"}
TRAINER_CLASSES = ("GRPOTrainer", "RLOOTrainer", "AsyncGRPOTrainer")
ARGUMENT_PARSERS = ("TrlParser", "HfArgumentParser")  # a script parsing its config's fields from its flags
MAX_PROCESSES = 1_000_000_000  # trainer.gpus's own bound (the spec refuses more)


def read_source(script: Path, where: str, launch: Any, *, workdir: Path | None, env: dict[str, str],
                ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]] | None:
    """The recipe, datasets, left-out keys and notes of a training script that builds its GRPOConfig
    (RLOOConfig) in its own code, read from its source; None where the script's flags are its config's
    fields (a TrlParser script, ``trl grpo``) or its source is not found (then its flags are read as
    GRPOConfig's, as TRL's own scripts take them). ``workdir``: the folder the command runs from (a
    relative script path is read from there; the current directory when None)."""
    from rlexp.trainers.trl import examples

    module = launch.module
    if not module.endswith(".py"):
        return None
    example = examples.example_of(module)
    if example is not None and example not in examples.OWN_CONFIG:
        return None  # a TrlParser example, or another trainer's (check_module refuses it)
    if example in examples.NOT_ON_RELEASE:
        raise InputError(script, where, examples.refusal(example))
    if workdir is not None and not workdir.is_dir():
        raise InputError(workdir, "--workdir", "not a folder: the folder the script's command runs from")
    path = _in_workdir(module, workdir)
    if not path.is_file():
        if example is not None:
            raise InputError(script, where, f"{examples.refusal(example)}; rlexp reads that code from the file, "
                             f"which is not at {path}: give the folder the command runs from with --workdir")
        return None  # read by its flags, as a script whose source is not here
    source = _source_text(path)
    import ast

    from rlexp.training import python_script as py

    try:
        tree = py.parse(source)  # parsed once: the reader below follows the same tree
    except py.ReadError as exc:
        raise _script_error(path, exc) from None
    nodes = list(ast.walk(tree))
    names = {n.id for n in nodes if isinstance(n, ast.Name)} | {n.attr for n in nodes if isinstance(n, ast.Attribute)} \
        | {n.name.rsplit(".", 1)[-1] for n in nodes if isinstance(n, ast.alias)}  # what it imports, by the name TRL gives
    calls = {getattr(n.func, "id", None) or getattr(n.func, "attr", None) for n in nodes if isinstance(n, ast.Call)}
    if names & set(ARGUMENT_PARSERS) and not calls & set(CONFIG_CLASSES):
        return None  # its parser reads the config's fields from its flags (a config it builds itself is read below)
    if not names & {*CONFIG_CLASSES, *TRAINER_CLASSES} and example is None:
        # it names no TRL config or trainer (it may hand its flags to a module of its own): read its
        # flags as GRPOConfig's, as a script that cannot be read is
        return None
    return _read_built_config(script, path, tree, launch, env)


def processes_needed(recipe: dict[str, Any]) -> bool:
    """Whether the plan of ``recipe`` needs the processes: not AsyncGRPOTrainer's, whose step count is the
    stated max_steps whatever the processes (rlexp.trainers.trl.steps.async_grpo_steps)."""
    from rlexp.trainers.trl.keys import ASYNC_GRPO, ESTIMATOR_KEY

    return recipe.get(ESTIMATOR_KEY) != ASYNC_GRPO


def processes(script: Path, where: str, launch: Any, *, workdir: Path | None) -> tuple[int, str]:
    """The processes the launch command starts, which TRL trains on (its world size: the attempt's
    ``trainer.gpus``), and how the command states it: ``accelerate launch --num_processes N`` (or the
    ``num_processes`` of its ``--config_file``, read from ``workdir``), ``torchrun --nproc_per_node N
    --nnodes M``, ``deepspeed --num_gpus N --num_nodes M``; ``python`` runs one."""
    from rlexp.training.launch_script import Unknown

    launcher = list(launch.launcher)
    # the tool that starts the processes, after any wrapper in front (`uv run`, `ray job submit --`)
    tools = [i for i, t in enumerate(launcher) if isinstance(t, str) and re.fullmatch(
        r"accelerate|torchrun|deepspeed|python(\d(\.\d+)?)?", t.rsplit("/", 1)[-1])]
    start = tools[0] if tools else 0
    launcher = launcher[start:]
    tool = str(launcher[0]).rsplit("/", 1)[-1] if launcher else "python"

    def option(*names: str) -> Any:
        for i, token in enumerate(launcher):
            if isinstance(token, Unknown):
                continue
            for name in names:
                if token == name and i + 1 < len(launcher):
                    return launcher[i + 1]
                if token.startswith(name + "="):
                    return token.split("=", 1)[1]
        return None

    def count(value: Any, shown: str, default: int | None) -> int:
        if value is None:
            if default is None:
                raise InputError(script, where, f"{tool} without {shown}: the processes come from the machine that "
                                 "ran it, and plan needs them (TRL's batches per step): give them with --gpus N")
            return default
        if isinstance(value, Unknown):
            raise InputError(script, f"line {value.line}", f"{value.what} reaches {tool}'s {shown}, the processes "
                             "plan needs (TRL's batches per step); or give them with --gpus N")
        if not re.fullmatch(r"[0-9]{1,10}", value) or not 1 <= int(value) <= MAX_PROCESSES:
            raise InputError(script, where, f"{shown} {value[:40]!r}: not a count of processes rlexp can read (1 to "
                             f"{MAX_PROCESSES}; plan needs it: TRL's batches per step); give it with --gpus N")
        return int(value)

    if tool == "accelerate":
        stated = option("--num_processes", "--num-processes")
        if stated is not None:
            return count(stated, "--num_processes", None), f"accelerate launch --num_processes {stated}"
        config = option("--config_file", "--config-file")
        if config is None or isinstance(config, Unknown):
            count(config, "--num_processes or --config_file", None)
        return _accelerate_config_processes(script, where, config, workdir), f"num_processes in {config}"
    if tool == "torchrun":
        per_node = count(option("--nproc_per_node", "--nproc-per-node"), "--nproc_per_node", 1)
        nodes = count(option("--nnodes"), "--nnodes", 1)
        return per_node * nodes, f"torchrun: {per_node} per node × {nodes} node(s)"
    if tool == "deepspeed":
        per_node = count(option("--num_gpus"), "--num_gpus", None)
        # without --num_nodes, deepspeed runs on every host of its hostfile (--hostfile, else /job/hostfile
        # where the training machine has one): a named hostfile's hosts are not known here
        hostfile = option("--hostfile") is not None
        nodes = count(option("--num_nodes"), "--num_nodes (with --hostfile, every host in it)", None if hostfile else 1)
        counted = "" if option("--num_nodes") is not None else ", as one node (deepspeed's /job/hostfile, where the " \
            "machine has one, would add its hosts)"
        return per_node * nodes, f"deepspeed: {per_node} per node × {nodes} node(s){counted}"
    return 1, f"{tool} runs one process"


def _accelerate_config_processes(script: Path, where: str, config: str, workdir: Path | None) -> int:
    """``num_processes`` of an accelerate config file (safe YAML, read as data)."""
    import yaml

    path = _in_workdir(config, workdir)
    if not path.is_file():
        raise InputError(script, where, f"accelerate's --config_file {config}: not found at {path}, and plan needs its "
                         "num_processes (TRL's batches per step): give the folder the command runs from with "
                         "--workdir, or the processes with --gpus N")
    text = _source_text(path)
    try:
        settings = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"not YAML that parses ({str(exc).splitlines()[0][:80]})") from None
    value = settings.get("num_processes") if isinstance(settings, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PROCESSES:
        raise InputError(path, "num_processes", f"{value!r:.40}: expected a count of processes (plan needs it: TRL's "
                         "batches per step); give it with --gpus N")
    return value


def _in_workdir(name: str, workdir: Path | None) -> Path:
    """A path the launch command names, as the command sees it: run from ``workdir`` (the current
    directory when None)."""
    return Path(name) if Path(name).is_absolute() else (workdir or Path.cwd()) / name


def _source_text(path: Path) -> str:
    from rlexp.experiment.files import read_text
    from rlexp.training.launch_script import MAX_SCRIPT_BYTES

    return read_text(path, limit=MAX_SCRIPT_BYTES)


def _script_error(path: Path, exc: ReadError) -> InputError:
    """A training script's :class:`~rlexp.training.python_script.ReadError`, naming the file and line."""
    return InputError(path, f"line {exc.line}" if exc.line else None, exc.message)


def _read_built_config(script: Path, path: Path, tree: ast.Module, launch: Any, env: dict[str, str],
                       ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
    """Follow the script's code to its one config call and its trainer call."""
    from rlexp.trainers.trl.keys import ESTIMATOR_KEY
    from rlexp.trainers.trl.recipe import Field, TrlRecipe
    from rlexp.training import python_script as py
    from rlexp.training.launch_script import PLACEHOLDER, Unknown

    words: list[str] = []
    unknown_words: dict[str, py.Unknown] = {}
    for i, token in enumerate(launch.args):
        if isinstance(token, Unknown):
            word = f"{PLACEHOLDER}-{i}"
            unknown_words[word] = py.Unknown(token.line, f"{token.what} (line {token.line} of {script.name})")
            words.append(word)
        else:
            words.append(token)
    try:
        found = py.read(tree, words, env=env, configs=tuple(CONFIG_CLASSES), trainers=TRAINER_CLASSES, library="trl",
                        unknown_words=unknown_words)
    except py.ReadError as exc:
        raise _script_error(path, exc) from None
    shown = path.name
    if not found.configs:
        raise InputError(path, None, f"{shown} builds no GRPOConfig, RLOOConfig or AsyncGRPOConfig that rlexp can "
                         "follow, and does not parse one with TrlParser: rlexp plans TRL's GRPOTrainer, RLOOTrainer "
                         "and AsyncGRPOTrainer")
    if len(found.configs) > 1:
        lines = ", ".join(str(c.line) for c in found.configs)
        raise InputError(path, f"lines {lines}", f"{shown} builds {len(found.configs)} configs: rlexp plans one run")
    config = found.configs[0]
    where = f"line {config.line}"
    if config.conditional is not None:
        raise InputError(path, where, f"{config.cls}(…) is built on a path rlexp cannot follow "
                         f"({config.conditional.why}), and plan needs its fields")
    if config.all_unknown is not None:
        raise InputError(path, where, f"{config.all_unknown.why}: plan needs the config's fields")
    needed = {name for name, value in vars(TrlRecipe).items() if isinstance(value, Field)}
    recipe: dict[str, Any] = {}
    left_out: list[str] = []
    notes: list[str] = [f"the config is {config.cls}(…) on line {config.line} of {shown}, read from its code "
                        "(not run)"]
    for key, value in config.fields.items():
        if key in OWNED or secret_argument(key) or (py.known(value) and holds_secret(key, _plain(value), env)):
            left_out.append(key)
        elif py.known(value):
            recipe[key] = _plain(value)
        elif key in needed:
            why = py.first_unknown(value, config.line)
            raise InputError(path, f"line {why.line}", f"{why.why} reaches {config.cls}({key}=…), which plan needs "
                             f"(recipe key {key})")
        else:
            why = py.first_unknown(value, config.line)
            notes.append(f"line {why.line} of {shown}: {key} left out, its value is not known ({why.why})")
    estimator = CONFIG_CLASSES[config.cls]
    implied = {} if estimator == "grpo" else {ESTIMATOR_KEY: estimator}
    datasets = {"pool": {"path": [launch.module], "flag": f"the data {launch.module} loads"}}
    trainers = [t for t in found.trainers if t.arguments.get("args") is config]
    if trainers:
        arguments = trainers[0].arguments
        model = arguments.get("model")
        if isinstance(model, str):
            if holds_secret("model_name_or_path", model, env):
                left_out.append("model_name_or_path")
            else:
                recipe["model_name_or_path"] = model
        elif model is not None:
            notes.append(f"line {trainers[0].line} of {shown}: the model is not known "
                         f"({py.first_unknown(model, trainers[0].line).why})")
        datasets["pool"] = _pool(launch.module, arguments.get("train_dataset"), shown, notes)
        if "peft_config" in arguments:
            notes.append(f"line {trainers[0].line} of {shown}: a peft_config is passed to the trainer (LoRA); "
                         "rlexp does not read its settings")
    return {**implied, **recipe}, datasets, left_out, notes


def holds_secret(key: str, value: Any, env: dict[str, str]) -> bool:
    """Whether ``value`` carries a credential, which never reaches attempt.yaml: a URL with user:key@, a
    key-shaped string, a mapping entry named like one (``model_init_kwargs={"token": ...}``, also inside
    a JSON text), or the value of a credential the environment holds (``model=os.environ["HF_TOKEN"]``)."""
    import contextlib
    import json

    from rlexp.spec.schema import credential_in, is_credential_key

    if isinstance(value, str) and value.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    if credential_in(value, key, by_key=True) is not None:
        return True
    secrets = {v for name, v in env.items() if is_credential_key(name) and len(v) >= 4}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str) and item in secrets:
            return True
    return False


def _pool(module: str, dataset: Any, shown: str, notes: list[str]) -> dict[str, Any]:
    """The training set the script's trainer is given: a hub name, or the data the script builds (with
    its size where its code states it)."""
    from rlexp.training import python_script as py

    if isinstance(dataset, py.Dataset):
        entry: dict[str, Any] = {"path": dataset.hub_name or [module], "flag": f"{dataset.source} in {shown}"}
        if dataset.size is not None:  # counted from the code (`from_dict`, `.select(range(500))`)
            entry["size"] = dataset.size
        return entry
    return {"path": [module], "flag": f"the data {module} loads"}


def _plain(value: Any) -> Any:
    """A value as YAML writes it (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def check_module(script: Path, where: str, module: str) -> dict[str, Any]:
    """The recipe keys the command itself states. TRL's command line and its `trl.scripts` modules
    run one trainer each: `trl grpo` / `trl.scripts.grpo` GRPOTrainer (the recipe's default),
    `trl rloo` / `trl.scripts.rloo` RLOOTrainer (``advantage_estimator: rloo``: RLOOConfig's fields
    and defaults); another (`trl sft` SFTTrainer, ...) is refused, naming it, rather than planned as
    GRPO. (A training script of the user's own, `accelerate launch train.py`, is read as a GRPO
    script; one of TRL's own examples is read by what it runs, rlexp.trainers.trl.examples.)"""
    from rlexp.trainers.trl import examples
    from rlexp.trainers.trl.keys import CLI_COMMANDS, DEFAULT_ESTIMATOR, ESTIMATOR_KEY

    example = examples.example_of(module)
    if example is not None:
        why = examples.refusal(example)
        if why is not None:
            raise InputError(script, where, why)
        estimator = examples.PARSED[example]
        return {} if estimator == DEFAULT_ESTIMATOR else {ESTIMATOR_KEY: estimator}
    if module.startswith("trl ") or module.startswith("trl.scripts."):
        sub = module.split(" ", 1)[1] if module.startswith("trl ") else module.rsplit(".", 1)[-1]
        if sub not in CLI_COMMANDS:
            shown = f"trl {sub}" if module.startswith("trl ") else f"python -m {module}"
            raise InputError(script, where, f"{shown[:80]}: rlexp plans TRL's GRPOTrainer (`trl grpo`) and RLOOTrainer "
                             f"(`trl rloo`); {shown[:80]} runs another trainer")
        if sub != DEFAULT_ESTIMATOR:
            return {ESTIMATOR_KEY: sub}
    return {}


def read_args(script: Path, where: str, args: list[str], version: str | None = None):
    """The recipe, datasets, left-out keys and notes of ``--field value`` arguments."""
    kinds = _kinds()
    recipe: dict[str, Any] = {}
    datasets: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            raise InputError(script, where, f"{token[:80]!r}: expected --field value")
        key, eq, raw = token[2:].partition("=")
        key = key.replace("-", "_")
        kind = kinds.get(key, "one")
        i += 1
        following: list[str] = []
        while i < len(args) and not args[i].startswith("--") and (kind == "list" or not following):
            following.append(args[i])
            i += 1
        if eq:
            values = [raw] + following
            if following:
                raise InputError(script, where, f"--{key}={raw} then {following[0]!r}: a word no flag takes")
        elif following:
            values = following
        elif kind == "bool":
            values = ["true"]
        else:
            raise InputError(script, where, f"--{key} without a value (TRL's parser expects one)")
        value: Any = [argument_value(v) for v in values] if kind == "list" else argument_value(values[0])
        if key == "advantage_estimator":  # rlexp's key naming the trainer, which the command names here
            raise InputError(script, where, "--advantage_estimator: not an argument of TRL's scripts (the command "
                             "names the trainer: `trl grpo`, `trl rloo`)")
        if secret_argument(key) or holds_secret(key, value, {}):
            left_out.append(key)
        elif key in DATASET_FLAGS:
            datasets["pool"] = dataset_argument(str(value), f"--{key}")
        elif key in OWNED or key in REWARD_ARGUMENTS:
            left_out.append(key)
        elif key in DATASET_DETAILS:
            notes.append(f"--{key} {value}: which part of the training data the run read (recorded here, the pool's "
                         "size is what plan needs)")
        else:
            recipe[key] = value
    # no --dataset_name: a script of one's own loads its data itself (the stage records the script as
    # the data's source and asks for its size by name); `trl grpo` cannot run without one
    return recipe, datasets, left_out, notes
