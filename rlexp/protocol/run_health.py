"""Run health from the trainers' own logs (pure; no I/O): training–inference mismatch, resume
integrity, off-policy staleness.

Each check reads canonical metric rows (``metrics.jsonl``, or any log ``rlexp ingest`` reads) and the
SOP's ``run_health`` numbers, and says what it found as a :class:`~rlexp.protocol.verdict.Verdict`:

- **mismatch** (:func:`mismatch_verdict`): the rollout engine's log-probs against the trainer's,
  ``rollout_kl`` (OpenRLHF's ``vllm_kl``, verl's ``rollout_corr/kl``: the token mean of
  log π_rollout − log π_train) and ``rollout_logp_diff_mean`` (TRL's and verl's mean |Δ log p|).
  A logged value above the warning level is a warning at that step; above the stop level on
  ``stop_after_steps`` logged steps in a row, the rule fires (the in-run stop, and a failed verdict).
  A run whose trainer logs neither is pending, never a pass: nothing was measured.
- **resume** (:func:`resume_verdict`): after each resume, the logged steps continue the resume
  point (the first step logged is the one after it; none is skipped or logged twice), the logged LR
  at those steps is the plan's (within ``lr_rel_tolerance``: a schedule that restarted shows its
  warm-up LR where the plan has its peak), and the run did not "resume" into zero steps.
- **staleness** (:func:`staleness_verdict`): how many policy versions behind each batch was
  generated, from the trainer's own metric (``policy_lag_mean``/``policy_lag_max``) against what the
  launch settings allow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlexp.numbers import json_number
from rlexp.protocol.verdict import Verdict

# canonical metric -> (warning level, stop level) field names of the SOP's run_health.mismatch
MISMATCH_LEVELS = {"rollout_kl": ("kl_warn_above", "kl_stop_above"),
                   "rollout_logp_diff_mean": ("logp_diff_warn_above", "logp_diff_stop_above")}
MISMATCH_METRICS = tuple(MISMATCH_LEVELS)
WORST_STEPS = 5  # how many of the worst steps a verdict lists


@dataclass(frozen=True)
class Resume:
    """One resume of a run: the step it continued from (0: it started over)."""

    from_step: int


def _values(rows: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    out = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append((int(row["global_step"]), float(value)))
    return out


def mismatch_verdict(rows: Sequence[Mapping[str, Any]], settings: Any) -> Verdict:
    """The mismatch rule on ``rows`` with the SOP's ``run_health.mismatch`` (``settings``)."""
    rule = (f"rollout_kl > {settings.kl_warn_above:g} or rollout_logp_diff_mean > {settings.logp_diff_warn_above:g} "
            f"at a step: a warning; rollout_kl > {settings.kl_stop_above:g} or rollout_logp_diff_mean > "
            f"{settings.logp_diff_stop_above:g} on {settings.stop_after_steps} logged steps in a row: stop")
    series = {m: _values(rows, m) for m in MISMATCH_METRICS}
    logged = [m for m, values in series.items() if values]
    if not logged:
        return Verdict("mismatch", None, rule, {"metrics": []},
                       ("the trainer logged no mismatch metric (rollout_kl, rollout_logp_diff_mean): nothing "
                        "was measured; see docs/run-health.md for the setting that makes each trainer log it",))
    warnings: list[dict[str, Any]] = []
    stop: dict[str, Any] | None = None
    worst: dict[str, list[tuple[int, float]]] = {}
    for metric in logged:
        warn_at, stop_at = (getattr(settings, f) for f in MISMATCH_LEVELS[metric])
        run: list[int] = []
        for step, value in series[metric]:
            bad = not math.isfinite(value) or value > stop_at
            if bad or value > warn_at:
                warnings.append({"step": step, "metric": metric, "value": json_number(value),
                                 "level": "stop" if bad else "warning"})
            run = run + [step] if bad else []
            if stop is None and len(run) >= settings.stop_after_steps:
                stop = {"step": step, "metric": metric, "value": json_number(value), "threshold": stop_at,
                        "since_step": run[0]}
        ranked = sorted(series[metric], key=lambda sv: (-sv[1] if math.isfinite(sv[1]) else -math.inf, sv[0]))
        worst[metric] = ranked[:WORST_STEPS]
    warnings.sort(key=lambda w: (w["step"], w["metric"]))
    numbers = {"metrics": logged, "steps": {m: len(series[m]) for m in logged},
               "max": {m: max((v for _, v in series[m] if math.isfinite(v)), default=None) for m in logged},
               "worst_steps": {m: [[s, json_number(v)] for s, v in worst[m]] for m in logged},
               "warning_steps": sorted({w["step"] for w in warnings}), "stop": stop}
    if stop is not None:
        note = (f"{stop['metric']} above {stop['threshold']:g} on {settings.stop_after_steps} logged steps in a row "
                f"(steps {stop['since_step']}..{stop['step']}; {stop['value']} at step {stop['step']}): the rollout "
                "engine and the trainer disagree on the policy")
        return Verdict("mismatch", False, rule, numbers, (note,), tuple(warnings))
    if warnings:
        first = warnings[0]
        note = (f"{len(numbers['warning_steps'])} step(s) above the warning level, first at step {first['step']} "
                f"({first['metric']} {first['value']})")
        return Verdict("mismatch", True, rule, numbers, (note,), tuple(warnings), severity="warning")
    return Verdict("mismatch", True, rule, numbers)


