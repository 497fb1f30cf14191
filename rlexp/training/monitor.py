"""The in-run monitor: spike log, the G3 smoke gate, G5 runtime assertions, the early-stop rule,
the environment-error stop.

All of it reads normalised metric rows (``metrics.jsonl``) and the plan; none of it touches a
process. ``rlexp launch`` feeds it each batch of new rows while following a run and acts on the
verdicts (stopping the run when the SOP's early-stop rule fires, recording why).

Every number is the SOP file's (``guardrails.spikes``, ``guardrails.g3``, ``guardrails.g5``):
spikes are ``grad_norm > 50`` (the spike log); G3 and G5 are read at global step 10
(the smoke run); the stop rule is ``rlexp.protocol.gates.early_stop`` with the SOP's ``early_stop``
numbers. Each function takes them as optional arguments (or a ``sop``); left out, they come from
the SOP in force, read only then. The first step is warm-up and excluded
from step-time stability (it includes model loading and compilation).

A NaN or an infinity in a row (kept by the readers: the step where a run diverged) is a signal,
never averaged: a non-finite ``grad_norm`` is a spike (the gradient blew past any threshold; the
spike log writes its value as "NaN"/"Infinity"); a non-finite ``reward`` or ``actor_lr`` up to
G5's step fails G5 and says so; a non-finite step time fails G3; a non-finite ``monitor_acc`` is
no point for the early-stop rule (it judges accuracies). Maxima, medians and means are over the
finite values; :attr:`StabilitySummary.nonfinite_steps` lists the steps that held any.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import AttemptDir
from rlexp.numbers import json_row
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import guard_settings, sop_or_default

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


@dataclass(frozen=True)
class Spike:
    global_step: int
    metric: str
    value: float
    threshold: float


@dataclass(frozen=True)
class StabilitySummary:
    """The report's stability section: spike count, max grad norm, ratio tail indicators."""

    steps: int
    spike_threshold: float
    spikes: tuple[Spike, ...]
    max_grad_norm: float | None
    max_grad_norm_step: int | None
    ratio_max: float | None  # largest importance ratio seen
    log_ratio_abs_p99_max: float | None
    log_ratio_abs_p99_median: float | None
    nonfinite_steps: tuple[int, ...] = ()  # steps whose row holds a NaN/inf (any metric)

    @property
    def spike_count(self) -> int:
        return len(self.spikes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spike_count"] = self.spike_count
        return d


def _all(rows: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of every row holding ``key``, NaN/inf included."""
    return [(int(r["global_step"]), float(r[key])) for r in rows if key in r and r[key] is not None]


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of the finite values of ``key`` (what maxima, medians and means are over)."""
    return [(s, v) for s, v in _all(rows, key) if math.isfinite(v)]


def _nonfinite(rows: Sequence[Mapping[str, Any]], key: str) -> list[int]:
    """The steps where ``key`` is NaN/inf."""
    return [s for s, v in _all(rows, key) if not math.isfinite(v)]


def nonfinite_steps(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The steps whose row holds a NaN/inf in any metric."""
    return [int(r["global_step"]) for r in rows
            if any(isinstance(v, float) and not math.isfinite(v) for v in r.values())]


def spikes(rows: Sequence[Mapping[str, Any]], threshold: float | None = None, *,
           sop: Sop | None = None) -> list[Spike]:  # fmt: skip
    """Steps whose grad norm is strictly above ``threshold`` (the SOP's ``guardrails.spikes.grad_norm``),
    or NaN/inf (a divergence: a spike whatever the threshold)."""
    if threshold is None:
        threshold = guard_settings(sop).spikes.grad_norm
    return [Spike(s, "grad_norm", v, threshold) for s, v in _all(rows, "grad_norm")
            if v > threshold or not math.isfinite(v)]


def stability(rows: Sequence[Mapping[str, Any]], threshold: float | None = None, *,
              sop: Sop | None = None) -> StabilitySummary:  # fmt: skip
    if threshold is None:
        threshold = guard_settings(sop).spikes.grad_norm
    grad = _series(rows, "grad_norm")
    ratio = [v for _, v in _series(rows, "ratio_max")]
    p99 = [v for _, v in _series(rows, "log_ratio_abs_p99")]
    top = max(grad, key=lambda sv: sv[1]) if grad else None
    return StabilitySummary(
        steps=len(rows),
        spike_threshold=threshold,
        spikes=tuple(spikes(rows, threshold)),
        max_grad_norm=top[1] if top else None,
        max_grad_norm_step=top[0] if top else None,
        ratio_max=max(ratio) if ratio else None,
        log_ratio_abs_p99_max=max(p99) if p99 else None,
        log_ratio_abs_p99_median=statistics.median(p99) if p99 else None,
        nonfinite_steps=tuple(nonfinite_steps(rows)),
    )


def _gate(name: str, passed: bool | None, reason: str, criteria: str,
          numbers: Mapping[str, Any] | None = None) -> Verdict:
    """An in-run gate's verdict in the one ``guards/`` schema: ``rule`` is the criterion,
    ``notes[0]`` the reason, ``passed`` None while pending."""
    return Verdict(name, passed, criteria, dict(numbers or {}), (reason,))


def smoke_window(smoke_steps: int, planned_steps: int | None) -> int:
    """The global steps G3 watches: the SOP's smoke steps, or the whole run when it plans fewer."""
    if isinstance(planned_steps, int) and not isinstance(planned_steps, bool) and planned_steps >= 1:
        return min(int(smoke_steps), planned_steps)
    return int(smoke_steps)


def planned_global_steps(plan: Mapping[str, Any] | None) -> int | None:
    """The plan's global steps in all (``steps.global_steps_total``), or None."""
    steps = plan.get("steps") if isinstance(plan, Mapping) else None
    total = steps.get("global_steps_total") if isinstance(steps, Mapping) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def g3_smoke(
    rows: Sequence[Mapping[str, Any]],
    *,
    crashed: bool = False,
    exit_code: int | None = None,
    steps: int | None = None,
    max_ratio: float | None = None,
    sop: Sop | None = None,
    planned_steps: int | None = None,
) -> Verdict:
    """G3 (sop/README.md#guardrails): no crash and a stable step time over the first ``steps`` global steps
    (defaults: the SOP's ``guardrails.g3.smoke_steps`` and ``step_time_max_ratio``). ``planned_steps``
    (the plan's global steps in all) caps the window: a run shorter than the smoke window is judged
    over all its steps, not left pending forever."""
    if steps is None or max_ratio is None:
        g3 = guard_settings(sop).g3
        steps = g3.smoke_steps if steps is None else steps
        max_ratio = g3.step_time_max_ratio if max_ratio is None else max_ratio
    steps = smoke_window(steps, planned_steps)
    criteria = f"no crash before step {steps}; step time of steps 2..{steps} within {max_ratio}x their median"
    first = [r for r in rows if int(r["global_step"]) <= steps]
    done = max((int(r["global_step"]) for r in first), default=0)
    if crashed:
        return _gate("g3", False, f"trainer exited with code {exit_code} at step {done}", criteria,
                     {"steps_done": done, "exit_code": exit_code})
    if done < steps:
        return _gate("g3", None, f"{done} of {steps} smoke steps done", criteria, {"steps_done": done})
    bad = [s for s in _nonfinite(first, "step_time_s") if s >= 2]
    if bad:
        return _gate("g3", False, f"step time NaN/inf at step {', '.join(map(str, bad))}", criteria,
                     {"steps_done": done, "nonfinite_step_time_steps": bad})
    times = [v for s, v in _series(first, "step_time_s") if s >= 2]
    if len(times) < 2:
        return _gate("g3", True, "no crash; step_time_s not logged, stability not checked", criteria,
                     {"steps_done": done})
    median = statistics.median(times)
    worst = max(times)
    ratio = worst / median if median > 0 else float("inf")
    details = {"steps_done": done, "median_step_time_s": median, "max_step_time_s": worst,
               "max_over_median": round(ratio, 4) if median > 0 else None}  # JSON has no inf
    if ratio > max_ratio:
        return _gate("g3", False, f"step time blow-up: max {worst:.1f}s is {ratio:.2f}x the median "
                     f"{median:.1f}s", criteria, details)
    return _gate("g3", True, f"no crash; max step time {ratio:.2f}x the median", criteria, details)


def planned_lr(plan: Mapping[str, Any] | None, global_step: int) -> float | None:
    """The ``actor_lr`` the plan expects the trainer to log at ``global_step`` (None: no table)."""
    return planned_lr_table(plan).get(global_step)


_LR_KEYS = ("actor_lr_logged", "lr_mean", "lr", "actor_lr")


def planned_lr_table(plan: Mapping[str, Any] | None) -> dict[int, float]:
    """global_step -> planned logged LR, from the plan's LR table.

    ``rlexp plan`` writes rows of ``rlexp.training.schedule.GlobalStepLR.as_dict()``; ``actor_lr_logged``
    is what the trainer logs (v0.9.x: the mean over the step's micro-batches), so it is the value
    to compare with. The table is found by shape (a list of rows with ``global_step`` and an LR
    key, up to three levels deep) so the plan may nest it where it likes.
    """
    if not plan:
        return {}

    def rows_of(node: Any, depth: int) -> list | None:
        if (isinstance(node, list) and node and all(isinstance(r, Mapping) and "global_step" in r for r in node)
                and any(k in node[0] for k in _LR_KEYS)):
            return node
        if isinstance(node, Mapping) and depth < 3:
            for key in ("lr_schedule", "lr_table", "lr", *node.keys()):
                if key in node:
                    found = rows_of(node[key], depth + 1)
                    if found:
                        return found
        return None

    out: dict[int, float] = {}
    for row in rows_of(plan, 0) or []:
        lr = next((row[k] for k in _LR_KEYS if isinstance(row.get(k), int | float)), None)
        if lr is not None and isinstance(row["global_step"], int):
            out[int(row["global_step"])] = float(lr)
    return out


def g5_runtime(
    rows: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any] | None,
    *,
    at_step: int | None = None,
    lr_tolerance: float | None = None,
    reward_bounds: tuple[float, float] | None = None,
    sop: Sop | None = None,
) -> Verdict:
    """G5 (sop/README.md#guardrails): at step ``at_step`` the logged LR is the planned one and reward is not stuck
    (defaults: the SOP's ``guardrails.g5``; ``reward_bounds`` is (reward_stuck_low, reward_stuck_high))."""
    if at_step is None or lr_tolerance is None or reward_bounds is None:
        g5 = guard_settings(sop).g5
        at_step = g5.at_step if at_step is None else at_step
        lr_tolerance = g5.lr_rel_tolerance if lr_tolerance is None else lr_tolerance
        if reward_bounds is None:
            reward_bounds = (g5.reward_stuck_low, g5.reward_stuck_high)
    reward_low, reward_high = reward_bounds
    criteria = (f"at step {at_step}: |actor_lr / planned - 1| <= {lr_tolerance:g}; mean reward of steps "
                f"1..{at_step} in [{reward_low:g}, {reward_high:g}]")
    row = next((r for r in rows if int(r["global_step"]) == at_step), None)
    if row is None:
        return _gate("g5", None, f"step {at_step} not logged yet", criteria)
    problems: list[str] = []
    details: dict[str, Any] = {}
    expected = planned_lr(plan, at_step)
    logged = row.get("actor_lr")
    details.update(planned_lr=expected, logged_lr=logged)
    if expected is None:
        problems.append("plan has no LR for this step")
    elif logged is None:
        problems.append("actor_lr not logged")
    elif not math.isfinite(float(logged)):
        details["logged_lr"] = None  # guards/*.json are strict JSON
        problems.append(f"actor_lr is {float(logged)}")
    elif expected > 0 and abs(float(logged) / expected - 1.0) > lr_tolerance:
        problems.append(f"actor_lr {float(logged):.3g} is {float(logged) / expected:.0%} of planned {expected:.3g}")
    rewards = [v for s, v in _series(rows, "reward") if s <= at_step]
    if bad := [s for s in _nonfinite(rows, "reward") if s <= at_step]:
        details["reward_nonfinite_steps"] = bad  # a diverged reward is not "not stuck": G5 fails
        problems.append(f"reward NaN/inf at step {', '.join(map(str, bad))}")
    if rewards:
        mean = statistics.fmean(rewards)
        details["reward_mean"] = mean
        if mean < reward_low or mean > reward_high:
            problems.append(f"reward stuck at {mean:.3f}")
    elif not bad:
        problems.append("reward not logged")
    grad = [v for s, v in _series(rows, "grad_norm") if s <= at_step]
    if grad:
        details["grad_norm_max"] = max(grad)
    if problems:
        return _gate("g5", False, "; ".join(problems), criteria, details)
    return _gate("g5", True, f"LR at {float(logged) / expected:.1%} of plan; reward mean "
                 f"{details['reward_mean']:.3f}", criteria, details)


def monitor_points(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """(global_step, monitor_acc) for the steps where the in-run OOD monitor fired (a NaN/inf
    accuracy is no point: the early-stop rule judges accuracies)."""
    return _series(rows, "monitor_acc")


def early_stop_verdict(rows: Sequence[Mapping[str, Any]], sop: Sop | None = None):
    """``rlexp.protocol.gates.early_stop`` on the monitor points of ``rows`` (the SOP in force by default)."""
    from rlexp.protocol.gates import early_stop

    return early_stop(monitor_points(rows), sop_or_default(sop))


def env_error_verdict(rows: Sequence[Mapping[str, Any]], sop: Sop | None = None) -> Verdict:
    """The environment-error stop (``guardrails.env_errors``): ``passed`` (the rule's condition
    met: stop the run) when the mean ``env_errors`` (the share of a step's episodes that ended in an
    environment error) over the last ``window`` logged steps passes ``max_rate``; None until
    ``window`` steps have logged it (and on runs that never do: no environment task). A NaN share
    is no point."""
    settings = guard_settings(sop).env_errors
    criteria = f"mean env_errors of the last {settings.window} steps <= {settings.max_rate}"
    points = _series(rows, "env_errors")
    if len(points) < settings.window:
        return _gate("env_errors", None, f"{len(points)} of {settings.window} steps with env_errors logged",
                     criteria, {"steps": len(points)})
    last = points[-settings.window:]
    rate = sum(v for _, v in last) / len(last)
    numbers = {"rate": rate, "from_step": last[0][0], "to_step": last[-1][0], "max_rate": settings.max_rate}
    if rate > settings.max_rate:
        return _gate("env_errors", True, f"{rate:.0%} of the episodes of steps {last[0][0]}..{last[-1][0]} ended "
                     f"in an environment error (more than {settings.max_rate:.0%})", criteria, numbers)
    return _gate("env_errors", False, f"{rate:.0%} environment errors over steps {last[0][0]}..{last[-1][0]}",
                 criteria, numbers)


@dataclass
class RunMonitor:
    """Stateful monitor of one live run: feed it new rows, read its verdicts.

    ``update`` returns the early-stop verdict, the environment-error stop or the run-health mismatch
    verdict when its rule fires (the caller stops the run), else None; ``guards/mismatch.json``
    follows the mismatch metrics as they come. ``resume_from`` (a resumed launch: the step it
    continues from) makes :meth:`finish` write the resume gate (``guards/resume.json``) over the rows
    this launch logged. The G3/G5 verdicts (``guards/g3.json``, ``guards/g5.json``, pending ones included)
    and the spike log are written under the attempt directory; a verdict file is rewritten only
    when its verdict changes, not on every poll. ``sop`` (default: the SOP in force, loaded once
    here) gives every number; ``spike_threshold`` overrides its ``guardrails.spikes.grad_norm``.
    """

    attempt_dir: Path
    plan: Mapping[str, Any] | None = None
    sop: Any = None
    spike_threshold: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    logged_spikes: set[int] = field(default_factory=set)
    stopped: Any = None
    written: dict[str, dict[str, Any]] = field(default_factory=dict)  # gate name -> verdict last on disk
    resume_from: int | None = None
    logged_since_resume: list[dict[str, Any]] = field(default_factory=list)  # as this launch logged them

    def __post_init__(self) -> None:
        self.sop = sop_or_default(self.sop)
        if self.spike_threshold is None:
            self.spike_threshold = self.sop.guardrails.spikes.grad_norm

    def _write(self, verdict: Verdict) -> bool:
        """Write ``guards/<name>.json`` unless it already holds this verdict; True when written."""
        from rlexp.experiment.files import read_json
        from rlexp.experiment.verdicts import write_verdict

        doc = json.loads(json.dumps(verdict.to_dict()))  # as it reads back from disk
        if verdict.name not in self.written:
            path = AttemptDir(self.attempt_dir).guards.verdict(verdict.name)
            if path.exists():  # a resumed run: the previous launch's verdict counts as written
                with contextlib.suppress(InputError):  # unreadable: rewrite it
                    self.written[verdict.name] = read_json(path)
        last = self.written.get(verdict.name)
        if last == doc:
            return False
        if verdict.passed is None and isinstance(last, dict) and last.get("passed") is not None:
            return False  # a resume before the gate's step does not erase a decided verdict (e.g. a crash)
        write_verdict(self.attempt_dir, verdict)
        self.written[verdict.name] = doc
        return True

    def update(self, new_rows: Sequence[Mapping[str, Any]]):
        from rlexp.experiment.files import append_jsonl

        # keyed by step: a re-read or a resumed trainer's rewritten rows replace, never duplicate
        by_step = {int(r["global_step"]): r for r in self.rows}
        by_step.update({int(r["global_step"]): dict(r) for r in new_rows})
        self.rows = [by_step[s] for s in sorted(by_step)]
        for spike in spikes(new_rows, self.spike_threshold):
            if spike.global_step not in self.logged_spikes:
                append_jsonl(AttemptDir(self.attempt_dir).launch.spikes, json_row(asdict(spike)))
                self.logged_spikes.add(spike.global_step)
        self._write(g3_smoke(self.rows, sop=self.sop, planned_steps=planned_global_steps(self.plan)))
        self._write(g5_runtime(self.rows, self.plan, sop=self.sop))
        if self.resume_from is not None:
            self.logged_since_resume.extend(dict(r) for r in new_rows)
        # judged at each new step in turn: the stop names the first step where the rate passed,
        # however the rows were batched by the poll
        for step in sorted({int(r["global_step"]) for r in new_rows if "env_errors" in r}):
            if self.stopped is not None:
                break
            verdict = env_error_verdict([r for r in self.rows if int(r["global_step"]) <= step], self.sop)
            if verdict.passed:
                self.stopped = verdict
                return verdict
        mismatch = self._health_mismatch(new_rows)
        if mismatch is not None:
            return mismatch
        if self.stopped is None and monitor_points(new_rows):
            verdict = early_stop_verdict(self.rows, self.sop)
            if verdict.passed:
                self.stopped = verdict
                return verdict
        return None

    def _health_mismatch(self, new_rows: Sequence[Mapping[str, Any]]) -> Verdict | None:
        """guards/mismatch.json once the trainer logs a mismatch metric; the verdict when its stop rule
        fires (the run is stopped as for the early-stop rule)."""
        from rlexp.protocol.run_health import MISMATCH_METRICS, mismatch_verdict

        if not any(m in r for r in new_rows for m in MISMATCH_METRICS):
            return None
        verdict = mismatch_verdict(self.rows, self.sop.run_health.mismatch)
        self._write(verdict)
        if verdict.passed is False and self.stopped is None:
            self.stopped = verdict
            return verdict
        return None

    def finish(self) -> list[Verdict]:
        """At the end of a launch: the resume gate over what a resumed launch logged (written to
        guards/resume.json), or nothing for a first launch."""
        if self.resume_from is None:
            return []
        from rlexp.protocol.run_health import Resume, resume_verdict

        before = [r for r in self.rows if int(r["global_step"]) <= self.resume_from]
        verdict = resume_verdict([before, self.logged_since_resume], [Resume(self.resume_from)],
                                 lambda step: planned_lr(self.plan, step), self.sop.run_health.resume,
                                 planned_steps=planned_global_steps(self.plan))
        self._write(verdict)
        return [verdict]

    def record_crash(self, exit_code: int) -> Verdict:
        done = max((int(r["global_step"]) for r in self.rows), default=0)
        planned = planned_global_steps(self.plan)
        verdict = g3_smoke(self.rows, crashed=done < smoke_window(self.sop.guardrails.g3.smoke_steps, planned),
                           exit_code=exit_code, sop=self.sop, planned_steps=planned)
        self._write(verdict)
        return verdict


def read_plan(attempt_dir: str | Path) -> dict[str, Any] | None:
    """plan.json, strictly (the layout's typed reader), or None when there is none yet."""
    return AttemptDir(attempt_dir).read_plan()
