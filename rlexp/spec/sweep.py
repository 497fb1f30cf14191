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
spec (strictly, through :func:`rlexp.experiment.files.load_yaml`) and checks every field before any
stage writes a file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.evaluation.answers import PARSE_FAILURES
from rlexp.evaluation.engine_table import engine_traits
from rlexp.experiment.files import load_yaml
from rlexp.experiment.layout import SWEEP_SPEC_NAME, SweepDir
from rlexp.spec import (
    SCHEMA_DRAFT,
    DatasetRef,
    EvalSettings,
    resolve_dataset,
    resolve_eval_settings,
    spec_section_rules,
    validate_spec_section,
)
from rlexp.spec.fields import (
    FRACTION,
    Field,
    Invalid,
    check,
    check_keys,
    integer,
    nullable,
    object_json,
    suggest,
    with_input_gate,
)

SWEEP_SETS = ("ood_primary", "id", "sanity")  # the eval sets a sweep may name (no pool, no in-run monitor)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_CANDIDATES = 1000
MAX_RESAMPLES = 10**6
MAX_PARAMS = 10**15


# ----------------------------------------------------------------------------- the spec's fields
#
# Each rule gives load_sweep's check, its error line and sweep_json_schema's entry; what one field
# cannot say alone (a set named under datasets, a candidate's name, low below high) load_sweep checks.


def _named(what: str) -> Field:
    def check_name(value: Any) -> str:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise Invalid(f"{value!r:.60} is not a valid {what} (letters, digits, _ . -)")
        return value

    return Field(check_name, {"type": "string", "pattern": _NAME_RE.pattern})


def _sweep_id(value: Any) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise Invalid(f"{value!r} is not a valid sweep id (letters, digits, _ . -)")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"must be a string (got {value!r:.60})")
    return value


def _candidate_list(value: Any) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise Invalid("required: a list of {name, model} (at least one)")
    if len(value) > MAX_CANDIDATES:
        raise Invalid(f"at most {MAX_CANDIDATES} candidates (got {len(value)})")
    return value


