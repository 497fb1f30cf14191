"""`rlexp import SCRIPT ATTEMPT_DIR`: an existing launch script -> an attempt.yaml that `rlexp plan` checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def import_script(
    script: Annotated[Path, typer.Argument(help="A shell script holding one launch command (python -m, torchrun, "
                                                "deepspeed, accelerate launch, ray job submit -- ...). Read, never run.")],
    attempt_dir: Annotated[Path, typer.Argument(help="The attempt directory to write attempt.yaml into (new).")],
    version: Annotated[str | None, typer.Option("--version", help="The trainer release the script ran "
                                                "(asked for when the script does not state it).")] = None,
    pool_size: Annotated[int | None, typer.Option("--pool-size", min=1, max=10**9, help="Prompts in the training "
                                                  "data, when its file is not in the experiment directory.")] = None,
    monitor_size: Annotated[int | None, typer.Option("--monitor-size", min=1, max=10**9, help="Problems in the "
                                                     "in-run eval set, when its file is not here.")] = None,
    parent: Annotated[str | None, typer.Option("--parent", help="An attempt of the same experiment: the import "
                                               "states only what the script changes from it.")] = None,
    intent_steps: Annotated[int | None, typer.Option("--intent-steps", min=1, max=10**7, help="The global steps "
                                                     "the run was meant to make (plan checks the script gives them).")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, max=100000, help="GPUs the run had.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE the script finds in its environment "
                                                  "($HOME, $DATA_DIR, ...); repeatable.")] = None,
    env_file: Annotated[Path | None, typer.Option("--env-file", help="A file of NAME=VALUE lines for the script's "
                                                  "environment (read as data, never run).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="The folder the script's command runs from: a "
                                                 "training script it names by a relative path (python train.py) is "
                                                 "read from there (default: the current directory).")] = None,
) -> None:
    """Write ATTEMPT_DIR/attempt.yaml from an existing launch script (OpenRLHF flags through that release's own
    parser; verl Hydra overrides; TRL GRPOConfig fields), then check it with `rlexp plan ATTEMPT_DIR`. What
    the script cannot tell (a dataset file that is not here, the release) is asked for by name."""
    import re

    from rlexp.errors import InputError
    from rlexp.stages.importing import import_script as run

    environment: dict[str, str] = {}
    for item in env or []:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(None, "--env", f"{item[:60]!r}: expected NAME=VALUE")
        environment[name] = value
    result = run(script, attempt_dir, version=version, pool_size=pool_size, monitor_size=monitor_size,
                 parent=parent, intent_steps=intent_steps, gpus=gpus, env=environment, env_file=env_file,
                 workdir=workdir)
    print(f"{result.spec_path} written ({result.trainer}; {len(result.spec.get('recipe', {}))} recipe keys)")
    if result.left_out:
        print(f"left out (rlexp sets these, or they carry a secret): {', '.join(result.left_out)}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"next: rlexp plan {attempt_dir}")


def import_run(
    attempt_dir: Annotated[Path, typer.Argument(help="An attempt directory with its attempt.yaml (from `rlexp import`).")],
    logs: Annotated[Path | None, typer.Option("--logs", help="The run's metrics: console log, JSONL, verl file "
                                              "logger, trainer_state.json or TensorBoard directory.")] = None,
    log_format: Annotated[str | None, typer.Option("--format", help="The log's format, as `rlexp ingest --format`.")] = None,
    checkpoints: Annotated[Path | None, typer.Option("--checkpoints", help="The run's checkpoint folder "
                                                     "(global_step{N}_hf, checkpoint-{N} or global_step_{N} inside).")] = None,
) -> None:
    """Bring an existing run into the protocol: its log into metrics.jsonl, its checkpoints linked as
    checkpoints/global_step{N}_hf, state finished; then `rlexp eval`, `decide` and `report` work on it."""
    from rlexp.stages.importing import import_run as run

    result = run(attempt_dir, logs=logs, log_format=log_format, checkpoints=checkpoints)
    line = f"{attempt_dir}: {result.steps} steps into metrics.jsonl, {len(result.checkpoints)} checkpoints"
    if result.checkpoints:
        line += f" (global steps {', '.join(str(s) for s in result.checkpoints)})"
    print(line)
    if result.not_understood:
        shown = ", ".join(str(n) for n in result.not_understood[:20])
        print(f"{len(result.not_understood)} log line(s) not understood: {shown}")
    if result.cut:
        spans = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in result.cut[:20])
        print(f"{len(result.cut)} log record(s) cut and not re-joined (the cut item left out) at lines {spans}")
    if result.nonfinite_steps:
        print(f"NaN/inf kept in metrics.jsonl (flagged) at steps {', '.join(str(s) for s in result.nonfinite_steps[:20])}")
    if result.not_numbers:
        print("values that are not numbers (left out): " + ", ".join(f"{k} ({n})" for k, n in result.not_numbers.items()))
    for note in result.notes:
        print(f"note: {note}")
    from rlexp.protocol.run_health import health_lines

    for line in health_lines(result.health):
        print(line)
    print(f"next: rlexp eval {attempt_dir}")
