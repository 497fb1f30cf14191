"""MLflow mirror of the experiment directory (the directory stays the source of truth).

- one MLflow experiment per experiment directory (named after it), one run per attempt, found
  again by the tag ``rlexp.attempt_id``: logging an attempt twice updates its run;
- the full resolved recipe as params (``recipe.<key>``), the trainer, the backend;
- tags: parent, changed variable, pool SHA-256, SOP version, decision, git SHA, state;
- a rung's seed siblings (same parent, same recipe but the seed, same pool) nested under one group
  run (``mlflow.parentRunId``): MLflow's nesting for grouping only; lineage stays a tag;
- training metrics per global step through ``log_batch``, each stamped with the trainer's own
  time of the step (``time`` of ``metrics.jsonl``; rows without one get the time of logging) (at most 1000 values a call: one call
  per value is ~40x slower, see benchmarks/bench_mlflow_logging.py). Logging is idempotent:
  the (key, step) pairs already in the run are read back from MLflow and only the missing ones
  are sent, so a launcher killed between a batch and its bookkeeping never duplicates a row;
- MLflow cannot delete metrics: when ``metrics.jsonl`` was rewound past steps the run already
  holds (a resume from an earlier checkpoint, or from step 0), the attempt is logged into a new
  run and the old one is tagged ``rlexp.superseded`` (and no longer carries the attempt tag);
- the run's status follows ``launch/state.json`` (RUNNING while it runs, then
  FINISHED / FAILED / KILLED), also after a resume of a run that had failed;
- eval accuracy per checkpoint and set, the decision's Δ / p / CI as metrics (names never hold
  ``@`` or parentheses: MLflow rejects them);
- artifacts: plan, provenance, argv, decision, report and its plots.

``import mlflow`` costs about a second, so it happens inside the functions. The default store is
``sqlite:///mlflow.db`` in the working directory; it is created once under a file lock, because
several processes creating a SQLite store at once crash in schema migration. Creating an
attempt's run and logging its metrics happen under the same lock, so parallel loggers of one
attempt (``rlexp report`` beside a live launch) neither create two runs nor log a step twice; on
other stores a run created twice by a race is resolved to the oldest one.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.files import read_json
from rlexp.experiment.layout import STEP_TIME_KEY, AttemptDir, checkpoint_name, checkpoint_step
from rlexp.experiment.provenance import scrub
from rlexp.experiment.records import eval_accuracies
from rlexp.spec import is_credential_key

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
ATTEMPT_TAG = "rlexp.attempt_id"
LOGGED_STEP_TAG = "rlexp.metrics_logged_through"
SUPERSEDED_TAG = "rlexp.superseded"             # "true" on a run replaced after a rewind
SUPERSEDED_ATTEMPT_TAG = "rlexp.superseded_attempt"
SUPERSEDED_BY_TAG = "rlexp.superseded_by"
SEED_GROUP_TAG = "rlexp.seed_group"   # same parent, same recipe but the seed, same pool: one rung's seeds
GROUP_RUN_TAG = "rlexp.group_run"     # "seeds" on the run that only groups a rung's seed siblings
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's nesting: used for grouping only, never for lineage
# point metrics (eval accuracy, the decision's numbers by role): not training rows of metrics.jsonl
POINT_METRIC_PREFIXES = ("eval/", "decision/", "primary/")
MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call
NOT_METRICS = ("global_step", STEP_TIME_KEY)  # a metrics.jsonl row's step and the step's time
_BAD_METRIC_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")


def metric_name(name: str) -> str:
    """An MLflow-safe metric name: ``greedy_pass@1`` -> ``greedy_pass_at_1``, no parentheses."""
    name = name.replace("@", "_at_")
    return _BAD_METRIC_CHARS.sub("_", name)


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<cwd>/mlflow.db`` (absolute, so a
    child process in another directory writes the same store)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str(Path(uri[len("sqlite:///") :]).resolve())
    if uri.startswith(("postgresql://", "postgres://")):
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; psycopg2 is what the test extra installs
        import importlib.util

        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            uri = "postgresql+psycopg2://" + uri.split("://", 1)[1]
    return uri


# Schemes MLflow stores live at (a bare path is a local file store); the network ones are probed
# with a short TCP connect before MLflow is asked (its HTTP client retries for minutes, and a
# database driver may wait on a dead port far longer).
TRACKING_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mssql", "http", "https", "databricks")
DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433, "http": 80, "https": 443}
CONNECT_TIMEOUT_S = 3.0
_reachable: set[str] = set()


def scrub_url(url: str) -> str:
    """The URL without its password (for messages)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, _, host = rest.rpartition("@")
        return f"{scheme}://{creds.split(':')[0]}@{host}"
    return url