def resume_verdict(segments: Sequence[Sequence[Mapping[str, Any]]], resumes: Sequence[Resume],
                   planned_lr: Callable[[int], float | None], settings: Any, *,
                   planned_steps: int | None = None) -> Verdict:
    """The resume gate over a run written in ``segments`` (the rows each launch logged, in order; one
    segment per launch) with the ``resumes`` that started segments 2, 3, ...; ``planned_lr(step)``
    is the plan's LR at a step (None where the plan has none)."""
    tol = settings.lr_rel_tolerance
    rule = (f"after each resume: the first logged step is the resume point + 1, no step skipped or repeated, "
            f"the logged actor_lr within {tol:.2%} of the plan's at every step, and steps are logged")
    if not resumes:
        return Verdict("resume", None, rule, {"resumes": 0}, ("the run was never resumed",))
    problems: list[str] = []
    checked: list[dict[str, Any]] = []
    for resume, rows in zip(resumes, segments[1:], strict=False):
        steps = [int(r["global_step"]) for r in rows]
        entry: dict[str, Any] = {"from_step": resume.from_step, "first_step": steps[0] if steps else None,
                                 "steps": len(steps)}
        if not steps:
            if planned_steps is None or resume.from_step < planned_steps:
                problems.append(f"the resume from step {resume.from_step} logged no step")
        else:
            if steps[0] != resume.from_step + 1:
                problems.append(f"the resume from step {resume.from_step} logged step {steps[0]} first "
                                f"(expected {resume.from_step + 1})")
            gaps = [(a, b) for a, b in zip(steps, steps[1:], strict=False) if b != a + 1]
            if gaps:
                a, b = gaps[0]
                problems.append(f"after the resume from step {resume.from_step}: step {a} then {b}")
            for row in rows:
                step, lr = int(row["global_step"]), row.get("actor_lr")
                want = planned_lr(step)
                if not isinstance(lr, int | float) or isinstance(lr, bool) or want is None:
                    continue
                if not math.isfinite(float(lr)) or abs(float(lr) - want) > tol * abs(want):
                    entry["lr_mismatch"] = {"step": step, "logged": float(lr), "planned": want}
                    problems.append(f"after the resume from step {resume.from_step}: the LR at step {step} is "
                                    f"{float(lr):.6g}, the plan's is {want:.6g} (the schedule restarted?)")
                    break
        checked.append(entry)
    numbers = {"resumes": len(resumes), "checked": checked}
    if problems:
        return Verdict("resume", False, rule, numbers, tuple(problems))
    return Verdict("resume", True, rule, numbers,
                   (f"{len(resumes)} resume(s): the steps and the LR continue the plan",))


