"""Base-model sweeps (``rlexp sweep models``): the spec, per-candidate statistics, ranking, selection.

A sweep answers "which base model do we start from?" before any training is planned. Every
candidate is evaluated with one shared eval configuration (engine, chat template, prompt suffix,
decoding, ``max_tokens``), so the model is the only thing that differs between rows.

- **Stage 1** evaluates every candidate on the primary OOD set.
- **Finalists** are the candidates closest to the headroom band (inside it first), then by
  answer format (boxed rate, then parse-failure rate), then by size.
- **Stage 2** evaluates the finalists on the ID and sanity sets (and can drop a finalist whose
  sanity accuracy is below ``criteria.min_sanity_acc``).
- **Selection** among the finalists that pass stage 2: inside the band first; among those, every
  candidate whose boxed rate and parse-failure rate are within ``criteria.format_tolerance_pp``
  of the best-formatted one counts as equally well formatted, and the smallest of them (parameter
  count) is chosen. When no finalist is inside the band, the one closest to it is chosen and the
  reason says so.

Everything here is a pure function of its inputs, except :func:`load_sweep`, which reads the
spec (strictly, through :func:`rlexp.storage.files.load_yaml`) and checks every field before any
stage writes a file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlexp.core.answers import PARSE_FAILURES
from rlexp.core.engines import engine_traits
from rlexp.core.fields import FRACTION, MAX_SPEC_INT, check, check_keys, integer, suggest
from rlexp.core.spec import (
    DatasetRef,
    EvalSettings,
    resolve_dataset,
    resolve_eval_settings,
    validate_spec_section,
)
from rlexp.errors import InputError
from rlexp.storage.files import load_yaml
from rlexp.storage.layout import SWEEP_SPEC_NAME, SweepDir

SWEEP_SETS = ("ood_primary", "id", "sanity")  # the eval sets a sweep may name (no pool, no in-run monitor)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOP_KEYS = ("id", "description", "candidates", "datasets", "eval", "stages", "criteria", "truncation_check")
MAX_CANDIDATES = 1000
MAX_RESAMPLES = 10**6


# ----------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Candidate:
    name: str  # the candidate's label: its record folder, its MLflow child run
    model: Path | str  # a directory (absolute) when it exists, else the name as written (a hub id)
    stated_model: str  # as the spec wrote it
    params: int | None = None  # stated parameter count (else counted from the weights when local)


@dataclass(frozen=True)
class Criteria:
    band: tuple[float, float]  # the headroom band on the stage-1 set, fractions
    format_tolerance_pp: float = 2.0  # boxed / parse-failure rates closer than this count as equal
    min_sanity_acc: float | None = None  # stage 2: a finalist below this on the sanity set is dropped

    def to_dict(self) -> dict[str, Any]:
        return {"band": list(self.band), "format_tolerance_pp": self.format_tolerance_pp,
                "min_sanity_acc": self.min_sanity_acc}


@dataclass(frozen=True)
class TruncationCheck:
    max_tokens: tuple[int, int]  # (shorter, longer)
    subset: int  # the first N problems of the set (files are in hash order: a fixed, content-blind draw)
    set_role: str = "ood_primary"
    candidate: str | None = None  # None: the selected candidate
    resamples: int = 10_000
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"max_tokens": list(self.max_tokens), "subset": self.subset, "set": self.set_role,
                "candidate": self.candidate, "resamples": self.resamples, "seed": self.seed}


@dataclass(frozen=True)
class SweepSpec:
    """A loaded, checked ``sweep.yaml``. It has the attributes the eval pipeline reads from an
    attempt (``eval``, ``datasets``, ``spec_path``), so the same engines and loaders serve both."""

    id: str
    description: str
    candidates: tuple[Candidate, ...]
    datasets: dict[str, DatasetRef]
    eval: EvalSettings
    stage1_set: str
    stage1_limit: int | None
    stage2_sets: tuple[str, ...]
    finalists: int
    criteria: Criteria
    truncation: TruncationCheck | None
    spec_path: Path
    sweep_dir: Path
    experiment_dir: Path
    display_path: str = ""

    def candidate(self, name: str) -> Candidate:
        for candidate in self.candidates:
            if candidate.name == name:
                return candidate
        raise InputError(self.display_path or self.spec_path, "candidates",
                         f"no candidate named {name!r}" + suggest(name, [c.name for c in self.candidates]))


def resolve_sweep_path(path: str | Path) -> Path:
    """``SPEC`` arguments are the sweep directory or its ``sweep.yaml``."""
    path = Path(path)
    return path / SWEEP_SPEC_NAME if path.is_dir() else path


def _int(value: Any, display: str, where: str, minimum: int = 1, maximum: int = MAX_SPEC_INT) -> int:
    return check(integer(minimum, maximum), value, display, where)


def load_sweep(path: str | Path) -> SweepSpec:
    """Load and check a sweep spec; every refusal is one :class:`InputError` naming file and field."""
    spec_path = resolve_sweep_path(path)
    display = str(spec_path)
    if not spec_path.is_file():
        raise InputError(display, None, "file not found (a sweep is a directory holding sweep.yaml)")
    raw = load_yaml(spec_path)
    if not isinstance(raw, dict):
        what = "empty file" if raw is None else f"a {type(raw).__name__}"
        raise InputError(display, None, f"expected a mapping of sweep keys at the top level, got {what}")
    for key in raw:
        if not isinstance(key, str):
            raise InputError(display, str(key), f"keys must be strings, got {type(key).__name__}")
        if key not in _TOP_KEYS:
            raise InputError(display, key, "unknown key" + suggest(key, _TOP_KEYS))

    sweep_dir = SweepDir(spec_path.parent)
    experiment_dir = sweep_dir.experiment.root.resolve()
    dir_id = spec_path.parent.resolve().name
    sweep_id = raw.get("id") if raw.get("id") is not None else dir_id
    if not isinstance(sweep_id, str) or not _NAME_RE.match(sweep_id):
        raise InputError(display, "id", f"{sweep_id!r} is not a valid sweep id (letters, digits, _ . -)")
    if sweep_id != dir_id:
        raise InputError(display, "id", f"{sweep_id!r} does not match its directory name {dir_id!r}")
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise InputError(display, "description", f"must be a string (got {description!r:.60})")

    eval_stated = validate_spec_section(raw.get("eval") or {}, "eval", display)
    eval_settings = resolve_eval_settings(eval_stated)
    candidates = _candidates(raw.get("candidates"), display, experiment_dir, eval_settings)

    datasets_raw = validate_spec_section(raw.get("datasets") or {}, "datasets", display)
    datasets: dict[str, DatasetRef] = {}
    for role, entry in datasets_raw.items():
        if role not in SWEEP_SETS:
            raise InputError(display, f"datasets.{role}",
                             f"a sweep evaluates {', '.join(SWEEP_SETS)} only (no training pool, no in-run monitor)")
        if not entry.get("path"):
            raise InputError(display, f"datasets.{role}.path", "required: the set's JSONL file")
        ref = resolve_dataset(role, entry, experiment_dir, eval_settings, display)
        if not ref.exists:
            raise InputError(display, f"datasets.{role}.path", f"{ref.path} does not exist")
        datasets[role] = ref

    stages = check_keys(raw.get("stages"), display, "stages", ("stage1", "stage2"))
    stage1 = check_keys(stages.get("stage1"), display, "stages.stage1", ("set", "limit"))
    stage2 = check_keys(stages.get("stage2"), display, "stages.stage2", ("sets", "finalists"))
    stage1_set = stage1.get("set", "ood_primary")
    _known_set(stage1_set, datasets, display, "stages.stage1.set")
    limit = stage1.get("limit")
    stage1_limit = None if limit is None else _int(limit, display, "stages.stage1.limit")
    default_sets = [r for r in ("id", "sanity") if r in datasets and r != stage1_set]
    sets = stage2.get("sets", default_sets)
    if not isinstance(sets, list):
        raise InputError(display, "stages.stage2.sets", f"must be a list of set names (got {sets!r:.60})")
    for i, role in enumerate(sets):
        _known_set(role, datasets, display, f"stages.stage2.sets[{i}]")
    if len(set(sets)) != len(sets):
        raise InputError(display, "stages.stage2.sets", "names a set twice")
    finalists = _int(stage2.get("finalists", min(2, len(candidates))), display, "stages.stage2.finalists",
                     maximum=len(candidates))

    criteria_raw = check_keys(raw.get("criteria"), display, "criteria",
                            ("band", "format_tolerance_pp", "min_sanity_acc"))
    band = criteria_raw.get("band")
    if not isinstance(band, list) or len(band) != 2:
        raise InputError(display, "criteria.band", f"required: [low, high] accuracy fractions, e.g. [0.60, 0.70] "
                                                   f"(got {band!r:.60})")
    low, high = (check(FRACTION, v, display, f"criteria.band[{i}]") for i, v in enumerate(band))
    if not low < high:
        raise InputError(display, "criteria.band", f"low must be below high (got [{low:g}, {high:g}])")
    tolerance = criteria_raw.get("format_tolerance_pp", 2.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance <= 100:
        raise InputError(display, "criteria.format_tolerance_pp", f"must be a number of percentage points "
                                                                  f"between 0 and 100 (got {tolerance!r:.60})")
    min_sanity = criteria_raw.get("min_sanity_acc")
    if min_sanity is not None:
        min_sanity = check(FRACTION, min_sanity, display, "criteria.min_sanity_acc")
        if "sanity" not in sets:
            raise InputError(display, "criteria.min_sanity_acc", "needs the sanity set in stages.stage2.sets")
    criteria = Criteria((low, high), float(tolerance), min_sanity)

    truncation = _truncation(raw.get("truncation_check"), display, datasets, candidates, stage1_set)
    return SweepSpec(
        id=sweep_id, description=description, candidates=candidates, datasets=datasets, eval=eval_settings,
        stage1_set=stage1_set, stage1_limit=stage1_limit, stage2_sets=tuple(sets), finalists=finalists,
        criteria=criteria, truncation=truncation, spec_path=spec_path.resolve(), sweep_dir=sweep_dir.root.resolve(),
        experiment_dir=experiment_dir, display_path=display,
    )


def _known_set(role: Any, datasets: Mapping[str, DatasetRef], display: str, where: str) -> None:
    if role not in SWEEP_SETS:
        raise InputError(display, where, f"must be one of {', '.join(SWEEP_SETS)} (got {role!r:.60})")
    if role not in datasets:
        raise InputError(display, where, f"{role} has no entry under datasets")


def _candidates(raw: Any, display: str, experiment_dir: Path, settings: EvalSettings) -> tuple[Candidate, ...]:
    if not isinstance(raw, list) or not raw:
        raise InputError(display, "candidates", "required: a list of {name, model} (at least one)")
    if len(raw) > MAX_CANDIDATES:
        raise InputError(display, "candidates", f"at most {MAX_CANDIDATES} candidates (got {len(raw)})")
    out: list[Candidate] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"candidates[{i}]"
        entry = check_keys(entry, display, where, ("name", "model", "params"))
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InputError(display, f"{where}.name", f"{name!r:.60} is not a valid name (letters, digits, _ . -)")
        if name in seen:
            raise InputError(display, f"{where}.name", f"{name!r} names two candidates")
        seen.add(name)
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip() or "\0" in model:
            raise InputError(display, f"{where}.model", "required: a model directory or a hub name")
        path = Path(model)
        if not path.is_absolute():
            path = experiment_dir / path
        resolved: Path | str = path.resolve() if path.exists() else model
        if getattr(engine_traits(settings.engine), "needs_local_model", False) and not (isinstance(resolved, Path) and (resolved / "config.json").is_file()):
            raise InputError(display, f"{where}.model", f"{model} is not a local model directory (config.json), "
                                                        "which the local engine needs")
        params = entry.get("params")
        if params is not None:
            params = _int(params, display, f"{where}.params", maximum=10**15)
        out.append(Candidate(name, resolved, model, params))
    return tuple(out)


def _truncation(raw: Any, display: str, datasets: Mapping[str, DatasetRef], candidates: Sequence[Candidate],
                stage1_set: str) -> TruncationCheck | None:
    if raw is None:
        return None
    where = "truncation_check"
    raw = check_keys(raw, display, where, ("max_tokens", "subset", "set", "candidate", "resamples", "seed"))
    tokens = raw.get("max_tokens")
    if not isinstance(tokens, list) or len(tokens) != 2:
        raise InputError(display, f"{where}.max_tokens", f"required: two values, e.g. [2048, 4096] (got {tokens!r:.60})")
    short, long = (_int(v, display, f"{where}.max_tokens[{i}]") for i, v in enumerate(tokens))
    if short == long:
        raise InputError(display, f"{where}.max_tokens", f"the two values must differ (both {short})")
    subset = _int(raw.get("subset", 200), display, f"{where}.subset")
    role = raw.get("set", stage1_set)
    _known_set(role, datasets, display, f"{where}.set")
    candidate = raw.get("candidate")
    if candidate is not None and candidate not in [c.name for c in candidates]:
        raise InputError(display, f"{where}.candidate", f"no candidate named {candidate!r:.60}"
                         + suggest(str(candidate), [c.name for c in candidates]))
    resamples = _int(raw.get("resamples", 10_000), display, f"{where}.resamples", minimum=100, maximum=MAX_RESAMPLES)
    seed = _int(raw.get("seed", 0), display, f"{where}.seed", minimum=0)
    return TruncationCheck((min(short, long), max(short, long)), subset, role, candidate, resamples, seed)


# ----------------------------------------------------------------------------- statistics of one record file


@dataclass(frozen=True)
class SetStats:
    """One candidate on one set: accuracy with n, how answers were extracted
    (:func:`rlexp.core.answers.extract_answer`'s method per record), and truncation as the engine
    reported it (``finish_reason == "length"``, never a guess from the text)."""

    n: int
    correct: int
    boxed: int
    last_number: int
    failed: int  # parse failures: unparsed or no answer at all
    truncated: int

    @property
    def acc(self) -> float:
        return self.correct / self.n if self.n else 0.0

    def rate(self, count: int) -> float:
        return count / self.n if self.n else 0.0

    @property
    def boxed_rate(self) -> float:
        return self.rate(self.boxed)

    @property
    def last_number_rate(self) -> float:
        return self.rate(self.last_number)

    @property
    def fail_rate(self) -> float:
        return self.rate(self.failed)

    @property
    def truncation_rate(self) -> float:
        return self.rate(self.truncated)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acc": self.acc, "boxed_rate": self.boxed_rate,
                "last_number_rate": self.last_number_rate, "fail_rate": self.fail_rate,
                "truncation_rate": self.truncation_rate}


def set_stats(records: Iterable[Mapping[str, Any]]) -> SetStats:
    """Counts over eval records (``correct``, ``parse_method``, ``finish_reason``)."""
    n = correct = boxed = last = failed = truncated = 0
    for record in records:
        n += 1
        correct += int(bool(record.get("correct")))
        method = record.get("parse_method")
        boxed += method == "boxed"
        last += method == "last_number"
        failed += method in PARSE_FAILURES or method is None
        truncated += record.get("finish_reason") == "length"
    return SetStats(n, correct, boxed, last, failed, truncated)


# ----------------------------------------------------------------------------- ranking and selection


def band_distance_pp(acc: float, band: tuple[float, float]) -> float:
    """Percentage points from the band: 0 inside it (both ends included)."""
    low, high = band
    if acc < low:
        return round(100.0 * (low - acc), 9)
    if acc > high:
        return round(100.0 * (acc - high), 9)
    return 0.0


def _size_key(params: int | None) -> float:
    return math.inf if params is None else float(params)


def finalist_order(primary: Mapping[str, SetStats], params: Mapping[str, int | None],
                   criteria: Criteria) -> list[str]:
    """Candidates in the order stage 2 takes them: closest to the band (inside first), then the
    higher boxed rate, the lower parse-failure rate, the smaller model, the name."""
    return sorted(primary, key=lambda name: (band_distance_pp(primary[name].acc, criteria.band),
                                             -primary[name].boxed_rate, primary[name].fail_rate,
                                             _size_key(params.get(name)), name))


def accuracy_order(primary: Mapping[str, SetStats]) -> list[str]:
    """The ranking table's order: stage-1 accuracy, highest first (ties by name)."""
    return sorted(primary, key=lambda name: (-primary[name].acc, name))


@dataclass(frozen=True)
class Selection:
    candidate: str | None
    reason: str
    in_band: tuple[str, ...] = ()  # eligible finalists inside the band
    format_equivalent: tuple[str, ...] = ()  # of those, within the format tolerance of the best
    dropped: dict[str, str] = field(default_factory=dict)  # finalist -> why stage 2 dropped it

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "reason": self.reason, "in_band": list(self.in_band),
                "format_equivalent": list(self.format_equivalent), "dropped": dict(self.dropped)}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def format_params(params: int | None) -> str:
    if params is None:
        return "size unknown"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if params >= scale:
            return f"{params / scale:.3g}{unit}"
    return str(params)


