"""The guards on Baseline-S0's records on the primary set (sop/README.md#guardrails).

- G2 parser ceiling: on 200 baseline problems boxed ≥ 98%, parse failures (none + unparsed) = 0%,
  truncation ≤ 5% (on an environment task: the final answer of the greedy episodes).
- G4 pass@k headroom: k=8 samples at temperature 0.6 on the problems the baseline gets wrong;
  pass@8 ≥ 15% means GRPO has signal to learn from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment import verdicts
from rlexp.experiment.layout import AttemptDir
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import guard_settings

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.spec.sop import G2Settings, G4Settings, Sop


def parser_ceiling(records: Sequence[dict[str, Any]], t: G2Settings | None = None, *,
                   sop: Sop | None = None) -> Verdict:  # fmt: skip
    """G2 on Baseline-S0 records with the SOP's ``guardrails.g2`` numbers (``t`` overrides them)."""
    from rlexp.evaluation.answers import PARSE_FAILURES
    from rlexp.experiment.records import summarize

    t = t if t is not None else guard_settings(sop).g2
    s = summarize(list(records))
    # a parse failure is "none" (nothing numeric) or "unparsed" (an answer that is not one number)
    boxed, trunc = s.parse_rate("boxed"), s.truncation_rate
    fail = sum(s.parse_rate(m) for m in PARSE_FAILURES)
    checks = {"boxed": boxed >= t.min_boxed, "fail": fail <= t.max_fail, "truncation": trunc <= t.max_truncation}
    return Verdict(
        name="g2",
        passed=s.n > 0 and all(checks.values()),
        rule=f"boxed >= {t.min_boxed:.0%}, parse failures <= {t.max_fail:.0%}, "
        f"truncation (finish_reason=length) <= {t.max_truncation:.0%}",
        numbers={"problems": s.n, "boxed_rate": boxed, "last_number_rate": s.parse_rate("last_number"),
                 "unparsed_rate": s.parse_rate("unparsed"), "fail_rate": fail, "truncation_rate": trunc, "accuracy": s.accuracy},
        notes=tuple(f"{k} check failed" for k, ok in checks.items() if not ok),
    )


def _baseline_records(att: Attempt, limit: int | None, *, show_progress: bool = False) -> list[dict[str, Any]]:
    """Baseline-S0 greedy records on the primary set, through the normal eval pipeline (written to
    ``eval/baseline_s0/ood_primary.jsonl``, so a later ``rlexp eval`` resumes from them)."""
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.experiment.records import BASELINE_S0, read_records
    from rlexp.stages.eval_records import (
        Target,
        build_engine,
        check_record_files,
        engine_chunk,
        eval_lock,
        eval_records,
        load_problems,
    )

    loaded = load_problems(att, "ood_primary", limit)
    if loaded is None:
        raise InputError(att.spec_path, "datasets.ood_primary", "no path")
    problems, _, digest = loaded
    base = att.base_model()
    target = Target(BASELINE_S0, None)
    engine, tokenizer = build_engine(att, base, [target])
    where = {"attempt_dir": Path(att.attempt_dir), "set_role": "ood_primary", "dataset_sha256": digest,
             "targets": [target], "base": base, "decoding": Decoding.for_eval(att.eval),
             "suffix": att.datasets["ood_primary"].prompt_suffix or "",
             "grading": att.datasets["ood_primary"].answer_mode}  # eval resumes this file
    with engine:
        check_record_files(engine, tokenizer, **where)  # bad records refused before any write (lock, cache)
        with eval_lock(Path(att.attempt_dir)):
            results = eval_records(engine, tokenizer, problems=problems, chunk=engine_chunk(engine), **where)
    wanted = {p["problem_hash"] for p in problems}
    return [r for r in read_records(results[0][1].path) if r["problem_hash"] in wanted]


def run_g2(attempt: str | Path, problems: int | None = None, *, sop: Sop | None = None) -> Verdict:
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    g2 = guard_settings(sop).g2
    if att.environment is not None:  # episodes: G2 grades each episode's final answer
        from rlexp.stages.evaluate_env import baseline_episode_records

        records = baseline_episode_records(att, problems or g2.problems)
    else:
        records = _baseline_records(att, problems or g2.problems)
    verdict = parser_ceiling(records, g2)
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict


def passk_headroom(sample_records: Sequence[dict[str, Any]], k: int, t: G4Settings | None = None, *,
                   sop: Sop | None = None) -> Verdict:  # fmt: skip
    """Mean unbiased pass@k (Chen et al. 2021) over records carrying ``n`` and ``num_correct``,
    against the SOP's ``guardrails.g4`` bar (``t`` overrides it)."""
    from rlexp.stats import pass_at_k

    t = t if t is not None else guard_settings(sop).g4

    values = []
    for r in sample_records:
        n, c = r.get("n"), r.get("num_correct")
        if not isinstance(n, int) or not isinstance(c, int) or n < k:
            raise InputError(None, "n", f"record {str(r.get('problem_hash'))[:12]} has no {k} graded samples")
        values.append(pass_at_k(n, c, k))
    mean = sum(values) / len(values) if values else 0.0
    return Verdict(
        name="g4",
        passed=bool(values) and mean >= t.min_pass_at_k,
        rule=f"pass@{k} (temperature {t.temperature}) on baseline-wrong problems >= {t.min_pass_at_k:.0%}",
        numbers={"problems": len(values), "k": k, f"pass_at_{k}": mean,
                 "any_correct": sum(1 for v in values if v > 0)},
        notes=() if values else ("the baseline got every problem right: no headroom set to sample",),
    )


def run_g4(attempt: str | Path, *, k: int | None = None, limit: int | None = None,
           sop: Sop | None = None) -> Verdict:  # fmt: skip
    """Sample k at the SOP's temperature (T=0.6) on the baseline's wrong problems (from its greedy
    records on the primary set; those are produced first if missing) into ``guards/g4_samples.jsonl``."""
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.experiment.records import BASELINE_S0, read_records
    from rlexp.spec import load_attempt
    from rlexp.stages.eval_records import Target, build_engine, eval_records, load_problems

    att = load_attempt(attempt)
    g4 = guard_settings(sop).g4
    k = k or g4.k
    greedy = _baseline_records(att, None)
    wrong = {r["problem_hash"] for r in greedy if not r["correct"]}
    loaded = load_problems(att, "ood_primary")
    assert loaded is not None  # _baseline_records checked it
    problems = [p for p in loaded[0] if p["problem_hash"] in wrong][:limit]
    base = att.base_model()
    target = Target(BASELINE_S0, None)
    engine, tokenizer = build_engine(att, base, [target])
    out = AttemptDir(att.attempt_dir).guards.g4_samples
    with engine:
        eval_records(engine, tokenizer, attempt_dir=Path(att.attempt_dir), set_role="ood_primary",
                     problems=problems, dataset_sha256=loaded[2], targets=[target], base=base,
                     decoding=Decoding.for_eval(att.eval, samples=k, temperature=g4.temperature),
                     suffix=att.datasets["ood_primary"].prompt_suffix or "",
                     grading=att.datasets["ood_primary"].answer_mode, records_path=lambda _t: out)
    wanted = {p["problem_hash"] for p in problems}
    verdict = passk_headroom([r for r in read_records(out) if r["problem_hash"] in wanted], k, g4)
    verdict = replace(verdict, numbers={**verdict.numbers, "baseline_wrong": len(wrong),
                                        "baseline_problems": len(greedy)})
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict
