"""The SOP in force, loaded from ``sop/sop-*.yaml``: every threshold the gates and the
guardrails (G0-G5, the spike log, the parser audit) use, as data.

Gates, ``rlexp.stages.guard`` and ``rlexp.training.monitor`` never hold numbers of their own; they read
them from a :class:`Sop`. Each decision
records ``sop.version`` and ``sop.sha256`` (of the file's bytes), so a decision can always be
traced to the exact rules it was taken under. Changing a number means writing a new file.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from rlexp.errors import InputError
from rlexp.experiment.files import load_yaml, sha256_file
from rlexp.spec.fields import (
    MAX_SPEC_INT,
    SCHEMA_DRAFT,
    STRING,
    Field,
    check,
    integer,
    number,
    one_of,
    suggest,
    with_input_gate,
)

# The SOP files are package data: the repository keeps them at its top level (``sop/``, the rules
# as versioned data) and the build maps that folder onto the package ``rlexp.sopdata``
# (pyproject.toml), so a wheel carries them and an editable install reads the repository's folder.
SOP_PACKAGE = "rlexp.sopdata"
DEFAULT_SOP_NAME = "sop-v2.1-final.yaml"


def _sop_dir() -> Path:
    """The folder holding the shipped SOP files: ``rlexp/sopdata`` in an installed wheel, the
    repository's own ``sop/`` in a checkout (an editable install maps ``rlexp.sopdata`` there too),
    else wherever ``importlib.resources`` finds the package. The two folders are looked for first:
    importlib.resources costs more than ``rlexp plan`` spends on the SOP (it is imported at start)."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "sopdata", package.parent / "sop"):
        if (folder / DEFAULT_SOP_NAME).is_file():
            return folder
    from importlib import resources

    # pip installs a wheel unpacked, so the package is a real folder on disk (never a zip member);
    # the SOP's path is recorded in every decision.
    return Path(str(resources.files(SOP_PACKAGE)))


SOP_DIR = _sop_dir()
DEFAULT_SOP = SOP_DIR / DEFAULT_SOP_NAME


@dataclass(frozen=True, kw_only=True)
class _Section:
    """A section of the SOP file: every key declared, typed strictly (an integer is no float's
    stand-in the other way round, a bool is no number, a string no number), numbers finite.

    Built from the YAML mapping by :func:`_build`, which names the file and the key path of the
    first thing wrong. (Standard library only: ``rlexp plan`` reads the SOP and must start fast.)
    """

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class PrimarySettings(_Section):
    set_role: str = "ood_primary"
    secondary_role: str = "id"
    sanity_role: str = "sanity"
    decision_baseline: Literal["baseline_sota", "baseline_s0"] = "baseline_sota"
    fallback_baseline: Literal["baseline_sota", "baseline_s0"] = "baseline_s0"


@dataclass(frozen=True, kw_only=True)
class BootstrapSettings(_Section):
    resamples: int
    confidence: float
    method: Literal["percentile", "bca", "newcombe"]
    seed: int


@dataclass(frozen=True, kw_only=True)
class Gate1Thresholds(_Section):
    min_delta_pp: float
    max_mcnemar_p: float
    min_ci_low_pp: float


@dataclass(frozen=True, kw_only=True)
class Gate2Thresholds(_Section):
    min_seeds: int
    min_each_delta_pp: float
    min_mean_delta_pp: float
    gold_mean_delta_pp: float
    # which Δ of each seed the replication reads: the selected checkpoint's raw Δ (v2.1-final as
    # written) or its selection-adjusted estimate (rlexp.protocol.selection), free of the winner's curse
    estimate: Literal["raw", "selection_adjusted"] = "raw"


@dataclass(frozen=True, kw_only=True)
class IdGuardrail(_Section):
    min_delta_pp: float
    relaxed_min_delta_pp: float
    relaxed_when_mean_ood_delta_pp: float


@dataclass(frozen=True, kw_only=True)
class Stop3Thresholds(_Section):
    max_delta_pp: float
    not_significant_p: float
    consecutive_attempts: int
    gray_zone_low_pp: float
    gray_zone_high_pp: float


@dataclass(frozen=True, kw_only=True)
class EarlyStopSettings(_Section):
    smoothing_window: int
    patience_evals: int
    min_improvement_pp: float


