"""What `rlexp plan` shows: the plan as rich tables, or ``plan.json``'s own text with ``--json``.

Apart from the typer verb (:mod:`rlexp.commands.plan`) so that the console script can run the
command without typer (:func:`rlexp.console.main`): both call :func:`run`, and a test requires the
two to print the same bytes and exit with the same code. Standard library only at module level.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.protocol.plan import PlanResult


def run(spec: Path, json_output: bool) -> int:
    """Plan ``spec``, print it, and return the exit code: 0 when no check is an error, else 1."""
    from rlexp.experiment.files import to_json
    from rlexp.stages.plan import plan as plan_stage

    result = plan_stage(spec)
    if json_output:
        sys.stdout.write(result.text if result.text is not None else to_json(result.to_dict()))
        sys.stdout.flush()
    else:
        render(result)
    return 0 if result.ok else 1


def render(result: PlanResult) -> None:
    """Human output: rich tables, one per section."""
    from rich.console import Console

    console = Console()
    data = result.data
    s = result.steps
    tr = data["trainer"]
    console.print(
        f"[bold]plan[/bold] {data['attempt']}"
        + (f" (parent {data['parent']})" if data["parent"] else "")
        + f" — {tr['name']} {tr['version']}, pool {s['pool_size']:,} prompts"
    )

    # each section prints itself, in the order a reader checks a plan
    _print_header_and_diff(console, result, data, s)
    _print_loss_and_run_settings(console, result, data, s)
    _print_steps(console, result, data, s)
    _print_lr_and_schedule(console, result, data, s)
    _print_checks(console, result, data, s)
    _print_power(console, result, data, s)
    errors = sum(c.severity == "error" for c in result.checks)
    warnings = len(result.checks) - errors
    verdict = "[red]blocked[/red]" if errors else "[green]ready[/green]"
    console.print(f"{verdict}: {errors} error(s), {warnings} warning(s); plan.json written")


def _print_header_and_diff(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """The diff against the parent, and the SOP's one-variable rule."""
    from rich.table import Table

    if data["parent"]:
        diff = Table(title=f"Changed from parent {data['parent']}")
        for column in ("key", "parent", "this attempt", "kind"):
            diff.add_column(column)
        for d in data.get("diff") or []:
            diff.add_row(str(d["key"]), _readable(d["parent"]), _readable(d["value"]), str(d["kind"]))
        training = sum(1 for d in data.get("diff") or [] if d["kind"] == "training")
        if data.get("diff"):
            console.print(diff)
        else:
            console.print(f"no difference from parent {data['parent']}")
        if training != 1:
            console.print(f"[yellow]{training} training variables changed (the SOP allows one)[/yellow]")