def check_reachable(url: str, option: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A network store's host and port accept a TCP connection within ``timeout_s`` (once per
    process and URL); otherwise a one-line :class:`InputError` naming ``option``. Local stores pass."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        scheme = parts.scheme.split("+")[0].lower()
        if scheme not in DEFAULT_PORTS or url in _reachable:
            return
        host, port = parts.hostname, parts.port or DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise InputError(None, option, f"{scrub_url(url)}: not a valid address ({exc})") from None
    if not host:
        raise InputError(None, option, f"{scrub_url(url)}: no host")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise InputError(None, option, f"{scrub_url(url)}: cannot connect to {host}:{port} within "
                                       f"{timeout_s:g} s ({reason})") from None
    _reachable.add(url)


def check_tracking_uri(uri: str | None, option: str = "--tracking-uri", *, probe: bool = True) -> str:
    """The resolved store URI once its scheme is one MLflow serves and (``probe``), for a server or
    a database, its address answers; else a one-line :class:`InputError` (before anything is written)."""
    resolved = resolve_tracking_uri(uri)
    scheme = resolved.split(":", 1)[0].split("+")[0].lower() if ":" in resolved else ""
    if scheme not in TRACKING_SCHEMES or "://" not in resolved:
        # a bare path or file: is MLflow's file store, which MLflow 3 no longer serves (an exception
        # deep in MLflow); anything else is not a store at all
        raise InputError(None, option, f"{scrub_url(resolved)[:80]}: not an MLflow tracking store (sqlite:///FILE, "
                                       "http(s)://HOST:PORT, postgresql://..., mysql://..., or off)")
    if resolved.startswith("sqlite:///"):
        from rlexp.experiment.files import check_store_file

        check_store_file(resolved[len("sqlite:///"):], option)
    if probe:
        check_reachable(resolved, option)
    if resolved.startswith(("http://", "https://")):  # MLflow's own default retries for minutes
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    return resolved


_held_locks: dict[str, int] = {}  # store lock file -> how deep this process holds it (re-entrant)
_held_guard = threading.RLock()


