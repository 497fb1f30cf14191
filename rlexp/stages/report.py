"""The report stage: the one-page markdown report with its plots, mirrored to MLflow.

:func:`gather` reads every file of the attempt the report can use into one typed object
(:class:`rlexp.reporting.ReportInputs`): the spec (recipe diff), ``launch/provenance.json``
(hashes), ``plan.json`` (the planned LR), ``metrics.jsonl`` (stability, monitor),
``eval/selection.json`` and the eval records (K=3 and baselines), ``decision.json`` (paired stats,
gates), ``guards/*.json``, and the parent and the family in the experiment. A missing piece stays
empty (the report of a half-finished attempt is still useful); a malformed one is an InputError
before anything is written. :mod:`rlexp.reporting` renders it: markdown, plots, HTML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.files import atomic_write_text, read_json, sha256_file
from rlexp.experiment.layout import AttemptDir, Checkpoint
from rlexp.experiment.records import eval_accuracies
from rlexp.reporting.inputs import ReportInputs
from rlexp.reporting.markdown import render_markdown
from rlexp.reporting.parent import compare_with_parent
from rlexp.reporting.plots import render_plots

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


@dataclass(frozen=True)
class ReportResult:
    report: Path
    plots: tuple[Path, ...]
    mlflow_run_id: str | None
    mlflow_url: str | None = None  # the runs table with the comparison columns shown

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["report"], doc["plots"] = str(self.report), [str(p) for p in self.plots]
        return doc


def report(attempt: str | Path, *, reports_dir: str | Path | None = None,
           tracking_uri: str | None = None) -> ReportResult:
    """Write ``reports/<experiment>/<attempt>.md`` (and its PNGs) and log the attempt to MLflow
    (``tracking_uri`` "off" skips MLflow)."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.stages.status import scrub_finished_log

    ad = AttemptDir(attempt)
    if reports_dir is not None:
        from rlexp.experiment.files import check_output_dir

        check_output_dir(reports_dir, "--reports-dir")
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.tracking.store import check_tracking_uri

        check_tracking_uri(tracking_uri)  # a bad or dead store is refused before the report is written
    path = write_report(ad.root, reports_dir)
    scrub_finished_log(ad.root)  # a --no-follow run's log
    run_id = url = None
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.tracking.runs import log_attempt

        run_id = log_attempt(ad.root, tracking_uri, report_path=path)
        url = runs_table_url(run_id, tracking_uri)
    plots = tuple(sorted(path.parent.glob(f"{path.stem}_*.png")))
    return ReportResult(path, plots, run_id, url)


