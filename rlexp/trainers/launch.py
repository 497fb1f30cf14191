"""What a trainer is to ``rlexp launch`` and ``rlexp plan`` beyond its pure rules: the work with
processes and files (adapters layer). Each trainer's ``launch`` module exposes ``LAUNCH``, an
instance of a subclass of :class:`TrainerLaunch`; :func:`launcher` finds it through the registry
(:data:`rlexp.trainers.TRAINERS`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.experiment.layout import AttemptDir
from rlexp.trainers import names, package, rules
from rlexp.trainers.base import TrainerRules

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


@dataclass
class LaunchPlan:
    """A trainer's launch, decided and not yet written: the argv and what it needs on disk."""

    argv: list[str]
    reward_file: Path | None = None
    suffixed: dict[str, tuple[Path, Path, str]] = field(default_factory=dict)  # role -> (source, copy, suffix)
    dropped: tuple[str, ...] = ()
    files: dict[Path, str] = field(default_factory=dict)  # generated files to write (TRL's training script)
    # an environment task's generated adapters (agent file, agent loop, rollout module): written
    # with the files, and by a dry run too, so a reader can open what the argv names
    adapters: dict[Path, str] = field(default_factory=dict)
    env: dict[str, str] | None = None  # what the trainer's process must see (e.g. where its logger writes)
    own: Any = None  # the trainer's own launch object (what its write_files needs)