def _model(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise Invalid("required: a model directory or a hub name")
    return value


def _set_name(value: Any) -> str:
    if value not in SWEEP_SETS:
        raise Invalid(f"must be one of {', '.join(SWEEP_SETS)} (got {value!r:.60})")
    return value


def _set_list(value: Any) -> list[str]:
    # each name is checked by _SET, and against datasets, by load_sweep; then that none is twice
    if not isinstance(value, list):
        raise Invalid(f"must be a list of set names (got {value!r:.60})")
    return value


def _pair(example: str, item: Field) -> Field:
    """Two values, each checked by ``item`` (a wrong one is named by its index)."""

    def check_pair(value: Any) -> tuple[Any, Any]:
        if not isinstance(value, list) or len(value) != 2:
            raise Invalid(f"required: {example} (got {value!r:.60})")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except Invalid as exc:
                raise Invalid(str(exc), at=f"[{i}]") from None
        return out[0], out[1]

    return Field(check_pair, {"type": "array", "items": item.json, "minItems": 2, "maxItems": 2})


def _percentage_points(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise Invalid(f"must be a number of percentage points between 0 and 100 (got {value!r:.60})")
    return float(value)


_SET = Field(_set_name, {"enum": list(SWEEP_SETS)})
CANDIDATE_FIELDS: dict[str, Field] = {
    "name": _named("name").described("the candidate's label: its record folder, its MLflow child run"),
    "model": Field(_model, {"type": "string", "minLength": 1}).described(
        "a model directory (relative: to the experiment directory) or a hub name"),
    "params": integer(1, MAX_PARAMS).described("the parameter count (unset: counted from a local model's weights)"),
}
SWEEP_FIELDS: dict[str, Any] = {
    "id": Field(_sweep_id, {"type": "string", "pattern": _NAME_RE.pattern}).described(
        "the sweep id; must equal the directory name (defaults to it)"),
    "description": Field(_text, {"type": "string"}).described("free text"),
    "candidates": Field(_candidate_list, {"type": "array", "minItems": 1, "maxItems": MAX_CANDIDATES,
                                          "items": object_json(CANDIDATE_FIELDS, required=("name", "model"))}
                        ).described("the base models to compare"),
    "datasets": None,  # the attempt spec's dataset entries, for the sets a sweep evaluates: see _datasets_json
    "eval": None,  # the attempt spec's eval section
    "stages": {
        "stage1": {"set": _SET.described("the set every candidate is evaluated on"),
                   "limit": integer(1).described("the first N problems of the set (unset: all)")},
        "stage2": {"sets": Field(_set_list, {"type": "array", "items": _SET.json, "uniqueItems": True}).described(
                       "the finalists' sets (default: id and sanity, those under datasets)"),
                   "finalists": integer(1).described("how many candidates stage 2 evaluates, at most the "
                                                     "candidates (default 2)")},
    },
    "criteria": {
        "band": _pair("[low, high] accuracy fractions, e.g. [0.60, 0.70]", FRACTION).described(
            "the headroom band on the stage-1 set, as fractions"),
        "format_tolerance_pp": Field(_percentage_points, {"type": "number", "minimum": 0, "maximum": 100}
                                     ).described("format rates closer than this count as equal (default 2)"),
        "min_sanity_acc": FRACTION.described("stage 2 drops a finalist below this on the sanity set"),
    },
    "truncation_check": {
        "max_tokens": _pair("two values, e.g. [2048, 4096]", integer(1)).described(
            "the two completion budgets compared, paired, on the same problems"),
        "subset": integer(1).described("the first N problems of the set (default 200)"),
        "set": _SET.described("default: the stage-1 set"),
        "candidate": Field(_text, {"type": "string"}).described("default: the selected candidate"),
        "resamples": integer(100, MAX_RESAMPLES).described("bootstrap resamples (default 10000)"),
        "seed": integer(0).described("the bootstrap seed (default 0)"),
    },
}
_TOP_KEYS = tuple(SWEEP_FIELDS)
# keys the loader reads with a default when absent: a null is refused, not "not stated"
_NOT_NULL = {"stages.stage1": ("set",), "stages.stage2": ("sets", "finalists"),
             "criteria": ("format_tolerance_pp",), "truncation_check": ("subset", "set", "resamples", "seed")}
_REQUIRED = {"": ("candidates", "criteria"), "criteria": ("band",), "truncation_check": ("max_tokens",)}
_SECTIONS = {"stages": "stage 1 ranks every candidate on one set; stage 2 evaluates the finalists on the others",
             "stages.stage1": "every candidate, on one set", "stages.stage2": "the finalists, on the other sets",
             "criteria": "how the finalists and the selected candidate are chosen",
             "truncation_check": "a paired comparison of two max_tokens on one candidate (default: the selected one)"}


def sweep_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``sweep.yaml``, from :data:`SWEEP_FIELDS` and the attempt
    spec's ``datasets`` and ``eval`` sections; ``docs/sweep.schema.json`` holds it
    (``scripts/write-schemas``)."""
    entry = object_json(spec_section_rules("datasets")["ood_primary"], required=("path",))
    entry["properties"].pop("cluster")  # a sweep's comparisons take no cluster (load_sweep refuses one)
    shared = {
        "datasets": {"description": "the attempt spec's dataset entries (paths inside the experiment), for the "
                                    "sets a sweep evaluates", "type": "object", "additionalProperties": False,
                     "properties": {role: entry for role in SWEEP_SETS}},
        "eval": {"description": "the attempt spec's eval section: one eval configuration for every candidate",
                 **object_json(spec_section_rules("eval"))},
    }

    def section(rules: dict[str, Any], where: str) -> dict[str, Any]:
        properties = {}
        for name, rule in rules.items():
            path = f"{where}.{name}" if where else name
            schema = shared[name] if rule is None else section(rule, path) if isinstance(rule, dict) else rule.json
            if path in _SECTIONS:
                schema = {"description": _SECTIONS[path], **schema}
            keep = name in _REQUIRED.get(where, ()) or name in _NOT_NULL.get(where, ())
            properties[name] = schema if keep else nullable(schema)
        out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
        return out | ({"required": list(_REQUIRED[where])} if where in _REQUIRED else {})

    return with_input_gate({"$schema": SCHEMA_DRAFT, "title": "rlexp base-model sweep spec (sweep.yaml)",
                            "description": "which base model to start from: candidates evaluated with one eval "
                                           "configuration", **section(SWEEP_FIELDS, "")})


# ----------------------------------------------------------------------------- the loaded spec


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
    sweep_id = check(SWEEP_FIELDS["id"], raw.get("id") if raw.get("id") is not None else dir_id, display, "id")
    if sweep_id != dir_id:
        raise InputError(display, "id", f"{sweep_id!r} does not match its directory name {dir_id!r}")
    description = check(SWEEP_FIELDS["description"], raw.get("description") or "", display, "description")

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
        if entry.get("cluster") is not None:
            raise InputError(display, f"datasets.{role}.cluster", "a sweep ranks candidates on independent "
                                                                  "problems; a cluster column is read by an "
                                                                  "attempt's decision (attempt.yaml)")
        ref = resolve_dataset(role, entry, experiment_dir, eval_settings, display)
        if not ref.exists:
            raise InputError(display, f"datasets.{role}.path", f"{ref.path} does not exist")
        datasets[role] = ref

    rules = SWEEP_FIELDS["stages"]
    stages = check_keys(raw.get("stages"), display, "stages", rules)
    stage1 = check_keys(stages.get("stage1"), display, "stages.stage1", rules["stage1"])
    stage2 = check_keys(stages.get("stage2"), display, "stages.stage2", rules["stage2"])
    stage1_set = stage1.get("set", "ood_primary")
    _known_set(stage1_set, datasets, display, "stages.stage1.set")
    limit = stage1.get("limit")
    stage1_limit = None if limit is None else check(rules["stage1"]["limit"], limit, display, "stages.stage1.limit")
    default_sets = [r for r in ("id", "sanity") if r in datasets and r != stage1_set]
    sets = check(rules["stage2"]["sets"], stage2.get("sets", default_sets), display, "stages.stage2.sets")
    for i, role in enumerate(sets):
        _known_set(role, datasets, display, f"stages.stage2.sets[{i}]")
    if len(set(sets)) != len(sets):
        raise InputError(display, "stages.stage2.sets", "names a set twice")
    # the declared rule (>= 1) bounded by this sweep's own candidates
    finalists = check(integer(1, len(candidates)), stage2.get("finalists", min(2, len(candidates))), display,
                      "stages.stage2.finalists")

    rules = SWEEP_FIELDS["criteria"]
    criteria_raw = check_keys(raw.get("criteria"), display, "criteria", rules)
    low, high = check(rules["band"], criteria_raw.get("band"), display, "criteria.band")
    if not low < high:
        raise InputError(display, "criteria.band", f"low must be below high (got [{low:g}, {high:g}])")
    tolerance = check(rules["format_tolerance_pp"], criteria_raw.get("format_tolerance_pp", 2.0), display,
                      "criteria.format_tolerance_pp")
    min_sanity = criteria_raw.get("min_sanity_acc")
    if min_sanity is not None:
        min_sanity = check(rules["min_sanity_acc"], min_sanity, display, "criteria.min_sanity_acc")
        if "sanity" not in sets:
            raise InputError(display, "criteria.min_sanity_acc", "needs the sanity set in stages.stage2.sets")
    criteria = Criteria((low, high), tolerance, min_sanity)

    truncation = _truncation(raw.get("truncation_check"), display, datasets, candidates, stage1_set)
    return SweepSpec(
        id=sweep_id, description=description, candidates=candidates, datasets=datasets, eval=eval_settings,
        stage1_set=stage1_set, stage1_limit=stage1_limit, stage2_sets=tuple(sets), finalists=finalists,
        criteria=criteria, truncation=truncation, spec_path=spec_path.resolve(), sweep_dir=sweep_dir.root.resolve(),
        experiment_dir=experiment_dir, display_path=display,
    )


def _known_set(role: Any, datasets: Mapping[str, DatasetRef], display: str, where: str) -> None:
    check(_SET, role, display, where)
    if role not in datasets:
        raise InputError(display, where, f"{role} has no entry under datasets")


def _candidates(raw: Any, display: str, experiment_dir: Path, settings: EvalSettings) -> tuple[Candidate, ...]:
    raw = check(SWEEP_FIELDS["candidates"], raw, display, "candidates")
    out: list[Candidate] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"candidates[{i}]"
        entry = check_keys(entry, display, where, CANDIDATE_FIELDS)
        name = check(CANDIDATE_FIELDS["name"], entry.get("name"), display, f"{where}.name")
        if name in seen:
            raise InputError(display, f"{where}.name", f"{name!r} names two candidates")
        seen.add(name)
        model = check(CANDIDATE_FIELDS["model"], entry.get("model"), display, f"{where}.model")
        path = Path(model)
        if not path.is_absolute():
            path = experiment_dir / path
        resolved: Path | str = path.resolve() if path.exists() else model
        if getattr(engine_traits(settings.engine), "needs_local_model", False) and not (isinstance(resolved, Path) and (resolved / "config.json").is_file()):
            raise InputError(display, f"{where}.model", f"{model} is not a local model directory (config.json), "
                                                        "which the local engine needs")
        params = entry.get("params")
        if params is not None:
            params = check(CANDIDATE_FIELDS["params"], params, display, f"{where}.params")
        out.append(Candidate(name, resolved, model, params))
    return tuple(out)


def _truncation(raw: Any, display: str, datasets: Mapping[str, DatasetRef], candidates: Sequence[Candidate],
                stage1_set: str) -> TruncationCheck | None:
    if raw is None:
        return None
    where = "truncation_check"
    rules = SWEEP_FIELDS[where]
    raw = check_keys(raw, display, where, rules)
    short, long = check(rules["max_tokens"], raw.get("max_tokens"), display, f"{where}.max_tokens")
    if short == long:
        raise InputError(display, f"{where}.max_tokens", f"the two values must differ (both {short})")
    subset = check(rules["subset"], raw.get("subset", 200), display, f"{where}.subset")
    role = raw.get("set", stage1_set)
    _known_set(role, datasets, display, f"{where}.set")
    candidate = raw.get("candidate")
    if candidate is not None and candidate not in [c.name for c in candidates]:
        raise InputError(display, f"{where}.candidate", f"no candidate named {candidate!r:.60}"
                         + suggest(str(candidate), [c.name for c in candidates]))
    resamples = check(rules["resamples"], raw.get("resamples", 10_000), display, f"{where}.resamples")
    seed = check(rules["seed"], raw.get("seed", 0), display, f"{where}.seed")
    return TruncationCheck((min(short, long), max(short, long)), subset, role, candidate, resamples, seed)


# ----------------------------------------------------------------------------- statistics of one record file


@dataclass(frozen=True)
class SetStats:
    """One candidate on one set: accuracy with n, how answers were extracted
    (:func:`rlexp.evaluation.answers.extract_answer`'s method per record), and truncation as the engine
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
class FinalistChoice:
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
           stage2: Mapping[str, Mapping[str, SetStats]], criteria: Criteria, stage1_set: str) -> FinalistChoice:
    """The selected candidate and its one-sentence reason (the rule is the module docstring's)."""
    dropped = stage2_drops(finalists, stage2, criteria)
    eligible = [name for name in finalists if name not in dropped]
    band = band_text(criteria.band)
    if not eligible:
        return FinalistChoice(None, f"no candidate selected: every finalist failed stage 2 "
                               f"({'; '.join(f'{k}: {v}' for k, v in dropped.items())})", dropped=dropped)
    inside = [n for n in eligible if band_distance_pp(primary[n].acc, criteria.band) == 0.0]
    if not inside:
        name = min(eligible, key=lambda n: (band_distance_pp(primary[n].acc, criteria.band),
                                            -primary[n].boxed_rate, primary[n].fail_rate,
                                            _size_key(params.get(n)), n))
        s = primary[name]
        side = "below" if s.acc < criteria.band[0] else "above"
        return FinalistChoice(name, f"{name}: no finalist is inside the headroom band {band} on {stage1_set}; it is the "
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
    return FinalistChoice(name, reason, tuple(inside), tuple(equivalent), dropped)


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
