"""The report stage: the one-page markdown report with its plots, mirrored to MLflow."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


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
    from rlexp.adapters.rendering import write_report
    from rlexp.stages.status import scrub_finished_log
    from rlexp.storage.layout import AttemptDir

    ad = AttemptDir(attempt)
    if reports_dir is not None:
        from rlexp.storage.files import check_output_dir

        check_output_dir(reports_dir, "--reports-dir")
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.adapters.tracking import check_tracking_uri

        check_tracking_uri(tracking_uri)  # a bad or dead store is refused before the report is written
    path = write_report(ad.root, reports_dir)
    scrub_finished_log(ad.root)  # a --no-follow run's log
    run_id = url = None
    if not (tracking_uri and tracking_uri.lower() in ("off", "none")):
        from rlexp.adapters.tracking import log_attempt

        run_id = log_attempt(ad.root, tracking_uri, report_path=path)
        url = runs_table_url(run_id, tracking_uri)
    plots = tuple(sorted(path.parent.glob(f"{path.stem}_*.png")))
    return ReportResult(path, plots, run_id, url)


def runs_table_url(run_id: str, tracking_uri: str | None, ui: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI's runs table of the run's experiment, opened on rlexp's comparison view (the
    tracking server itself when it is one, else `mlflow ui`'s default address)."""
    from rlexp.adapters.tracking import _client, comparison_url, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    run = _client(uri).get_run(run_id)
    return comparison_url(uri if uri.startswith(("http://", "https://")) else ui, run.info.experiment_id)