@contextlib.contextmanager
def store_lock(uri: str):
    """An exclusive lock on a SQLite store (a ``.lock`` file beside the database) across
    processes, re-entrant within one; no lock for other stores (their server serialises each
    call)."""
    uri = resolve_tracking_uri(uri)
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db = Path(uri[len("sqlite:///") :])
    db.parent.mkdir(parents=True, exist_ok=True)
    name = str(db.with_name(db.name + ".lock"))
    with _held_guard:  # threads of one process take turns; a nested call holds it already
        if _held_locks.get(name):
            _held_locks[name] += 1
            try:
                yield
            finally:
                _held_locks[name] -= 1
            return
        with open(name, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _held_locks[name] = 1
            try:
                yield
            finally:
                _held_locks[name] = 0
                fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_store(uri: str) -> None:
    """Create the tracking store once, under an exclusive lock for SQLite files. A new SQLite store
    is created whole or not at all (:func:`_create_sqlite_store`)."""
    from mlflow.tracking import MlflowClient

    uri = check_tracking_uri(uri)
    with store_lock(uri), store_errors(uri):
        if uri.startswith("sqlite:///"):
            db = Path(uri[len("sqlite:///") :])
            if not db.exists() or db.stat().st_size == 0:
                _create_sqlite_store(db)
        MlflowClient(uri).search_experiments(max_results=1)


def _create_sqlite_store(db: Path) -> None:
    """Build MLflow's schema in a temporary file beside ``db`` and rename it into place: MLflow
    migrates a new store in many steps, and one cut off (a full disk, a kill) used to leave a
    half-migrated ``mlflow.db`` that every later run failed on ("duplicate column name")."""
    from mlflow.tracking import MlflowClient

    from rlexp.experiment.files import make_temp_file

    fd, name = make_temp_file(db)
    os.close(fd)
    tmp = Path(name)
    try:
        MlflowClient(f"sqlite:///{tmp}").search_experiments(max_results=1)  # creates and migrates the schema
        _dispose_store(f"sqlite:///{tmp}")
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, db)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _dispose_store(uri: str) -> None:
    """Close the connections MLflow keeps to ``uri`` (its SQL store is cached per URI)."""
    with contextlib.suppress(Exception):
        from mlflow.tracking._tracking_service.utils import _get_store

        engine = getattr(_get_store(uri), "engine", None)
        if engine is not None:
            engine.dispose()


@contextlib.contextmanager
def store_errors(uri: str):
    """MLflow's and SQLAlchemy's errors as rlexp's: a full disk under a SQLite store is the
    ``OSError`` every other failed write is (one line, exit 1); any other failure of the store one
    line naming it (:class:`ServiceError`), never a traceback."""
    import logging

    from rlexp.errors import ServiceError

    # MLflow's SQL store logs each database error with its traceback before raising it: the error
    # is reported below, in one line
    quiet = logging.getLogger("mlflow.store.db.utils")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    except Exception as exc:
        module = type(exc).__module__ or ""
        if not module.startswith(("sqlalchemy", "mlflow", "sqlite3", "alembic")):
            raise
        text = " ".join(str(exc).split())
        if "disk is full" in text or "No space left" in text:
            db = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else scrub_url(uri)
            raise OSError(errno.ENOSPC, "No space left on device (the MLflow store)", db) from None
        raise ServiceError(f"MLflow store {scrub_url(uri)[:120]}: {text[:300]}") from None
    finally:
        quiet.setLevel(level)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    uri = resolve_tracking_uri(uri)
    ensure_store(uri)
    return MlflowClient(uri)


def experiment_id(client, experiment_dir: Path, uri: str) -> str:
    name = experiment_dir.resolve().name
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    artifact_location = None
    if uri.startswith("sqlite:///"):  # keep artifacts beside the database, not in a stray ./mlruns
        artifact_location = (Path(uri[len("sqlite:///") :]).parent / "mlartifacts" / name).resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=artifact_location,
                                        tags={"rlexp.experiment_dir": str(experiment_dir.resolve())})
    except Exception:  # another process created it between our lookup and our create
        existing = client.get_experiment_by_name(name)
        if existing is None:
            raise
        return existing.experiment_id


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _attempt_runs(client, exp_id: str, attempt_id: str) -> list:
    runs = client.search_runs([exp_id], filter_string=f"tags.`{ATTEMPT_TAG}` = {_quote(attempt_id)}",
                              max_results=100)
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def find_run(client, exp_id: str, attempt_id: str):
    """The attempt's current run: the oldest active run carrying its tag (superseded runs lost it)."""
    runs = _attempt_runs(client, exp_id, attempt_id)
    return runs[0] if runs else None


