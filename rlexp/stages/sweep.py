"""``rlexp sweep models SPEC``: evaluate candidate base models with one eval configuration, rank
them, select one (the rules: :mod:`rlexp.spec.sweep`; the guide: docs/sweeps.md).

The flow, all under ``experiments/<experiment>/sweeps/<sweep_id>/`` (:class:`rlexp.experiment.layout.SweepDir`):

1. the spec is loaded and checked, and every dataset file read strictly, before anything is written;
2. stage 1: every candidate on the stage-1 set (:func:`evaluate_candidate`, one candidate at a time);
3. stage 2: the finalists on the ID and sanity sets;
4. the selection, then the optional truncation check (one candidate, two ``max_tokens`` values,
   the same problems, paired: McNemar exact p, bootstrap CI, b/c from :mod:`rlexp.stats`);
5. ``result/ranking.json`` and ``result/report.md`` written together (a temporary directory swapped
   in whole); then MLflow: a parent run for the sweep and a child run per candidate.

Records are the eval pipeline's own (:func:`rlexp.stages.eval_records.eval_records`, the engines of
:func:`rlexp.stages.eval_records.build_engine`, one record per problem appended as it finishes), so a
killed sweep continues where it stopped: a candidate whose records are complete is not even
loaded again, and a half-done file is completed, never redone.

:func:`evaluate_candidate` takes only a spec path and names and returns plain values, so another
process (a Ray task) can run it; :func:`sweep_models` calls it in a plain loop.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import SweepDir

if TYPE_CHECKING:
    from rlexp.spec.sweep import SweepSpec

EngineFactory = Callable[[Any, Any, Sequence[Any]], tuple[Any, Any]]  # build_engine's signature


@dataclass(frozen=True)
class CandidateEval:
    """What :func:`evaluate_candidate` did for one candidate: its record file per set, and how
    many records it added (0 everywhere and ``engine_loaded`` False when all were on disk)."""

    candidate: str
    files: dict[str, str]
    new_records: dict[str, int]
    engine_loaded: bool

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "files": dict(self.files), "new_records": dict(self.new_records),
                "engine_loaded": self.engine_loaded}


@dataclass(frozen=True)
class SweepResult:
    """The sweep's outcome: ``ranking`` is ``result/ranking.json``."""

    ranking: dict[str, Any]
    ranking_path: Path
    report_path: Path
    evaluations: tuple[CandidateEval, ...] = ()
    mlflow: dict[str, Any] = field(default_factory=dict)

    @property
    def selected(self) -> str | None:
        return self.ranking["selection"]["candidate"]

    def to_dict(self) -> dict[str, Any]:
        return {"ranking": self.ranking, "ranking_path": str(self.ranking_path), "report_path": str(self.report_path),
                "evaluations": [e.to_dict() for e in self.evaluations], "mlflow": self.mlflow}


# --------------------------------------------------------------------------- one candidate


def _decoding(settings: Any, max_tokens: int):
    """The shared decoding: greedy by default; sampling when ``eval.temperature`` > 0 (``num_samples``
    samples per problem; records grade the first, and keep every sample)."""
    from rlexp.evaluation.engines.base import Decoding

    if settings.temperature > 0:
        return Decoding.sampling(int(settings.num_samples), max_tokens, float(settings.temperature),
                                 seed=int(settings.seed))
    if settings.num_samples > 1:
        return Decoding.nondet_proxy(int(settings.num_samples), max_tokens, seed=int(settings.seed))
    return Decoding.greedy(max_tokens, seed=int(settings.seed))


@contextlib.contextmanager
def _candidate_lock(sweep: SweepDir, candidate: str) -> Iterator[None]:
    """One writer per candidate's records (two processes would append the same problems); the
    kernel drops a ``flock`` when its process dies, so a killed sweep leaves no stale lock."""
    import fcntl

    path = sweep.candidate_lock(candidate)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(path, None, f"another process is evaluating candidate {candidate}") from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class _Job:
    """One record file of a candidate: which problems, under which decoding, where."""

    set_role: str
    problems: list[dict[str, Any]]
    dataset_sha256: str
    path: Path
    suffix: str
    grading: str


def _complete(job: _Job, expected: dict[str, Any]) -> bool:
    """Whether ``job``'s record file already holds every problem, made under ``expected`` settings
    (those knowable without loading the model). Anything else goes through the pipeline, whose
    writer completes a partial file and refuses to mix settings."""
    from rlexp.experiment.records import iter_records, meta_path, read_meta

    if not job.path.is_file() or not meta_path(job.path).is_file():
        return False
    meta = read_meta(job.path)
    if any(meta.get(key) != value for key, value in expected.items()):
        return False
    try:
        done = {line.problem_hash for line in iter_records(job.path)}
    except InputError:  # a line torn by a kill: the pipeline's writer repairs it (and reports worse)
        return False
    return all(p["problem_hash"] in done for p in job.problems)


