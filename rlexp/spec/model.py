"""The resolved attempt: what ``attempt.yaml`` (and its parent chain) becomes once checked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlexp.errors import InputError
from rlexp.spec.fields import (
    BOOLEAN,
    MAPPING,
    POSITIVE_INT,
    STRING,
    declared,
    integer,
    number,
    one_of,
    record,
)
from rlexp.spec.recipe import RecipeView, key_table
from rlexp.trainers import names as trainer_names

ROLES = ("pool", "ood_monitor", "ood_primary", "id", "sanity")
EVAL_ROLES = ("ood_monitor", "ood_primary", "id", "sanity")
TRAINERS = trainer_names()  # the registry rlexp.trainers; each has its key table (rlexp.spec.recipe)
ENGINES = ("local", "vllm", "openai")
ANSWER_MODES = ("exact", "math_verify")  # rlexp.evaluation.answers.is_correct's modes
# Sets graded in-run by the trainer's reward (exact match): their grading is not a spec choice.
TRAINER_GRADED_ROLES = ("pool", "ood_monitor")
DATASET_FIELDS = ("path", "size", "prompt_suffix", "answer_mode", "cluster")  # a dataset's resolved fields
# Fields of a set the trainer grades in-run (pool, ood_monitor) does not take: their grading is the
# trainer's exact match, and no decision reads them
EVAL_ONLY_DATASET_FIELDS = ("answer_mode", "cluster")

# ----------------------------------------------------------------------------- resolved objects


@dataclass(frozen=True)
class TrainerSettings:
    """Which trainer runs the recipe, resolved: ``name`` from the spec or a parent, ``version`` as
    stated or the trainer's default release, ``gpus`` None when not stated."""

    name: str = declared(rule=one_of(*TRAINERS), description="the trainer: " + ", ".join(TRAINERS))
    # the local trainer follows OpenRLHF 0.11's step semantics
    version: str = declared(rule=STRING, description='the trainer release whose keys the recipe uses ("0.9.3")')
    gpus: int | None = declared(rule=integer(0), description="GPUs available to the run (unset: not stated)")


@dataclass(frozen=True)
class DatasetRef:
    """A dataset of the attempt. ``size`` is the file's line count when the file exists, else the
    stated size; ``stated_size`` keeps what the spec said (a mismatch is a preflight check)."""

    role: str
    path: Path | None  # absolute
    size: int | None
    prompt_suffix: str
    stated_size: int | None = None
    exists: bool = False
    # how rlexp eval and the guards grade this set: the set's own, else eval.answer_mode; always
    # "exact" for the sets the trainer grades in-run (pool, ood_monitor)
    answer_mode: str = "exact"
    # data outside the experiment, stated on purpose (``allow_outside``, or the ``sources`` an import
    # recorded): where it is, for plan's note; its size is the stated one
    external: tuple[str, ...] = ()
    # the column of the set's rows whose equal values make one cluster of correlated problems
    # (questions from one document, problems from one template): decide, the gates and the power
    # then use the cluster-robust paired test; None: problems are independent
    cluster: str | None = None
    n_clusters: int | None = None  # distinct values of that column, where the file exists
    cluster_sizes: tuple[int, ...] = ()  # problems per cluster, where the file exists

    def plan_row(self) -> dict:
        """The set as ``plan.json`` records it (``external`` only where there is some, so the plans of
        attempts without external data stay as they were)."""
        row = {"path": str(self.path) if self.path else None, "size": self.size, "stated_size": self.stated_size,
               "exists": self.exists, "prompt_suffix": self.prompt_suffix}
        if self.external:
            row["external"] = list(self.external)
        if self.cluster is not None:
            row["cluster"] = self.cluster
            row["n_clusters"] = self.n_clusters
        return row