def run_for_attempt(client, experiment_dir: Path, attempt_id: str, uri: str):
    """The run of ``attempt_id`` (created on first use, under the store lock). Two processes that
    still created one each (a store without a lock) both keep the oldest; the other is deleted."""
    exp_id = experiment_id(client, experiment_dir, uri)
    with store_lock(uri):
        run = find_run(client, exp_id, attempt_id)
        if run is not None:
            return run
        mine = client.create_run(exp_id, run_name=attempt_id, tags={ATTEMPT_TAG: attempt_id})
    oldest = find_run(client, exp_id, attempt_id)
    if oldest is not None and oldest.info.run_id != mine.info.run_id:
        client.delete_run(mine.info.run_id)
        return oldest
    return mine


def supersede_run(client, run, attempt_id: str, experiment_dir: Path, uri: str):
    """Retire ``run`` (its metrics were rewound past) and return the attempt's new run.

    Order, so that a kill at any point is repaired by the next log: tag the old run superseded,
    end it, drop its attempt tag (from here on it is not found), create the new run, and point the
    old one at it."""
    old_id = run.info.run_id
    client.set_tag(old_id, SUPERSEDED_TAG, "true")
    client.set_tag(old_id, SUPERSEDED_ATTEMPT_TAG, attempt_id)
    if run.info.status == "RUNNING":
        client.set_terminated(old_id, status="KILLED")
    client.delete_tag(old_id, ATTEMPT_TAG)
    new = run_for_attempt(client, experiment_dir, attempt_id, uri)
    client.set_tag(old_id, SUPERSEDED_BY_TAG, new.info.run_id)
    return new


# --- what an attempt directory holds ------------------------------------------------------------

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

def log_metric_rows(client, run_id: str, rows: Iterable[Mapping[str, Any]], after_step: int = -1,
                    logged: Mapping[str, Mapping[int, float]] | None = None) -> int:
    """Log training rows with ``step > after_step`` through ``log_batch``, skipping every
    (key, step) already in ``logged`` (key -> {step: value}); returns the last step seen."""
    from mlflow.entities import Metric

    logged = logged or {}
    batch: list[Metric] = []
    last = after_step
    now_ms = int(time.time() * 1000)
    for row in sorted(rows, key=lambda r: r["global_step"]):
        step = int(row["global_step"])
        if step <= after_step:
            continue
        stamp = row.get(STEP_TIME_KEY)  # the trainer's time of the step, else now
        timestamp_ms = int(round(float(stamp) * 1000)) if stamp is not None else now_ms
        for key, value in row.items():
            if key in NOT_METRICS:
                continue
            name = metric_name(key)
            if step in logged.get(name, {}):
                continue
            batch.append(Metric(name, float(value), timestamp_ms, step))
            if len(batch) == MAX_BATCH:
                client.log_batch(run_id, metrics=batch)
                batch = []
        last = max(last, step)
    if batch:
        client.log_batch(run_id, metrics=batch)
    return last


def logged_metrics(client, run_id: str, keys: Iterable[str]) -> dict[str, dict[int, float]]:
    """What the run holds for each training metric: key -> {step: value} (read back from MLflow)."""
    return {name: {m.step: m.value for m in client.get_metric_history(run_id, name)}
            for name in sorted({metric_name(k) for k in keys if k not in NOT_METRICS})}


