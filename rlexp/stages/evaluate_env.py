"""``rlexp eval`` on an environment task: the same K=3 checkpoints + Baseline-S0 (+ SOTA) play the
same episodes, greedy, on the spec's engine (local, vllm or openai).

The targets, the selection, the record files and their metadata, the resumability and the paired
records are those of :mod:`rlexp.stages.evaluate` (:mod:`rlexp.stages.eval_records`): only what a target produces differs — an episode
(:func:`rlexp.environments.episodes.play_episodes` driven by the engine's ``generate_tokens``:
token-in/token-out, every turn's ids as the engine produced them, the feedback rendered and
tokenised once by the base model's tokenizer, so every engine is given the same ids turn by turn;
the attempt's budgets) written
as an eval record by :func:`rlexp.environments.interface.episode_record` (the fields every record has,
``correct`` = the success flag, plus ``reward`` and the ``trajectory``: turns, tool calls,
feedback, finish reason). The record metadata holds the environment settings and its ``grading``
(an identity key) is ``episode:`` + their digest, so records of other budgets or another
environment are never mixed into a file.

On the vllm engine every checkpoint must be a LoRA adapter (what :class:`~rlexp.evaluation.engines.vllm.VllmEngine`
serves); full-weight checkpoints are evaluated on the local engine.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


def environment_meta(settings: Any) -> dict[str, Any]:
    """What of the environment settings decides an episode's outcome (the record metadata's
    ``environment``): the environment, its config, the budgets, the success threshold."""
    keep = ("name", "config", "max_turns", "max_tokens_per_turn", "max_total_tokens", "success_threshold")
    out = {k: v for k, v in asdict(settings).items() if k in keep}
    if getattr(settings, "reward", None):  # a composed reward: its weights and the judge model grade the records
        out["reward"] = dict(settings.reward)
        if settings.reward.get("judge"):
            out["judge_model"] = settings.judge.get("model")
    return out


def episode_settings(att: Attempt) -> tuple[Any, Any, str, dict[str, Any]]:
    """``(budgets, decoding, grading, extra_meta)`` of an attempt's episode eval: greedy, one
    sample, the per-turn budget as ``max_tokens``; ``grading`` (an identity key of a record file)
    is ``episode:`` + the digest of the environment settings."""
    from rlexp.environments.interface import budgets_of
    from rlexp.evaluation.engines.base import Decoding
    from rlexp.experiment.files import sha256_text

    settings = att.environment
    decoding = Decoding.for_eval(att.eval, max_tokens=int(settings.max_tokens_per_turn))
    extra = {"environment": environment_meta(settings)}
    grading = "episode:" + sha256_text(json.dumps(extra["environment"], sort_keys=True))[:16]
    return budgets_of(settings), decoding, grading, extra


def open_episode_records(path: Path, meta: dict[str, Any]) -> Any:
    """The record file's writer, resuming what it holds but the episodes whose reward failed (a
    ``judge_error``): those are played and judged again."""
    from rlexp.experiment.records import RecordWriter, drop_records

    drop_records(path, lambda r: bool(r.get("reward_error")))
    return RecordWriter.open(path, meta)


def play_into(writer: Any, engine: Any, tokenizer: Any, target: Any, problems: list[dict[str, Any]],
              rows: list[Any], *, budgets: Any, decoding: Any, cache: Any, success_threshold: float,
              rewarder: Any = None) -> int:
    """Play the episodes ``writer`` does not hold yet with ``target`` on ``engine``, append their
    records (graded by ``rewarder``, the attempt's ``environment.reward``, when given); the number
    appended."""
    from rlexp.environments.episodes import engine_turns, play_episodes
    from rlexp.environments.interface import episode_record

    todo = [i for i, p in enumerate(problems) if p["problem_hash"] not in writer.done]
    if not todo:
        return 0
    turns = engine_turns(engine, target.name if target.adapter_path else None, decoding)
    played = play_episodes(turns, tokenizer, [rows[i] for i in todo], budgets=budgets, cache=cache,
                           seed=decoding.seed)
    batch = []
    for i, (trajectory,) in zip(todo, played, strict=True):
        record = episode_record(problems[i], trajectory, problem_hash=problems[i]["problem_hash"],
                                success_threshold=success_threshold)
        batch.append(rewarder.apply(record, problems[i]) if rewarder is not None else record)
    writer.append_many(batch)  # one fsync for the episodes played together
    return len(todo)


def evaluate_episodes(att: Attempt, attempt_dir: Path, roles, selection, targets, base, limit, show_progress):
    """Evaluate every target on every set's episodes; an :class:`~rlexp.stages.eval_records.EvalOutcome`."""
    from rlexp.environments.episode_rewards import EpisodeRewarder
    from rlexp.environments.episodes import SlotCache
    from rlexp.environments.interface import rows_for_task
    from rlexp.evaluation.engines.base import close_engine
    from rlexp.experiment.files import atomic_write_json
    from rlexp.experiment.layout import AttemptDir
    from rlexp.experiment.records import read_records, summarize
    from rlexp.stages.eval_records import (
        EvalOutcome,
        FileOutcome,
        build_engine,
        check_record_files,
        load_eval_sets,
        record_metas,
        write_paired,
    )

    settings = att.environment
    budgets, decoding, grading, extra = episode_settings(att)
    datasets = {}
    for role, (problems, path, digest) in load_eval_sets(att, roles, limit).items():
        ref = att.datasets[role]
        rows = rows_for_task(problems, settings, prompt_suffix=ref.prompt_suffix or "", where=str(path))
        datasets[role] = (problems, rows, digest)

    engine, tokenizer = build_engine(att, base, targets)
    try:
        where = {"attempt_dir": attempt_dir, "targets": targets, "base": base, "decoding": decoding,
                 "grading": grading, "extra_meta": extra}
        for role, (_problems, _rows, digest) in datasets.items():  # every file checked before the first write
            check_record_files(engine, tokenizer, set_role=role, dataset_sha256=digest,
                               suffix=att.datasets[role].prompt_suffix or "", **where)
        atomic_write_json(AttemptDir(attempt_dir).evals.selection, selection)
        cache = SlotCache()
        rewarder = EpisodeRewarder(settings, attempt_dir)  # environment.reward: the judge, NDCG (or nothing)
        files = []
        for role, (problems, rows, digest) in datasets.items():
            metas = record_metas(engine, tokenizer, set_role=role, dataset_sha256=digest,
                                 suffix=att.datasets[role].prompt_suffix or "", **where)
            for target, path, meta in metas:
                writer = open_episode_records(path, meta)
                new = play_into(writer, engine, tokenizer, target, problems, rows, budgets=budgets,
                                decoding=decoding, cache=cache, success_threshold=settings.success_threshold,
                                rewarder=rewarder)
                if new and show_progress:
                    print(f"eval {role} {target.name}: {new} episodes", flush=True)
                files.append(FileOutcome(target.name, role, writer.path, new, summarize(read_records(writer.path))))
    finally:
        close_engine(engine)
    if rewarder.judge is not None and show_progress:
        print("judge: " + ", ".join(f"{k} {v}" for k, v in rewarder.summary().items()), flush=True)
    paired = write_paired(attempt_dir, [t.name for t in targets], list(datasets))
    return EvalOutcome(selection, tuple(files), tuple(paired))


def baseline_episode_records(att: Attempt, limit: int | None) -> list[dict[str, Any]]:
    """Baseline-S0's greedy episodes on the primary set through the eval pipeline (written to
    ``eval/baseline_s0/ood_primary.jsonl``, so a later ``rlexp eval`` resumes from them): what G2
    grades on an environment task (the final answer of each episode)."""
    from rlexp.environments.episode_rewards import EpisodeRewarder
    from rlexp.environments.episodes import SlotCache
    from rlexp.environments.interface import rows_for_task
    from rlexp.experiment.records import BASELINE_S0, read_records
    from rlexp.stages.eval_records import (
        Target,
        build_engine,
        check_record_files,
        eval_lock,
        load_problems,
        record_metas,
    )

    loaded = load_problems(att, "ood_primary", limit)
    if loaded is None:
        raise InputError(att.spec_path, "datasets.ood_primary", "no path")
    problems, path, digest = loaded
    budgets, decoding, grading, extra = episode_settings(att)
    rows = rows_for_task(problems, att.environment, prompt_suffix=att.datasets["ood_primary"].prompt_suffix or "",
                         where=str(path))
    base = att.base_model()
    target = Target(BASELINE_S0, None)
    attempt_dir = Path(att.attempt_dir)
    where = {"attempt_dir": attempt_dir, "set_role": "ood_primary", "dataset_sha256": digest, "targets": [target],
             "base": base, "decoding": decoding, "suffix": att.datasets["ood_primary"].prompt_suffix or "",
             "grading": grading, "extra_meta": extra}
    engine, tokenizer = build_engine(att, base, [target])
    with engine:
        check_record_files(engine, tokenizer, **where)
        with eval_lock(attempt_dir):
            ((_, out, meta),) = record_metas(engine, tokenizer, **where)
            # graded as `rlexp eval` grades them (environment.reward), since eval resumes from these records
            writer = open_episode_records(out, meta)
            play_into(writer, engine, tokenizer, target, problems, rows, budgets=budgets, decoding=decoding,
                      cache=SlotCache(), success_threshold=att.environment.success_threshold,
                      rewarder=EpisodeRewarder(att.environment, attempt_dir))
    wanted = {p["problem_hash"] for p in problems}
    return [r for r in read_records(out) if r["problem_hash"] in wanted]