class TrainerLaunch:
    """One trainer's launch side: the plan's command, the launch's argv and files, resume state,
    the metrics follower and the provenance it adds. Subclasses override what does not fit."""

    rules: TrainerRules

    def own_plan(self, att: Attempt, plan_format: int) -> dict[str, Any] | None:
        """The whole plan.json when the trainer counts its own way; None: the common plan."""
        return None

    def plan_details(self, att: Attempt, steps: Any) -> dict[str, Any]:
        """What only this trainer's plan holds (merged into the plan's ``trainer`` details)."""
        return {}

    def prepare(self, att: Attempt, ad: AttemptDir, *, resume: bool, must_exist: bool) -> LaunchPlan:
        raise NotImplementedError

    def write_files(self, plan: LaunchPlan) -> None:
        """The files of the launch beyond the argv (its reward function, at ``plan.reward_file``): none
        by default."""

    def resume_step(self, att: Attempt, ad: AttemptDir) -> int:
        """The step a ``--resume`` continues from (0: none saved yet, it starts over)."""
        latest = ad.checkpoint_files.latest_resume_state(self.rules, complete=self.rules.resume_state_complete)
        return latest.step if latest is not None else 0

    def follower(self, ad: AttemptDir, source: str, *, resume_step: int) -> Any:
        """The reader of the run's metrics into ``metrics.jsonl`` (rlexp.training.followers)."""
        raise NotImplementedError

    def script_args(self) -> Any:
        """The reader of its launch scripts' arguments for ``rlexp import`` (the package's
        ``script_args`` module: ``read_args``, ``CHECKS_VERSION``, ``LAUNCH_DEFAULTS``)."""
        return importlib.import_module(package(self.rules.name) + ".script_args")

    def provenance_extra(self, argv: list[str]) -> dict[str, Any]:
        """What the trainer adds to ``launch/provenance.json``."""
        return {}

    def gspo_settings(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """The settings that select GSPO (sequence-level ratios, their aggregation, the clip range
        ``eps_low``/``eps_high``) in this trainer's own spelling; ValueError where it has none. The KL
        coefficient stays its own recipe choice (GSPO's paper trains without one)."""
        raise ValueError(f"{self.rules.name} has no GSPO setting of its own")

    def gspo_recipe(self, version: str | None, eps_low: float, eps_high: float) -> dict[str, Any]:
        """:meth:`gspo_settings` as recipe keys (what :func:`loss_recipe` adds to the stated recipe);
        the same names unless the trainer's recipe spells its settings otherwise."""
        return self.gspo_settings(version, eps_low, eps_high)

    # ---- the loss aggregation (recipe.loss_agg_mode, rlexp.spec.recipe.LOSS_AGG_MODES)

    def loss_agg_recipe(self, att: Attempt, mode: str, recipe: Mapping[str, Any]) -> dict[str, Any]:
        """The trainer's own recipe keys that make it aggregate its loss by ``mode``, ``recipe`` being
        the stated recipe it goes with (GSPO's settings in); ValueError, naming the trainer and its
        release, where it has no exact equivalent."""
        raise ValueError(f"{self.rules.name} has no loss aggregation setting")

    def loss_agg_default(self, att: Attempt, recipe: Mapping[str, Any]) -> tuple[str, str]:
        """What the trainer aggregates by when the recipe states no ``loss_agg_mode`` (``recipe``:
        the resolved recipe with GSPO's settings in): a mode, or the trainer's own name for one
        that is none of them, and a note saying where that comes from."""
        return "the trainer's own", f"{self.rules.name} states no loss aggregation rlexp could name"

    def loss_token_budget(self, att: Attempt) -> int | None:
        """Dr. GRPO's constant L (``seq-mean-token-sum-norm`` divides by N·L): the most tokens one
        sequence's loss can hold, from the trainer's own length setting."""
        return None


def gspo_trainer_settings(trainer: str, version: str | None = None, *, eps_low: float = 3e-4,
                          eps_high: float = 4e-4) -> dict[str, Any]:  # fmt: skip
    """The settings that select GSPO on trainer ``trainer`` (:meth:`TrainerLaunch.gspo_settings`);
    ValueError for an unknown trainer or one without them."""
    if trainer not in names():
        raise ValueError(f"unknown trainer {trainer!r}")
    return launcher(trainer).gspo_settings(version, eps_low, eps_high)


def _same(a: Any, b: Any) -> bool:
    """Equal as recipe values: numbers by value (1e-3 == 0.001), lists element by element."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    numeric = (int, float)
    if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return bool(a == b)


def loss_recipe(att: Attempt, stated: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe ``stated`` with what the attempt's loss settings ask written in its trainer's own
    keys: with ``environment.loss: gspo``, the trainer's GSPO settings (:meth:`TrainerLaunch.gspo_recipe`)
    on a trainer with an agent interface (the local trainer takes the loss from the environment
    itself); with ``recipe.loss_agg_mode``, the trainer's aggregation setting
    (:meth:`TrainerLaunch.loss_agg_recipe`) in its place. Plan and launch both build on it, so the
    argv, the generated config and the plan agree.

    A trainer or release without GSPO is an InputError on ``environment.loss``, one without the
    aggregation an InputError on ``recipe.loss_agg_mode``, as is an aggregation other than GSPO's
    with GSPO; a stated recipe key that says otherwise (``policy_loss_type: ppo``, another clip
    range, another ``loss_type``) is one on that key, since launching it would run something other
    than what the spec says."""
    from rlexp.errors import InputError
    from rlexp.spec.recipe import GSPO_LOSS_AGG, LOSS_AGG_KEY

    out = dict(stated)
    env = att.environment
    gspo = env is not None and env.loss == "gspo"
    spec = att.display_path or att.spec_path
    mode = out.pop(LOSS_AGG_KEY.name, None)
    if mode is not None and gspo and mode != GSPO_LOSS_AGG:
        raise InputError(spec, f"recipe.{LOSS_AGG_KEY.name}", f"{mode!r} contradicts environment.loss gspo, which "
                                                              f"aggregates {GSPO_LOSS_AGG} (leave it out)")
    if gspo and rules(att.trainer.name).agent_api_since is not None:
        try:
            settings = launcher(att.trainer.name).gspo_recipe(att.trainer.version, env.gspo_eps_low,
                                                               env.gspo_eps_high)  # fmt: skip
        except ValueError as exc:
            raise InputError(spec, "environment.loss", f"gspo: {exc}") from None
        _merge(out, settings, spec, "environment.loss gspo",
               "leave it out; the clip range is environment.gspo_eps_low/high")
    if mode is not None:
        try:
            settings = launcher(att.trainer.name).loss_agg_recipe(att, mode, out)
        except ValueError as exc:
            raise InputError(spec, f"recipe.{LOSS_AGG_KEY.name}", f"{mode}: {exc}") from None
        _merge(out, settings, spec, f"recipe.{LOSS_AGG_KEY.name} {mode}", "leave one of the two out")
    return out


def _merge(out: dict[str, Any], settings: Mapping[str, Any], spec: str | Path, source: str, hint: str) -> None:
    """``settings`` into ``out``; an InputError (naming the spec file ``spec``) on a key ``out`` states otherwise."""
    from rlexp.errors import InputError

    for key, value in settings.items():
        if key in out and out[key] is not None and not _same(out[key], value):
            raise InputError(spec, f"recipe.{key}", f"{out[key]!r} contradicts {source}, which sets it to {value!r} "
                                                    f"({hint})")
        out[key] = value


def loss_aggregation_plan(att: Attempt) -> dict[str, Any]:
    """What the plan shows of the loss aggregation: the mode the trainer will apply, whether the
    recipe states it, the trainer's own settings for it (a stated mode), Dr. GRPO's constant where
    that mode uses one, and a note on a default. An InputError where the trainer cannot do the
    stated mode (:func:`loss_recipe`)."""
    from rlexp.spec.recipe import LOSS_AGG_KEY

    stated = dict(att.recipe_stated)
    mode = stated.get(LOSS_AGG_KEY.name)
    recipe = loss_recipe(att, stated)
    launch = launcher(att.trainer.name)
    if mode is None:
        own, note = launch.loss_agg_default(att, {**att.recipe, **recipe})
        out: dict[str, Any] = {"mode": own, "stated": False, "note": note}
    else:
        out = {"mode": mode, "stated": True, "trainer_settings": launch.loss_agg_recipe(att, mode, recipe)}
    if out["mode"] == "seq-mean-token-sum-norm":
        out["token_budget"] = launch.loss_token_budget(att)
    return out


def check_one_environment(att: Attempt) -> None:
    """The generated adapters play the attempt's one environment (the trainers hand the agent a
    prompt and a label, not a row's ``env``/``config``): a training-set row naming another one is
    refused here (file and line) rather than silently played in the wrong environment."""
    from rlexp.errors import InputError
    from rlexp.experiment.files import iter_jsonl

    env = att.environment
    for role in ("pool", "ood_monitor"):
        ref = att.datasets.get(role)
        if ref is None or ref.path is None or not Path(ref.path).exists():
            continue
        for line, record in iter_jsonl(ref.path):
            if record.get("env", env.name) != env.name or dict(record.get("config", env.config) or {}) != dict(env.config):
                raise InputError(ref.path, f"line {line}: env",
                                 f"this row names its own environment; on {att.trainer.name} every row plays the "
                                 f"attempt's environment.name {env.name!r} with its config")


def launcher(name: str) -> TrainerLaunch:
    """The launch side of trainer ``name`` (its package's ``launch.LAUNCH``)."""
    module = importlib.import_module(package(name) + ".launch")
    launch = module.LAUNCH
    assert launch.rules is rules(name)
    return launch
