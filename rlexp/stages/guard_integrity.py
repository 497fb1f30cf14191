"""G1 pipeline integrity (sop/README.md#guardrails): two eval paths on one checkpoint (adapter vs merged
weights, or in-run vs post-hoc record files) agree exactly, or differ only by a *named*
nondeterminism source with no change in correctness (an adapter applied on top of weights that
already contained it once inflated numbers by 2–7pp). On an environment task every turn is
compared, and :func:`episode_integrity` is G0 and G1 per turn between two paths' token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment import verdicts
from rlexp.experiment.layout import ADAPTER_PATTERN, AttemptDir, checkpoint_name, checkpoint_step
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import guard_settings

if TYPE_CHECKING:
    from rlexp.spec.sop import Sop


def pipeline_integrity(
    records_a: Sequence[dict[str, Any]],
    records_b: Sequence[dict[str, Any]],
    *,
    nondeterminism: str | None = None,
    labels: tuple[str, str] = ("a", "b"),
    max_discordant: int | None = None,
    sop: Sop | None = None,
) -> Verdict:
    """G1 from two record lists on the same problems.

    Passes when every output is identical; or, when a nondeterminism source is *named*, when the
    outputs differ but no more than ``max_discordant`` problems change correctness (the SOP's
    ``guardrails.g1.max_discordant``: 0 discordants, sop/README.md#guardrails)."""
    if max_discordant is None:
        max_discordant = guard_settings(sop).g1.max_discordant
    a = {r["problem_hash"]: r for r in records_a}
    b = {r["problem_hash"]: r for r in records_b}
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        raise InputError(None, "problem_hash", f"G1 needs the same problems on both paths ({only_a} only in "
                         f"{labels[0]}, {only_b} only in {labels[1]})")
    discordant = [h for h in a if int(bool(a[h]["correct"])) != int(bool(b[h]["correct"]))]
    text_diff = [h for h in a if _compared_output(a[h]) != _compared_output(b[h])]
    acc_a = sum(int(bool(r["correct"])) for r in a.values()) / len(a) if a else 0.0
    acc_b = sum(int(bool(r["correct"])) for r in b.values()) / len(b) if b else 0.0
    exact = not text_diff
    passed = bool(a) and (exact or (nondeterminism is not None and len(discordant) <= max_discordant))
    notes = []
    if text_diff and nondeterminism is None:
        notes.append("outputs differ and no nondeterminism source was named: treat as a pipeline bug")
    if text_diff and nondeterminism is not None:
        notes.append(f"outputs differ on {len(text_diff)} problems; named source: {nondeterminism}")
    return Verdict(
        name="g1",
        passed=passed,
        rule="identical outputs, or differences only from a named nondeterminism source with "
        f"<= {max_discordant} discordants",
        numbers={"problems": len(a), "discordant": len(discordant), "output_differences": len(text_diff),
                 f"acc_{labels[0]}": acc_a, f"acc_{labels[1]}": acc_b, "delta_pp": 100 * (acc_b - acc_a),
                 "nondeterminism": nondeterminism},
        notes=tuple(notes),
        details=tuple({"problem_hash": h, "correct_" + labels[0]: a[h]["correct"],
                       "correct_" + labels[1]: b[h]["correct"]} for h in discordant[:50]),
    )


def _compared_output(record: dict[str, Any]) -> Any:
    """What G1 compares of a record: its output; for an episode record every turn (action and
    the feedback it got), so two paths that end alike after different turns still differ."""
    trajectory = record.get("trajectory")
    if isinstance(trajectory, dict) and isinstance(trajectory.get("turns"), list):
        turns = [(t.get("action"), t.get("feedback")) for t in trajectory["turns"] if isinstance(t, dict)]
        return record.get("output"), turns
    return record.get("output")


def turn_segments(token_ids: Sequence[int], agent_mask: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """``(input ids, generated ids)`` of each model turn of an episode: the maximal runs of agent
    tokens, each with every id before it (the prompt, earlier turns and feedback) as its input."""
    out, start = [], None
    for i, m in enumerate([*agent_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((list(token_ids[:start]), list(token_ids[start:i])))
            start = None
    return out


def episode_integrity(
    episodes_a: Sequence[dict[str, Any]],
    episodes_b: Sequence[dict[str, Any]],
    *,
    labels: tuple[str, str] = ("a", "b"),
    min_identical: float = 0.99,
) -> Verdict:
    """G0 and G1 per turn between two paths that played the same episodes (two engines, say),
    from ``{"problem_hash", "token_ids", "agent_mask"}`` of each episode (a trajectory's ids).

    Walking each pair of episodes turn by turn while they agree: every turn's input ids must be
    equal on both paths (G0 per turn: the feedback rendered and tokenised alike); on the episodes
    whose first turn agrees every turn must be token-equal (G1 per turn); and at least
    ``min_identical`` of all episodes must be identical. A first turn that differs is the
    engines' numerical noise on the first decode (reported, not a per-turn failure)."""
    a = {e["problem_hash"]: e for e in episodes_a}
    b = {e["problem_hash"]: e for e in episodes_b}
    if set(a) != set(b) or len(a) != len(episodes_a) or len(b) != len(episodes_b):
        raise InputError(None, "problem_hash", "episode G0/G1 needs the same episodes, once each, on both paths")
    identical = first_agree = later_diff = input_diff = turns_compared = 0
    details = []
    for h in sorted(a):
        sa, sb = (turn_segments(e["token_ids"], e["agent_mask"]) for e in (a[h], b[h]))
        same = list(a[h]["token_ids"]) == list(b[h]["token_ids"]) and list(a[h]["agent_mask"]) == list(b[h]["agent_mask"])
        identical += same
        first = bool(sa and sb and sa[0] == sb[0])
        first_agree += first
        differing_turn = None
        for k, (ta, tb) in enumerate(zip(sa, sb, strict=False)):
            turns_compared += 1
            if ta[0] != tb[0]:
                input_diff += 1
                differing_turn = k
                break
            if ta[1] != tb[1]:
                differing_turn = k
                break
        if first and not same:
            later_diff += 1
        if not same:
            details.append({"problem_hash": h, "first_differing_turn": differing_turn,
                            f"turns_{labels[0]}": len(sa), f"turns_{labels[1]}": len(sb)})
    n = len(a)
    rate = identical / n if n else 0.0
    passed = n > 0 and input_diff == 0 and later_diff == 0 and rate >= min_identical
    return Verdict(
        name="g1",
        passed=passed,
        rule=f"per turn: equal input ids (G0) and, on episodes whose first turn agrees, token-equal turns (G1); "
        f">= {min_identical:.0%} of episodes identical",
        numbers={"episodes": n, "identical_episodes": identical, "identical_rate": rate,
                 "first_turn_agrees": first_agree, "later_turn_differences": later_diff,
                 "turn_input_differences": input_diff, "turns_compared": turns_compared},
        notes=tuple(f"{k} check failed" for k, bad in (("turn input (G0)", input_diff), ("later turn (G1)", later_diff),
                                                        ("identical rate", rate < min_identical)) if bad),
        details=tuple(details[:50]),
    )


def run_g1(
    attempt: str | Path,
    *,
    checkpoint: str | None = None,
    set_role: str | None = None,
    limit: int = 200,
    records: Sequence[str | Path] | None = None,
    nondeterminism: str | None = None,
    sop: Sop | None = None,
) -> Verdict:
    """G1 on an attempt: two given record files (in-run vs post-hoc), or adapter vs merged weights
    on ``checkpoint`` (default: the earliest saved, the smoke-run step) with the local engine."""
    from rlexp.experiment.records import read_records
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    attempt_dir = Path(att.attempt_dir)
    if records:
        if len(records) != 2:
            raise InputError(None, "--records", "give exactly two record files")
        verdict = pipeline_integrity(read_records(records[0]), read_records(records[1]),
                                     nondeterminism=nondeterminism, labels=("first", "second"), sop=sop)
        verdict = replace(verdict, numbers={**verdict.numbers, "paths": [str(p) for p in records]})
    else:
        from rlexp.evaluation.engines.base import Decoding
        from rlexp.evaluation.engines.local import LocalEngine
        from rlexp.stages.eval_records import Target, eval_records, load_problems

        saved = AttemptDir(attempt_dir).checkpoint_files.adapters()
        if not saved:
            raise InputError(AttemptDir(attempt_dir).checkpoint_files.dir, ADAPTER_PATTERN, "no checkpoint to check")
        name = checkpoint or checkpoint_name(min(saved))
        step = checkpoint_step(name)
        if step is None or step not in saved:
            raise InputError(AttemptDir(attempt_dir).checkpoint_files.dir, name, "no such saved checkpoint")
        role = set_role or ("ood_monitor" if att.datasets.get("ood_monitor") is not None
                            and att.datasets["ood_monitor"].path is not None else "ood_primary")
        loaded = load_problems(att, role, limit)
        if loaded is None:
            raise InputError(att.spec_path, f"datasets.{role}", "no path")
        problems, _, digest = loaded
        base = att.base_model()
        target = Target(name, saved[step])
        decoding = Decoding.for_eval(att.eval)
        suffix = att.datasets[role].prompt_suffix or ""
        paths = {}
        for label, merge in (("adapter", False), ("merged", True)):
            out = AttemptDir(attempt_dir).guards.g1_records(name, role, label)
            # one engine at a time, closed before the next loads: never two models in memory
            with LocalEngine(base, {name: saved[step]}, merge=merge) as engine:
                eval_records(engine, engine.tokenizer, attempt_dir=attempt_dir, set_role=role, problems=problems,
                             dataset_sha256=digest, targets=[target], base=base, decoding=decoding, suffix=suffix,
                             grading=att.datasets[role].answer_mode,
                             records_path=lambda _t, out=out: out, extra_meta={"g1_path": label})
            paths[label] = out
        verdict = pipeline_integrity(read_records(paths["adapter"]), read_records(paths["merged"]),
                                     nondeterminism=nondeterminism, labels=("adapter", "merged"), sop=sop)
        verdict = replace(verdict, numbers={**verdict.numbers, "checkpoint": name, "set": role,
                                            "paths": [str(p) for p in paths.values()]})
    verdicts.write_verdict(attempt_dir, verdict)
    return verdict
