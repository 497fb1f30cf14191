"""`rlexp sop show` and `rlexp sop calibrate`: the SOP in force, and how its gates behave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rlexp.commands.options import SEED, finite

app = typer.Typer(no_args_is_help=True)

MAX_SIMULATED_OUTCOMES = 1_000_000_000  # --sims x --n: bounds the distinct tables whose CI is computed
MAX_CORRELATIONS = 10
CI_METHODS = ("percentile", "bca", "newcombe")
SopOption = Annotated[Path | None, typer.Option("--sop", help="SOP file (default: the version in force).")]


@app.command("show")
def show(
    sop_file: SopOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the thresholds as JSON.")] = False,
) -> None:
    """Print the SOP in force: version, SHA-256 and every threshold."""
    from rlexp.spec.sop import load_sop

    sop = load_sop(sop_file)
    data = sop.to_dict()
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
    from rlexp.protocol import gates

    nobody = gates.AttemptOutcome("-", None, (), None, 0.0, None, None)
    return [gates.gate_1a_rule(sop), gates.gate_1b_rule(sop), gates.gate_2([], None, sop).rule,
            gates.id_guardrail(0.0, 0.0, sop).rule, gates.stop_3a(nobody, [], sop).rule,
            gates.stop_3b(nobody, [], sop).rule, gates.gray_zone(0.0, sop).rule,
            f"parser audit: mis-parse rate <= {sop.parser_audit.max_misparse_rate:.0%} of "
            f"{sop.parser_audit.sample_size} drawn cases, else DEBUG"]


@app.command("calibrate")
def calibrate(
    sims: Annotated[int, typer.Option("--sims", min=100, max=1_000_000,
                                      help="Simulated studies per scenario and correlation.")] = 20_000,
    seed: Annotated[int, typer.Option("--seed", **SEED)] = 0,
    n: Annotated[int, typer.Option("--n", min=50, max=100_000, help="Problems per paired study.")] = 1000,
    discordance: Annotated[float, typer.Option("--discordance", callback=finite(0.01, 0.5))] = 0.12,
    correlation: Annotated[list[float] | None, typer.Option(
        "--correlation", callback=finite(0, 1), help="Latent correlation rho of two checkpoints' flips, in [0, 0.99] or 1; repeat for a "
                              "row per value (default: 0.3, 0.6 and 0.9).")] = None,
    effect_pp: Annotated[float, typer.Option("--effect-pp", callback=finite(-50, 50), help="True effect of the alternative.")] = 3.0,
    ci_method: Annotated[str | None, typer.Option(
        "--ci-method", help="The gates' CI: percentile, bca or newcombe (default: the SOP's bootstrap.method).")
    ] = None,
    sop_file: SopOption = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the markdown table (for sop/README.md).")] = False,
) -> None:
    """Simulate paired studies like the SOP's final comparison: false-pass rate and power of every gate, per checkpoint and best-of-K, with Monte-Carlo errors, a row per correlation."""
    from rlexp.errors import InputError
    from rlexp.protocol.calibrate import (
        BELOW_BAR_EFFECTS,
        DEFAULT_CORRELATIONS,
        CalibrationSettings,
        check_settings,
    )
    from rlexp.protocol.calibrate import calibrate as run
    from rlexp.spec.sop import load_sop

    sop = load_sop(sop_file)
    if sims * n > MAX_SIMULATED_OUTCOMES:  # the distinct tables to judge, hence the time, grow with both
        raise InputError(None, "--sims", f"--sims x --n = {sims * n} simulated outcomes, over the limit of "
                                         f"{MAX_SIMULATED_OUTCOMES}")
    correlations = tuple(correlation) if correlation else DEFAULT_CORRELATIONS
    if len(correlations) > MAX_CORRELATIONS:
        raise InputError(None, "--correlation", f"{len(correlations)} values, at most {MAX_CORRELATIONS}")
    if ci_method is not None and ci_method not in CI_METHODS:
        raise InputError(None, "--ci-method", f"must be one of {', '.join(CI_METHODS)}, got {ci_method!r}")
    settings = CalibrationSettings(sims=sims, seed=seed, n=n, discordance=discordance, correlations=correlations,
                                   effect_pp=effect_pp, k=sop.checkpoints.k, below_bar_effects=BELOW_BAR_EFFECTS)
    try:
        check_settings(settings)
    except ValueError as exc:
        option = {"correlations": "--correlation", "effect_pp": "--effect-pp", "k": "--sop"}.get(
            str(exc).split(":", 1)[0], "--discordance")
        raise InputError(None, option, str(exc).split(": ", 1)[-1]) from None
    result = run(sop, settings, ci_method=ci_method)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    if markdown:
        typer.echo(result.markdown())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Gate pass rates ± Monte-Carlo s.e., {sims} simulated studies per scenario and "
                        f"correlation (SOP {sop.version}, CI {result.ci_method}, seed {seed})")
    for col in ("gate", "true effect", "rho (Δ corr.)", "per checkpoint", f"best of K={sop.checkpoints.k}",
                "best of K, Holm"):
        table.add_column(col, justify="left" if col in ("gate", "true effect") else "right")
    for r in result.rows:
        table.add_row(r.gate, r.scenario, f"{r.correlation:g} ({r.delta_correlation:.2f})", r.per_checkpoint.pct(),
                      r.best_of_k.pct(), r.holm_best_of_k.pct() if r.holm_best_of_k is not None else "-")
    console = Console()
    console.print(table)
    console.print("Null rows are false-pass rates; the +effect rows are power. Best of K: any of the K "
                  "checkpoints passes, which is what choosing among them does to the error rate. CONFIRM is "
                  "decide's answer for a first seed; STOP-1 assumes the ID guardrail holds.")
    if result.stop_1_below_bar:
        effects = sorted({e for _, e, _ in result.stop_1_below_bar})
        below = Table(title="STOP-1 (release candidate) at true effects below the +3pp bar: the best of K's raw Δ "
                            "overstates its true effect (the winner's curse)")
        below.add_column("rho", justify="right")
        for e in effects:
            below.add_column(f"true {e:+g}pp", justify="right")
        rates = {(rho, e): r for rho, e, r in result.stop_1_below_bar}
        for rho in sorted({rho for rho, _, _ in result.stop_1_below_bar}):
            below.add_row(f"{rho:g}", *[rates[(rho, e)].pct() if (rho, e) in rates else "-" for e in effects])
        console.print(below)