def runs_table_url(run_id: str, tracking_uri: str | None, ui: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI's runs table of the run's experiment, opened on rlexp's comparison view (the
    tracking server itself when it is one, else `mlflow ui`'s default address)."""
    from rlexp.tracking.comparison import comparison_url
    from rlexp.tracking.store import resolve_tracking_uri, store_client

    uri = resolve_tracking_uri(tracking_uri)
    run = store_client(uri).get_run(run_id)
    return comparison_url(uri if uri.startswith(("http://", "https://")) else ui, run.info.experiment_id)


# ---------------------------------------------------------------------------- gathering

def gather(attempt_dir: str | Path) -> ReportInputs:
    """Read every input the report can use from an attempt directory."""
    from rlexp.spec import diff_against_parent, load_attempt
    from rlexp.training.metrics_file import read_metrics
    from rlexp.training.monitor import read_plan

    att = load_attempt(attempt_dir)
    attempt_dir = Path(att.attempt_dir)
    ad = AttemptDir(attempt_dir)
    inputs = ReportInputs(attempt_id=att.id, experiment=Path(att.experiment_dir).name,
                          experiment_dir=str(att.experiment_dir), parent=att.parent_id,
                          change=dict(att.change or {}))
    inputs.trainer = {"name": att.trainer.name, "version": att.trainer.version}
    if att.parent is not None:
        inputs.diff = [(d.key, d.parent, d.value, d.kind) for d in diff_against_parent(att)]
    inputs.decoding = {"temperature": att.eval.temperature, "n": att.eval.num_samples,
                       "max_tokens": att.eval.max_tokens, "top_p": att.eval.top_p, "engine": att.eval.engine,
                       "prompt_suffix": att.eval.prompt_suffix}
    inputs.provenance = ad.launch.read_provenance()
    recorded = (inputs.provenance or {}).get("datasets") or {}
    for role, ref in att.datasets.items():
        entry = recorded.get(role)
        at_launch = entry.get("sha256") if isinstance(entry, dict) else None
        now = sha256_file(ref.path) if ref.path is not None and ref.path.is_file() else None
        inputs.hashes[role] = at_launch or now
        if at_launch and now and at_launch != now:  # the file was edited after the run started
            inputs.hash_changed.append(role)
    inputs.argv = ad.launch.read_argv()
    inputs.plan = read_plan(attempt_dir)
    if ad.metrics.exists():
        inputs.metrics = read_metrics(ad.metrics)
    inputs.selection = ad.evals.read_selection()
    inputs.accuracies = eval_accuracies(attempt_dir)
    inputs.decision = ad.read_decision()
    guards = ad.guards.dir
    if guards.is_dir():
        for path in sorted(guards.glob("*.json")):
            doc = read_json(path)
            # verdict files only (rlexp.stages.guard.Verdict: name, passed, rule, numbers, notes,
            # details): guards/ also holds samples' metadata (e.g. g4_samples.meta.json); a file
            # named like a verdict must be one
            if not path.name.endswith(".meta.json") and not (isinstance(doc, dict)
                                                             and {"name", "passed", "rule"} <= doc.keys()):
                raise InputError(path, None, "not a guard verdict (an object with name, passed and rule)")
            if isinstance(doc, dict) and {"name", "passed", "rule"} <= doc.keys():
                if doc["passed"] not in (True, False, None):
                    raise InputError(path, "passed", f"must be true, false or null, got {doc['passed']!r}")
                inputs.guards[path.stem] = doc
        inputs.audit_review_pending = ad.guards.audit_review.exists()
    inputs.state = ad.launch.read_state()
    try:
        from rlexp.spec.sop import load_sop, shipped_sop

        # the thresholds of the SOP the decision was taken under, when it is a shipped version
        inputs.sop = shipped_sop((inputs.decision or {}).get("sop_sha256")) or load_sop()
        inputs.smoothing_window = inputs.sop.early_stop.smoothing_window
    except InputError:
        pass
    experiment_dir = Path(att.experiment_dir)
    inputs.commands_prefix = (f"experiments/{experiment_dir.name}/" if experiment_dir.resolve().parent.name
                              == "experiments" else f"{experiment_dir.name}/")
    inputs.sota_name = _sota_name(attempt_dir, inputs)
    _gather_vs_parent(att, inputs)
    _gather_family(att, inputs)
    return inputs


def _checkpoint_of(path: str | None) -> dict[str, Any] | None:
    """``<experiment>/<attempt>/checkpoints/global_step64_hf`` -> {attempt, checkpoint}; a folder
    there that is no adapter of rlexp's layout is named as it is."""
    if not path:
        return None
    parts = Path(path).parts
    if "checkpoints" in parts:
        i = len(parts) - 1 - parts[::-1].index("checkpoints")
        if 0 < i < len(parts) - 1:
            adapter = Checkpoint.of_adapter(parts[i + 1])
            return {"attempt": parts[i - 1], "checkpoint": parts[i + 1] if adapter is None else adapter.name}
    return None


def _sota_name(attempt_dir: Path, inputs: ReportInputs) -> dict[str, Any] | None:
    """Which attempt and checkpoint Baseline-SOTA was when this attempt was evaluated: the
    records' meta (the adapter they were made from), else the decision's pin, else sota.json."""
    from rlexp.experiment.records import meta_path, read_meta

    primary = "ood_primary"
    if inputs.sop is not None:
        primary = inputs.sop.primary.set_role
    records = AttemptDir(attempt_dir).evals.records("baseline_sota", primary)
    named = None
    if meta_path(records).exists():
        named = _checkpoint_of(read_meta(records).get("adapter_path"))
    if named is None:
        pin = (inputs.decision or {}).get("sota")
        if isinstance(pin, Mapping) and pin.get("attempt") and not (inputs.decision or {}).get("sota_moved"):
            named = {"attempt": pin["attempt"], "checkpoint": pin.get("checkpoint")}
    if named is None and ("baseline_sota", primary) in inputs.accuracies:
        from rlexp.experiment.ledger import read_sota

        pin = read_sota(AttemptDir(attempt_dir).experiment.root)
        named = {"attempt": pin.attempt, "checkpoint": pin.checkpoint} if pin else None
    if named is not None:
        acc = inputs.accuracies.get(("baseline_sota", primary))
        named["acc"] = acc["acc"] if acc else None
    return named


def _gather_vs_parent(att: Attempt, inputs: ReportInputs) -> None:
    if att.parent is None:
        inputs.vs_parent_note = "a root attempt: no parent to compare with"
        return
    inputs.vs_parent = compare_with_parent(att.attempt_dir, inputs.sop)
    if not inputs.vs_parent:
        inputs.vs_parent_note = (f"no primary-set records of the same checkpoint roles in {att.parent_id} and this "
                                 f"attempt (`rlexp eval {inputs.commands_prefix}{att.parent_id}`)")


def _gather_family(att: Attempt, inputs: ReportInputs) -> None:
    """The attempt's family in the experiment: its parent, its seed siblings (same recipe and pool
    SHA-256, another seed: ``decision.json``'s recipe/pool digests) and its children."""
    from rlexp.experiment.layout import ExperimentDir
    from rlexp.training.metrics_file import read_metrics
    from rlexp.training.monitor import monitor_points

    mine = inputs.decision or {}
    members: list[dict[str, Any]] = []
    for other in ExperimentDir(att.experiment_dir).attempts():
        try:
            from rlexp.experiment.files import load_yaml

            spec = load_yaml(other.spec)
        except InputError:
            continue
        if not isinstance(spec, Mapping):
            continue
        other_id = str(spec.get("id") or other.id)
        decision = other.read_decision() if other.decision.exists() else None
        decision = decision if isinstance(decision, Mapping) else {}
        if other_id == att.id:
            relation = "this attempt"
        elif other_id == att.parent_id:
            relation = "parent"
        elif spec.get("parent") == att.id:
            relation = "child"
        elif (mine.get("recipe_sha256") and decision.get("recipe_sha256") == mine.get("recipe_sha256")
              and decision.get("pool_sha256") == mine.get("pool_sha256")):
            relation = "seed sibling"
        else:
            continue
        primary_ck = decision.get("primary_checkpoint")
        numbers = (decision.get("checkpoints") or {}).get(primary_ck) or {}
        members.append({"attempt": other_id, "relation": relation, "change": dict(spec.get("change") or {}),
                        "seed": decision.get("seed"), "decision": decision.get("decision"),
                        "checkpoint": primary_ck, "delta_pp": numbers.get("delta_pp"),
                        "acc": numbers.get("acc_new"), "baseline": decision.get("baseline")})
        if other.metrics.exists():
            points = monitor_points(read_metrics(other.metrics))
            if points:
                inputs.family_monitor[other_id] = points
    order = {"parent": 0, "this attempt": 1, "seed sibling": 2, "child": 3}
    inputs.family = sorted(members, key=lambda m: (order[m["relation"]], m["attempt"]))


def default_reports_dir(experiment_dir: Path) -> Path:
    """``reports/`` beside the ``experiments/`` folder that holds the experiment (the project
    layout), else ``reports/`` in the working directory."""
    experiment_dir = Path(experiment_dir).resolve()
    if experiment_dir.parent.name == "experiments":
        return experiment_dir.parent.parent / "reports"
    return Path("reports")


def write_report(attempt_dir: str | Path, reports_dir: str | Path | None = None) -> Path:
    """Render ``<reports_dir>/<experiment>/<attempt>.md`` and its PNGs; returns the markdown path."""
    inputs = gather(attempt_dir)
    if reports_dir is None:
        reports_dir = default_reports_dir(Path(inputs.experiment_dir))
    out_dir = Path(reports_dir) / inputs.experiment
    plots = render_plots(inputs, out_dir, inputs.attempt_id)
    text = render_markdown(inputs, plots)
    from rlexp.reporting.episodes import episode_section

    text += episode_section(attempt_dir, plots=plots)  # empty unless the attempt is an environment task
    return atomic_write_text(out_dir / f"{inputs.attempt_id}.md", text)
