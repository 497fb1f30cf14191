"""`rlexp demo`: plan → launch → eval → decide → report on a tiny model, on the CPU, in minutes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlexp.commands.options import SEED


def demo(
    directory: Annotated[
        Path,
        typer.Option("--dir", help="Where the experiment, the reports and mlflow.db land (default: here)."),
    ] = Path("."),
    fast: Annotated[bool, typer.Option("--fast", help="A few global steps and small eval sets (tests).")] = False,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow store (default sqlite:///<dir>/mlflow.db).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", **SEED, help="Seed of the task, the base model and the runs.")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON at the end.")] = False,
    build_base: Annotated[bool, typer.Option(
        "--build-base", help="Supervise the base model here rather than copy the shipped one (same result).")] = False,
    task: Annotated[str, typer.Option(
        "--task", help="arithmetic (default) | tools: the calculator environment task (docs/environments.md).")
    ] = "arithmetic",
    model: Annotated[str, typer.Option(
        "--model", help="tiny (default) | smollm2: SmolLM2-135M-Instruct (its published GGUF) on GSM-Symbolic "
                        "word problems, about 14 min on 2 CPU cores (docs/real-model.md).")
    ] = "tiny",
) -> None:
    """Run the whole protocol on a tiny model and a synthetic arithmetic task."""
    import json

    if model != "tiny":
        from rlexp.errors import InputError

        if model != "smollm2" or task != "arithmetic":
            raise InputError(None, "--model", f"{model!r}: tiny or smollm2 (with the default --task)")
        from rlexp.stages.demo_real import run_real_demo

        summary = run_real_demo(directory, fast=fast, seed=seed, tracking_uri=tracking_uri)
        print(json.dumps(summary, indent=2) if json_output else
              f"demo smollm2: decision {summary['decision']}; report {summary['report']}")
        return

    if task == "tools":
        from rlexp.stages.demo_tools import run_tools_demo

        summary = run_tools_demo(directory, fast=fast, seed=seed, tracking_uri=tracking_uri)
        print(json.dumps(summary, indent=2) if json_output else
              f"demo tools: decision {summary['decision']}; report {summary['report']}")
        return
    if task != "arithmetic":
        from rlexp.errors import InputError

        raise InputError(None, "--task", f"{task!r}: arithmetic or tools")
    from rlexp.stages.demo import demo as demo_stage

    result = demo_stage(directory, fast=fast, seed=seed, tracking_uri=tracking_uri, build_base=build_base)
    if json_output:
        print(json.dumps(result.to_dict(), indent=2))