def expected_lag(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a trainer's launch settings allow: ``{"mode": ..., "max_versions": int | None}`` from the
    keys the trainer's package reads (``async``: whether generation runs ahead of training,
    ``queue``: how many batches ahead it may run)."""
    if not settings.get("async"):
        return {"mode": "synchronous", "max_versions": 0}
    queue = settings.get("queue")
    return {"mode": str(settings.get("mode") or "asynchronous"),
            "max_versions": int(queue) if isinstance(queue, int) and not isinstance(queue, bool) else None}


def staleness_verdict(rows: Sequence[Mapping[str, Any]], expected: Mapping[str, Any], settings: Any) -> Verdict:
    """Observed policy lag (the trainer's own metric) against ``expected`` (:func:`expected_lag`) and the
    SOP's ``run_health.staleness.warn_above_versions``."""
    limit = settings.warn_above_versions
    rule = f"policy lag (versions behind) at most {limit}, and within what the launch settings allow"
    lag_max, lag_mean = _values(rows, "policy_lag_max"), _values(rows, "policy_lag_mean")
    numbers: dict[str, Any] = {"expected": dict(expected)}
    if not lag_max and not lag_mean:
        if expected.get("max_versions") == 0:
            return Verdict("staleness", True, rule, numbers, ("synchronous: every batch comes from the current policy",))
        return Verdict("staleness", None, rule, numbers,
                       ("asynchronous, but the trainer logged no policy lag metric: nothing was measured",))
    series = lag_max or lag_mean
    worst_step, worst = max(series, key=lambda sv: (sv[1], -sv[0]))
    numbers.update({"observed_max": worst, "observed_max_step": worst_step,
                    "observed_mean": (sum(v for _, v in lag_mean) / len(lag_mean)) if lag_mean else None})
    allowed = expected.get("max_versions")
    notes = []
    if allowed is not None and worst > allowed:
        notes.append(f"a batch {worst:g} versions behind at step {worst_step}: more than the launch settings "
                     f"allow ({allowed})")
    if worst > limit:
        notes.append(f"a batch {worst:g} versions behind at step {worst_step} (the SOP warns above {limit})")
    if notes:
        return Verdict("staleness", True, rule, numbers, tuple(notes), severity="warning")
    return Verdict("staleness", True, rule, numbers)


def merge_resumed(runs: Sequence[Sequence[Mapping[str, Any]]]) -> tuple[list[dict[str, Any]], list[Resume]] | None:
    """The runs of one log (its step numbers restart: rlexp.training.metric_logs' runs) as one
    resumed run: each later run continues from a checkpoint (its first step above 1), its rows replacing
    those of the earlier runs from that step on. None when a later run starts over at step 1 or 0 (a new
    run, or a resume that lost its checkpoint: which, the log cannot say)."""
    kept = [list(r) for r in runs if r]
    resumes = []
    merged: dict[int, dict[str, Any]] = {}
    for i, rows in enumerate(kept):
        first = int(rows[0]["global_step"])
        if i and first <= 1:
            return None
        if i:
            resumes.append(Resume(from_step=first - 1))
            merged = {s: r for s, r in merged.items() if s < first}
        merged.update({int(r["global_step"]): dict(r) for r in rows})
    return [merged[s] for s in sorted(merged)], resumes


def health_of_log(runs: Sequence[Sequence[Mapping[str, Any]]], sop: Any, *,
                  planned_lr: Callable[[int], float | None] | None = None, lag: Mapping[str, Any] | None = None,
                  planned_steps: int | None = None) -> list[Verdict]:
    """The three run-health verdicts of a run known only by its log (``rlexp import-run``, ``rlexp
    ingest``): mismatch over the merged rows, resume over the runs the log holds (the LR checked where a
    plan gives ``planned_lr``), staleness against ``lag`` (the attempt's launch settings, when known)."""
    kept = [list(r) for r in runs if r]
    merged = merge_resumed(kept)
    rows = merged[0] if merged else [r for run in kept for r in run]
    verdicts = [mismatch_verdict(rows, sop.run_health.mismatch)]
    settings = sop.run_health.resume
    if merged is None:
        starts = ", ".join(str(int(run[0]["global_step"])) for run in kept)
        verdicts.append(Verdict("resume", False, "a resumed run continues from a checkpoint: its first step is above 1",
                                {"runs": len(kept)},
                                (f"the step numbers restart at 1 (runs starting at steps {starts}): a new run, or "
                                 "a resume that started over",)))
    else:
        resume = resume_verdict(kept, merged[1], planned_lr or (lambda step: None), settings,
                                planned_steps=planned_steps)
        if planned_lr is None and merged[1]:
            resume = replace(resume, notes=(*resume.notes, "no plan: the LR after each resume was not checked "
                                            "(run `rlexp plan` on the attempt first)"))
        verdicts.append(resume)
    verdicts.append(staleness_verdict(rows, expected_lag(lag or {}), sop.run_health.staleness))
    return verdicts


def health_status(verdict: Verdict) -> str:
    """PASS, FAIL or PENDING as any verdict's, and WARN for one that passed with a warning."""
    return "WARN" if verdict.passed and verdict.severity == "warning" else verdict.status


def health_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """One line per run-health verdict, as `rlexp import-run` and `rlexp ingest` print them: the
    status (:func:`health_status`), the check, the first note."""
    return [f"run health {v.name}: {health_status(v)} - {v.reason}" for v in verdicts]
