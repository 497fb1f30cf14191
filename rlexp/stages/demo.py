"""`rlexp demo`: the whole protocol on a tiny model and a synthetic task, on a CPU.

What it does, in the working directory (or ``--dir``):

1. builds the verifiable task's five datasets (``experiments/demo/data``; disjoint by hash);
2. builds the tiny base model and supervises it briefly (``experiments/demo/models/tiny-base``) —
   this is Baseline-S0;
3. writes three attempt specs: ``d1`` (a root attempt, eps_clip 0.2), ``d1s2`` (d1 with another
   training seed: the SOP's Gate-2 replication, which can pin Baseline-SOTA) and ``d2`` (d1's
   one-variable child, eps_clip 0.1 — the A29A → A29B question of docs/plan.md, judged against SOTA);
4. runs, for each attempt, exactly the commands a user would: ``plan → launch (local backend) →
   eval → decide → report``, with the MLflow store ``sqlite:///<dir>/mlflow.db``.

Every step reuses what is already on disk (datasets by manifest, model by SFT key, training by
resume, eval records by problem hash), so a second run is quick. The demo calls the CLI's own
entry point for each verb: the demo exercises the very code path a cluster run uses downstream
of the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import CheckFailed, InputError
from rlexp.experiment.files import atomic_write_text
from rlexp.experiment.layout import AttemptDir, ExperimentDir

EXPERIMENT = "demo"
DEMO_LAUNCH_BATCH = "demo-launch"  # the fan-out batch of the three trainings (fanout/demo-launch.json)


# The demo's training recipe (OpenRLHF v0.9.x key names). Measured on the 2-core machine: 64
# global steps in ~80 s move OOD accuracy of the supervised tiny base from ~46% to ~66%
# (docs/local-trainer.md). LoRA on all seven projections; one pass over a 1,024-prompt pool.
DEMO_RECIPE: dict[str, Any] = {
    "advantage_estimator": "dr_grpo",
    "eps_clip": 0.2,
    "init_kl_coef": 0.001,
    "n_samples_per_prompt": 8,
    "rollout_batch_size": 16,
    "train_batch_size": 64,
    "micro_train_batch_size": 64,
    "num_episodes": 1,
    "max_epochs": 1,
    "actor_learning_rate": 1.0e-3,
    "lr_warmup_ratio": 0.05,
    "lora_rank": 16,
    "lora_alpha": 32,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "temperature": 1.0,
    "generate_max_len": 16,
    "eval_steps": 8,
    "save_steps": 8,
    "seed": 42,
}
DEMO_POOL_SIZE = 1024


@dataclass(frozen=True)
class DemoConfig:
    """Sizes and recipe of the demo. ``fast()`` is the plumbing-only variant the tests run."""

    seed: int = 0  # the task's draws and the base model's initialisation and supervision
    pool_size: int = DEMO_POOL_SIZE
    monitor_size: int = 200
    primary_size: int = 1000
    id_size: int = 200
    sanity_size: int = 18
    sft_steps: int = 2000
    sft_target_acc: float = 0.45
    use_shipped_base: bool = True  # start from the shipped base where its SFT key matches (shipped_base)
    mid_step: int = 32
    recipe: dict[str, Any] = field(default_factory=lambda: dict(DEMO_RECIPE))

    @property
    def global_steps(self) -> int:
        # One episode, one pass: global steps = pool / rollout batch (optimizer steps are more; docs/plan.md).
        return self.pool_size // self.recipe["rollout_batch_size"]

    @classmethod
    def fast(cls) -> DemoConfig:
        """4 global steps, small eval sets, a base model that has not learned the task yet."""
        return cls(
            pool_size=64,
            monitor_size=40,
            primary_size=120,
            id_size=40,
            sanity_size=6,
            sft_steps=300,
            mid_step=2,
            recipe={**DEMO_RECIPE, "eval_steps": 2, "save_steps": 2},
        )


def attempt_specs(config: DemoConfig, datasets: dict[str, Any]) -> dict[str, str]:
    """The YAML text of the demo attempts, in the order they run: d1 (root), d1s2 (d1's
    confirmation seed), d2 (d1 with eps_clip 0.1 — the one-variable child)."""
    import yaml

    recipe = {"pretrain": "models/tiny-base", **config.recipe}
    root = {
        "id": "d1",
        "description": "Demo root attempt: dr_grpo with LoRA on the tiny model, eps_clip 0.2.",
        "intent": {"global_steps": config.global_steps},
        "trainer": {"name": "local", "version": "0.11.0", "gpus": 0},
        "recipe": recipe,
        "datasets": {
            role: {"path": f"data/{Path(str(f.path)).name}", "size": f.size, "prompt_suffix": ""}
            for role, f in datasets.items()
        },
        "eval": {"engine": "local", "prompt_suffix": "", "max_tokens": recipe["generate_max_len"]},
        "checkpoints": {"mid": config.mid_step},
    }
    # Gate-2 needs a second seed of the same recipe on the same pool: a sibling of d1 (no parent),
    # identical but for the training seed. Decided after d1, it can pin Baseline-SOTA (STOP-1).
    confirmation = {
        **root,
        "id": "d1s2",
        "description": "Confirmation seed of d1 (SOP Gate-2): the same recipe and pool, another training seed.",
        "recipe": {**recipe, "seed": recipe["seed"] + 1},
    }
    child = {
        "id": "d2",
        "parent": "d1",
        "description": "One variable changed from d1: eps_clip 0.2 -> 0.1 (as A29A -> A29B in docs/plan.md).",
        "change": {"eps_clip": 0.1},
        "recipe": {"eps_clip": 0.1},
    }
    header = "# Written by `rlexp demo`; edit and rerun `rlexp plan` to explore.\n"
    return {
        "d1": header + yaml.safe_dump(root, sort_keys=False),
        "d1s2": header + yaml.safe_dump(confirmation, sort_keys=False),
        "d2": header + yaml.safe_dump(child, sort_keys=False),
    }


@dataclass(frozen=True)
class DemoResult:
    """Where the demo left its experiment, reports and MLflow store, each attempt's decision, timings."""

    summary: dict[str, Any]

    @property
    def decisions(self) -> dict[str, str | None]:
        return {attempt: info["decision"] for attempt, info in self.summary["attempts"].items()}

    def to_dict(self) -> dict[str, Any]:
        return self.summary


