"""The MLflow store behind ``--tracking-uri``: the URI resolved and probed, the store created once
under a file lock, its errors made one line, and the run of an attempt found, created or superseded.

One MLflow experiment per experiment directory (named after it), one run per attempt, found again
by the tag ``rlexp.attempt_id``: logging an attempt twice updates its run. MLflow cannot delete
metrics: when ``metrics.jsonl`` was rewound past steps the run already holds (a resume from an
earlier checkpoint, or from step 0), the attempt is logged into a new run and the old one is
tagged ``rlexp.superseded`` (and no longer carries the attempt tag).

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
import os
import threading
from pathlib import Path

from rlexp.errors import InputError
from rlexp.experiment.provenance import scrub_url

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
ATTEMPT_TAG = "rlexp.attempt_id"


SUPERSEDED_TAG = "rlexp.superseded"             # "true" on a run replaced after a rewind
SUPERSEDED_ATTEMPT_TAG = "rlexp.superseded_attempt"
SUPERSEDED_BY_TAG = "rlexp.superseded_by"


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


def store_client(uri: str):
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


def filter_literal(value: str) -> str:
    """``value`` as a quoted string literal of MLflow's search filter grammar."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _attempt_runs(client, exp_id: str, attempt_id: str) -> list:
    runs = client.search_runs([exp_id], filter_string=f"tags.`{ATTEMPT_TAG}` = {filter_literal(attempt_id)}",
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
