"""A ladder as an Optuna study: one study per experiment, one trial per rung.

The study lives in an Optuna RDB storage beside the MLflow store: ``optuna.db`` next to a SQLite
``mlflow.db`` by default, or any SQLAlchemy URL given (the team's PostgreSQL). Each trial carries
the rung as user attributes — ``attempt_id``, ``parent``, ``changed_variable``, ``value``,
``seed``, ``kind``, and once decided ``decision``, ``reason``, ``mlflow_run_id`` — and, when the
value is a scalar of the ladder's grid, the value as the trial's parameter; the trial's value is
the primary delta (pp) against the decision's baseline.

Two runners on one study never run the same rung twice: a rung is *claimed* before anything is
written for it, by inserting a row into ``rlexp_ladder_rungs`` in the same database, with unique
keys on (study, rung) and (study, attempt id). The database decides which insert wins, on SQLite
and PostgreSQL alike; the loser proposes again. A claim remembers its owner (host and process id):
a later runner on the same host takes over a claim whose owner has died (the killed run resumes),
never one whose owner is alive.

optuna and SQLAlchemy are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.layout import STUDY_DB_NAME, pid_alive

CLAIMS_TABLE = "rlexp_ladder_rungs"
STORAGE_ENV = "RLEXP_STUDY_STORAGE"
RUNNING, DONE, FAILED = "running", "done", "failed"


def study_name(experiment_dir: str | Path) -> str:
    """One study per experiment: ``ladder:<experiment name>``."""
    return f"ladder:{Path(experiment_dir).resolve().name}"


def resolve_storage(storage: str | None = None, tracking_uri: str | None = None) -> str:
    """``storage``, else ``$RLEXP_STUDY_STORAGE``, else ``sqlite:///<dir of mlflow.db>/optuna.db``.

    A PostgreSQL URL is used as given (psycopg2 named as the driver when psycopg 3 is absent, as
    for MLflow). An MLflow store that is not a SQLite file needs the study storage to be named."""
    from rlexp.tracking.store import resolve_tracking_uri

    url = storage or os.environ.get(STORAGE_ENV)
    if not url:
        mlflow_uri = resolve_tracking_uri(tracking_uri if tracking_uri not in (None, "off", "none") else None)
        if not mlflow_uri.startswith("sqlite:///"):
            raise InputError(None, "--storage", "the MLflow store is not a SQLite file: name the study's storage "
                                                f"(--storage URL or ${STORAGE_ENV}), e.g. a PostgreSQL URL")
        url = "sqlite:///" + str(Path(mlflow_uri[len("sqlite:///"):]).with_name(STUDY_DB_NAME))
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = "sqlite:///" + str(Path(url[len("sqlite:///"):]).resolve())
    if url.startswith(("postgresql://", "postgres://")):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            url = "postgresql+psycopg2://" + url.split("://", 1)[1]
    if not url.startswith(("sqlite:///", "postgresql", "mysql")):
        raise InputError(None, "--storage", f"{url.split('://')[0]}: not an Optuna RDB storage URL "
                                            "(sqlite:///FILE or postgresql://...)")
    return url


def owner_id() -> str:
    """This runner: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool | None:
    """Whether a claim's owner still runs: True/False on this host, None (unknown) on another."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return pid_alive(int(pid))


SCHEMA_LOCK_KEY = 0x726C6578  # PostgreSQL advisory lock id held while a runner creates the tables


@contextlib.contextmanager
def schema_lock(url: str, engine_kwargs: dict[str, Any]):
    """One runner at a time creates the study's tables: a lock file beside a SQLite database, an
    advisory lock on a PostgreSQL server."""
    if url.startswith("sqlite:///"):
        from rlexp.tracking.store import store_lock

        with store_lock(url):
            yield
        return
    if not url.startswith("postgresql"):
        yield
        return
    import sqlalchemy as sa

    engine = sa.create_engine(url, **engine_kwargs)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Claim:
    number: int            # the order in which rungs were claimed
    rung_key: str
    attempt: str
    rung: dict[str, Any]   # parent, variable, value, seed, seed_of, kind
    owner: str
    state: str             # running | done | failed
    trial_number: int | None


class LadderStudy:
    """The Optuna study of one experiment's ladder and the claims of its rungs."""

    def __init__(self, experiment_dir: str | Path, storage: str | None = None, tracking_uri: str | None = None):
        import optuna

        self.experiment_dir = Path(experiment_dir).resolve()
        self.url = resolve_storage(storage, tracking_uri)
        self.name = study_name(self.experiment_dir)
        engine_kwargs: dict[str, Any] = {}
        if self.url.startswith("sqlite:///"):
            Path(self.url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
            engine_kwargs = {"connect_args": {"timeout": 120}}  # runners wait for each other's writes
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        from rlexp.tracking.store import check_reachable

        check_reachable(self.url, "--storage")  # a dead database port: one line now, not a driver's long wait
        if self.url.startswith("sqlite:///"):
            from rlexp.experiment.files import check_store_file

            check_store_file(self.url[len("sqlite:///"):], "--storage")
        # runners starting together must not both create the schema
        with schema_lock(self.url, engine_kwargs):
            self._open(engine_kwargs)

    def _open(self, engine_kwargs: dict[str, Any]) -> None:
        import optuna
        import sqlalchemy as sa

        self.storage = optuna.storages.RDBStorage(self.url, engine_kwargs=engine_kwargs)
        self.study = optuna.create_study(storage=self.storage, study_name=self.name, direction="maximize",
                                         load_if_exists=True)
        self.engine = sa.create_engine(self.url, **engine_kwargs)
        meta = sa.MetaData()
        self.table = sa.Table(
            CLAIMS_TABLE, meta,
            sa.Column("number", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("study_name", sa.String(512), nullable=False),
            sa.Column("rung_key", sa.String(1024), nullable=False),
            sa.Column("attempt_id", sa.String(256), nullable=False),
            sa.Column("rung", sa.Text, nullable=False),
            sa.Column("owner", sa.String(512), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("trial_number", sa.Integer, nullable=True),
            sa.UniqueConstraint("study_name", "rung_key", name="rlexp_ladder_rung_once"),
            sa.UniqueConstraint("study_name", "attempt_id", name="rlexp_ladder_attempt_once"),
        )
        meta.create_all(self.engine, checkfirst=True)

    # ------------------------------------------------------------------ claims
    def claims(self) -> list[Claim]:
        """Every claimed rung, in claim order."""
        import sqlalchemy as sa

        t = self.table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).where(t.c.study_name == self.name).order_by(t.c.number)).all()
        return [Claim(r.number, r.rung_key, r.attempt_id, json.loads(r.rung), r.owner, r.state, r.trial_number)
                for r in rows]

    def claim(self, rung_key: str, attempt_id: str, rung: dict[str, Any], owner: str) -> bool:
        """Claim a rung for ``owner``: True when this call inserted the claim, False when the rung or
        the attempt id is claimed already (by anyone)."""
        import sqlalchemy as sa

        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(self.table).values(
                    study_name=self.name, rung_key=rung_key, attempt_id=attempt_id,
                    rung=json.dumps(rung, sort_keys=True, default=str), owner=owner, state=RUNNING))
        except sa.exc.IntegrityError:
            return False
        return True

    def take_over(self, attempt_id: str, old_owner: str, old_state: str, owner: str) -> bool:
        """Move a claim from ``old_owner`` to ``owner`` if nobody moved it first (compare and set)."""
        import sqlalchemy as sa

        t = self.table
        with self.engine.begin() as conn:
            done = conn.execute(sa.update(t).where(
                t.c.study_name == self.name, t.c.attempt_id == attempt_id, t.c.owner == old_owner,
                t.c.state == old_state).values(owner=owner, state=RUNNING))
        return done.rowcount == 1

    def set_claim(self, attempt_id: str, **values: Any) -> None:
        import sqlalchemy as sa

        t = self.table
        with self.engine.begin() as conn:
            conn.execute(sa.update(t).where(t.c.study_name == self.name, t.c.attempt_id == attempt_id)
                         .values(**values))

    # ------------------------------------------------------------------ trials
    def start_trial(self, attempt_id: str, attrs: dict[str, Any], params: dict[str, tuple[Any, tuple]] | None = None
                    ) -> int:
        """A RUNNING trial for a claimed rung, with its attributes (and grid parameters); its number."""
        import optuna

        trial = self.study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for name, (value, choices) in (params or {}).items():
            dist = optuna.distributions.CategoricalDistribution(list(choices))
            self.storage.set_trial_param(trial._trial_id, name, dist.to_internal_repr(value), dist)
        self.set_claim(attempt_id, trial_number=trial.number)
        return trial.number

    def trial_state(self, number: int) -> str:
        return self.study.get_trials(deepcopy=False)[number].state.name

    def set_attrs(self, number: int, attrs: dict[str, Any]) -> None:
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number)
        for key, value in attrs.items():
            self.storage.set_trial_user_attr(trial_id, key, value)

    def finish(self, number: int, value: float | None, *, failed: bool = False) -> None:
        import optuna

        if failed or value is None:
            self.study.tell(number, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(number, value)

    def trials(self) -> list[Any]:
        return self.study.get_trials(deepcopy=False)