def demo(directory: str | Path = ".", *, fast: bool = False, seed: int = 0, tracking_uri: str | None = None,
         build_base: bool = False, console: Any = None) -> DemoResult:
    """The whole protocol on a tiny model and a synthetic arithmetic task, under ``directory``.

    ``build_base``: supervise the base model here even where the shipped one fits (see
    :func:`shipped_base`); by default a shipped base whose settings match is copied instead.
    """
    import dataclasses

    config = dataclasses.replace(DemoConfig.fast() if fast else DemoConfig(), seed=seed, use_shipped_base=not build_base)
    root = Path(directory)
    blocking = next((p for p in (root, *root.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():  # refused before the first directory is made
        raise InputError(blocking, None, "is a file, expected a directory (--dir)")
    root.mkdir(parents=True, exist_ok=True)
    return DemoResult(run_demo(root, config=config, tracking_uri=tracking_uri, console=console))


def demo_base(directory: str | Path = ".", *, fast: bool = False, seed: int = 0, build_base: bool = False,
              console: Any = None) -> Path:
    """The demo's datasets and its supervised base model (Baseline-S0) under ``directory``, built
    exactly as ``rlexp demo`` builds them; returns the model directory (``scripts/build-demo-base``)."""
    import dataclasses

    from rich.console import Console

    config = dataclasses.replace(DemoConfig.fast() if fast else DemoConfig(), seed=seed, use_shipped_base=not build_base)
    experiment_dir = Path(directory).resolve() / "experiments" / EXPERIMENT
    datasets = _build_datasets(experiment_dir / "data", config)
    return _build_base_model(experiment_dir / "models", datasets, config, console or Console())


def run_demo(root: Path, *, config: DemoConfig, tracking_uri: str | None = None, console: Any = None) -> dict:
    """Build, train, evaluate, decide and report both attempts under ``root``. Returns a summary."""
    import time

    from rich.console import Console

    console = console or Console()
    root = root.resolve()
    experiment_dir = root / "experiments" / EXPERIMENT
    tracking_uri = tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
    started = time.perf_counter()
    timings, timed = step_timer(console, "demo")

    console.rule("[bold]rlexp demo[/bold]: task and base model")
    datasets = timed("datasets", _build_datasets, experiment_dir / "data", config)
    model_dir = timed("base_model", _build_base_model, experiment_dir / "models", datasets, config, console)
    console.print(f"base model (Baseline-S0): {model_dir}")

    _forget_stale_attempts(experiment_dir, model_dir, datasets, console)
    specs = attempt_specs(config, datasets)
    attempts = []
    for attempt_id, text in specs.items():
        spec_path = ExperimentDir(experiment_dir).attempt(attempt_id).spec
        if not spec_path.exists() or spec_path.read_text() != text:
            atomic_write_text(spec_path, text)
        attempts.append(spec_path.parent)

    for attempt_dir in attempts:
        _prepare_attempt(attempt_dir, console, timed)
    # The three trainings are independent until their decisions: they run at once, each trainer on
    # one core, as `rlexp fanout --parallel` runs attempts (the evaluations and decisions come after,
    # in order: Gate-2 of d1s2 reads d1's ledger line, d2 is judged against the SOTA d1s2 pins).
    console.rule("[bold]" + ", ".join(a.name for a in attempts) + "[/bold]: rlexp launch, all at once")
    timed("launch", _launch_together, attempts, tracking_uri, console)
    runs_table = None
    for attempt_dir in attempts:
        runs_table = _evaluate_and_decide(attempt_dir, config, tracking_uri, console, timed) or runs_table

    timings["total"] = round(time.perf_counter() - started, 1)
    summary = _summary(root, experiment_dir, attempts, tracking_uri, timings)
    summary["mlflow_runs_table"] = runs_table  # the runs table with the comparison columns shown
    _print_summary(console, summary)
    return summary


def _stepper(name: str, console: Any, timed):
    def step(label: str, fn, *args, **kwargs):
        console.rule(f"[bold]{name}[/bold]: rlexp {label}")
        return timed(f"{name}.{label}", fn, *args, **kwargs)

    return step


def _show_verdict(console: Any, verdict) -> None:
    colour = "green" if verdict.passed else "yellow"
    console.print(f"[{colour}]{verdict.name}: {verdict.status}[/{colour}] — {verdict.reason}", highlight=False)


def _prepare_attempt(attempt_dir: Path, console: Any, timed) -> None:
    """Before training, as the SOP orders it: plan → guard g0 (prompt parity), g2 (parser ceiling).

    A guardrail reports a verdict; the demo shows it and goes on, as a researcher reading the SOP
    would (a failed guard is written to guards/ and shows in the report). A stage that cannot go on
    (plan errors, a failed run) stops the demo.
    """
    from rlexp.stages.guard import guard
    from rlexp.stages.plan import plan

    name = attempt_dir.name
    step = _stepper(name, console, timed)
    planned = step("plan", plan, attempt_dir)
    if not planned.ok:
        first = planned.errors[0]
        raise CheckFailed(f"demo: plan of {name} has error checks, first {first['name']}: {first['rule']}")
    console.print(f"{planned.global_steps_total} global steps, checks: "
                  f"{len(planned.checks)} ({len(planned.errors)} errors)")
    _show_verdict(console, step("guard g0", guard, "g0", attempt_dir))
    _show_verdict(console, step("guard g2", guard, "g2", attempt_dir))


def _launch_together(attempts: list[Path], tracking_uri: str, console: Any) -> None:
    """``rlexp launch ATTEMPT --backend local --resume`` for every attempt at once, as child processes
    (a second demo run continues, or just re-checks, each training); their lines shown as they come."""
    from rlexp.backends.fanout import run_jobs
    from rlexp.stages.fanout import LAUNCH_ONLY, attempt_job

    def echo(job: str, line: str) -> None:
        if line.strip():
            console.print(f"[{job}] {line}", highlight=False, markup=False)

    jobs = [attempt_job(a, tracking_uri, LAUNCH_ONLY) for a in attempts]
    result = run_jobs(jobs, experiment_dir=attempts[0].parent, batch=DEMO_LAUNCH_BATCH, parallel=len(jobs),
                      echo=echo)
    for attempt_dir, job in zip(attempts, result.results, strict=True):
        took = "done before" if job.reused else f"{(job.ended_at or 0) - (job.started_at or 0):.0f} s"
        console.print(f"{job.name} training: {'finished' if job.ok else 'failed'} ({took})")
        if not job.ok:
            raise CheckFailed(f"demo: the training run of {job.name} failed (exit {job.exit_code}); "
                              f"its output: {job.log_path}, its state: {AttemptDir(attempt_dir).launch.state}")


def _evaluate_and_decide(attempt_dir: Path, config: DemoConfig | None, tracking_uri: str, console: Any,
                         timed, *, limits: dict[str, int] | None = None) -> str | None:
    """After training, in the SOP's order: guard g1 → eval → guard g4, audit draw → decide → report.
    ``limits``: G1's problems (``g1``), G4's problems and samples (``g4``, ``k``), where not the demo's."""
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard import guard
    from rlexp.stages.guard_audit import run_audit_draw
    from rlexp.stages.report import report

    step = _stepper(attempt_dir.name, console, timed)
    limits = limits or {"g1": config.monitor_size, "g4": 200}
    _show_verdict(console, step("guard g1", guard, "g1", attempt_dir, limit=limits["g1"]))
    evaluated = step("eval", evaluate, attempt_dir)
    for f in evaluated.files:
        console.print(f"  {f.checkpoint:>16} {f.set_role:<12} acc {f.summary.accuracy:.1%}  (n={f.summary.n})")
    _show_verdict(console, step("guard g4", guard, "g4", attempt_dir, limit=limits["g4"],
                                **({"k": limits["k"]} if "k" in limits else {})))
    review = step("guard audit", run_audit_draw, attempt_dir)
    console.print(f"parser audit: {review.drawn} cases drawn for review into {review.review_file}")
    decided = step("decide", decide, attempt_dir)
    console.print(f"[bold]decision: {decided.decision}[/bold] — {decided.reason}")
    written = step("report", report, attempt_dir, tracking_uri=tracking_uri)
    console.print(f"report: {written.report}")
    return written.mlflow_url


def _forget_stale_attempts(experiment_dir: Path, model_dir: Path, datasets: dict[str, Any], console: Any) -> None:
    """Attempts trained on another base model or other datasets are not reusable: start them over.

    The eval stage would refuse to mix records anyway (model/dataset SHA-256 in each meta file);
    the demo owns its experiment directory, so it clears it rather than stopping there.
    """
    import shutil

    from rlexp.experiment.files import atomic_write_json, read_json, sha256_dir

    state_path = experiment_dir / "demo.json"
    current = {
        "base_model_sha256": sha256_dir(model_dir),
        "datasets": {role: f.sha256 for role, f in datasets.items()},
    }
    previous = read_json(state_path) if state_path.exists() else None
    if previous is not None and previous != current:
        console.print("[yellow]base model or datasets changed: starting the demo attempts over[/yellow]")
        for attempt_id in ("d1", "d1s2", "d2"):
            shutil.rmtree(experiment_dir / attempt_id, ignore_errors=True)
        for name in (ExperimentDir(experiment_dir).ledger.name, ExperimentDir(experiment_dir).sota.name):
            (experiment_dir / name).unlink(missing_ok=True)
        # the launches' fan-out state would call the old trainings done
        ExperimentDir(experiment_dir).fanout_state(DEMO_LAUNCH_BATCH).unlink(missing_ok=True)
    if previous != current:
        atomic_write_json(state_path, current)


def step_timer(console: Any, label: str) -> tuple[dict[str, float], Callable[..., Any]]:
    """``(timings, timed)`` for a demo's steps: ``timed(name, fn, *args)`` runs ``fn`` and records its
    seconds in ``timings[name]``. Libraries' own progress bars are silenced; when ``console`` is not
    a terminal (a log), each step's start and end are timestamped lines, flushed as written."""
    import time

    from rlexp.tracking import progress

    _quiet_libraries()
    plain = not console.is_terminal
    if plain:
        import sys

        progress.use_stream(sys.stdout)
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        if plain:
            progress.line(f"{label}: {name} started")
        result = fn(*args, **kwargs)
        timings[name] = round(time.perf_counter() - t0, 1)
        if plain:
            progress.line(f"{label}: {name} done in {timings[name]} s")
        return result

    return timings, timed


def _quiet_libraries() -> None:
    """transformers' per-load progress bars would bury the demo's own; our bars say what runs."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not os.environ.get("RLEXP_VERBOSE"):
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import logging
    import warnings

    # MLflow's store creation and alembic migrations log at INFO; torch/transformers warn on deprecations
    for name in ("mlflow", "alembic", "urllib3", "git"):
        logging.getLogger(name).setLevel(logging.WARNING if os.environ.get("RLEXP_VERBOSE") else logging.ERROR)
    if not os.environ.get("RLEXP_VERBOSE"):
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # the local extra is not installed: the trainer step will say so
        pass


def _started(attempt_dir: Path) -> bool:
    """A previous demo already launched this attempt: resume it rather than start over."""
    return AttemptDir(attempt_dir).launch.state.exists()


def _build_datasets(data_dir: Path, config: DemoConfig) -> dict[str, Any]:
    from rlexp.experiment.datasets import build_task_datasets

    return build_task_datasets(
        data_dir,
        seed=config.seed,
        pool_size=config.pool_size,
        monitor_size=config.monitor_size,
        primary_size=config.primary_size,
        id_size=config.id_size,
        sanity_size=config.sanity_size,
    )


def _build_base_model(models_dir: Path, datasets: dict[str, Any], config: DemoConfig, console: Any) -> Path:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rlexp.evaluation.arithmetic_task import ArithmeticTask
    from rlexp.experiment.datasets import eval_hashes
    from rlexp.models.tiny import build_tiny_model, sft_tiny_model

    untrained = models_dir / "tiny-untrained"
    if not (untrained / "config.json").exists():
        build_tiny_model(untrained, seed=config.seed)
    if config.use_shipped_base:
        _seed_from_shipped(models_dir / "tiny-base")
    with Progress(
        TextColumn("supervising the base model"),
        BarColumn(),
        TextColumn("step {task.completed:.0f}/{task.total:.0f}  dev acc {task.fields[acc]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("sft", total=config.sft_steps, acc="-")
        from rlexp.tracking import progress as plain_progress

        throttle = plain_progress.Throttle(config.sft_steps) if not console.is_terminal else None

        def report(step: int, steps: int, dev_acc: float, *_: Any) -> None:
            progress.update(bar, completed=step, acc=f"{dev_acc:.0%}")
            if throttle is not None and throttle.due(step):
                plain_progress.line(f"supervising the base model: step {step}/{steps}, dev acc {dev_acc:.0%}")

        return sft_tiny_model(
            untrained,
            ArithmeticTask(),
            models_dir / "tiny-base",
            steps=config.sft_steps,
            seed=config.seed,
            target_acc=config.sft_target_acc,
            exclude_hashes=eval_hashes(datasets),
            progress=report,
        )


def shipped_base() -> Path:
    """The demo's supervised base model as shipped inside the package (a few MB).

    It is exactly what :func:`_build_base_model` writes for the default demo (``rlexp demo
    --build-base``; ``scripts/build-demo-base`` copies it here): the SFT's cache entry, with its
    ``sft.json`` key over every setting, the untrained model's SHA-256 and the evaluation sets.
    """
    return Path(__file__).resolve().parents[1] / "assets" / "demo-base"


def _seed_from_shipped(target: Path) -> None:
    """Put the shipped base where the SFT looks for its cache, unless a base is already there.

    The SFT then checks the key as for any cache entry: a demo whose settings, datasets or untrained
    model differ from the shipped one's (another ``--seed``, the fast variant, another transformers
    release writing another ``config.json``) supervises its own base as before. So the shipped copy
    saves the supervision only where that would have produced this very model.
    """
    import shutil

    from rlexp.experiment.files import make_temp_dir, replace_dir

    source = shipped_base()
    if (target / "sft.json").exists() or not (source / "sft.json").exists():
        return
    tmp = make_temp_dir(target)
    shutil.copytree(source, tmp, dirs_exist_ok=True)
    replace_dir(tmp, target)


def _summary(root: Path, experiment_dir: Path, attempts: list[Path], tracking_uri: str, timings) -> dict:
    from rlexp.experiment.files import read_json

    result: dict[str, Any] = {"dir": str(root), "tracking_uri": tracking_uri, "timings_s": timings, "attempts": {}}
    for attempt_dir in attempts:
        decision_path = AttemptDir(attempt_dir).decision
        decision = read_json(decision_path) if decision_path.exists() else {}
        report = root / "reports" / experiment_dir.name / f"{attempt_dir.name}.md"
        result["attempts"][attempt_dir.name] = {
            "decision": decision.get("decision"),
            "decision_file": str(decision_path),
            "report": str(report),
        }
    result["mlflow_ui"] = ["mlflow", "ui", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1"]
    return result


def _print_summary(console: Any, summary: dict) -> None:
    import shlex

    from rich.table import Table

    table = Table(title="rlexp demo: results")
    table.add_column("attempt")
    table.add_column("decision")
    table.add_column("report")
    for attempt, info in summary["attempts"].items():
        table.add_row(attempt, str(info["decision"]), info["report"])
    console.print(table)
    timings = summary["timings_s"]
    console.print("time per step (s): " + ", ".join(f"{k} {v}" for k, v in timings.items() if k != "total"))
    console.print(f"total time: {timings['total']} s")
    console.print("open the MLflow UI on the results:  " + shlex.join(summary["mlflow_ui"]))
    if summary.get("mlflow_runs_table"):
        console.print(f"then the runs table with the comparison columns: {summary['mlflow_runs_table']}")
