"""verl (``trainer.name: verl``): dotted Hydra keys of the pinned release, its own step count.

Its pure rules live here and in the package's core modules (steps, LR and schedule: :mod:`.steps`;
checks: :mod:`.checks`; the listed releases' config keys: :mod:`.keys`); the adapters: the releases'
wheels (:mod:`.releases`), the recipe checked against a release's config and the Hydra argv
(:mod:`.hydra`), the plan (:mod:`.plan`) and the launch (:mod:`.launch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.trainers.base import TrainerRules

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


class VerlRules(TrainerRules):
    name = "verl"
    backends = ("process", "ray")
    metrics_sources = ("verl",)  # its file logger's JSONL (VERL_FILE_LOGGER_PATH)
    metrics_source_note = "verl's metrics come from its file logger (--metrics-source verl), and only verl's"
    log_trainer = "verl"
    console_log_format = "verl-console"
    jsonl_log_format = "verl-file"  # its file logger
    checkpoint_dirs = (r"global_step_(\d+)",)  # trainer.default_local_dir: global_step_{N}
    # its trainer.default_local_dir, checkpoints/verl/global_step_{N}/actor: it resumes itself from
    # the latest (resume_mode auto); rlexp reads the step it continues from
    resume_state_folder = "verl"
    own_state_names = checkpoint_dirs[0]
    resume_state_complete = "actor"
    weights_inside = ("actor/lora_adapter", "actor/huggingface", "actor")
    launch_modules = ("verl.trainer.main_ppo", "verl.")

    def metric_vocabulary(self) -> Any:
        from rlexp.trainers.verl.metrics import VOCABULARY

        return VOCABULARY

    def steps(self, att: Attempt) -> Any:
        """The shared step math of rlexp.training.schedule.compute_steps (its rollout and batch keys)."""
        from rlexp.training.schedule import compute_steps

        return compute_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, trainer=self.name)

    def log_readers(self) -> dict[str, Any]:
        from rlexp.trainers.verl.metrics import LOG_READERS

        return LOG_READERS

    def build_key_table(self) -> Any:
        """The dotted Hydra keys of the newest listed release's trainer config (:mod:`.keys`, read
        from the wheel's _generated_ppo_trainer.yaml by scripts/refresh-verl-keys), each with its kind
        (:func:`.steps.verl_kind`). Float, bool and str defaults type their key; an int default does
        not (verl's YAML writes temperature: 0 for a float field), nor a list, a mapping, null or an
        interpolation: those keys take any value here, and :mod:`.hydra` checks them against the
        release (numbers, lists) at plan time.

        The defaults are FSDP's (verl's default engine); the keys add ``model_engine`` and the keys of
        the other engines' configs (:mod:`.engine_keys`), which :func:`.hydra.check_recipe` holds
        against the config of the engine the recipe chooses (a key of another engine is refused there)."""
        from rlexp.spec.recipe import JSON_VALUE, RecipeKey, TrainerKeyTable
        from rlexp.trainers.verl.engine_keys import VERL_ENGINE_KEYS
        from rlexp.trainers.verl.fully_async import ENTRY_KEY, MAIN_PPO
        from rlexp.trainers.verl.fully_async_keys import FULLY_ASYNC_DELTA
        from rlexp.trainers.verl.keys import VERL_CONFIG_KEYS
        from rlexp.trainers.verl.recipe import LISTED_VERSIONS, VerlRecipe
        from rlexp.trainers.verl.steps import DEFAULT_ENGINE, ENGINE_KEY, NUMBER_OR_BOUNDS, verl_kind

        def row(name: str, type_: str, default: Any) -> RecipeKey:
            # a field wider than its default's type (a number or "LOWER_UPPER") is checked by hydra.check_recipe
            recipe_type = JSON_VALUE if name in NUMBER_OR_BOUNDS else _TYPES.get(type_, JSON_VALUE)
            return RecipeKey(name, recipe_type, default, verl_kind(name), recipe_type == JSON_VALUE)

        # newest first: its keys and defaults are the table's, and a spec without trainer.version plans with it
        versions = LISTED_VERSIONS
        keys = {name: row(name, type_, default) for name, type_, default in VERL_CONFIG_KEYS[versions[0]]}
        defaults = {k.name: k.default for k in keys.values()}  # FSDP's: an unstated key takes verl's default
        # the engine choice, then the other engines' keys (typed by their engine's default), after FSDP's
        keys[ENGINE_KEY] = RecipeKey(ENGINE_KEY, "str", DEFAULT_ENGINE, "training")
        # the trainer module (main_ppo, or the fully-async trainer, whose config adds its own keys)
        keys[ENTRY_KEY] = RecipeKey(ENTRY_KEY, "str", MAIN_PPO, "training")
        for rows in FULLY_ASYNC_DELTA.values():
            for name, type_, default in rows:
                keys.setdefault(name, row(name, type_, default))
        for rows in VERL_ENGINE_KEYS.get(versions[0], {}).values():
            for name, type_, default in rows:
                keys.setdefault(name, row(name, type_, default))
        # an older listed release's keys its successor dropped (0.9.0's actor.megatron.grad_offload):
        # accepted here, held against that release's own config at plan
        for version in versions[1:]:
            for rows in (VERL_CONFIG_KEYS[version], *VERL_ENGINE_KEYS.get(version, {}).values()):
                for name, type_, default in rows:
                    keys.setdefault(name, row(name, type_, default))
        lookup = keys.get

        return TrainerKeyTable("verl", f"verl {', '.join(versions)} config keys (dotted Hydra paths)", keys,
                               defaults, lookup, versions,
                               model_key="actor_rollout_ref.model.path", names_only_schema=True, recipe_type=VerlRecipe,
                               schema_note="unstated keys take verl's default (FSDP's); the keys are "
                               "rlexp/trainers/verl/keys.py's and, for another model_engine, engine_keys.py's "
                               "(types and the engine checked by rlexp plan)")  # fmt: skip


    @property
    def agent_api_since(self) -> str:  # type: ignore[override]
        from rlexp.trainers.verl.checks import AGENT_API_SINCE

        return AGENT_API_SINCE

    def agentic_checks(self, env: Any, recipe: dict[str, Any], version: str) -> list[Any]:
        from rlexp.trainers.verl.checks import agentic_checks

        return agentic_checks(env, recipe, version)

    def group_of_one(self, recipe: dict[str, Any], version: str) -> Any:
        from rlexp.trainers.verl.checks import group_of_one

        return group_of_one(recipe, version)

    def run_health_checks(self, recipe: dict[str, Any], version: str, env: Any = None) -> list[Any]:
        from rlexp.trainers.verl.checks import run_health_checks

        return run_health_checks(recipe, version)

    def async_lag(self, recipe: dict[str, Any]) -> dict[str, Any]:
        # trainer.v1.trainer_mode (trainer/ppo/v1/trainer_base.py): sync keeps every batch on-policy; the
        # async modes generate ahead and log training/off_policy/trajectory_staleness/* themselves
        from rlexp.trainers.verl.fully_async import is_fully_async
        from rlexp.trainers.verl.recipe import as_verl_recipe

        if is_fully_async(recipe):  # generates ahead by a staleness budget in samples, not a version count
            return {"async": True, "mode": "fully_async", "queue": None}
        v1 = as_verl_recipe(recipe).trainer.v1
        mode = str(v1.trainer_mode)
        # only separate_async has a parameter_sync_step (the trainer's queue of generated batches)
        return {"async": mode != "sync", "mode": mode,
                "queue": v1.separate_async.parameter_sync_step if mode == "separate_async" else None}


_TYPES = {"float": "float", "bool": "bool", "str": "str"}  # a default of these types types its key


RULES = VerlRules()