@dataclass(frozen=True, kw_only=True)
class CheckpointSettings(_Section):
    k: int
    multiplicity: Literal["holm"]
    decide_on: Literal["per_checkpoint", "holm"]


@dataclass(frozen=True, kw_only=True)
class ClaimCalibrationRecord(_Section):
    """What ``rlexp sop calibrate-claim`` measured for this version's claim rule (STOP-1), under the
    model of ``rlexp sop calibrate`` (sop/README.md): the targets it was calibrated to and the rates
    it reached, each the worst case over the checkpoint correlations simulated. Measured figures
    about the rules, not rules: ``decide`` and the report quote them."""

    below_effect_pp: float           # a true Δ at or below this ...
    max_rate_below: float            # ... reaches STOP-1 at most at this rate (the target)
    at_effect_pp: float              # a true Δ of this ...
    min_rate_at: float               # ... reaches STOP-1 at least at this rate (the target)
    rate_below: float                # measured: the largest STOP-1 rate at a true Δ <= below_effect_pp
    rate_at: float                   # measured: the smallest STOP-1 rate at at_effect_pp
    mc_se: float                     # the larger Monte-Carlo standard error of the two
    sims: int                        # simulated studies per effect and correlation
    seed: int


@dataclass(frozen=True, kw_only=True)
class ParserAuditSettings(_Section):
    max_misparse_rate: float
    sample_size: int


@dataclass(frozen=True, kw_only=True)
class G0Settings(_Section):
    samples: int


@dataclass(frozen=True, kw_only=True)
class G1Settings(_Section):
    max_discordant: int


@dataclass(frozen=True, kw_only=True)
class G2Settings(_Section):
    problems: int
    min_boxed: float
    max_fail: float
    max_truncation: float


@dataclass(frozen=True, kw_only=True)
class G3Settings(_Section):
    smoke_steps: int
    step_time_max_ratio: float


@dataclass(frozen=True, kw_only=True)
class G4Settings(_Section):
    k: int
    temperature: float
    min_pass_at_k: float


@dataclass(frozen=True, kw_only=True)
class G5Settings(_Section):
    at_step: int
    lr_rel_tolerance: float
    reward_stuck_low: float
    reward_stuck_high: float


@dataclass(frozen=True, kw_only=True)
class SpikeSettings(_Section):
    grad_norm: float


@dataclass(frozen=True, kw_only=True)
class EnvErrorSettings(_Section):
    """Environment tasks: episodes that end in an environment error are left out of training; a run
    whose share of them, averaged over the last ``window`` logged steps, passes ``max_rate`` is
    stopped (the environment, not the policy, is failing)."""

    max_rate: float
    window: int


@dataclass(frozen=True, kw_only=True)
class GuardrailSettings(_Section):
    """The guardrails G0-G5 and the spike log: checks around a run, not decisions."""

    g0: G0Settings
    g1: G1Settings
    g2: G2Settings
    g3: G3Settings
    g4: G4Settings
    g5: G5Settings
    spikes: SpikeSettings
    env_errors: EnvErrorSettings


@dataclass(frozen=True, kw_only=True)
class FaultTreeSettings(_Section):
    passk_gap_pp: float
    trend_min_pp: float
    late_peak_fraction: float
    lr_low_fraction: float
    ratio_tail_shrink: float


@dataclass(frozen=True, kw_only=True)
class MismatchSettings(_Section):
    """The rollout engine's log-probs against the trainer's (``rollout_kl``: the token mean of
    log π_rollout − log π_train over the response, as OpenRLHF's ``vllm_kl`` and verl's
    ``rollout_corr/kl`` log it; ``rollout_logp_diff_mean``: the token mean of |Δ log p|, TRL's
    ``sampling/sampling_logp_difference/mean``)."""

    kl_warn_above: float
    kl_stop_above: float
    logp_diff_warn_above: float
    logp_diff_stop_above: float
    stop_after_steps: int  # the stop fires after this many logged steps in a row above the stop level


@dataclass(frozen=True, kw_only=True)
class ResumeSettings(_Section):
    lr_rel_tolerance: float  # the logged LR after a resume against the plan's LR at that step


@dataclass(frozen=True, kw_only=True)
class StalenessSettings(_Section):
    warn_above_versions: int  # a batch generated more policy versions behind than this: a warning