def _print_loss_and_run_settings(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """An environment task's budgets and loss, the loss aggregation, an asynchronous launch's staleness."""
    env = data.get("environment")
    if env:  # an environment task: the episode budgets and the loss (GSPO's own clip and trainer settings)
        console.print(f"environment [bold]{env['name']}[/bold] {env['config']}: {env['max_turns']} turns × "
                      f"{env['max_tokens_per_turn']} tokens, {env['max_total_tokens']} in all; loss "
                      f"[bold]{env['loss']}[/bold], advantages {env['advantage_mode']}; primary metric "
                      f"{env['primary_metric']}" + (f"; eval reward {env['reward']}" if env.get("reward") else ""))
        gspo = env.get("gspo")
        if gspo:
            console.print(f"GSPO: {gspo['ratio']}, clip [{gspo['clip'][0]:g}, {gspo['clip'][1]:g}]")
            for trainer, settings in gspo["trainer_settings"].items():
                console.print(f"  {trainer}: " + ", ".join(f"{k}={v}" for k, v in settings.items()))

    agg = data.get("loss_aggregation")
    if agg:  # how the per-token losses of an optimizer step become one number (recipe.loss_agg_mode)
        line = f"loss aggregation [bold]{agg['mode']}[/bold]" + (" (recipe.loss_agg_mode)" if agg["stated"] else "")
        if agg.get("token_budget") is not None:
            line += f", L = {agg['token_budget']} tokens"
        if agg.get("trainer_settings"):
            line += ": " + ", ".join(f"{k}={v}" for k, v in agg["trainer_settings"].items())
        if agg.get("note"):
            line += f" — {agg['note']}"
        console.print(line)

    lag = (data.get("run_health") or {}).get("expected_lag")
    if lag:  # an asynchronous launch: how far behind the policy its batches may be generated
        most = lag.get("max_versions")
        console.print(f"off-policy staleness: {lag['mode']}, batches up to "
                      f"{most if most is not None else 'an unstated number of'} policy version(s) behind "
                      "(observed in the run from the trainer's own metric where it logs one)")


def _print_steps(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """The step math as the trainer counts it, the argv's notes and external data."""
    from rich.table import Table

    steps = Table(title="Steps (as the trainer counts them)", show_header=False)
    steps.add_column("what")
    steps.add_column("value", justify="right")
    verl = s.get("verl")  # verl: the scheduler counts global steps (rlexp.trainers.verl.steps)
    steps.add_row(
        "optimizer steps (mini-batch updates of the actor)" if verl else
        "optimizer steps (max_steps, the LR scheduler's horizon)", f"{s['optimizer_steps_total']:,}"
    )
    steps.add_row("optimizer steps per global step", f"{s['optimizer_steps_per_global_step']:g}")
    steps.add_row("global steps per episode", f"{s['global_steps_per_episode']:,}")
    steps.add_row("global steps total", f"[bold]{result.global_steps_total:,}[/bold]")
    if data["intent"].get("global_steps"):
        steps.add_row("intended global steps", f"{data['intent']['global_steps']:,}")
    steps.add_row("optimizer steps the trainer runs", f"{s['optimizer_steps_run']:,}")
    steps.add_row(
        "warm-up (scheduler steps / global steps)" if verl else "warm-up (optimizer steps / global steps)",
        f"{s['warmup_steps']:,} / {s['warmup_global_steps']:,.1f}"
    )
    steps.add_row("partial last rollout batch (prompts)",
                  f"{s['partial_batch_prompts']}" + (" dropped" if s["drops_partial_batch"] else " trained")
                  if s["partial_batch_prompts"] else "0")  # fmt: skip
    steps.add_row("peak LR → min LR", f"{s['peak_lr']:.3g} → {s['min_lr']:.3g}")
    if verl:
        v = verl
        steps.add_row("verl: total_training_steps (LR scheduler horizon)", f"{v['total_training_steps']:,}")
        steps.add_row("verl: scheduler / validation at step 0",
                      (f"{v['model_engine']} " if v.get("model_engine") else "")
                      + f"{v['lr_scheduler_type']} / {'yes' if data.get('validation_at_step_0') else 'no'}")
    console.print(steps)
    for note in (data.get("openrlhf_command") or {}).get("notes", []):
        console.print(f"[dim]argv note:[/dim] {note}")
    for role, entry in (data.get("datasets") or {}).items():
        if entry.get("external"):
            console.print(f"[dim]note:[/dim] datasets.{role}: external data ({', '.join(entry['external'])[:160]}), "
                          f"{entry.get('size')} prompts as stated; plan counts from that size")


def _print_lr_and_schedule(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """The LR at milestones and the eval/save schedule with the K=3 checkpoints."""
    from rich.table import Table

    lr = Table(title="LR at milestones (fraction of peak)")
    for col in ("global step", "optimizer steps", "LR first", "LR mean", "of peak", "actor_lr logged"):
        lr.add_column(col, justify="right")
    for row in data["lr_milestones"]:
        lr.add_row(
            f"{row['global_step']:,}",
            f"{row['first_optimizer_step']:,}–{row['last_optimizer_step']:,}",
            f"{row['lr_first']:.3g}",
            f"{row['lr_mean']:.3g}",
            f"{row['fraction_of_peak']:.1%}",
            f"{row['actor_lr_logged']:.3g}" if row["actor_lr_logged"] is not None else "—",  # verl: no update
        )
    console.print(lr)

    rule = "every N-th step and the last" if s.get("verl") else "global_step % N == 0"
    sched = Table(title=f"Eval / save schedule ({rule})", show_header=False)
    sched.add_column("what")
    sched.add_column("steps")
    sched.add_row("in-run eval", _compact(data["eval_global_steps"]))
    sched.add_row("checkpoint saves", _compact(data["save_global_steps"]))
    ck = data["checkpoints"]
    sched.add_row("K=3: final", _mark(ck["final"], data))
    sched.add_row(
        "K=3: mid (pre-registered)", _mark(ck["mid"], data) if ck["mid"] else "[yellow]none[/yellow]"
    )
    sched.add_row("K=3: best-by-monitor candidates", f"{len(ck['best_by_monitor_candidates'])} steps")
    console.print(sched)


def _print_checks(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """The preflight checks."""
    from rich.table import Table

    checks = Table(title="Preflight checks")
    for col in ("severity", "id", "message", "SOP"):
        checks.add_column(col, overflow="fold")
    for c in result.checks:
        colour = "red" if c.severity == "error" else "yellow"
        checks.add_row(f"[{colour}]{c.severity}[/{colour}]", c.name, c.rule, c.ref)
    if not result.checks:
        checks.add_row("[green]ok[/green]", "-", "no findings", "")
    console.print(checks)


def _print_power(console: Any, result: PlanResult, data: dict[str, Any], s: dict[str, Any]) -> None:
    """The power of the planned comparison and what each figure means."""
    from rich.table import Table

    p = data["power"]
    power = Table(title=f"Power of the planned comparison (paired, α={p.get('alpha', 0.05)}, 80% power)")
    threshold = f"+{p.get('win_threshold_pp', 3.0):.1f} pp"
    best = p.get("gate_1b_best_of_k_at_win_threshold")
    k = best["k"] if best else 3
    for col in ("set", "n", "discordance", "MDE (pp)", f"power at {threshold}", "n for it (z)",
                f"Gate-1b passes a true {threshold}: one ckpt", f"best of {k}", "claim (STOP-1)",
                "effect passing Gate-1b 80%: one ckpt"):  # fmt: skip
        power.add_column(col, justify="right")
    for name, row in (("ood_primary", p if p.get("n") else None), ("ood_monitor", p.get("monitor"))):
        if row:
            gate_pass, gate_effect = row.get("gate_1b_pass_power_at_win_threshold"), row.get("gate_1b_effect_80_pp")
            mde, exact = row.get("mde_exact_pp"), row.get("power_exact_at_win_threshold")
            rates = (row.get("gate_1b_best_of_k_at_win_threshold") or {}).get("rates")
            claim = (row.get("claim_probability_at_win_threshold") or {}).get("rates")
            power.add_row(name, f"{row['n']:,}", f"{row['discordance']:.1%}",
                          f"{mde:.1f}" if mde is not None else "beyond",
                          f"{exact:.0%}" if exact is not None else "-", f"{row['n_for_win_threshold']:,}",
                          f"{gate_pass:.0%}" if gate_pass is not None else "-",
                          f"{min(rates):.0%}–{max(rates):.0%}" if rates else "-",
                          f"{min(claim):.0%}–{max(claim):.0%}" if claim else "-",
                          f"{gate_effect:.2f} pp" if gate_effect is not None else "none")  # fmt: skip
    console.print(power)
    cl = p.get("clustered")
    if cl:
        console.print(_clustered_power_line(cl, threshold))
    console.print("MDE and power: the exact McNemar test the SOP runs; n for it: Miller's z approximation. One "
                  "ckpt: a single pre-registered checkpoint.")
    if best:
        console.print(f"Best of {k}: some of the K={k} checkpoints passes Gate-1b, what a decision on K gets, over a "
                      f"latent checkpoint correlation of {max(best['correlations']):g} to {min(best['correlations']):g} "
                      "(rlexp sop calibrate's model, Gaussian-copula approximation).")
    claim = p.get("claim_probability_at_win_threshold")
    if claim:
        console.print(f"Claim (STOP-1): the probability that the whole claim rule (Gate-1b on the best of {claim['k']}, a "
                      f"second seed, Gate-2 on both seeds' selected Δ) makes the attempt a release candidate at a true "
                      f"{threshold}, same correlations (normal approximation; rlexp sop calibrate simulates it).")


def _clustered_power_line(cl: dict[str, Any], threshold: str) -> str:
    """plan.json's ``power.clustered`` in one paragraph: what decide will test the primary set with."""
    if cl.get("mde_pp") is None:
        return f"[yellow]ood_primary is clustered by {cl['column']}: {cl.get('note', 'no clustered power')}.[/yellow]"
    rates = cl["gate_1b_best_of_k_at_win_threshold"]["rates"]
    return (f"[bold]ood_primary is clustered by {cl['column']}[/bold] ({cl['n_clusters']} clusters, from "
            f"{cl['clusters_from']}; mean size {cl['mean_cluster_size']:.1f}; ICC {cl['icc']:g}, {cl['icc_from']}): "
            f"design effect {cl['design_effect']:.2f}, effective n {cl['effective_n']:,.0f}. Decide tests it with the "
            f"cluster-robust t ({cl['df']} df), so the figures that hold are: MDE {cl['mde_pp']:.1f} pp, power at "
            f"{threshold} {cl['power_at_win_threshold']:.0%}, Gate-1b passes a true {threshold} "
            f"{cl['gate_1b_pass_power_at_win_threshold']:.0%} for one checkpoint ({min(rates):.0%}–{max(rates):.0%} "
            f"best of {cl['gate_1b_best_of_k_at_win_threshold']['k']}), 80% needs {cl['gate_1b_effect_80_pp']:.2f} pp; "
            "the table's McNemar figures treat the problems as independent.")


def _readable(value: Any) -> str:
    """A value as a person reads it: lists joined, no Python reprs (None is "unset")."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_readable(v) for v in value) or "none"
    return str(value)


def _compact(points: list[int]) -> str:
    if not points:
        return "[yellow]never[/yellow]"
    if len(points) <= 8:
        return ", ".join(f"{p:,}" for p in points)
    return f"{points[0]:,}, {points[1]:,}, {points[2]:,}, … {points[-1]:,} ({len(points):,} in all)"


def _mark(step: int, data: dict[str, Any]) -> str:
    saved = step in set(data["save_global_steps"])
    evaluated = step in set(data["eval_global_steps"])
    return (
        f"{step:,}  saved: {'[green]yes[/green]' if saved else '[red]no[/red]'}"
        f"  evaluated: {'[green]yes[/green]' if evaluated else '[red]no[/red]'}"
    )
