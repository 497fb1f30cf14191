"""MLflow mirror of the experiment directory (the directory stays the source of truth): one
attempt logged into its run.

- the full resolved recipe as params (``recipe.<key>``), the trainer, the backend;
- tags: parent, changed variable, pool SHA-256, SOP version, decision, git SHA, state;
- training metrics per step (:mod:`rlexp.tracking.metric_rows`), into the attempt's run
  (:mod:`rlexp.tracking.store`: one run per attempt, a new one after a rewind);
- the run's status follows ``launch/state.json`` (RUNNING while it runs, then
  FINISHED / FAILED / KILLED), also after a resume of a run that had failed;
- eval accuracy per checkpoint and set, the decision's Δ / p / CI as metrics, and the tags the
  runs table compares attempts by (:mod:`rlexp.tracking.comparison`);
- artifacts: plan, provenance, argv, decision, report and its plots.

``import mlflow`` costs about a second, so it happens inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import read_json
from rlexp.experiment.layout import AttemptDir
from rlexp.experiment.provenance import scrub
from rlexp.spec import is_credential_key
from rlexp.tracking.comparison import (
    SEED_GROUP_TAG,
    comparison_tags,
    ensure_comparison_view,
    group_seeds,
    log_datasets,
    role_metrics,
    seed_group,
)
from rlexp.tracking.metric_rows import (
    LOGGED_STEP_TAG,
    MAX_BATCH,
    POINT_METRIC_PREFIXES,
    logged_metrics,
    metric_name,
    rewound,
    sync_metric_rows,
)
from rlexp.tracking.store import (
    ATTEMPT_TAG,
    check_tracking_uri,
    resolve_tracking_uri,
    run_for_attempt,
    set_run_status,
    store_client,
    store_errors,
    store_lock,
    supersede_run,
)


def attempt_info(attempt_dir: Path) -> dict[str, Any]:
    """id, parent, change, recipe, trainer of an attempt: through ``rlexp.spec`` (parent chain
    resolved, defaults applied) when the spec loads, else the raw ``attempt.yaml``."""
    try:
        from rlexp.spec import load_attempt

        att = load_attempt(attempt_dir)
        trainer = {"name": att.trainer.name, "version": att.trainer.version, "gpus": att.trainer.gpus}
        return {"id": att.id, "parent": att.parent_id, "change": dict(att.change or {}),
                "recipe": dict(att.recipe), "trainer": trainer, "experiment_dir": Path(att.experiment_dir)}
    except ImportError:
        pass
    from rlexp.experiment.files import load_yaml

    raw = load_yaml(AttemptDir(attempt_dir).spec)
    if not isinstance(raw, dict):
        raise InputError(AttemptDir(attempt_dir).spec, None, "expected a mapping")
    return {"id": str(raw.get("id") or attempt_dir.name), "parent": raw.get("parent"),
            "change": dict(raw.get("change") or {}), "recipe": dict(raw.get("recipe") or {}),
            "trainer": dict(raw.get("trainer") or {}), "experiment_dir": attempt_dir.parent}


def _maybe_json(path: Path) -> Any:
    return read_json(path) if path.exists() else None


# --- logging -------------------------------------------------------------------------------------


def _training_keys_in_run(run) -> set[str]:
    """The run's metric keys that are not point metrics (eval accuracy, decision numbers)."""
    return {k for k in run.data.metrics if not k.startswith(POINT_METRIC_PREFIXES)}


def _log_single_metrics(client, run, values: Mapping[str, float]) -> None:
    """Point metrics (eval accuracy, Δ, p, CI): logged only when absent or changed, so a re-log
    adds no duplicate history entries."""
    from mlflow.entities import Metric

    current = run.data.metrics
    now = int(time.time() * 1000)
    fresh = [Metric(metric_name(k), float(v), now, 0) for k, v in values.items()
             if v is not None and current.get(metric_name(k)) != float(v)]
    for start in range(0, len(fresh), MAX_BATCH):
        client.log_batch(run.info.run_id, metrics=fresh[start : start + MAX_BATCH])


def _param_value(value: Any) -> str:
    text = " ".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
    return scrub(text)[:6000]