@dataclass(frozen=True, kw_only=True)
class RunHealthSettings(_Section):
    """Run health from the trainers' own logs: training–inference mismatch, resume integrity,
    off-policy staleness (in the run, and on any run's logs through ``rlexp import-run``)."""

    mismatch: MismatchSettings
    resume: ResumeSettings
    staleness: StalenessSettings


@dataclass(frozen=True, kw_only=True)
class _SopFile(_Section):
    version: str
    source: str = ""
    primary: PrimarySettings = field(default_factory=PrimarySettings)
    bootstrap: BootstrapSettings
    gate_1a: Gate1Thresholds
    gate_1b: Gate1Thresholds
    gate_2: Gate2Thresholds
    id_guardrail: IdGuardrail
    stop_3: Stop3Thresholds
    early_stop: EarlyStopSettings
    checkpoints: CheckpointSettings
    parser_audit: ParserAuditSettings
    fault_tree: FaultTreeSettings
    guardrails: GuardrailSettings
    run_health: RunHealthSettings
    claim_calibration: ClaimCalibrationRecord | None = None   # absent: the claim rule was not calibrated


@dataclass(frozen=True, kw_only=True)
class Sop(_SopFile):
    """The validated SOP plus where it came from (``path``) and the SHA-256 of its bytes."""

    path: str
    sha256: str


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _build(cls: type, data: Any, where: str | None, path: Path) -> Any:
    """``cls`` from the mapping ``data`` (at key path ``where``), strictly: see :class:`_Section`."""
    if not isinstance(data, dict):
        raise InputError(path, where, f"expected a mapping, got {type(data).__name__}")
    declared = [f for f in fields(cls) if f.name not in ("path", "sha256")]
    names = {f.name for f in declared}
    for key in data:
        if key not in names:
            raise InputError(path, _join(where, str(key)), "unknown key" + suggest(str(key), sorted(names)))
    values = {}
    for f in declared:
        key = _join(where, f.name)
        if f.name in data:
            values[f.name] = _value(_hints(cls)[f.name], data[f.name], key, path)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise InputError(path, key, "missing")
    return cls(**values)


def _value(kind: Any, value: Any, key: str, path: Path) -> Any:
    kind = _section_of(kind) or kind
    if is_dataclass(kind):
        return _build(kind, value, key, path)
    return check(_rule(kind, key), value, path, key)


def _section_of(kind: Any) -> Any:
    """The section class of an optional section (``Section | None``), else None."""
    args = getattr(kind, "__args__", ())
    if type(None) in args:
        found = [a for a in args if is_dataclass(a)]
        return found[0] if found else None
    return None


_RULES = {int: integer(), float: number(text=False), str: STRING}


def _rule(kind: Any, key: str) -> Field:
    """The rule of a SOP field, from its type: the rules every user-written file is checked with
    (rlexp.spec.fields), strict as the SOP is (no numeric text, no bool for a number)."""
    if get_origin(kind) is Literal:
        return one_of(*get_args(kind))
    if kind in _RULES:
        return _RULES[kind]
    raise TypeError(f"SOP field {key}: no rule for {kind!r}")  # a declaration this module cannot check


def _join(where: str | None, key: str) -> str:
    return f"{where}.{key}" if where else key


def load_sop(path: str | Path | None = None) -> Sop:
    """Load and validate a SOP file (default: the version in force, ``sop/sop-v2.1-final.yaml``).

    Unknown keys, missing keys, wrong types and non-finite numbers are :class:`InputError`
    naming the file and the key path.
    """
    path = Path(path) if path is not None else DEFAULT_SOP
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "expected a mapping at the top level")
    if "path" in data or "sha256" in data:
        raise InputError(path, "path" if "path" in data else "sha256", "reserved key: computed by rlexp")
    parsed = _build(_SopFile, data, None, path)
    _check_consistency(parsed, path)
    return Sop(**{f.name: getattr(parsed, f.name) for f in fields(_SopFile)}, path=str(path),
               sha256=sha256_file(path))


def shipped_sop(sha256: Any) -> Sop | None:
    """The shipped SOP file (``sop/sop-*.yaml``) whose bytes have this SHA-256, or None: what a
    decision was taken under (``decision.json``'s ``sop_sha256``), for reading its thresholds later."""
    if not isinstance(sha256, str):
        return None
    for path in sorted(SOP_DIR.glob("sop-*.yaml")):
        if sha256_file(path) == sha256:
            return load_sop(path)
    return None


