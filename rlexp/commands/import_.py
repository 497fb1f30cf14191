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
) -> None:
    """Write ATTEMPT_DIR/attempt.yaml from an existing launch script (OpenRLHF flags through that release's own
    parser; verl Hydra overrides; TRL GRPOConfig fields), then check it with `rlexp plan ATTEMPT_DIR`. What
    the script cannot tell (a dataset file that is not here, the release) is asked for by name."""
    from rlexp.stages.importing import import_script as run

    result = run(script, attempt_dir, version=version, pool_size=pool_size, monitor_size=monitor_size,
                 parent=parent, intent_steps=intent_steps, gpus=gpus)
    print(f"{result.spec_path} written ({result.trainer}; {len(result.spec.get('recipe', {}))} recipe keys)")
    if result.left_out:
        print(f"left out (rlexp sets these, or they carry a secret): {', '.join(result.left_out)}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"next: rlexp plan {attempt_dir}")