def log_attempt(attempt_dir: str | Path, tracking_uri: str | None = None, *, report_path: str | Path | None = None) -> str:
    """Mirror one attempt directory into MLflow; returns the run id (the same on every call).

    The whole mirror is one turn under the store lock: parallel ``report``s of one attempt each
    read what is logged and add the rest (params, dataset inputs, tags), and MLflow's SQL store
    inserts those after a check that two processes can pass at once (a UNIQUE constraint failure
    on ``params`` or ``datasets``). A SQLite store serialises writes anyway; others take no lock."""
    uri = check_tracking_uri(tracking_uri)
    with store_lock(uri), store_errors(uri):
        return _log_attempt(attempt_dir, tracking_uri, report_path=report_path)


def _params_and_tags(info: Mapping[str, Any], argv_doc: Mapping[str, Any], provenance: Mapping[str, Any],
                     state: Mapping[str, Any], decision: Mapping[str, Any] | None, existing: Mapping[str, str],
                     attempt_dir: Path) -> tuple[dict[str, str], dict[str, str], str | None]:
    """The run's params (recipe, trainer, backend) and tags (lineage, pool, commit, state, decision,
    seed group), and the seed group."""
    # params: immutable in MLflow, so only the missing ones are logged; a value that changed
    # since (an edited spec) is flagged in a tag instead of failing the whole log.
    # a credential-named key that the spec let through holds a count (e.g. a trainer's *_token_len_* key)
    params = {f"recipe.{k}": _param_value(v) for k, v in info["recipe"].items()
              if not is_credential_key(k) or (isinstance(v, int | float) and not isinstance(v, bool))}
    params.update({f"trainer.{k}": _param_value(v) for k, v in info["trainer"].items()})
    if argv_doc.get("backend"):
        params["launch.backend"] = str(argv_doc["backend"])
    changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)

    pool = (provenance.get("datasets") or {}).get("pool") or {}
    group = seed_group(attempt_dir, provenance)
    tags = {
        ATTEMPT_TAG: info["id"],
        "mlflow.runName": info["id"],
        "rlexp.parent": str(info["parent"] or ""),
        "rlexp.changed_variable": ",".join(sorted(info["change"])) or "none",
        "rlexp.pool_sha256": str(pool.get("sha256") or ""),
        "rlexp.git_sha": str((provenance.get("git") or {}).get("sha") or ""),
        "rlexp.state": str(state.get("state") or "not launched"),
    }
    if decision:
        tags["rlexp.decision"] = str(decision.get("decision", ""))
        tags["rlexp.sop_version"] = str(decision.get("sop_version", ""))
    if group:
        tags[SEED_GROUP_TAG] = group
    if changed:
        tags["rlexp.params_changed_after_logging"] = ",".join(changed)
    return params, tags, group


def _log_artifacts(client: Any, run_id: str, ad: AttemptDir, attempt_dir: Path,
                   report_path: str | Path | None) -> None:
    """The attempt's plan, provenance, argv, decision and guard verdicts, and the report (markdown,
    its plots and the HTML view MLflow's artifact pane renders)."""
    artifacts = [ad.plan, ad.launch.provenance,
                 ad.launch.argv, ad.decision]
    artifacts += sorted(ad.guards.dir.glob("*.json")) if ad.guards.dir.is_dir() else []
    for path in artifacts:
        if path.exists():
            client.log_artifact(run_id, str(path), artifact_path=path.parent.relative_to(attempt_dir).as_posix()
                                if path.parent != attempt_dir else None)
    if report_path is not None and Path(report_path).exists():
        report_path = Path(report_path)
        client.log_artifact(run_id, str(report_path), artifact_path="report")
        for png in sorted(report_path.parent.glob(f"{report_path.stem}_*.png")):
            client.log_artifact(run_id, str(png), artifact_path="report")
        import tempfile

        from rlexp.reporting import report_html

        with tempfile.TemporaryDirectory() as tmp:  # the HTML view MLflow's artifact pane renders
            html = Path(tmp) / f"{report_path.stem}.html"
            html.write_text(report_html(report_path), encoding="utf-8")
            client.log_artifact(run_id, str(html), artifact_path="report")