class _Bound:
    """A bound of one SOP number: checked once every type is, and stated in the JSON Schema. (A plain
    class: a NamedTuple costs ~0.1 ms of ``rlexp plan``'s start-up, which imports this module.)"""

    __slots__ = ("key", "message", "low", "high", "low_open", "high_open", "field", "below")

    def __init__(self, key: str, message: str, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, field: str | None = None,
                 below: str | None = None) -> None:
        self.key = key  # the dotted key path
        self.message = message  # {value}: the value (24 characters at most)
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open
        self.field = field  # the field the message names (default: key)
        self.below = below  # another key this one must not exceed (high_open: must stay below)


def _at_least(key: str, low: float) -> _Bound:
    return _Bound(key, f"must be >= {low}", low=low)


def _at_most(key: str, high: int) -> _Bound:
    # a count drives an allocation or a loop (resamples x n indices): past these the run exhausts
    # memory or fails deep inside
    return _Bound(key, f"must be at most {high}, got {{value}}", high=high)


def _fraction(key: str) -> _Bound:
    return _Bound(key, "must be a fraction in [0, 1]", 0.0, 1.0)


_EARLY_STOP = "smoothing_window and patience_evals must be >= 1"
# Numbers that are individually well typed but out of range, or contradict each other: checked in
# this order (the first one wrong is the error line), and the JSON Schema's bounds.
_BOUNDS = (
    _Bound("gate_1a.max_mcnemar_p", "must be in (0, 1]", 0.0, 1.0, low_open=True),
    _Bound("gate_1b.max_mcnemar_p", "must be in (0, 1]", 0.0, 1.0, low_open=True),
    _Bound("bootstrap.confidence", "must be in (0.5, 1)", 0.5, 1.0, low_open=True, high_open=True),
    _Bound("bootstrap.resamples", "must be at least 100", low=100),
    _Bound("early_stop.smoothing_window", _EARLY_STOP, low=1, field="early_stop"),
    _Bound("early_stop.patience_evals", _EARLY_STOP, low=1, field="early_stop"),
    _at_least("checkpoints.k", 1),
    _at_least("gate_2.min_seeds", 1),
    _Bound("stop_3.gray_zone_low_pp", "must not exceed gray_zone_high_pp", below="stop_3.gray_zone_high_pp"),
    _fraction("parser_audit.max_misparse_rate"),
    _fraction("claim_calibration.max_rate_below"),
    _fraction("claim_calibration.min_rate_at"),
    _fraction("claim_calibration.rate_below"),
    _fraction("claim_calibration.rate_at"),
    _fraction("claim_calibration.mc_se"),
    _at_least("claim_calibration.sims", 1),
    _Bound("claim_calibration.below_effect_pp", "must be below at_effect_pp", high_open=True,
           below="claim_calibration.at_effect_pp"),
    _at_least("parser_audit.sample_size", 1),
    _at_least("guardrails.g0.samples", 1),
    _at_least("guardrails.g1.max_discordant", 0),
    _at_least("guardrails.g2.problems", 1),
    _at_least("guardrails.g3.smoke_steps", 1),
    _at_least("guardrails.g3.step_time_max_ratio", 1.0),
    _at_least("guardrails.g4.k", 1),
    _at_least("guardrails.g5.at_step", 1),
    _fraction("guardrails.env_errors.max_rate"),
    _at_least("guardrails.env_errors.window", 1),
    _at_most("bootstrap.resamples", 1_000_000),
    _at_most("checkpoints.k", 1000),
    _at_most("gate_2.min_seeds", 1000),
    _at_most("early_stop.smoothing_window", 1_000_000),
    _at_most("early_stop.patience_evals", 1_000_000),
    _at_most("parser_audit.sample_size", 1_000_000),
    _at_most("guardrails.g0.samples", 10_000),
    _at_most("guardrails.g2.problems", 10_000_000),
    _at_most("guardrails.g3.smoke_steps", 1_000_000),
    _at_most("guardrails.g4.k", 10_000),
    _at_most("guardrails.g5.at_step", 1_000_000_000),
    # a seed feeds numpy's seeding (0 .. 2**32-1)
    _Bound("bootstrap.seed", f"must be an integer from 0 to {2**32 - 1}, got {{value}}", 0, 2**32 - 1),
    _fraction("guardrails.g2.min_boxed"),
    _fraction("guardrails.g2.max_fail"),
    _fraction("guardrails.g2.max_truncation"),
    _fraction("guardrails.g4.min_pass_at_k"),
    _fraction("guardrails.g5.lr_rel_tolerance"),
    _fraction("guardrails.g5.reward_stuck_low"),
    _fraction("guardrails.g5.reward_stuck_high"),
    _Bound("guardrails.g5.reward_stuck_low", "must be below reward_stuck_high", high_open=True,
           below="guardrails.g5.reward_stuck_high"),
    _Bound("guardrails.g4.temperature", "must be > 0 (pass@k needs sampling)", low=0.0, low_open=True),
    _Bound("guardrails.spikes.grad_norm", "must be > 0", low=0.0, low_open=True),
    _Bound("run_health.mismatch.kl_warn_above", "must be > 0", low=0.0, low_open=True),
    _Bound("run_health.mismatch.kl_warn_above", "must not exceed kl_stop_above",
           below="run_health.mismatch.kl_stop_above"),
    _Bound("run_health.mismatch.logp_diff_warn_above", "must be > 0", low=0.0, low_open=True),
    _Bound("run_health.mismatch.logp_diff_warn_above", "must not exceed logp_diff_stop_above",
           below="run_health.mismatch.logp_diff_stop_above"),
    _at_least("run_health.mismatch.stop_after_steps", 1),
    _at_most("run_health.mismatch.stop_after_steps", 1_000_000),
    _fraction("run_health.resume.lr_rel_tolerance"),
    _at_least("run_health.staleness.warn_above_versions", 0),
    _at_most("run_health.staleness.warn_above_versions", 1_000_000),
)


