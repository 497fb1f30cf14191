"""`rlexp sop show` and `rlexp sop calibrate`: the SOP in force, and how its gates behave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)

MAX_SIMULATED_OUTCOMES = 50_000_000  # --sims x --n: the simulation holds one draw per (study, problem)
SopOption = Annotated[Path | None, typer.Option("--sop", help="SOP file (default: the version in force).")]


@app.command("show")
def show(
    sop_file: SopOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the thresholds as JSON.")] = False,
) -> None:
    """Print the SOP in force: version, SHA-256 and every threshold."""
    from rlexp.core.sop import load_sop

    sop = load_sop(sop_file)
    data = sop.model_dump()
    if json_out:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]SOP {sop.version}[/bold]: the rules, with the thresholds in place")
    for sentence in rule_sentences(sop):
        console.print(f"  • {sentence}", highlight=False)
    console.print()
    table = Table(title=f"SOP {sop.version}  sha256 {sop.sha256[:16]}  ({sop.path})")
    table.add_column("section")
    table.add_column("setting")
    table.add_column("value", justify="right")
    for section, values in data.items():
        if isinstance(values, dict):
            for key, value in values.items():
                if isinstance(value, dict):  # guardrails.g2.min_boxed ... shown as "g2.min_boxed"
                    for sub, item in value.items():
                        table.add_row(section, f"{key}.{sub}", str(item))
                else:
                    table.add_row(section, key, str(value))
    console.print(table)


def rule_sentences(sop) -> list[str]:
    """Each decision rule as the sentence the gates print, its numbers from ``sop`` (AND/OR in place)."""
    from rlexp.core import gates

    nobody = gates.AttemptOutcome("-", None, (), None, 0.0, None, None)
    return [gates.gate_1a_rule(sop), gates.gate_1b_rule(sop), gates.gate_2([], None, sop).rule,
            gates.id_guardrail(0.0, 0.0, sop).rule, gates.stop_3a(nobody, [], sop).rule,
            gates.stop_3b(nobody, [], sop).rule, gates.gray_zone(0.0, sop).rule,
            f"parser audit: mis-parse rate <= {sop.parser_audit.max_misparse_rate:.0%} of "
            f"{sop.parser_audit.sample_size} drawn cases, else DEBUG"]


@app.command("calibrate")
def calibrate(
    sims: Annotated[int, typer.Option("--sims", min=100, max=100_000, help="Simulated studies per scenario.")] = 2000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    n: Annotated[int, typer.Option("--n", min=50, max=100_000, help="Problems per paired study.")] = 1000,
    discordance: Annotated[float, typer.Option("--discordance", min=0.01, max=0.5)] = 0.12,
    rho: Annotated[float, typer.Option("--rho", min=0.0, max=0.99,
                                       help="Correlation of the K checkpoints' flips.")] = 0.6,
    effect_pp: Annotated[float, typer.Option("--effect-pp", help="True effect of the alternative.")] = 3.0,
    resamples: Annotated[int, typer.Option("--resamples", min=100, max=100_000,
                                           help="Bootstrap resamples per study.")] = 2000,
    sop_file: SopOption = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the markdown table (for sop/README.md).")] = False,
) -> None:
    """Simulate paired studies like the SOP's final comparison: false-pass rate and power of every gate, per checkpoint and best-of-K."""
    from rlexp.core.calibrate import CalibrationSettings
    from rlexp.core.calibrate import calibrate as run
    from rlexp.core.sop import load_sop
    from rlexp.errors import InputError

    sop = load_sop(sop_file)
    if sims * n > MAX_SIMULATED_OUTCOMES:  # one draw per (study, problem) is held in memory at once
        raise InputError(None, "--sims", f"--sims x --n = {sims * n} simulated outcomes, over the limit of "
                                         f"{MAX_SIMULATED_OUTCOMES}")
    if abs(effect_pp) / 100.0 >= discordance:
        raise InputError(None, "--effect-pp", "the effect must be smaller than the discordance")
    result = run(sop, CalibrationSettings(sims=sims, seed=seed, n=n, discordance=discordance, rho=rho,
                                          effect_pp=effect_pp, resamples=resamples, k=sop.checkpoints.k))
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    if markdown:
        typer.echo(result.markdown())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Gate pass rates, {sims} simulated studies per scenario (SOP {sop.version}, seed {seed})")
    for col in ("gate", "true effect", "per checkpoint", f"best of K={sop.checkpoints.k}", "best of K, Holm", "MC s.e."):
        table.add_column(col, justify="left" if col in ("gate", "true effect") else "right")
    for r in result.rows:
        table.add_row(r.gate, r.scenario, f"{r.per_checkpoint:.2%}", f"{r.best_of_k:.2%}",
                      f"{r.holm_best_of_k:.2%}" if r.holm_best_of_k is not None else "-", f"{r.mc_se:.2%}")
    console = Console()
    console.print(table)
    console.print("Null rows are false-pass rates; the +effect rows are power. Best of K: any of the K "
                  "checkpoints passes, which is what choosing among them does to the error rate.")