def _log_attempt(attempt_dir: str | Path, tracking_uri: str | None = None, *,
                 report_path: str | Path | None = None) -> str:
    from mlflow.entities import Param, RunTag

    ad = AttemptDir(attempt_dir)
    attempt_dir = ad.root  # the directory, also when given its attempt.yaml
    if not ad.spec.exists():
        raise InputError(ad.spec, None, "file not found")
    info = attempt_info(attempt_dir)
    uri = resolve_tracking_uri(tracking_uri)
    client = store_client(uri)
    run = run_for_attempt(client, Path(info["experiment_dir"]), info["id"], uri)
    run_id = run.info.run_id

    provenance = _maybe_json(ad.launch.provenance) or {}
    argv_doc = _maybe_json(ad.launch.argv) or {}
    state = _maybe_json(ad.launch.state) or {}
    decision = _maybe_json(ad.decision)

    params, tags, group = _params_and_tags(info, argv_doc, provenance, state, decision, run.data.params,
                                           attempt_dir)
    tag_list = [RunTag(k, scrub(v)) for k, v in tags.items()]
    # Parallel `report`s of one attempt: each reads the params logged so far and logs the rest; two
    # that read before either wrote would both insert a param (a UNIQUE constraint failure in
    # the SQL store), so the read and the write happen under the store lock, the read fresh.
    with store_lock(uri):
        existing = client.get_run(run_id).data.params
        new_params = [Param(k, v) for k, v in params.items() if k not in existing]
        for start in range(0, max(len(new_params), 1), 100):  # MLflow: at most 100 params per call
            client.log_batch(run_id, params=new_params[start : start + 100], tags=tag_list if start == 0 else [])

    metrics_path = ad.metrics
    rows: list[dict[str, Any]] = []
    if metrics_path.exists():
        from rlexp.training.metrics_file import read_metrics

        rows = read_metrics(metrics_path, allow_torn_tail=True)
    training_keys = _training_keys_in_run(run)
    if training_keys:
        with store_lock(uri):
            if rewound(rows, logged_metrics(client, run_id, training_keys)):
                run = supersede_run(client, run, info["id"], Path(info["experiment_dir"]), uri)
                run_id = run.info.run_id
                existing = run.data.params
                new_params = [Param(k, v) for k, v in params.items() if k not in existing]
                client.log_batch(run_id, params=new_params[:100], tags=tag_list)
                for start in range(100, len(new_params), 100):
                    client.log_batch(run_id, params=new_params[start : start + 100])
    if rows:
        last = sync_metric_rows(client, run_id, rows, uri)
        client.set_tag(run_id, LOGGED_STEP_TAG, str(last))

    from rlexp.environments.traces import log_episode_traces

    # an environment task's eval episodes, one trace each (nothing for single-turn attempts)
    log_episode_traces(client, uri, run.info.experiment_id, run_id, attempt_dir)

    selection = _maybe_json(ad.evals.selection) or {}
    point, role_tags = role_metrics(attempt_dir, selection, decision)
    with store_lock(uri):  # parallel loggers: each point value once
        _log_single_metrics(client, client.get_run(run_id), point)
    surface = {**role_tags, **comparison_tags(client, run, info, decision, uri)}
    client.log_batch(run_id, tags=[RunTag(k, scrub(v)) for k, v in surface.items()])
    log_datasets(client, run_id, provenance, Path(info["experiment_dir"]), attempt_dir)
    ensure_comparison_view(client, run.info.experiment_id)
    if group:
        # the runs table shows the group folded (MLflow 3.17's shared view state leaves runsExpanded
        # out, so the view cannot open it): one click on its expander shows the seeds' rows
        group_seeds(client, run.info.experiment_id, group, uri)

    # the run's MLflow status follows the launch state (a resumed run that had failed ends
    # FINISHED when the resume finishes), so the UI shows running/finished/failed/stopped runs
    status = {"running": "RUNNING", "finished": "FINISHED", "failed": "FAILED",
              "stopped": "KILLED"}.get(str(state.get("state")))
    set_run_status(client, run_id, status)

    _log_artifacts(client, run_id, ad, attempt_dir, report_path)
    return run_id


class LiveLogger:
    """Streams new metric rows of a running attempt into its run (used by ``rlexp launch``).

    Created after ``metrics.jsonl`` was cut back to the resume point, so the first
    :func:`log_attempt` moves to a new run when the old one holds steps past it."""

    def __init__(self, attempt_dir: str | Path, tracking_uri: str | None = None):
        self.uri = resolve_tracking_uri(tracking_uri)
        self.run_id = log_attempt(attempt_dir, self.uri)
        self.client = store_client(self.uri)
        set_run_status(self.client, self.run_id, "RUNNING")
        self.last = int(self.client.get_run(self.run_id).data.tags.get(LOGGED_STEP_TAG, "-1"))

    def log_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        last = sync_metric_rows(self.client, self.run_id, rows, self.uri)
        if last > self.last:
            self.last = last
            self.client.set_tag(self.run_id, LOGGED_STEP_TAG, str(last))
