"""The report's plots as PNGs: learning rate (planned vs logged), gradient norm, the in-run
monitor, the attempt's family, an environment task's tool calls and turns per episode over
training, and the discordant pairs of each comparison.

matplotlib's Agg backend (no display), imported inside :func:`render_plots`.
"""

from __future__ import annotations

import math
from pathlib import Path

from rlexp.reporting.inputs import ReportInputs, checkpoint_items, checkpoint_label, selected_roles

# Okabe-Ito: distinguishable under the common colour-vision deficiencies
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")


def render_plots(inputs: ReportInputs, out_dir: Path, stem: str) -> dict[str, Path]:
    """The plots as PNGs (only those with data); returns name -> path.

    Sized to read (7x3.6 in at 110 dpi), axes scaled to the data (a threshold is drawn only when
    it lies within the data's range), legends beside the axes rather than over the data, and the
    Okabe-Ito palette."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlexp.spec.settings import guard_settings

    spike_grad_norm = guard_settings().spikes.grad_norm  # the SOP's spike threshold

    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}

    def figure():
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.grid(True, color="0.9", lw=0.6)
        return fig, ax

    def save(fig, ax, name: str) -> None:
        import io

        from rlexp.experiment.files import atomic_write_bytes

        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        path = out_dir / f"{stem}_{name}.png"
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        plt.close(fig)
        # a uniquely named temp file, then a rename: parallel reports of one attempt never share it
        atomic_write_bytes(path, buffer.getvalue())
        made[name] = path

    # one function a plot; each draws only when it has data
    _plot_lr(inputs, figure, save)
    _plot_monitor(inputs, figure, save)
    _plot_family(inputs, figure, save)
    _plot_grad_norm(inputs, figure, save, spike_grad_norm)
    _plot_episodes(inputs, figure, save)
    _plot_discordant(inputs, figure, save)
    return made


def _plot_lr(inputs: ReportInputs, figure, save) -> None:
    """The planned LR (plan.json) against the logged actor_lr."""
    from rlexp.training.monitor import planned_lr_table

    planned = planned_lr_table(inputs.plan)
    logged = [(r["global_step"], r["actor_lr"]) for r in inputs.metrics
              if "actor_lr" in r and math.isfinite(r["actor_lr"])]  # a NaN LR: in the stability section
    if planned or logged:
        fig, ax = figure()
        if planned:
            steps = sorted(planned)
            ax.plot(steps, [planned[s] for s in steps], label="planned\n(plan.json)", color=PALETTE[6], lw=2,
                    alpha=0.5)
        if logged:
            ax.plot([s for s, _ in logged], [v for _, v in logged], "o", ms=3, color=PALETTE[0],
                    label="logged actor_lr")
        ax.set(xlabel="global step", ylabel="learning rate", title="LR schedule: planned vs logged")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        save(fig, ax, "lr")


def _plot_monitor(inputs: ReportInputs, figure, save) -> None:
    """The in-run OOD monitor, raw and smoothed, with the K=3 checkpoints marked."""
    from rlexp.training.monitor import monitor_points

    points = monitor_points(inputs.metrics)
    if points:
        from rlexp.protocol.gates import smooth

        fig, ax = figure()
        ax.plot([s for s, _ in points], [v * 100 for _, v in points], "o-", ms=3, lw=1, alpha=0.6,
                color=PALETTE[0], label="raw")
        sm = [(s, v) for s, v in smooth(points, inputs.smoothing_window) if v is not None]
        if sm:
            ax.plot([s for s, _ in sm], [v * 100 for _, v in sm], lw=2, color=PALETTE[0],
                    label=f"{inputs.smoothing_window}-point mean")
        for (role, step), color, style in zip(selected_roles(inputs.selection), PALETTE[1:4], ("--", ":", "-."),
                                              strict=False):
            ax.axvline(step, color=color, ls=style, lw=1.5, label=f"K=3 {role.replace('_', ' ')} ({step})")
        ax.set(xlabel="global step", ylabel="accuracy (%)", title="In-run OOD monitor")
        save(fig, ax, "monitor")


def _plot_family(inputs: ReportInputs, figure, save) -> None:
    """The monitor of every attempt of the family."""
    if len(inputs.family_monitor) > 1:
        fig, ax = figure()
        relation = {m["attempt"]: m["relation"] for m in inputs.family}
        for i, (attempt, pts) in enumerate(sorted(inputs.family_monitor.items(),
                                                  key=lambda kv: (kv[0] != inputs.attempt_id, kv[0]))):
            mine = attempt == inputs.attempt_id
            ax.plot([s for s, _ in pts], [v * 100 for _, v in pts], "o-" if mine else ".-",
                    lw=2.2 if mine else 1.2, ms=4 if mine else 3, color=PALETTE[i % len(PALETTE)],
                    label=f"{attempt} ({relation.get(attempt, '')})")
        ax.set(xlabel="global step", ylabel="monitor accuracy (%)", title="In-run OOD monitor: the family")
        save(fig, ax, "family")


def _plot_grad_norm(inputs: ReportInputs, figure, save, spike_grad_norm: float) -> None:
    """The gradient norm, its NaN/inf steps and the spikes above the SOP's threshold."""
    grad = [(r["global_step"], r["grad_norm"]) for r in inputs.metrics
            if "grad_norm" in r and math.isfinite(r["grad_norm"])]
    grad_nonfinite = [r["global_step"] for r in inputs.metrics
                      if "grad_norm" in r and not math.isfinite(r["grad_norm"])]
    if grad:
        fig, ax = figure()
        values = [v for _, v in grad]
        ax.plot([s for s, _ in grad], values, lw=1, color=PALETTE[0], label="grad norm")
        for i, step in enumerate(grad_nonfinite[:20]):  # a NaN/inf grad norm: a spike with no height
            ax.axvline(step, color=PALETTE[3], lw=1, ls="--", label="grad norm NaN/inf" if i == 0 else None)
        high = [(s, v) for s, v in grad if v > spike_grad_norm]
        if high:
            ax.plot([s for s, _ in high], [v for _, v in high], "v", color=PALETTE[3], ms=6,
                    label=f"spike > {spike_grad_norm:g}")
        title = "Gradient norm and spikes"
        if max(values) > 10 * max(min(values), 1e-9):
            ax.set_yscale("log")
        if spike_grad_norm <= 1.2 * max(values):  # in range: draw it; else it would flatten the curve
            ax.axhline(spike_grad_norm, color=PALETTE[3], lw=1, ls=":", label=f"spike threshold {spike_grad_norm:g}")
        else:
            title += f" (spike threshold {spike_grad_norm:g}, far above the data)"
        ax.set(xlabel="global step", ylabel="grad norm", title=title)
        save(fig, ax, "grad_norm")


