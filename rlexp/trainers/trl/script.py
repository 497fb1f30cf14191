"""Launching TRL's ``GRPOTrainer`` or ``RLOOTrainer``: the generated training script, its argv and
where it writes.

``rlexp launch`` on an attempt with ``trainer.name: trl`` writes ``launch/train_trl.py`` (from
:mod:`rlexp.trainers.trl.template`) and runs ``[<.venv-trl python>, launch/train_trl.py]`` as a
process. TRL is not installed in the main venv (it moves the torch/transformers pins): the
Python is ``$RLEXP_TRL_PYTHON`` when set, else ``.venv-trl/bin/python`` of the rlexp checkout
(``scripts/setup-trl`` builds it). The recipe's stated config fields reach the config class its
``advantage_estimator`` names (``GRPOConfig``, or ``RLOOConfig`` under ``rloo_config`` in the
script's JSON) as they are, except the ones rlexp owns: ``output_dir`` (``checkpoints/trl``) and ``report_to``
(TensorBoard is always among them: the launcher follows its event files).

Metric names: TRL's logged keys land in ``metrics.jsonl`` under the names of
docs/ARCHITECTURE.md "Metrics JSONL" where one exists (:data:`TRL_METRIC_ALIASES`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import ADAPTER_PATTERN, AttemptDir
from rlexp.models.base_models import loadable
from rlexp.trainers.trl import RULES
from rlexp.trainers.trl.files import TrlFiles
from rlexp.trainers.trl.keys import ASYNC_GRPO, ESTIMATOR_KEY
from rlexp.trainers.trl.metrics import NAMES as _TRL_NAMES

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

# rlexp sets these GRPOConfig fields itself (the layout and the metrics it follows)
OWNED_FIELDS = ("output_dir", "report_to")
# TRL's log keys (after transformers' "train/" prefix) -> the canonical metrics.jsonl names: the
# one table in rlexp.trainers.trl.metrics.NAMES, flattened (source name -> canonical name)
TRL_METRIC_ALIASES = {source: canonical for canonical, sources in _TRL_NAMES.items() for source in sources
                      if source != canonical}


@dataclass(frozen=True)
class TrlScript:
    """What the launcher writes and runs for a TRL attempt: the argv, the generated training script
    (its path and text) and the generated modules beside it. (The trainer's launch, the
    ``TrainerLaunch`` the registry finds, is :class:`rlexp.trainers.trl.launch.TrlLaunch`; it
    turns this into a ``LaunchPlan``.)"""

    argv: list[str]
    script: Path
    script_text: str
    # generated files a dry run writes too, for a reader to open (an environment task: the script and
    # its rollout module, rlexp.trainers.trl.agent); empty for single-turn prompts
    adapters: dict[Path, str] = field(default_factory=dict)


# the checkout (or site-packages folder) that holds the rlexp package: where .venv-trl is set up, and
# what the generated script puts on sys.path
CHECKOUT = Path(__file__).resolve().parents[3]


def trl_python(*, must_exist: bool = True) -> Path:
    """The Python of the TRL venv (``$RLEXP_TRL_PYTHON`` or the checkout's ``.venv-trl``)."""
    stated = os.environ.get("RLEXP_TRL_PYTHON")
    path = Path(stated) if stated else CHECKOUT / ".venv-trl" / "bin" / "python"
    if must_exist and not path.exists():
        raise InputError(path, None, "TRL's Python not found: run scripts/setup-trl (or set RLEXP_TRL_PYTHON)")
    return path


def config_kwargs(att: Attempt, ad: AttemptDir) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config class's (GRPOConfig or RLOOConfig) and ModelConfig's keyword arguments: the fields
    some spec in the chain states, plus the ones rlexp owns (output paths, TensorBoard, the resolved
    model path). A field no spec states takes the class's own default, which is what the plan
    resolved it to (rlexp.trainers.trl.keys.recipe_defaults)."""
    from rlexp.trainers.launch import loss_recipe
    from rlexp.trainers.trl.fields import MODEL_CONFIG_FIELDS
    from rlexp.trainers.trl.keys import config_field_names

    stated = loss_recipe(att, att.recipe_stated)  # environment.loss gspo: TRL's fields
    config_names = config_field_names(att.recipe.estimator)
    model_kwargs = {k: v for k, v in stated.items() if k not in config_names and k in {r[0] for r in MODEL_CONFIG_FIELDS}}
    model_kwargs["model_name_or_path"] = str(loadable(att.base_model(), att.spec_path))  # a .gguf: its converted directory
    stated = {k: v for k, v in stated.items() if k in config_names}
    for owned in OWNED_FIELDS:
        if owned in stated and owned != "report_to":
            raise InputError(att.display_path or att.spec_path, f"recipe.{owned}",
                             "rlexp sets it (the experiment directory's layout): leave it out")
    report_to = stated.get("report_to") or []
    report_to = [report_to] if isinstance(report_to, str) else list(report_to)
    report_to = [r for r in report_to if r not in ("none", "tensorboard")] + ["tensorboard"]
    return {**stated, "output_dir": str(ad.checkpoint_files.resume_state_dir(RULES)), "report_to": report_to}, model_kwargs


def prepare_launch(att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool = True) -> TrlScript:
    """The script and argv of a TRL run of ``att`` (nothing is written here)."""
    from rlexp.trainers.trl.template import render_training_script

    spec = att.display_path or att.spec_path
    if att.recipe.estimator == ASYNC_GRPO:  # its rollout worker, vLLM server and weight transfer are not generated
        raise InputError(spec, f"recipe.{ESTIMATOR_KEY}", f"{ASYNC_GRPO}: rlexp plans TRL's AsyncGRPOTrainer but does "
                         "not launch it (it needs a vLLM server of its own, which rlexp's TRL launch does not start); "
                         "run it with your script")
    pool = att.datasets.get("pool")
    if pool is None or pool.path is None:
        raise InputError(spec, "datasets.pool.path", "required to launch training")
    if must_exist and not pool.path.exists():
        raise InputError(pool.path, None, "training pool file not found")
    monitor = att.datasets.get("ood_monitor")
    kwargs, model_kwargs = config_kwargs(att, ad)
    if str(kwargs.get("eval_strategy", "no")) != "no" and (monitor is None or monitor.path is None):
        raise InputError(spec, "datasets.ood_monitor", "eval_strategy asks for in-run evals: the greedy monitor "
                                                       "needs the ood_monitor set's path")
    # the greedy monitor decodes as far as training does: the stated cap, else TRL's default (TrlRecipe)
    max_new = kwargs.get("max_completion_length", att.recipe.max_completion_length)
    if max_new is None and str(kwargs.get("eval_strategy", "no")) != "no":
        raise InputError(spec, "recipe.max_completion_length", "null: the greedy monitor decodes as far as training "
                                                               "does and needs a number of tokens")

    config = {
        "rlexp_root": str(CHECKOUT),
        f"{att.recipe.estimator}_config": kwargs,  # grpo_config (GRPOConfig) or rloo_config (RLOOConfig)
        "model_config": model_kwargs,
        "pool": {"path": str(pool.path), "suffix": pool.prompt_suffix},
        "monitor": ({"path": str(monitor.path), "suffix": monitor.prompt_suffix}
                    if monitor is not None and monitor.path is not None else None),
        "monitor_max_new_tokens": None if max_new is None else int(max_new),  # None: no monitor runs
        "tensorboard_dir": str(ad.tensorboard),
        "monitor_tensorboard_dir": str(TrlFiles.of(ad).monitor_tensorboard),
        "checkpoint_pattern": str(ad.checkpoint_files.dir / ADAPTER_PATTERN),
    }
    script = TrlFiles.of(ad).script
    argv = [str(trl_python(must_exist=must_exist)), str(script)] + (["--resume"] if resume else [])
    env = att.environment
    if env is not None and env.actions == "tool_calls":  # TRL's environment_factory adapter
        from rlexp.trainers.trl.agent_tools import tools_adapter

        adapter = tools_adapter(att, ad, kwargs, config["rlexp_root"])  # sets max_tool_calling_iterations
        text = render_training_script(att.id, att.trainer.version, config, environment_factory=True)
        return TrlScript(argv + list(adapter.argv_tail), script, text, {script: text, adapter.path: adapter.text})
    text = render_training_script(att.id, att.trainer.version, config)
    if env is not None:  # an environment task: TRL's rollout_func adapter
        from rlexp.trainers.trl.agent import rollout_adapter

        adapter = rollout_adapter(att, ad, kwargs, config["rlexp_root"])
        return TrlScript(argv + list(adapter.argv_tail), script, text, {script: text, adapter.path: adapter.text})
    return TrlScript(argv, script, text)