@app.command("calibrate-claim")
def calibrate_claim(
    sims: Annotated[int, typer.Option("--sims", min=100, max=100_000,
                                      help="Simulated studies per true effect and correlation.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", **SEED)] = 0,
    n: Annotated[int, typer.Option("--n", min=50, max=100_000, help="Problems per paired study.")] = 1000,
    discordance: Annotated[float, typer.Option("--discordance", callback=finite(0.01, 0.5))] = 0.12,
    correlation: Annotated[list[float] | None, typer.Option(
        "--correlation", callback=finite(0, 1), help="Latent correlation rho of two checkpoints' flips; repeat "
                                                      "(default: 0.3, 0.6 and 0.9).")] = None,
    below_effect_pp: Annotated[float, typer.Option(
        "--below-effect-pp", callback=finite(-50, 50), help="A true effect at or below this (pp) ...")] = 2.0,
    max_rate_below: Annotated[float, typer.Option(
        "--max-rate-below", callback=finite(0, 1), help="... reaches STOP-1 at most at this rate.")] = 0.10,
    at_effect_pp: Annotated[float, typer.Option(
        "--at-effect-pp", callback=finite(-50, 50), help="A true effect of this (pp) ...")] = 3.0,
    min_rate_at: Annotated[float, typer.Option(
        "--min-rate-at", callback=finite(0, 1), help="... reaches STOP-1 at least at this rate.")] = 0.33,
    estimate: Annotated[list[str] | None, typer.Option(
        "--estimate", help="What Gate-2 may average: raw or selection_adjusted; repeat (default: both).")] = None,
    sop_file: SopOption = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Choose the claim rule: simulate STOP-1 (Gate-1b best of K, a second seed, Gate-2) at true 0, +1, +2, +3, +5pp and pick Gate-2's estimate (raw or selection-adjusted Δ) and mean threshold that meet the targets."""
    from rlexp.errors import InputError
    from rlexp.protocol.calibrate import (
        DEFAULT_CORRELATIONS,
        CalibrationSettings,
        ClaimTargets,
        check_settings,
    )
    from rlexp.protocol.calibrate import calibrate_claim as run
    from rlexp.spec.sop import load_sop

    sop = load_sop(sop_file)
    if sims * n > MAX_SIMULATED_OUTCOMES:
        raise InputError(None, "--sims", f"--sims x --n = {sims * n} simulated outcomes, over the limit of "
                                         f"{MAX_SIMULATED_OUTCOMES}")
    correlations = tuple(correlation) if correlation else DEFAULT_CORRELATIONS
    if len(correlations) > MAX_CORRELATIONS:
        raise InputError(None, "--correlation", f"{len(correlations)} values, at most {MAX_CORRELATIONS}")
    if below_effect_pp >= at_effect_pp:
        raise InputError(None, "--below-effect-pp", f"{below_effect_pp:g} must be below --at-effect-pp "
                                                    f"({at_effect_pp:g})")
    settings = CalibrationSettings(sims=sims, seed=seed, n=n, discordance=discordance, correlations=correlations,
                                   k=sop.checkpoints.k)
    for effect, option in ((at_effect_pp, "--at-effect-pp"), (below_effect_pp, "--below-effect-pp"), (5.0, "--discordance")):
        try:
            check_settings(CalibrationSettings(**{**settings.__dict__, "effect_pp": effect}))
        except ValueError as exc:
            name = str(exc).split(":", 1)[0]
            raise InputError(None, {"correlations": "--correlation", "k": "--sop"}.get(name, option),
                             str(exc).split(": ", 1)[-1]) from None
    from rlexp.protocol.calibrate import ESTIMATES

    estimates = tuple(dict.fromkeys(estimate)) if estimate else ESTIMATES
    for name in estimates:
        if name not in ESTIMATES:
            raise InputError(None, "--estimate", f"must be one of {', '.join(ESTIMATES)}, got {name!r}")
    result = run(sop, settings, ClaimTargets(below_effect_pp, max_rate_below, at_effect_pp, min_rate_at), estimates)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    typer.echo(result.markdown())
    section = result.sop_section()
    if section is not None:
        import yaml

        typer.echo("A SOP version with this rule states (beside its other sections):")
        typer.echo(yaml.safe_dump(section, sort_keys=False))
