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
so it is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.training.launch_script import argument_value, dataset_argument, secret_argument

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


def check_module(script: Path, where: str, module: str) -> dict[str, Any]:
    """The recipe keys the command itself states. TRL's command line and its `trl.scripts` modules
    run one trainer each: `trl grpo` / `trl.scripts.grpo` GRPOTrainer (the recipe's default),
    `trl rloo` / `trl.scripts.rloo` RLOOTrainer (``advantage_estimator: rloo``: RLOOConfig's fields
    and defaults); another (`trl sft` SFTTrainer, ...) is refused, naming it, rather than planned as
    GRPO. (A training script of the user's own, `accelerate launch train.py`, is read as a GRPO
    script; one of TRL's own examples is read by what it runs, rlexp.trainers.trl.examples.)"""
    from rlexp.trainers.trl import examples
    from rlexp.trainers.trl.keys import DEFAULT_ESTIMATOR, ESTIMATOR_KEY, TRAINERS

    example = examples.example_of(module)
    if example is not None:
        why = examples.refusal(example)
        if why is not None:
            raise InputError(script, where, why)
        estimator = examples.PARSED[example]
        return {} if estimator == DEFAULT_ESTIMATOR else {ESTIMATOR_KEY: estimator}
    if module.startswith("trl ") or module.startswith("trl.scripts."):
        sub = module.split(" ", 1)[1] if module.startswith("trl ") else module.rsplit(".", 1)[-1]
        if sub not in TRAINERS:
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
        if secret_argument(key):
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