def _row_keys(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {k for row in rows for k in row if k not in NOT_METRICS}


def rewound(rows: list[Mapping[str, Any]], logged: Mapping[str, Mapping[int, float]]) -> bool:
    """True when the run holds a training value the file no longer has: a step past the file's
    end, or a step whose row is now different (MLflow cannot delete or replace metrics)."""
    in_file: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in NOT_METRICS:
                in_file.setdefault(metric_name(key), {})[int(row["global_step"])] = float(value)
    return any(step not in in_file.get(name, {}) or not _same(in_file[name][step], value)
               for name, steps in logged.items() for step, value in steps.items())


def _same(in_file: float, logged: float) -> bool:
    """The file's value is the one the run holds: a NaN equals a NaN (MLflow keeps NaN), and an
    infinity equals the largest float of its sign (MLflow's SQL store keeps an infinity as that)."""
    if math.isinf(in_file) and abs(logged) in (math.inf, sys.float_info.max):
        return math.copysign(1.0, in_file) == math.copysign(1.0, logged)
    return in_file == logged or (math.isnan(in_file) and math.isnan(logged))


def sync_metric_rows(client, run_id: str, rows: list[Mapping[str, Any]], uri: str) -> int:
    """Log the rows' (key, step) pairs the run does not hold yet (read back under the store
    lock, so parallel loggers never log one twice); returns the last step."""
    with store_lock(uri):
        logged = logged_metrics(client, run_id, _row_keys(rows))
        return log_metric_rows(client, run_id, rows, -1, logged)


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
    client = _client(uri)
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


# --- the comparison surface ----------------------------------------------------------------------

ROLES = ("final", "mid", "best_by_monitor")
# the columns a reader compares attempts by; shown in the runs table through the shared view
COMPARISON_COLUMNS = (
    "tags.`rlexp.decision`", "tags.`rlexp.parent`", "tags.`rlexp.changed_variable`",
    "metrics.`primary/delta_pp`", "metrics.`primary/vs_parent/delta_pp`", "metrics.`primary/pvalue`",
)
VIEW_KEY = "rlexp-comparison"
SHARED_VIEW_TAG = "mlflow.sharedViewState."
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow UI (>= 2.10): ?viewStateShareKey=<key> loads this tag


def role_metrics(attempt_dir: Path, selection: Mapping[str, Any], decision: Mapping[str, Any] | None
                 ) -> tuple[dict[str, float], dict[str, str]]:
    """Point metrics named by checkpoint role, not by step, so one column compares attempts:
    ``primary/final/delta_pp``, ``primary/best_by_monitor/acc``, ``primary/mid/pvalue``; the
    decision's chosen checkpoint as ``primary/delta_pp`` …; ``eval/<set>/<role>/acc``. The steps
    go to tags (``rlexp.step.<role>``)."""
    step_of = {role: selection[role] for role in ROLES if isinstance(selection.get(role), int)}
    roles_of: dict[str, list[str]] = {}
    for role, step in step_of.items():
        roles_of.setdefault(checkpoint_name(step), []).append(role)
    point: dict[str, float] = {}
    tags = {f"rlexp.step.{role}": str(step) for role, step in step_of.items()}
    for (checkpoint, set_name), acc in eval_accuracies(attempt_dir).items():
        for name in roles_of.get(checkpoint, [checkpoint] if checkpoint_step(checkpoint) is None else []):
            point[f"eval/{set_name}/{name}/acc"] = acc["acc"]
            point[f"eval/{set_name}/{name}/n"] = acc["n"]

    def numbers_of(prefix: str, numbers: Mapping[str, Any]) -> None:
        for key, name in (("delta_pp", "delta_pp"), ("b", "b"), ("c", "c"), ("mcnemar_p", "pvalue"),
                          ("holm_p", "holm_pvalue"), ("acc_new", "acc"), ("acc_base", "baseline_acc")):
            if isinstance(numbers.get(key), int | float) and not isinstance(numbers.get(key), bool):
                point[f"{prefix}/{name}"] = numbers[key]
        ci = numbers.get("ci_pp")
        if isinstance(ci, list | tuple) and len(ci) == 2:
            point[f"{prefix}/ci_low_pp"], point[f"{prefix}/ci_high_pp"] = ci[0], ci[1]

    if decision:
        checkpoints = decision.get("checkpoints") or {}
        primary_set = decision.get("primary_set") or "ood_primary"
        for checkpoint, numbers in checkpoints.items():
            for role in roles_of.get(checkpoint, []):
                numbers_of(f"primary/{role}", numbers)
                s0 = ((numbers.get("vs") or {}).get("baseline_s0") or {}).get(primary_set)
                if s0:
                    point[f"primary/{role}/vs_s0/delta_pp"] = s0["delta_pp"]
        chosen = decision.get("primary_checkpoint")
        if chosen in checkpoints:
            numbers_of("primary", checkpoints[chosen])
            tags["rlexp.primary_checkpoint"] = chosen
        from rlexp.reporting import compare_with_parent

        for role, cmp in compare_with_parent(attempt_dir).items():
            point[f"primary/{role}/vs_parent/delta_pp"] = cmp["delta_pp"]
            if step_of.get(role) is not None and chosen == checkpoint_name(step_of[role]):
                point["primary/vs_parent/delta_pp"] = cmp["delta_pp"]
    return point, tags


def run_link(experiment_id: str, run_id: str, uri: str | None = None) -> str:
    """The UI address of a run: absolute under an http(s) tracking server, else the UI fragment."""
    fragment = f"#/experiments/{experiment_id}/runs/{run_id}"
    return f"{uri.rstrip('/')}/{fragment}" if uri and uri.startswith(("http://", "https://")) else fragment


def comparison_tags(client, run, info: Mapping[str, Any], decision: Mapping[str, Any] | None, uri: str
                    ) -> dict[str, str]:
    """The decision's reason as the run description; lineage as a link to the parent's run (a
    tag, not MLflow nesting: a 30-rung ladder would nest 30 deep)."""
    tags: dict[str, str] = {}
    if decision:
        tags["mlflow.note.content"] = (f"**{decision.get('decision', '?')}**: {decision.get('reason', '')}. "
                                       f"Changed: {', '.join(sorted(info['change'])) or 'nothing (root)'}; "
                                       f"parent: {info['parent'] or 'none'}.")
    if info.get("parent"):
        parent_run = find_run(client, run.info.experiment_id, str(info["parent"]))
        if parent_run is not None:
            tags["rlexp.lineage"] = f"{info['parent']} -> {info['id']}"
            tags["rlexp.parent_run"] = run_link(run.info.experiment_id, parent_run.info.run_id, uri)
    return tags


def log_datasets(client, run_id: str, provenance: Mapping[str, Any], experiment_dir: Path, attempt_dir: Path) -> None:
    """Each dataset role as an MLflow dataset input, its SHA-256 the digest (MLflow's digest
    column holds 36 characters: the first 36 hex digits; the full digest is in the profile)."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    from rlexp.experiment.files import sha256_file

    recorded = provenance.get("datasets") or {}
    try:
        from rlexp.spec import load_attempt

        refs = {role: ref for role, ref in load_attempt(attempt_dir).datasets.items() if ref.path is not None}
    except (ImportError, InputError):
        refs = {}
    existing = {(d.dataset.name, d.dataset.digest) for d in client.get_run(run_id).inputs.dataset_inputs}
    inputs = []
    for role, ref in refs.items():
        sha = (recorded.get(role) or {}).get("sha256") or (sha256_file(ref.path) if ref.path.is_file() else None)
        if not sha:
            continue
        try:
            source = ref.path.resolve().relative_to(experiment_dir.resolve()).as_posix()
        except ValueError:
            source = ref.path.name
        dataset = Dataset(name=role, digest=sha[:36], source_type="local", source=json.dumps({"uri": source}),
                          profile=json.dumps({"sha256": sha, "num_rows": ref.size}))
        if (dataset.name, dataset.digest) not in existing:
            inputs.append(DatasetInput(dataset, tags=[InputTag("mlflow.data.context", role)]))
    if inputs:
        client.log_inputs(run_id, datasets=inputs)


def seed_group(attempt_dir: Path, provenance: Mapping[str, Any]) -> str | None:
    """The attempt's seed group: a digest of its parent, its recipe without the seed (what Gate-2
    calls the same recipe) and its pool's SHA-256; None when the spec or the pool cannot be read."""
    import json

    from rlexp.experiment.files import sha256_file
    from rlexp.numbers import sha256_text

    try:
        from rlexp.spec import attempt_recipe_sha256, load_attempt

        att = load_attempt(attempt_dir)
    except (ImportError, InputError):
        return None
    pool = att.datasets.get("pool")
    pool_sha = (((provenance.get("datasets") or {}).get("pool") or {}).get("sha256")
                or (sha256_file(pool.path) if pool is not None and pool.path is not None and pool.path.is_file()
                    else None))
    if not pool_sha:
        return None
    return sha256_text(json.dumps([att.parent_id, attempt_recipe_sha256(att), pool_sha]))[:16]