def band_text(band: tuple[float, float]) -> str:
    return f"{100 * band[0]:g}–{100 * band[1]:g}%"


def stage2_drops(finalists: Sequence[str], stage2: Mapping[str, Mapping[str, SetStats]],
                 criteria: Criteria) -> dict[str, str]:
    """Finalists stage 2 drops: sanity accuracy below ``criteria.min_sanity_acc``."""
    dropped: dict[str, str] = {}
    if criteria.min_sanity_acc is None:
        return dropped
    for name in finalists:
        sanity = stage2.get(name, {}).get("sanity")
        if sanity is not None and sanity.acc < criteria.min_sanity_acc:
            dropped[name] = (f"sanity accuracy {_pct(sanity.acc)} (n={sanity.n}) is below "
                             f"{_pct(criteria.min_sanity_acc)}")
    return dropped


def select(finalists: Sequence[str], primary: Mapping[str, SetStats], params: Mapping[str, int | None],
           stage2: Mapping[str, Mapping[str, SetStats]], criteria: Criteria, stage1_set: str) -> Selection:
    """The selected candidate and its one-sentence reason (the rule is the module docstring's)."""
    dropped = stage2_drops(finalists, stage2, criteria)
    eligible = [name for name in finalists if name not in dropped]
    band = band_text(criteria.band)
    if not eligible:
        return Selection(None, f"no candidate selected: every finalist failed stage 2 "
                               f"({'; '.join(f'{k}: {v}' for k, v in dropped.items())})", dropped=dropped)
    inside = [n for n in eligible if band_distance_pp(primary[n].acc, criteria.band) == 0.0]
    if not inside:
        name = min(eligible, key=lambda n: (band_distance_pp(primary[n].acc, criteria.band),
                                            -primary[n].boxed_rate, primary[n].fail_rate,
                                            _size_key(params.get(n)), n))
        s = primary[name]
        side = "below" if s.acc < criteria.band[0] else "above"
        return Selection(name, f"{name}: no finalist is inside the headroom band {band} on {stage1_set}; it is the "
                               f"closest ({_pct(s.acc)}, n={s.n}, "
                               f"{band_distance_pp(s.acc, criteria.band):.1f} pp {side}), boxed "
                               f"{_pct(s.boxed_rate)}, parse failures {_pct(s.fail_rate)}.", dropped=dropped)
    tol = criteria.format_tolerance_pp / 100.0
    leader = max(inside, key=lambda n: (primary[n].boxed_rate, -primary[n].fail_rate))
    lead = primary[leader]
    # a small epsilon: rates are ratios of counts, and "within 2 pp" must include exactly 2 pp
    equivalent = [n for n in inside if primary[n].boxed_rate >= lead.boxed_rate - tol - 1e-12
                  and primary[n].fail_rate <= lead.fail_rate + tol + 1e-12]
    name = min(equivalent, key=lambda n: (_size_key(params.get(n)), -primary[n].boxed_rate,
                                          primary[n].fail_rate, n))
    s = primary[name]
    head = (f"{name}: inside the headroom band {band} on {stage1_set} ({_pct(s.acc)}, n={s.n}), boxed "
            f"{_pct(s.boxed_rate)}, parse failures {_pct(s.fail_rate)}")
    if len(inside) == 1:
        reason = f"{head}; the only finalist inside the band."
    elif len(equivalent) == 1:
        reason = f"{head}; the best answer format of the {len(inside)} finalists inside the band."
    else:
        others = [n for n in equivalent if n != name]
        reason = (f"{head}; its format is within {criteria.format_tolerance_pp:g} pp of "
                  f"{', '.join(others)}, and it is the smallest ({format_params(params.get(name))}).")
    return Selection(name, reason, tuple(inside), tuple(equivalent), dropped)


def truncation_verdict(short: int, long: int, comparison: Mapping[str, Any], arms: Mapping[str, Any]) -> str:
    """One sentence on the paired max_tokens comparison (``comparison``: the paired comparison's
    dict, base = the shorter budget)."""
    delta = comparison["delta_pp"]
    lo, hi = comparison["ci_pp"]
    p = comparison["mcnemar_p"]
    trunc_short = arms[str(short)]["truncation_rate"]
    trunc_long = arms[str(long)]["truncation_rate"]
    if p < 0.05:
        better = long if delta > 0 else short
        finding = f"max_tokens {better} is more accurate"
    else:
        finding = "no significant difference: the shorter budget costs nothing measurable"
    return (f"max_tokens {short} vs {long} on {comparison['n']} paired problems: Δ {delta:+.1f} pp "
            f"(b/c {comparison['b']}/{comparison['c']}, McNemar p {p:.3g}, 95% CI [{lo:+.1f}, {hi:+.1f}] pp); "
            f"truncated by finish_reason {_pct(trunc_short)} vs {_pct(trunc_long)} — {finding}.")
