"""What a trainer is to rlexp's pure rules (in the spirit of Optuna's ``samplers/_base.py``).

A trainer's package (``rlexp.trainers.<name>``) exposes ``RULES``, an instance of a subclass of
:class:`TrainerRules`; its ``launch`` module adds the work with processes and files
(:class:`rlexp.trainers.launch.TrainerLaunch`). Everything here is a pure function of the spec:
no file is read or written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.experiment.layout import ADAPTER_DIR_PATTERN, CHECKPOINT_NAME_PATTERN

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rlexp.spec.model import Attempt


class TrainerRules:
    """One trainer's rules: its key table, steps and LR, preflight checks, metrics sources,
    checkpoint layout and resume state, and the backends that run it.

    Subclasses set the class attributes and override the methods whose default does not fit."""

    #: the ``trainer.name`` value
    name: str = ""
    #: the backends (rlexp.backends.registry) that run it; the first is the default without --ray-address
    backends: tuple[str, ...] = ("process", "ray")
    #: why a backend outside :attr:`backends` is refused (appended to "trainer X runs on the ... backend")
    backend_note: str = ""
    #: what ``--metrics-source`` may name for it; the first is the default
    metrics_sources: tuple[str, ...] = ("stdout",)
    #: the message when ``--metrics-source`` names another source
    metrics_source_note: str = ""
    #: ``trainer.version`` when the spec states none (None: the key table's first listed release)
    default_version: str | None = None
    #: how its releases are written, for the message when a spec states none and it has no default
    version_example: str = ""
    #: it reads its training sets through the recipe's ``input_key``/``label_key``
    graded_by_recipe_keys: bool = True
    #: its prompts always go through the chat template (else: the recipe's ``apply_chat_template``)
    always_chat_template: bool = False
    #: ``rlexp import --logs`` reads its logs as this trainer's (rlexp.training.metric_names.vocabulary)
    log_trainer: str = ""
    #: ``rlexp ingest``'s format (rlexp.training.metric_logs.formats(): a shared one, or one of its
    #: :meth:`log_readers`) for its console log (None: it has none with step numbers,
    #: :attr:`console_log_note` says what to give instead) and for a .jsonl
    console_log_format: str | None = None
    console_log_note: str = ""
    jsonl_log_format: str = "jsonl"
    #: its checkpoint folders' names (regular expressions, the step as group 1: ``rlexp import
    #: --checkpoints``), and the folders inside one where its weights may be
    checkpoint_dirs: tuple[str, ...] = (ADAPTER_DIR_PATTERN,  # --save_hf_ckpt
                                        CHECKPOINT_NAME_PATTERN)  # --save_path
    weights_inside: tuple[str, ...] = ()
    #: the folder under the attempt's ``checkpoints/`` it resumes from (rlexp.experiment.layout
    #: CheckpointFiles.resume_state_dir; "": it keeps no resume state there, and asking for one is an error)
    resume_state_folder: str = ""
    #: a pattern of its own resume-state names besides ``global_step{N}`` (the step as group 1)
    own_state_names: str | None = None
    #: a file or folder a resume state must hold to count when a launch resumes (a save whose writer
    #: was killed has none; verl's ``actor``), or None
    resume_state_complete: str | None = None
    #: how ``rlexp import`` recognises its launch script (rlexp.training.launch_script.launch_of): the
    #: Python modules it is run as (a module name, or a prefix ending in a dot), the console scripts
    #: that launch it (``trl grpo ...``), and whether any Python script (``*.py``) is one of its
    launch_modules: tuple[str, ...] = ()
    launch_commands: tuple[str, ...] = ()
    runs_scripts: bool = False
    #: it runs as rlexp's own Python module (a Ray job then forwards this process's environment)
    runs_rlexp_python: bool = False
    #: the first release with the agent interface rlexp's environment adapter generates for (None:
    #: an environment task needs no adapter, or it has none)
    agent_api_since: str | None = None
    #: it plays ``environment.actions: tool_calls`` (the model acts through the chat template's tool
    #: calls, the environment's ``tools``); the others play text turns only
    plays_tool_calls: bool = False
    #: it trains on ``environment.reward``'s mix (rlexp.environments.rewards.episode_reward, the eval's rule);
    #: the others train on the environment's return, so a weighted ndcg/judge part is refused for them
    trains_reward_mix: bool = False

    def agentic_checks(self, env: Any, recipe: Mapping[str, Any], version: str) -> list[Any]:
        """Its plan rules for an environment task (rlexp.protocol.agentic_checks), past the release check:
        token budgets against its length limits, GSPO's clip range."""
        return []

    def group_of_one(self, recipe: Mapping[str, Any], version: str) -> Any:
        """A group-normalised estimator with one sample per prompt in this recipe
        (rlexp.protocol.recipe_checks.GroupOfOne: the keys, and what this trainer then does), else None."""
        return None

    def run_health_checks(self, recipe: Mapping[str, Any], version: str, env: Any = None) -> list[Any]:
        """Its plan rules for the training-inference mismatch (rlexp.protocol.run_health): settings known
        to bias the rollout correction or to switch it off, each with the trainer's own source of the
        behaviour. None by default (the local trainer generates with the model it trains)."""
        return []

    def async_lag(self, recipe: Mapping[str, Any]) -> dict[str, Any]:
        """What its launch settings allow of off-policy staleness (rlexp.protocol.run_health.expected_lag's
        input: ``async``, ``queue``, ``mode``): synchronous by default."""
        return {"async": False}

    def key_table(self) -> Any:
        """The recipe keys a spec for this trainer may state (rlexp.spec.recipe.key_table: built once)."""
        from rlexp.spec.recipe import key_table

        return key_table(self.name)

    def recipe_defaults(self, stated: Any) -> Any:
        """What the keys a recipe does not state resolve to (``stated``: the keys its spec chain
        states): the key table's defaults, unless the trainer's own defaults depend on the recipe
        (TRL's: those of the config class its ``advantage_estimator`` names)."""
        return self.key_table().defaults

    def metric_vocabulary(self) -> Any:
        """Its metric names -> rlexp's canonical names (rlexp.training.metric_names.Vocabulary):
        rlexp's own unless the trainer logs its own (its package's ``metrics`` module)."""
        from rlexp.training.metric_names import COMMON_VOCABULARY

        return COMMON_VOCABULARY

    def log_readers(self) -> dict[str, Any]:
        """The log formats it reads its own way (name -> ``reader(text, trainer)``, returning a
        rlexp.training.metric_logs.LogRead): none unless its package has them."""
        return {}

    def build_key_table(self) -> Any:
        """Its key table (rlexp.spec.recipe.TrainerKeyTable), built on first use: each trainer's own
        (OpenRLHF's argument names, TRL's GRPOConfig fields, verl's Hydra keys)."""
        raise NotImplementedError(f"trainer {self.name!r} states no key table (its rules' build_key_table())")

    def recipe_reads(self, recipe: Any, role: str) -> dict[str, str]:
        """How it reads the rows of a training set (``check_dataset_rows`` keywords)."""
        if not self.graded_by_recipe_keys:
            return {}
        return {"prompt_key": str(recipe.get("input_key") or "prompt"),
                "answer_key": str(recipe.get("label_key") or "answer")}

    def uses_chat_template(self, recipe: Any) -> bool:
        return self.always_chat_template or bool(recipe.get("apply_chat_template", False))

    #: it loads its base model from a directory on this machine (no hub): a pretrain that names none
    #: is a warning at plan (rlexp.protocol.checks.check_base_model)
    loads_local_model: bool = False

    # ---- steps and LR
    #: one data-parallel rank whatever the GPU layout says
    single_process: bool = False

    def step_version(self, trainer_version: str) -> str:
        """The release whose step semantics the step math follows."""
        return trainer_version

    def steps(self, att: Attempt) -> Any:
        """The attempt's step counts (rlexp.training.schedule.Steps or a subclass): each trainer's own."""
        raise NotImplementedError(f"trainer {self.name!r} states no step math (its rules' steps())")

    # ---- preflight checks (rlexp.protocol.checks): its own parts of the catalogue
    def batch_checks(self, att: Attempt, steps: Any) -> list[Any]:
        """Its batch-size rules on the attempt's step counts (rlexp.protocol.checks.Verdict list): none by
        default (OpenRLHF's divisibility rules live in its package)."""
        return []

    def partial_batch_note(self, steps: Any) -> str | None:
        """What it does with a partial last rollout batch (appended to the ``steps.partial_batch``
        warning), when its step math leaves one and words it no way of its own (``Steps.step_message``):
        None by default (the warning then states the batch alone)."""
        return None

    def lr_checks(self, att: Attempt, steps: Any) -> list[Any]:
        """Its LR rules past the shared ones (e.g. OpenRLHF's fixed min LR before 0.10.2): none by default."""
        return []

    def gpu_layout(self, recipe: Any) -> Any:
        """The GPUs its placement asks for, by role (rlexp.trainers.openrlhf.checks.GpuLayout: ``total``,
        ``notes`` and the roles' counts), shown in the plan; None (the default): it states none."""
        return None

    def gpu_layout_checks(self, att: Attempt) -> list[Any]:
        """Its layout's preflight rules (rlexp.protocol.checks.Verdict list: co-location, the GPUs the
        layout needs against ``trainer.gpus``): none by default."""
        return []

    #: DeepSpeed checkpoints beside the HF saves (disk.hf_ckpt; --resume needs them)
    deepspeed_checkpoints: bool = False
