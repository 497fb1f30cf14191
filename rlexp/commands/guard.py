"""`rlexp guard g0|g1|g2|g4|audit ATTEMPT`: the SOP's guardrails and the parser audit (sop/README.md).

Each writes ``ATTEMPT/guards/<name>.json`` and exits 1 when its verdict is a failure. Every
number (samples, problems, k, temperature, bars) comes from the SOP file's ``guardrails`` and
``parser_audit`` sections (``--sop``, default: the version in force); an option given here
overrides the SOP's value for this run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlexp.commands.options import SEED

app = typer.Typer(no_args_is_help=True)

AttemptArg = Annotated[Path, typer.Argument(help="Attempt directory or its attempt.yaml.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")]
SopOpt = Annotated[Path | None, typer.Option("--sop", help="SOP file (default: the version in force).")]


def _load_sop(sop_file: Path | None):
    from rlexp.spec.sop import load_sop

    return load_sop(sop_file)


def _report(verdict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(verdict.to_dict(), indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{verdict.name}: {'PASS' if verdict.passed else 'FAIL'}", show_header=False)
        table.add_column("key", no_wrap=True)
        table.add_column("value")
        table.add_row("rule", verdict.rule)
        for key, value in verdict.numbers.items():
            table.add_row(" ".join(key.split("_")), readable(value))
        for note in verdict.notes:
            table.add_row("note", note)
        Console().print(table)
    if not verdict.passed:
        raise typer.Exit(1)


@app.command("g0")
def g0(
    attempt: AttemptArg,
    samples: Annotated[int | None, typer.Option(min=1, max=10_000, help="Default: the SOP's guardrails.g0.samples (5).")] = None,
    sop_file: SopOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """G0 prompt parity: training-path vs eval-path input_ids on pool samples."""
    from rlexp.stages.guard_parity import run_g0

    _report(run_g0(attempt, samples, sop=_load_sop(sop_file)), as_json)


@app.command("g1")
def g1(
    attempt: AttemptArg,
    checkpoint: Annotated[str | None, typer.Option(help="global_stepN (default: the earliest saved).")] = None,
    set_role: Annotated[str | None, typer.Option("--set", help="Eval set role (default: ood_monitor).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Problems to compare.")] = 200,
    records: Annotated[
        list[Path] | None, typer.Option("--records", help="Compare two existing record files instead (give twice).")
    ] = None,
    nondeterminism: Annotated[
        str | None, typer.Option(help="Name the nondeterminism source that may change outputs (not correctness).")
    ] = None,
    sop_file: SopOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """G1 pipeline integrity: adapter vs merged weights (or two record files) must agree."""
    from rlexp.stages.guard_integrity import run_g1

    _report(run_g1(attempt, checkpoint=checkpoint, set_role=set_role, limit=limit, records=records,
                   nondeterminism=nondeterminism, sop=_load_sop(sop_file)), as_json)


@app.command("g2")
def g2(
    attempt: AttemptArg,
    problems: Annotated[int | None, typer.Option(min=1, max=10_000_000, help="Default: the SOP's guardrails.g2.problems (200).")] = None,
    sop_file: SopOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """G2 parser ceiling on Baseline-S0: boxed >= 98%, failures 0%, truncation <= 5% (SOP guardrails.g2)."""
    from rlexp.stages.guard_baseline import run_g2

    _report(run_g2(attempt, problems, sop=_load_sop(sop_file)), as_json)


@app.command("g4")
def g4(
    attempt: AttemptArg,
    k: Annotated[int | None, typer.Option(min=1, max=10_000, help="Default: the SOP's guardrails.g4.k (8).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most N baseline-wrong problems.")] = None,
    sop_file: SopOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """G4 pass@k headroom: k samples at T=0.6 on the baseline's wrong problems, pass@k >= 15% (SOP guardrails.g4)."""
    from rlexp.stages.guard_baseline import run_g4

    _report(run_g4(attempt, k=k, limit=limit, sop=_load_sop(sop_file)), as_json)


@app.command("audit")
def audit(
    attempt: AttemptArg,
    draw: Annotated[bool, typer.Option("--draw", help="Draw incorrect cases into guards/parser_audit_review.jsonl.")] = False,
    verdicts: Annotated[
        Path | None, typer.Option("--verdicts", help="The review file with each 'verdict' filled: ok|misparse|ambiguous.")
    ] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Default: best-by-monitor, else final.")] = None,
    n: Annotated[int | None, typer.Option(min=1, help="Cases to draw (default: the SOP's "
                                          "parser_audit.sample_size, 50).")] = None,
    seed: Annotated[int, typer.Option(**SEED)] = 0,
    sop_file: SopOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Parser audit (sop/README.md#parser-audit): draw 50 incorrect cases for review, or score the reviewed file."""
    from rlexp.errors import InputError
    from rlexp.stages.guard_audit import run_audit_draw, run_audit_verdicts

    if draw == (verdicts is not None):
        raise InputError(None, "audit", "give exactly one of --draw or --verdicts FILE")
    if draw:
        drawn = run_audit_draw(attempt, checkpoint=checkpoint, n=n, seed=seed, sop=_load_sop(sop_file))
        if as_json:
            typer.echo(json.dumps(drawn.to_dict()))
        else:
            typer.echo(f"{drawn.drawn} incorrect cases drawn ({drawn.flagged} flagged suspicious) into "
                       f"{drawn.review_file}; "
                       "set each 'verdict' to ok|misparse|ambiguous, then run with --verdicts")
        return
    _report(run_audit_verdicts(attempt, verdicts, sop=_load_sop(sop_file)), as_json)


def readable(value: object) -> str:
    """A verdict number as a person reads it: no Python reprs (None, True, ['a'], {'k': v})."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(readable(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{' '.join(str(k).split('_'))} {readable(v)}" for k, v in value.items())
    return str(value)