def _plot_episodes(inputs: ReportInputs, figure, save) -> None:
    """An environment task: how the policy's use of its tools moves over training."""
    # an environment task: how the policy's use of its tools moves over training
    episode_series = {key: [(r["global_step"], float(r[key])) for r in inputs.metrics
                            if isinstance(r.get(key), int | float) and math.isfinite(r[key]) and "global_step" in r]
                      for key in ("tool_calls_per_episode", "turns_per_episode")}
    if any(episode_series.values()):
        fig, ax = figure()
        for i, (key, pts) in enumerate(episode_series.items()):
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], ".-", lw=1.4, ms=4, color=PALETTE[i],
                        label=key.replace("_", " "))
        ax.set(xlabel="global step", ylabel="per training episode", title="Tool calls and turns over training")
        save(fig, ax, "episodes")


def _plot_discordant(inputs: ReportInputs, figure, save) -> None:
    """The discordant pairs of each checkpoint against the decision baseline."""
    bars = [(name, v.get("b"), v.get("c")) for name, v in checkpoint_items(inputs)
            if isinstance(v.get("b"), int) and isinstance(v.get("c"), int)]
    if bars:
        fig, ax = figure()
        xs = range(len(bars))
        ax.bar([x - 0.2 for x in xs], [b for _, b, _ in bars], 0.4, label="b: baseline right,\nnew wrong",
               color=PALETTE[3])
        ax.bar([x + 0.2 for x in xs], [c for _, _, c in bars], 0.4, label="c: baseline wrong,\nnew right",
               color=PALETTE[0])
        ax.set_xticks(list(xs), [checkpoint_label(inputs, n) for n, _, _ in bars])
        ax.set(ylabel="problems", title=f"Discordant pairs vs {(inputs.decision or {}).get('baseline', 'baseline')}")
        save(fig, ax, "discordant")