def _jobs(spec: SweepSpec, sweep: SweepDir, candidate: str, sets: Sequence[str], limit: int | None,
          max_tokens: int | None) -> list[_Job]:
    from rlexp.stages.eval_records import load_problems

    jobs = []
    for role in sets:
        loaded = load_problems(spec, role, limit)
        if loaded is None:
            raise InputError(spec.display_path, f"datasets.{role}", "no such set in the sweep")
        problems, _, digest = loaded
        ref = spec.datasets[role]
        path = (sweep.records(candidate, role) if max_tokens is None
                else sweep.truncation_records(candidate, role, max_tokens))
        jobs.append(_Job(role, problems, digest, path, ref.prompt_suffix or "", ref.answer_mode))
    return jobs


def evaluate_candidate(spec_path: str | Path, candidate: str, sets: Sequence[str], *, limit: int | None = None,
                       max_tokens: int | None = None, engine_factory: EngineFactory | None = None,
                       progress: Callable[[int], None] | None = None) -> CandidateEval:
    """Evaluate one candidate (its base model, no adapter) on ``sets``; resumable.

    Records go to ``eval/<candidate>/<set>.jsonl``, or with ``max_tokens`` (the truncation check's
    other budgets) to ``truncation/<candidate>/<set>__max_tokens{N}.jsonl``. ``limit`` keeps the
    first N problems of each set. Self-contained (it loads the spec itself) so that another
    process can run it."""
    from rlexp.evaluation.answers import PARSER_VERSION
    from rlexp.evaluation.engines.base import close_engine
    from rlexp.spec.sweep import load_sweep
    from rlexp.stages.eval_records import Target, build_engine, engine_chunk, eval_records, model_sha256

    spec = load_sweep(spec_path)
    cand = spec.candidate(candidate)
    sweep = SweepDir(spec.sweep_dir)
    tokens = int(max_tokens if max_tokens is not None else spec.eval.max_tokens)
    decoding = _decoding(spec.eval, tokens)
    jobs = _jobs(spec, sweep, candidate, sets, limit, max_tokens)
    files = {job.set_role: str(job.path) for job in jobs}
    with _candidate_lock(sweep, candidate):
        base_sha = model_sha256(cand.model, sweep.hash_cache)
        expected = {"decoding": decoding.to_dict(), "model_sha256": base_sha, "parser_version": PARSER_VERSION,
                    "adapter_sha256": None, "checkpoint": candidate}
        todo = [job for job in jobs if not _complete(job, {**expected, "set": job.set_role,
                                                          "dataset_sha256": job.dataset_sha256,
                                                          "prompt_suffix": job.suffix, "grading": job.grading})]
        new = {job.set_role: 0 for job in jobs}
        if not todo:
            return CandidateEval(candidate, files, new, engine_loaded=False)
        target = Target(candidate, None)  # the base model itself: a sweep has no checkpoints
        engine, tokenizer = (engine_factory or build_engine)(spec, cand.model, [target])
        try:
            for job in todo:
                results = eval_records(
                    engine, tokenizer, attempt_dir=sweep.root, set_role=job.set_role, problems=job.problems,
                    dataset_sha256=job.dataset_sha256, targets=[target], base=cand.model, decoding=decoding,
                    suffix=job.suffix, grading=job.grading, chunk=engine_chunk(engine), progress=progress,
                    records_path=lambda _t, path=job.path: path,
                    extra_meta={"sweep": spec.id, "candidate": candidate, "max_tokens": tokens},
                )
                new[job.set_role] = sum(count for _, _, count in results)
        finally:
            close_engine(engine)
    return CandidateEval(candidate, files, new, engine_loaded=True)


# --------------------------------------------------------------------------- size