def _at(sop: Any, key: str) -> Any:
    for part in key.split("."):
        if sop is None:
            return None
        sop = getattr(sop, part)
    return sop


def _out_of_bounds(bound: _Bound, value: float, sop: Any) -> bool:
    low, high = bound.low, _at(sop, bound.below) if bound.below else bound.high
    if low is not None and (value <= low if bound.low_open else value < low):
        return True
    return high is not None and (value >= high if bound.high_open else value > high)


def _check_consistency(sop: _SopFile, path: Path) -> None:
    """Numbers that are individually valid but out of their range or contradict each other."""
    for bound in _BOUNDS:
        value = _at(sop, bound.key)
        if value is None:  # a key of an optional section the file leaves out
            continue
        if _out_of_bounds(bound, value, sop):
            raise InputError(path, bound.field or bound.key, bound.message.format(value=str(value)[:24]))


def sop_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a SOP file, from the sections' declared types and
    :data:`_BOUNDS` (all but the bounds between two keys); ``docs/sop.schema.json`` holds it
    (``scripts/write-schemas``)."""
    bounds: dict[str, dict[str, Any]] = {}
    for bound in _BOUNDS:
        if bound.below:
            continue
        stated = bounds.setdefault(bound.key, {})
        if bound.low is not None:
            stated["exclusiveMinimum" if bound.low_open else "minimum"] = bound.low
        if bound.high is not None:
            stated["exclusiveMaximum" if bound.high_open else "maximum"] = bound.high

    def section(cls: type, where: str | None) -> dict[str, Any]:
        properties = {}
        for f in fields(cls):
            key, kind = _join(where, f.name), _hints(cls)[f.name]
            kind = _section_of(kind) or kind
            properties[f.name] = (section(kind, key) if is_dataclass(kind)
                                  else {**_rule(kind, key).json, **bounds.get(key, {})})
            if kind is int and properties[f.name].get("maximum", 0) > MAX_SPEC_INT:
                properties[f.name]["maximum"] = MAX_SPEC_INT  # the input gate's limit comes first
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        return {"type": "object", "additionalProperties": False, "properties": properties, "required": required}

    return with_input_gate({"$schema": SCHEMA_DRAFT, "title": "rlexp SOP (sop/sop-*.yaml)",
                            "description": "every threshold the gates and the guardrails use, as data "
                                           "(sop/README.md explains each rule)", **section(_SopFile, None)})
