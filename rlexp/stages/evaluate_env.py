"""``rlexp eval`` on an environment task: the same K=3 checkpoints + Baseline-S0 (+ SOTA) play the
same episodes, greedy, on the local engine.

The targets, the selection, the record files and their metadata, the resumability and the paired
records are :mod:`rlexp.stages.evaluate`'s: only what a target produces differs — an episode
(:func:`rlexp.adapters.episodes.run_episodes`, token-in/token-out, the attempt's budgets) written
as an eval record by :func:`rlexp.core.environments.episode_record` (the fields every record has,
``correct`` = the success flag, plus ``reward`` and the ``trajectory``: turns, tool calls,
feedback, finish reason). The record metadata holds the environment settings and its ``grading``
(an identity key) is ``episode:`` + their digest, so records of other budgets or another
environment are never mixed into a file.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlexp.errors import InputError


def environment_meta(settings: Any) -> dict[str, Any]:
    """What of the environment settings decides an episode's outcome (the record metadata's
    ``environment``): the environment, its config, the budgets, the success threshold."""
    keep = ("name", "config", "max_turns", "max_tokens_per_turn", "max_total_tokens", "success_threshold")
    return {k: v for k, v in asdict(settings).items() if k in keep}


def evaluate_episodes(att: Any, attempt_dir: Path, roles, selection, targets, base, limit, show_progress):
    """Evaluate every target on every set's episodes; an :class:`~rlexp.stages.evaluate.EvalOutcome`."""
    from rlexp.adapters.episodes import SlotCache, run_episodes
    from rlexp.core.environments import budgets_of, episode_record, rows_for_task
    from rlexp.engines.base import Decoding, close_engine
    from rlexp.storage.files import atomic_write_json, sha256_text
    from rlexp.storage.layout import AttemptDir
    from rlexp.storage.records import RecordWriter, read_records, summarize

    from .evaluate import (
        EvalOutcome,
        FileOutcome,
        build_engine,
        check_record_files,
        load_eval_sets,
        record_metas,
        write_paired,
    )

    settings = att.environment
    from rlexp.core.engines import engine_traits

    if not getattr(engine_traits(att.eval.engine), "plays_episodes", False):
        raise InputError(att.spec_path, "eval.engine", f"{att.eval.engine!r}: environment tasks are evaluated on "
                                                       "the local engine (vllm and openai episodes are not built yet)")
    budgets = budgets_of(settings)
    # the budgets per turn as the decoding every turn uses: greedy, one sample
    decoding = Decoding.greedy(int(settings.max_tokens_per_turn), seed=int(att.eval.seed))
    extra = {"environment": environment_meta(settings)}
    # "grading" is an identity key of a record file: the environment and its budgets are part of it
    grading = "episode:" + sha256_text(json.dumps(extra["environment"], sort_keys=True))[:16]
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
        atomic_write_json(AttemptDir(attempt_dir).selection, selection)
        cache = SlotCache()
        files = []
        for role, (problems, rows, digest) in datasets.items():
            metas = record_metas(engine, tokenizer, set_role=role, dataset_sha256=digest,
                                 suffix=att.datasets[role].prompt_suffix or "", **where)
            for target, path, meta in metas:
                writer = RecordWriter.open(path, meta)
                todo = [i for i, p in enumerate(problems) if p["problem_hash"] not in writer.done]
                new = 0
                if todo:
                    with engine._serving(target.name if target.adapter_path else None) as model:
                        played = run_episodes(model, tokenizer, [rows[i] for i in todo], budgets=budgets,
                                              cache=cache, temperature=0.0, seed=int(att.eval.seed))
                    for i, (trajectory,) in zip(todo, played, strict=True):
                        writer.append(episode_record(problems[i], trajectory,
                                                     problem_hash=problems[i]["problem_hash"],
                                                     success_threshold=settings.success_threshold))
                        new += 1
                    if show_progress:
                        print(f"eval {role} {target.name}: {new} episodes", flush=True)
                files.append(FileOutcome(target.name, role, writer.path, new, summarize(read_records(writer.path))))
    finally:
        close_engine(engine)
    paired = write_paired(attempt_dir, [t.name for t in targets], list(datasets))
    return EvalOutcome(selection, tuple(files), tuple(paired))