def count_parameters(model: Path | str) -> int | None:
    """Parameters of a local model from its safetensors headers (no weights loaded): the sum of
    every tensor's element count. None for a hub name or a model without safetensors files."""
    if not isinstance(model, Path) or not model.is_dir():
        return None
    files = sorted(model.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100 << 20:
                raise InputError(path, None, f"safetensors header of {size} bytes: not a safetensors file")
            header = json.loads(fh.read(size))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in info["shape"]:
                count *= int(dim)
            total += count
    return total


# --------------------------------------------------------------------------- the sweep


def _read_stats(path: str | Path) -> Any:
    from rlexp.experiment.records import read_records
    from rlexp.spec.sweep import set_stats

    return set_stats(read_records(path))


def _outcomes(path: str | Path) -> dict[str, int]:
    from rlexp.experiment.records import iter_records

    return {line.problem_hash: line.correct for line in iter_records(path)}


def _stage_covers(spec: SweepSpec, set_role: str, subset: int) -> bool:
    """The stage-1 records already hold the truncation check's problems at ``eval.max_tokens``."""
    return set_role == spec.stage1_set and (spec.stage1_limit is None or subset <= spec.stage1_limit)


def truncation_check(spec: SweepSpec, candidate: str, *, engine_factory: EngineFactory | None = None,
                     evaluations: list[CandidateEval] | None = None) -> dict[str, Any]:
    """The paired max_tokens comparison on the first ``subset`` problems of the set: the shorter
    budget is the baseline, so ``delta_pp`` is long − short and ``c`` counts problems only the
    longer budget gets right."""
    from rlexp.experiment.records import read_records
    from rlexp.spec.sweep import set_stats, truncation_verdict
    from rlexp.stats import pair, paired_comparison

    check = spec.truncation
    sweep = SweepDir(spec.sweep_dir)
    arms: dict[str, dict[str, Any]] = {}
    outcomes: dict[int, dict[str, int]] = {}
    for tokens in check.max_tokens:
        if tokens == spec.eval.max_tokens and _stage_covers(spec, check.set_role, check.subset):
            path = sweep.records(candidate, check.set_role)  # reused: the same problems, settings and file
            source = "stage records"
        else:
            done = evaluate_candidate(spec.spec_path, candidate, [check.set_role], limit=check.subset,
                                      max_tokens=tokens, engine_factory=engine_factory)
            if evaluations is not None:
                evaluations.append(done)
            path = Path(done.files[check.set_role])
            source = "truncation records"
        wanted = _first_hashes(spec, check.set_role, check.subset)
        records = [r for r in read_records(path) if r["problem_hash"] in wanted]
        outcomes[tokens] = {r["problem_hash"]: int(r["correct"]) for r in records}
        arms[str(tokens)] = {**set_stats(records).to_dict(), "records": str(path), "source": source}
    short, long = check.max_tokens
    paired = pair(outcomes[short], outcomes[long])
    comparison = paired_comparison(paired.y_base, paired.y_new, resamples=check.resamples,
                                   seed=check.seed).to_dict()
    return {**check.to_dict(), "candidate": candidate, "arms": arms, "comparison": comparison,
            "verdict": truncation_verdict(short, long, comparison, arms)}


def _first_hashes(spec: SweepSpec, role: str, limit: int) -> set[str]:
    from rlexp.stages.eval_records import load_problems

    problems, _, _ = load_problems(spec, role, limit)
    return {p["problem_hash"] for p in problems}


def sweep_models(spec_path: str | Path, *, tracking_uri: str | None = None,
                 engine_factory: EngineFactory | None = None, progress: Callable[[str], None] | None = None,
                 ray_address: str | None = None) -> SweepResult:
    """Run the sweep of ``spec_path`` (``sweeps/<id>/sweep.yaml`` or its directory); see the module
    docstring. ``tracking_uri`` "off" skips MLflow. ``ray_address``: each stage's candidates are
    evaluated at once, one Ray job each (rlexp.stages.fanout), before the loops below read them."""
    from rlexp.experiment.files import sha256_file
    from rlexp.spec import sweep as rules
    from rlexp.stages.eval_records import load_problems

    spec = rules.load_sweep(spec_path)
    for role in {spec.stage1_set, *spec.stage2_sets}:  # every dataset strictly read before any write
        load_problems(spec, role)
    say = progress or (lambda _line: None)
    evaluations: list[CandidateEval] = []

    params = {c.name: c.params if c.params is not None else count_parameters(c.model) for c in spec.candidates}
    primary: dict[str, Any] = {}
    if ray_address:
        _on_ray(spec, [c.name for c in spec.candidates], [spec.stage1_set], spec.stage1_limit, ray_address,
                "stage1", engine_factory, say)
    for cand in spec.candidates:  # stage 1: a plain loop, one candidate at a time (records of Ray jobs reused)
        say(f"stage 1: {cand.name} on {spec.stage1_set}")
        done = evaluate_candidate(spec.spec_path, cand.name, [spec.stage1_set], limit=spec.stage1_limit,
                                  engine_factory=engine_factory)
        evaluations.append(done)
        primary[cand.name] = _read_stats(done.files[spec.stage1_set])

    finalists = rules.finalist_order(primary, params, spec.criteria)[: spec.finalists]
    stage2: dict[str, dict[str, Any]] = {}
    if ray_address and spec.stage2_sets and finalists:
        _on_ray(spec, finalists, list(spec.stage2_sets), None, ray_address, "stage2", engine_factory, say)
    for name in finalists:
        if not spec.stage2_sets:
            break
        say(f"stage 2: {name} on {', '.join(spec.stage2_sets)}")
        done = evaluate_candidate(spec.spec_path, name, spec.stage2_sets, engine_factory=engine_factory)
        evaluations.append(done)
        stage2[name] = {role: _read_stats(path) for role, path in done.files.items()}

    selection = rules.select(finalists, primary, params, stage2, spec.criteria, spec.stage1_set)
    truncation = None
    if spec.truncation is not None:
        who = spec.truncation.candidate or selection.candidate
        if who is None:
            truncation = {**spec.truncation.to_dict(), "skipped": "no candidate was selected"}
        else:
            say(f"truncation check: {who}, max_tokens {spec.truncation.max_tokens[0]} vs "
                f"{spec.truncation.max_tokens[1]}")
            truncation = truncation_check(spec, who, engine_factory=engine_factory, evaluations=evaluations)

    rows = []
    for rank, name in enumerate(rules.accuracy_order(primary), start=1):
        cand = spec.candidate(name)
        s = primary[name]
        rows.append({
            "rank": rank, "name": name, "model": cand.stated_model, "params": params[name],
            "params_source": "spec" if cand.params is not None else ("safetensors" if params[name] else None),
            "primary": s.to_dict(), "in_band": rules.band_distance_pp(s.acc, spec.criteria.band) == 0.0,
            "band_distance_pp": rules.band_distance_pp(s.acc, spec.criteria.band),
            "finalist": name in finalists, "stage2": {r: v.to_dict() for r, v in stage2.get(name, {}).items()},
            "dropped": selection.dropped.get(name), "selected": name == selection.candidate,
        })
    ranking = {
        "sweep": spec.id,
        "experiment": spec.experiment_dir.name,
        "description": spec.description,
        "spec_sha256": sha256_file(spec.spec_path),
        "stage1_set": spec.stage1_set,
        "stage1_limit": spec.stage1_limit,
        "stage2_sets": list(spec.stage2_sets),
        "finalists": finalists,
        "criteria": spec.criteria.to_dict(),
        "eval": {"engine": spec.eval.engine, "max_tokens": spec.eval.max_tokens,
                 "decoding": _decoding(spec.eval, int(spec.eval.max_tokens)).to_dict(),
                 "prompt_suffix": spec.eval.prompt_suffix},
        "datasets": {role: {"path": str(ref.path), "sha256": sha256_file(ref.path), "size": ref.size}
                     for role, ref in spec.datasets.items()},
        "candidates": rows,
        "selection": selection.to_dict(),
        "truncation_check": truncation,
    }
    ranking_path, report_path = _write_result(spec, ranking)
    mlflow: dict[str, Any] = {}
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.tracking.sweeps import log_sweep

        mlflow = log_sweep(ranking, spec.experiment_dir, report_path, ranking_path, tracking_uri)
    return SweepResult(ranking, ranking_path, report_path, tuple(evaluations), mlflow)


def _on_ray(spec: SweepSpec, candidates: list[str], sets: list[str], limit: int | None, ray_address: str, stage: str,
            engine_factory: EngineFactory | None, say: Callable[[str], None]) -> None:
    from rlexp.stages.fanout import evaluate_candidates

    if engine_factory is not None:
        raise InputError(None, "--ray-address", "a sweep on Ray evaluates with the spec's engine (no engine_factory)")
    say(f"{stage}: {len(candidates)} candidate(s) as Ray jobs at {ray_address}")
    evaluate_candidates(spec.spec_path, candidates, sets, limit=limit, ray_address=ray_address,
                        experiment_dir=spec.experiment_dir, batch=f"sweep-{spec.id}-{stage}")


def _write_result(spec: SweepSpec, ranking: dict[str, Any]) -> tuple[Path, Path]:
    """``result/ranking.json`` and ``result/report.md`` together: written into a temporary
    directory beside ``result/`` and swapped in whole, so a reader never sees one without the other."""
    import os

    from rlexp.experiment.files import atomic_write_json, atomic_write_text, make_temp_dir, replace_dir
    from rlexp.reporting.sweep import render_sweep_report

    sweep = SweepDir(spec.sweep_dir)
    final = sweep.result_dir
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final)  # also removes what a killed run left here
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would make result/ the one private folder of the sweep
    try:
        atomic_write_json(tmp / sweep.ranking.name, ranking)
        atomic_write_text(tmp / sweep.report.name, render_sweep_report(ranking))
        replace_dir(tmp, final)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sweep.ranking, sweep.report
