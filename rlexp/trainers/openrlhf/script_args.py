"""``rlexp import`` of an OpenRLHF launch script: the arguments are parsed by the named release's own
``train_ppo_ray`` parser (:mod:`rlexp.trainers.openrlhf.parser`, as ``rlexp plan`` does), so a flag
that release does not have, or a bad value, is refused as the trainer would refuse it. Each given
flag becomes its recipe key (the v0.9.x name, or the dotted name of a flag only newer releases have)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.training.launch_script import dataset_argument, secret_argument

# read_args refuses a missing --version itself, naming the listed releases (their parsers read the flags)
CHECKS_VERSION = True
OWNED = ("save_path", "ckpt_path", "remote_rm_url", "use_tensorboard", "load_checkpoint", "prompt_data",
         "eval_dataset", "reward_pretrain")
# what rlexp launch sets when the recipe does not (rlexp.trainers.openrlhf.argv.attempt_recipe): the same value
# in a script is no setting of its own
LAUNCH_DEFAULTS = {"input_key": "prompt", "label_key": "answer", "apply_chat_template": True,
                   "save_hf_ckpt": True}
ARGUMENT_STYLE = "flags"
DATASET_KEYS = {"prompt_data": "pool", "eval_dataset": "ood_monitor"}


def _recipe_key(flag_name: str) -> str:
    """The v0.9.x recipe key of a flag (``ckpt.output_dir`` -> ``save_path``)."""

    return _reverse_names().get(f"--{flag_name}", flag_name)


def _reverse_names() -> dict[str, str]:
    """``--dotted.flag`` -> its v0.9.x recipe key; where two keys share a flag (``generate_max_len``
    and the builder's ``max_new_tokens`` -> ``rollout.max_new_tokens``) the recipe's own name wins.
    The builder's own underscore names are read as that recipe key too: 0.9.8 to 0.10.1.post2 call the
    response budget ``--max_new_tokens``, which attempt.yaml states as ``generate_max_len``."""
    from rlexp.spec.recipe import BUILDER_ONLY_DOTTED
    from rlexp.trainers.openrlhf import argv as openrlhf

    reverse: dict[str, str] = {}
    for key, dotted in openrlhf.DOTTED_NAMES.items():
        if key not in BUILDER_ONLY_DOTTED:
            reverse.setdefault(f"--{dotted}", key)
    for key, dotted in BUILDER_ONLY_DOTTED.items():
        reverse[f"--{key}"] = reverse[f"--{dotted}"]
    for key, names in openrlhf.SPLIT_NAMES.items():
        for name in names:
            reverse[f"--{name}"] = key
    return reverse


def dropped(flag_name: str) -> bool:
    """Whether import leaves the flag out anyway (rlexp sets it, a logger, a credential)."""
    key = _recipe_key(flag_name)
    return (key in OWNED and key not in DATASET_KEYS) or secret_argument(key) or secret_argument(flag_name) \
        or key.startswith(("wandb", "use_wandb", "logger.", "ckpt.output_dir")) or flag_name.startswith("logger.")


def field_of(flag_name: str) -> str:
    key = _recipe_key(flag_name)
    role = DATASET_KEYS.get(key)
    return f"datasets.{role}: the data's path" if role else f"--{flag_name}, recipe key {key}"


def read_args(script: Path, where: str, args: list[str], version: str | None):
    """The recipe, datasets, left-out keys and notes of ``train_ppo_ray`` arguments, parsed by the
    release's own parser."""
    from rlexp.trainers.openrlhf import argv as openrlhf
    from rlexp.trainers.openrlhf import parser as openrlhf_parser

    if version is None:
        raise InputError(script, None, "the OpenRLHF release is not stated in the script: give it with --version "
                         f"(one of {', '.join(openrlhf.known_versions())}); its parser reads the flags")
    version = openrlhf.check_version(version, script)
    try:
        parser = openrlhf_parser.load_release_parser(version)
    except openrlhf_parser.ReleaseError as exc:
        raise InputError(None, "--version", f"OpenRLHF {version}'s parser is not here ({exc}); run "
                         f"{openrlhf_parser.FETCH_SCRIPT}") from None
    try:
        parsed = parser.parse(args, post_parse=False)
    except openrlhf_parser.Rejected as exc:
        raise InputError(script, where, f"OpenRLHF {version}'s parser refuses the command: {exc}") from None
    table = openrlhf.load_flag_table(version)
    reverse = _reverse_names()
    by_flag = {option: action for action in parser.parser._actions for option in action.option_strings}
    recipe: dict[str, Any] = {}
    datasets: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    notes: list[str] = []
    for token in args:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        action = by_flag.get(flag)
        if action is None:  # an abbreviation argparse accepted: name the flag in full
            raise InputError(script, where, f"{flag}: write the flag in full (argparse took it as an abbreviation)")
        key = reverse.get(flag, flag[2:])
        if "." in key and table.dialect == "underscore":
            key = flag[2:]
        value = getattr(parsed.args, action.dest)
        if secret_argument(key):
            left_out.append(key)
            continue
        if key in ("prompt_data", "eval_dataset"):
            role = "pool" if key == "prompt_data" else "ood_monitor"
            datasets[role] = dataset_argument(str(value), flag)
            continue
        if key in OWNED:
            left_out.append(key)
            continue
        if key in LAUNCH_DEFAULTS and LAUNCH_DEFAULTS[key] == value:
            continue  # what rlexp launch passes anyway
        recipe[key] = list(value) if isinstance(value, tuple) else value
    if "pool" not in datasets:
        raise InputError(script, where, "no --prompt_data: the data the run trains on is needed for its steps")
    if parsed.printed:
        notes += parsed.printed
    return recipe, datasets, left_out, notes