def group_seeds(client, experiment_id: str, group: str, uri: str) -> str | None:
    """Nest the runs of one seed group under a group run (``mlflow.parentRunId``) once it has two
    members; returns the group run's id. MLflow's nesting groups a rung's seeds only: lineage
    across rungs stays the ``rlexp.parent`` tag and link (a 30-rung ladder would nest 30 deep)."""
    with store_lock(uri):
        runs = client.search_runs([experiment_id], filter_string=f"tags.`{SEED_GROUP_TAG}` = {_quote(group)}",
                                  max_results=1000)
        order = lambda r: (r.info.start_time or 0, r.info.run_id)  # noqa: E731
        members = sorted((r for r in runs if ATTEMPT_TAG in r.data.tags), key=order)
        if len(members) < 2:
            return None
        holders = sorted((r for r in runs if r.data.tags.get(GROUP_RUN_TAG)), key=order)
        first = members[0].data.tags[ATTEMPT_TAG]
        if holders:
            group_id = holders[0].info.run_id
        else:
            group_id = client.create_run(experiment_id, run_name=f"seeds of {first}",
                                         tags={SEED_GROUP_TAG: group, GROUP_RUN_TAG: "seeds"}).info.run_id
            client.set_terminated(group_id, status="FINISHED")
        names = ", ".join(r.data.tags[ATTEMPT_TAG] for r in members)
        client.set_tag(group_id, "mlflow.note.content",
                       f"Seed siblings: the same recipe and pool, another training seed ({names}).")
        for run in members:
            if run.data.tags.get(PARENT_RUN_TAG) != group_id:
                client.set_tag(run.info.run_id, PARENT_RUN_TAG, group_id)
        return group_id