@dataclass(frozen=True)
class EvalSettings:
    """How checkpoints and baselines are evaluated (one pipeline for all of them)."""

    engine: str = declared("local", one_of(*ENGINES), "the eval engine: local (transformers), vllm, openai (a server)")
    prompt_suffix: str = declared("", STRING, "appended to every eval prompt (a set's own prompt_suffix wins)")
    answer_mode: str = declared("exact", one_of(*ANSWER_MODES), "the default grading of ood_primary, id and sanity")
    max_tokens: int = declared(2048, POSITIVE_INT, "the completion budget of every eval sample")
    max_lora_rank: int = declared(16, POSITIVE_INT, "vLLM's max_lora_rank: adapters of a higher rank are refused")
    temperature: float = declared(0.0, number(0))
    top_p: float = declared(1.0, number(0, 1, low_open=True))
    num_samples: int = declared(1, POSITIVE_INT)
    seed: int = declared(0, integer(0), "the decoding seed, recorded with every record file")
    batch_size: int | None = declared(None, POSITIVE_INT, "local engine: prompts per generate call (default 64)")
    max_model_len: int | None = declared(None, POSITIVE_INT, "vllm engine: the context length")
    tensor_parallel_size: int = declared(1, POSITIVE_INT, "vllm engine: GPUs per model")
    gpu_memory_utilization: float = declared(0.9, number(0, 1, low_open=True), "vllm engine: the GPU memory share")
    max_loras: int | None = declared(None, POSITIVE_INT, "vllm engine: adapters held at once")
    dtype: str | None = declared(None, one_of("auto", "float32", "float16", "bfloat16"),
                                 "vllm engine: the weights' dtype (vLLM's auto runs a float32 checkpoint in half "
                                 "precision); unset: vLLM's default")
    enforce_eager: bool = declared(False, BOOLEAN, "vllm engine: eager mode (no CUDA graphs, no torch.compile)")
    base_url: str | None = declared(None, STRING, "openai engine: the server (vLLM's OpenAI-compatible API)")
    model: str | None = declared(None, STRING, "openai engine: the served model name")
    # never the key itself: an ambient OPENAI_API_KEY is never sent unless named here
    api_key_env: str | None = declared(None, STRING, "openai engine: the NAME of the environment variable with "
                                                     "the key; unset: no Authorization header")
    # the limits of every request to that server (rlexp.evaluation.engines.http): a server that hangs, trickles or
    # sends too much ends in one line within timeout_s, never a hang
    timeout_s: float = declared(600.0, number(0, low_open=True), "openai engine: one request's deadline in seconds, "
                                                                 "every retry and backoff included")
    connect_timeout_s: float = declared(10.0, number(0, low_open=True), "openai engine: seconds to connect")
    read_timeout_s: float = declared(120.0, number(0, low_open=True), "openai engine: the longest silence (seconds) "
                                                                      "while an answer is read")
    retries: int = declared(5, integer(0, 10), "openai engine: tries after the first on connection errors, 429 and 5xx")
    max_response_bytes: int = declared(32 << 20, POSITIVE_INT, "openai engine: the largest answer read, bytes")


ENV_LOSSES = ("grpo", "gspo")  # rlexp.trainers.local.config.LOSS_TYPES
ENV_ADVANTAGE_MODES = ("return", "token_rewards")  # rlexp.trainers.local.config.ADVANTAGE_MODES
ENV_PRIMARY_METRICS = ("success", "mean_reward")
# how the model acts: text turns (rlexp's episode runner) or tool calls (TRL's environment_factory)
ENV_ACTIONS = ("text", "tool_calls")
ENV_REWARD_PARTS = ("env", "judge", "ndcg")  # the weighted parts of environment.reward (rlexp.environments.rewards.combine)
ENV_JUDGE_DEFAULTS = {"max_tokens": 8, "timeout_s": 60.0, "retries": 2}
# environment fields that decide what is evaluated, not what is trained (the rest shape the training)
ENV_EVAL_FIELDS = ("primary_metric", "success_threshold", "reward", "judge")


# an episode's limits when the spec states none: the one place they are written (rlexp.environments.interface.Budgets
# takes an attempt's through budgets_of; the trainers' agent files and TRL's tool loop through the settings)
MAX_TURNS_DEFAULT = 4
MAX_TOKENS_PER_TURN_DEFAULT = 16
MAX_TOTAL_TOKENS_DEFAULT = 96


