"""The SOP's guardrails and its parser audit (sop/README.md), each a verdict in ``ATTEMPT/guards/<name>.json``.

- G0 prompt parity: the training path's ``input_ids`` equal the eval path's on 5 samples (a suffix
  moved a baseline by 10pp once, docs/plan.md#prompt-suffix-parity; a checkpoint that ships its
  own chat template is the other way to break it).
- G1 pipeline integrity: two eval paths on one checkpoint (adapter vs merged weights, or in-run vs
  post-hoc record files) agree exactly, or differ only by a *named* nondeterminism source with no
  change in correctness (an adapter applied on top of weights that already contained it once
  inflated numbers by 2–7pp).
- G2 parser ceiling: on 200 baseline problems boxed ≥ 98%, parse failures (none + unparsed) = 0%, truncation ≤ 5%.
- G4 pass@k headroom: k=8 samples at temperature 0.6 on the problems the baseline gets wrong;
  pass@8 ≥ 15% means GRPO has signal to learn from.
- Parser audit: 50 incorrect cases drawn for a human, suspicious ones flagged (fallback after a
  bold answer, a trailing number in prose); verdicts give the mis-parse rate; ``decide`` blocks
  when it exceeds the SOP's ``parser_audit.max_misparse_rate`` (5%).

On an environment task the records are episodes: G1 compares every turn (action and feedback),
G2 grades the final answer of Baseline-S0's greedy episodes, the audit's cases carry the whole
trajectory, and :func:`episode_integrity` is G0 and G1 per turn between two paths' token ids.

Every number (5 samples, 0 discordants, 98% / 0% / 5% on 200 problems, k=8 at T=0.6 and 15%,
50 audit cases, 5% mis-parsed) is data: the SOP file's ``guardrails`` and ``parser_audit``
sections, read through :func:`rlexp.spec.sop.load_sop`. Each function takes the values (or a ``sop``)
as optional arguments so a test or a caller can override them; left out, they come from the SOP
in force, read only when a default is needed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment import verdicts
from rlexp.experiment.files import atomic_write_text, iter_jsonl
from rlexp.experiment.layout import ADAPTER_PATTERN, AttemptDir, checkpoint_name, checkpoint_step
from rlexp.protocol.verdict import Verdict
from rlexp.spec.settings import guard_settings, sop_or_default

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt
    from rlexp.spec.sop import G2Settings, G4Settings, Sop


AUDIT_VERDICTS = ("ok", "misparse", "ambiguous")




# --------------------------------------------------------------------------- G0 prompt parity


def prompt_parity(
    train_ids: Sequence[Sequence[int]], eval_ids: Sequence[Sequence[int]], hashes: Sequence[str]
) -> Verdict:
    """G0 from two lists of token-id lists (training path, eval path), one per sample problem."""
    details = []
    for h, a, b in zip(hashes, train_ids, eval_ids, strict=True):
        if list(a) != list(b):
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            details.append({"problem_hash": h, "train_len": len(a), "eval_len": len(b), "first_difference": first})
    n = len(hashes)
    return Verdict(
        name="g0",
        passed=n > 0 and not details,
        rule=f"input_ids identical on all {n} samples (training path vs eval path)",
        numbers={"samples": n, "mismatches": len(details)},
        notes=() if n else ("no samples to compare",),
        details=tuple(details),
    )


def training_path_ids(tokenizer: Any, prompt: str, suffix: str, *, chat_template: bool = True) -> list[int]:
    """How the trainer tokenises a pool prompt. OpenRLHF without ``apply_chat_template`` feeds the
    raw text — exactly the parity break G0 is there to catch."""
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    if not chat_template:
        return list(tokenizer(prompt + suffix, add_special_tokens=True)["input_ids"])
    return encode_prompt(tokenizer, render_prompt(tokenizer, prompt, suffix))


def eval_path_ids(tokenizer: Any, prompt: str, suffix: str) -> list[int]:
    """What every eval engine is given (vLLM as token ids, local as the same ids)."""
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    return encode_prompt(tokenizer, render_prompt(tokenizer, prompt, suffix))


def run_g0(attempt: str | Path, samples: int | None = None, *, sop: Sop | None = None) -> Verdict:
    """G0 on an attempt: pool prompts through the training path (base tokenizer, pool suffix,
    the trainer's chat-template setting) vs the eval path (the tokenizer eval would load — a
    checkpoint's own tokenizer when it ships one — and the eval suffix)."""
    from transformers import AutoTokenizer

    from rlexp.experiment.datasets import read_dataset
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    samples = samples or guard_settings(sop).g0.samples
    base = att.base_model()
    pool = att.datasets.get("pool")
    source = pool if pool is not None and pool.path is not None else att.datasets.get("ood_primary")
    if source is None or source.path is None:
        raise InputError(att.spec_path, "datasets.pool", "no dataset to draw G0 samples from")
    problems = read_dataset(source.path)[:samples]
    from rlexp.models.base_models import loadable

    base = loadable(base, att.spec_path)  # a GGUF file: its converted directory, the tokenizer the runs load
    train_tok = AutoTokenizer.from_pretrained(str(base))
    eval_source = str(base)
    saved = AttemptDir(att.attempt_dir).checkpoints()
    if saved:
        last = saved[max(saved)]
        if (last / "tokenizer_config.json").exists():
            eval_source = str(last)
    eval_tok = AutoTokenizer.from_pretrained(eval_source)
    from rlexp.trainers import rules as trainer_rules

    uses_template = trainer_rules(att.trainer.name).uses_chat_template(att.recipe)
    train_suffix = getattr(source, "prompt_suffix", "") or ""
    primary = att.datasets.get("ood_primary")
    eval_suffix = (primary.prompt_suffix if primary is not None else att.eval.prompt_suffix) or ""
    verdict = prompt_parity(
        [training_path_ids(train_tok, p["prompt"], train_suffix, chat_template=uses_template) for p in problems],
        [eval_path_ids(eval_tok, p["prompt"], eval_suffix) for p in problems],
        [p["problem_hash"] for p in problems],
    )
    notes = list(verdict.notes)
    if train_suffix != eval_suffix:
        notes.append(f"prompt suffix differs: training {train_suffix!r} vs eval {eval_suffix!r}")
    if (train_tok.chat_template or "") != (eval_tok.chat_template or ""):
        notes.append(f"chat template differs: training uses {base}, eval loads {eval_source}")
    if not uses_template:
        notes.append("the trainer does not apply the chat template (recipe.apply_chat_template is off)")
    verdict = Verdict(verdict.name, verdict.passed, verdict.rule,
                           {**verdict.numbers, "train_tokenizer": str(base), "eval_tokenizer": eval_source},
                           tuple(notes), verdict.details)
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict


# --------------------------------------------------------------------------- G1 pipeline integrity


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
        verdict = _with_numbers(verdict, paths=[str(p) for p in records])
    else:
        from rlexp.evaluation.engines.base import Decoding
        from rlexp.evaluation.engines.local import LocalEngine
        from rlexp.stages.eval_records import Target, eval_records, load_problems

        saved = AttemptDir(attempt_dir).checkpoints()
        if not saved:
            raise InputError(AttemptDir(attempt_dir).checkpoints_dir, ADAPTER_PATTERN, "no checkpoint to check")
        name = checkpoint or checkpoint_name(min(saved))
        step = checkpoint_step(name)
        if step is None or step not in saved:
            raise InputError(AttemptDir(attempt_dir).checkpoints_dir, name, "no such saved checkpoint")
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
            out = AttemptDir(attempt_dir).g1_records(name, role, label)
            # one engine at a time, closed before the next loads: never two models in memory
            with LocalEngine(base, {name: saved[step]}, merge=merge) as engine:
                eval_records(engine, engine.tokenizer, attempt_dir=attempt_dir, set_role=role, problems=problems,
                             dataset_sha256=digest, targets=[target], base=base, decoding=decoding, suffix=suffix,
                             grading=att.datasets[role].answer_mode,
                             records_path=lambda _t, out=out: out, extra_meta={"g1_path": label})
            paths[label] = out
        verdict = pipeline_integrity(read_records(paths["adapter"]), read_records(paths["merged"]),
                                     nondeterminism=nondeterminism, labels=("adapter", "merged"), sop=sop)
        verdict = _with_numbers(verdict, checkpoint=name, set=role, paths=[str(p) for p in paths.values()])
    verdicts.write_verdict(attempt_dir, verdict)
    return verdict


def _with_numbers(verdict: Verdict, **extra: Any) -> Verdict:
    return Verdict(verdict.name, verdict.passed, verdict.rule, {**verdict.numbers, **extra},
                        verdict.notes, verdict.details)


# --------------------------------------------------------------------------- G2 parser ceiling


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


# --------------------------------------------------------------------------- G4 pass@k headroom


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
    out = AttemptDir(att.attempt_dir).g4_samples
    with engine:
        eval_records(engine, tokenizer, attempt_dir=Path(att.attempt_dir), set_role="ood_primary",
                     problems=problems, dataset_sha256=loaded[2], targets=[target], base=base,
                     decoding=Decoding.for_eval(att.eval, samples=k, temperature=g4.temperature),
                     suffix=att.datasets["ood_primary"].prompt_suffix or "",
                     grading=att.datasets["ood_primary"].answer_mode, records_path=lambda _t: out)
    wanted = {p["problem_hash"] for p in problems}
    verdict = passk_headroom([r for r in read_records(out) if r["problem_hash"] in wanted], k, g4)
    verdict = _with_numbers(verdict, baseline_wrong=len(wrong), baseline_problems=len(greedy))
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict


# --------------------------------------------------------------------------- parser audit

_BOLD_NUMBER = re.compile(r"\*\*[^*\n]*\d[^*\n]*\*\*")
_CONTEXT_WORDS = re.compile(r"(?:base|step|part|case|page|figure|option|section|line|row|column)\s*$", re.IGNORECASE)


def suspicion_flags(record: dict[str, Any]) -> list[str]:
    """Why a wrong record may be a parser error rather than a model error.

    The patterns are those real audits found: a bold ``**N**`` answer the parser skipped for a
    later number, a trailing number in prose."""
    output = str(record.get("output") or "")
    method = record.get("parse_method")
    flags = []
    if method == "last_number" and _BOLD_NUMBER.search(output):
        flags.append("fallback_after_bold_answer")
    if method == "last_number":
        answer = str(record.get("answer") or "")
        plain = output.replace(",", "")  # "1,234" was extracted as "1234"
        spot = _last_occurrence(plain, answer)
        if spot is not None:
            before, after = plain[max(0, spot - 20) : spot], plain[spot + len(answer) : spot + len(answer) + 20]
            if re.match(r"\s*[A-Za-z]{2,}", after) or _CONTEXT_WORDS.search(before):
                flags.append("trailing_number_in_prose")
    if method == "none":
        flags.append("no_answer_parsed")
    if method == "unparsed":  # an answer that is not one number: the last box, or an expression
        flags.append("answer_not_one_number")
    if record.get("finish_reason") == "length":
        flags.append("truncated")
    gold = str(record.get("gold") or "")
    if gold and re.search(rf"(?<![\d.]){re.escape(gold)}(?![\d.])", output):
        flags.append("gold_appears_in_output")
    return flags


def _last_occurrence(output: str, answer: str) -> int | None:
    if not answer:
        return None
    matches = [m.start() for m in re.finditer(rf"(?<![\d.]){re.escape(answer)}(?![\d])", output)]
    return matches[-1] if matches else None


def audit_draw(records: Sequence[dict[str, Any]], n: int | None = None, seed: int = 0, *,
               sop: Sop | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Draw up to ``n`` incorrect records (seeded, independent of file order) for human review;
    ``n`` defaults to the SOP's ``parser_audit.sample_size`` (50)."""
    n = n or sop_or_default(sop).parser_audit.sample_size
    wrong = sorted((r for r in records if not r["correct"]), key=lambda r: r["problem_hash"])
    drawn = random.Random(seed).sample(wrong, min(n, len(wrong)))
    return [
        {"problem_hash": r["problem_hash"], "gold": r.get("gold"), "answer": r.get("answer"),
         "parse_method": r.get("parse_method"), "finish_reason": r.get("finish_reason"),
         "flags": suspicion_flags(r), "output": r.get("output"), "verdict": None, "note": "",
         # an episode record: the reviewer sees every turn, tool calls and feedback, not only the last
         **({"trajectory": r["trajectory"]} if r.get("trajectory") is not None else {})}
        for r in drawn
    ]


def audit_verdicts(items: Sequence[dict[str, Any]], max_rate: float, source: str | Path | None = None) -> Verdict:
    """Mis-parse rate from reviewed items (``verdict`` in ok | misparse | ambiguous)."""
    if not items:
        raise InputError(source, "verdict", "no reviewed items")
    counts = dict.fromkeys(AUDIT_VERDICTS, 0)
    for i, item in enumerate(items, start=1):
        v = item.get("verdict")
        if v not in AUDIT_VERDICTS:
            raise InputError(source, f"line {i}: verdict", f"must be one of {', '.join(AUDIT_VERDICTS)}, got {v!r}")
        counts[v] += 1
    rate = counts["misparse"] / len(items)
    flagged = [it for it in items if it.get("flags")]
    flagged_mis = sum(1 for it in flagged if it["verdict"] == "misparse")
    return Verdict(
        name="parser_audit",
        passed=rate <= max_rate,
        rule=f"mis-parse rate <= {max_rate:.0%} of reviewed incorrect cases (sop/README.md#parser-audit)",
        numbers={"reviewed": len(items), "misparse": counts["misparse"], "ambiguous": counts["ambiguous"],
                 "ok": counts["ok"], "mis_parse_rate": rate, "max_misparse_rate": max_rate,
                 "flagged": len(flagged), "flagged_misparse": flagged_mis},
        notes=("fix the parser/format first, re-evaluate, before blaming the model",) if rate > max_rate else (),
    )


@dataclass(frozen=True)
class AuditDraw:
    """The parser-audit cases drawn for a person to review (``guards/parser_audit_review.jsonl``)."""

    review_file: Path
    drawn: int
    flagged: int  # cases the heuristics call suspicious

    def to_dict(self) -> dict[str, Any]:
        return {"review_file": str(self.review_file), "drawn": self.drawn, "flagged": self.flagged}


def run_audit_draw(attempt: str | Path, *, checkpoint: str | None = None, set_role: str = "ood_primary",
                   n: int | None = None, seed: int = 0, sop: Sop | None = None) -> AuditDraw:
    """Write ``guards/parser_audit_review.jsonl`` from the best checkpoint's incorrect records."""
    import json

    from rlexp.experiment.records import read_records, record_path
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    attempt_dir = Path(att.attempt_dir)
    if checkpoint is None:
        from rlexp.experiment.results import read_selection

        selection = read_selection(attempt_dir)
        if selection is None:  # the CLI adds which command writes it
            raise InputError(AttemptDir(attempt_dir).selection, None, "file not found")
        step = selection.best_by_monitor or selection.final
        if step is None:
            raise InputError(AttemptDir(attempt_dir).selection, "final", "no checkpoint selected")
        checkpoint = checkpoint_name(step)
    items = audit_draw(read_records(record_path(attempt_dir, checkpoint, set_role)), n, seed, sop=sop)
    out = AttemptDir(attempt_dir).audit_review
    text = "".join(json.dumps({"checkpoint": checkpoint, "set": set_role, **it}, ensure_ascii=False) + "\n"
                   for it in items)
    path = atomic_write_text(out, text)
    return AuditDraw(path, len(items), sum(1 for it in items if it["flags"]))


def run_audit_verdicts(attempt: str | Path, verdict_file: str | Path, *, sop: Sop | None = None) -> Verdict:
    from rlexp.spec import load_attempt

    att = load_attempt(attempt)
    items = [record for _, record in iter_jsonl(verdict_file)]
    verdict = audit_verdicts(items, sop_or_default(sop).parser_audit.max_misparse_rate, verdict_file)
    verdict = _with_numbers(verdict, verdict_file=str(verdict_file))
    verdicts.write_verdict(att.attempt_dir, verdict)
    return verdict


GUARDS = ("g0", "g1", "g2", "g4", "audit")


def guard(name: str, attempt: str | Path, *, sop: Sop | None = None, **options: Any) -> Verdict:
    """Run one guardrail on an attempt and write its verdict to ``guards/<name>.json``.

    ``name``: g0 (prompt parity), g1 (pipeline integrity), g2 (parser ceiling), g4 (pass@k
    headroom) or audit (score a reviewed parser-audit file: ``verdict_file=``). ``options`` are the
    guard's own (``samples``, ``checkpoint``, ``set_role``, ``limit``, ``records``, ``problems``,
    ``k``); what is not given comes from the SOP. A failing guard is a verdict, not an exception.
    """
    runners = {"g0": run_g0, "g1": run_g1, "g2": run_g2, "g4": run_g4, "audit": run_audit_verdicts}
    if name not in runners:
        raise InputError(None, "guard", f"unknown guard {name!r}; expected one of {', '.join(GUARDS)}")
    return runners[name](attempt, sop=sop, **options)