def ensure_comparison_view(client, experiment_id: str) -> None:
    """The runs table's comparison columns as a shared view (an experiment tag the UI loads)."""
    import json

    state = json.dumps({"selectedColumns": list(COMPARISON_COLUMNS), "orderByKey": "attributes.start_time",
                        "orderByAsc": True})
    tags = client.get_experiment(experiment_id).tags
    if tags.get(SHARED_VIEW_TAG + VIEW_KEY) != state:
        client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + VIEW_KEY, state)
    if EXPERIMENT_KIND_TAG not in tags:  # MLflow 3 opens GenAI experiments on a traces overview, not the runs
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, "custom_model_development")


def comparison_url(ui: str, experiment_id: str) -> str:
    """The runs table with the comparison columns shown (MLflow UI's shared view state)."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}"


def set_run_status(client, run_id: str, status: str | None) -> None:
    """Make the run's status ``status`` (RUNNING, FINISHED, FAILED, KILLED; None: leave it)."""
    if status is None:
        return
    current = client.get_run(run_id).info.status
    if current == status:
        return
    if status == "RUNNING":
        client.update_run(run_id, status="RUNNING")
    else:
        client.set_terminated(run_id, status=status)


class LiveLogger:
    """Streams new metric rows of a running attempt into its run (used by ``rlexp launch``).

    Created after ``metrics.jsonl`` was cut back to the resume point, so the first
    :func:`log_attempt` moves to a new run when the old one holds steps past it."""

    def __init__(self, attempt_dir: str | Path, tracking_uri: str | None = None):
        self.uri = resolve_tracking_uri(tracking_uri)
        self.run_id = log_attempt(attempt_dir, self.uri)
        self.client = _client(self.uri)
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