@dataclass(frozen=True)
class EnvironmentSettings:
    """An environment task (docs/environments.md): dataset rows play episodes in ``name`` (rows may
    name their own ``env``/``config``), bounded by the budgets, trained with ``loss`` and
    ``advantage_mode``, evaluated on ``primary_metric`` (``success`` = return >= success_threshold,
    McNemar; ``mean_reward`` = the paired mean-score statistics)."""

    name: str = declared("exact_match", STRING, "the environment of a dataset row that names none: a registered "
                                                "name or an import path")
    config: dict[str, Any] = declared(rule=MAPPING, description="that environment's config",
                                      default_factory=dict)
    max_turns: int = declared(MAX_TURNS_DEFAULT, POSITIVE_INT, "turns of every episode, at most")
    max_tokens_per_turn: int = declared(MAX_TOKENS_PER_TURN_DEFAULT, POSITIVE_INT,
                                        "tokens the policy generates in one turn, at most")
    max_total_tokens: int = declared(MAX_TOTAL_TOKENS_DEFAULT, POSITIVE_INT,
                                     "tokens the policy generates in one episode, at most")
    loss: str = declared("grpo", one_of(*ENV_LOSSES), "grpo: token-level ratio (recipe.eps_clip) | gspo: "
                                                      "sequence-level ratio, its own clip range")
    gspo_eps_low: float = declared(3e-4, number(0, 1, low_open=True), "GSPO's clip range below 1")
    gspo_eps_high: float = declared(4e-4, number(0, 1, low_open=True), "GSPO's clip range above 1")
    advantage_mode: str = declared("return", one_of(*ENV_ADVANTAGE_MODES), "return | token_rewards")
    primary_metric: str = declared("success", one_of(*ENV_PRIMARY_METRICS),
                                   "success (McNemar) | mean_reward (the paired mean-score statistics)")
    success_threshold: float = declared(1.0, number(), "an episode succeeds when its reward reaches it")
    # the eval reward as the weighted mean of parts (env: the episode's return, judge: the LLM judge's
    # score of the final answer, ndcg: the retrieval score of the documents the episode fetched);
    # empty: the return alone. A failed judge call makes the reward an explicit judge_error.
    reward: dict[str, float] = declared(
        rule=record({part: number(0) for part in ENV_REWARD_PARTS}), default_factory=dict,
        description="the eval reward as weighted parts (env: the return, judge: the LLM judge's score, ndcg: "
                    "the retrieval score); unset: the return alone")
    # unstated keys take ENV_JUDGE_DEFAULTS once the judge is stated
    judge: dict[str, Any] = declared(
        rule=record({"base_url": STRING, "model": STRING, "api_key_env": STRING, "max_tokens": POSITIVE_INT,
                     "timeout_s": number(0, low_open=True), "retries": integer(0, 10),
                     "connect_timeout_s": number(0, low_open=True), "read_timeout_s": number(0, low_open=True),
                     "max_response_bytes": POSITIVE_INT}),
        default_factory=dict,
        description="the LLM judge: an OpenAI-compatible server (base_url, model; api_key_env: the NAME of the "
                    "variable holding its key; timeout_s: one call's deadline, every retry included; by default "
                    + ", ".join(f"{k} {v:g}" for k, v in ENV_JUDGE_DEFAULTS.items())
                    + "; connect_timeout_s 10, read_timeout_s 30, max_response_bytes 1 MiB)")
    # text: every model turn is text the environment steps on; tool_calls: its tools (Tool) are
    # called through the chat template's tool calls (TRL's environment_factory only). Added after
    # recipe digests and plans were recorded: the default enters neither (see ENV_LATE_DEFAULTS)
    actions: str = declared("text", one_of(*ENV_ACTIONS),
                            "text: model turns are text the environment steps on | tool_calls: the environment's "
                            "tools are called through the chat template (TRL's environment_factory)")

    def recorded(self) -> dict[str, Any]:
        """Its fields as the plan and the one-variable diff record them, in declaration order: a field
        added after attempts were recorded (:data:`ENV_LATE_DEFAULTS`) is left out at its default."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__
                if not (name in ENV_LATE_DEFAULTS and getattr(self, name) == ENV_LATE_DEFAULTS[name])}


# environment fields that enter the recipe digest and plan.json only when they differ from their
# default (a field added later: the attempts recorded before keep their digest and plan)
ENV_LATE_DEFAULTS = {"actions": "text"}


@dataclass(frozen=True)
class Budget:
    free_disk_gb: float | None = declared(None, number(0), "disk free for the run's checkpoints, GB")
    checkpoint_size_gb: float | None = declared(None, number(0, low_open=True),
                                                "one saved checkpoint (LoRA adapter or full model), GB")


@dataclass(frozen=True)
class Baseline:
    accuracy: float | None = declared(None, number(0, 1), "baseline accuracy on the primary set, a fraction")
    # 11.8% in the campaign's final comparison
    discordance: float = declared(0.12, number(0, 1, low_open=True),
                                  "expected share of discordant problems, a fraction")
    # for a primary set that declares a cluster column: the intra-cluster correlation of the
    # per-problem differences the power assumes (unset: 1, the worst case, every problem of a
    # cluster moving together), and the mean cluster size where the set's file is not there yet
    cluster_icc: float | None = declared(None, number(0, 1), "assumed intra-cluster correlation of the per-problem "
                                                             "differences on a clustered primary set (unset: 1, "
                                                             "the worst case)")
    cluster_size: float | None = declared(None, number(1), "assumed mean problems per cluster of a clustered "
                                                           "primary set whose file is not there yet")


class EvalSpec(Protocol):
    """What the eval pipeline (engines, eval sets) reads of a spec: an :class:`Attempt`, or a sweep
    (:class:`rlexp.spec.sweep.SweepSpec`), which has the same three attributes."""

    @property
    def eval(self) -> EvalSettings: ...

    @property
    def datasets(self) -> Mapping[str, DatasetRef]: ...

    @property
    def spec_path(self) -> Path: ...


@dataclass(frozen=True)
class Attempt:
    id: str
    parent_id: str | None
    change: dict[str, Any]
    intent: dict[str, Any]
    trainer: TrainerSettings
    # fully resolved (parent chain merged, defaults applied), of its key table's recipe_type: OpenRLHF's
    # and the local trainer's Recipe (att.recipe.eps_clip), TRL's TrlRecipe (att.recipe.epsilon), verl's
    # VerlRecipe (att.recipe.actor_rollout_ref.actor.clip_ratio); each a read-only mapping by key too
    recipe: RecipeView
    recipe_stated: dict[str, Any]  # only the keys some spec in the chain states
    datasets: dict[str, DatasetRef]
    eval: EvalSettings
    checkpoints_mid: int | None
    checkpoints_extra: tuple[int, ...]
    budget: Budget
    baseline: Baseline
    attempt_dir: Path
    experiment_dir: Path
    spec_path: Path
    parent: Attempt | None = None
    display_path: str = ""  # the spec path as the user wrote it (for messages)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # this file's own content
    merged_raw: dict[str, Any] = field(default_factory=dict, repr=False)  # chain-merged sections
    environment: EnvironmentSettings | None = None  # an environment task (None: single-turn prompts)

    def chain(self) -> list[Attempt]:
        """This attempt and its ancestors, nearest first."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def chain_sha256(self) -> str:
        """One digest of every spec file in the chain: editing a parent changes the child's plan."""
        from rlexp.experiment.files import sha256_file, sha256_text

        return sha256_text("\n".join(f"{a.id}:{sha256_file(a.spec_path)}" for a in self.chain()))

    def base_model(self) -> Path | str:
        """The base model (``recipe.pretrain``; the trainer's model key, TRL's ``model_name_or_path``),
        resolved once for every stage: a directory (a relative path resolves against the experiment
        directory) when it exists, else the name as written (a hub id, which vLLM, an
        OpenAI-compatible server or the trainer resolve themselves)."""
        model_key = key_table(self.trainer.name).model_key  # pretrain; TRL: model_name_or_path
        pretrain = self.recipe.get(model_key)
        if not isinstance(pretrain, str) or not pretrain:
            raise InputError(self.spec_path, f"recipe.{model_key}", "missing: the base model (a directory or a hub id)")
        path = Path(pretrain)
        if not path.is_absolute():
            path = self.experiment_dir / path
        return path if path.exists() else pretrain


@dataclass(frozen=True)
class Difference:
    key: str  # recipe key, or datasets.<role>.<field>, trainer.<field>, eval.<field>
    parent: Any
    value: Any
    kind: str  # training | instrumentation | infrastructure


