"""Provenance of a launch: what code, data, model and software produced an attempt.

The seed typed git SHAs, pool SHA-256s and versions into its log by hand; here they are collected
once at launch into ``launch/provenance.json`` and mirrored to MLflow. Environment variables
pass through :func:`redact_env` before anything is written: names containing KEY, TOKEN, SECRET
or PASSWORD never reach a file, MLflow or a report.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rlexp.experiment.files import sha256_dir, sha256_file

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
REDACTED = "<redacted>"

# Environment variables worth recording (they change what a run does); secrets are removed anyway.
# rlexp's own: who decodes the local trainer's rollouts and where the model runs (not the RLEXP_TEST_*
# service addresses, which may carry credentials in their URIs)
RECORDED_ENV_PREFIXES = ("CUDA_", "NCCL_", "RAY_", "VLLM_", "OMP_", "PYTHONHASHSEED", "HF_", "TRANSFORMERS_",
                         "RLEXP_ROLLOUT_ENGINE", "RLEXP_VLLM_PYTHON", "RLEXP_DEVICE", "RLEXP_TORCH_THREADS")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


# Recipe keys are OpenRLHF flag names: ``input_key``/``label_key`` name dataset columns, they are
# not secrets. A recipe key is secret when it names a credential, or is v0.9.x's ``use_wandb``,
# whose value is the W&B API key itself.



def redact_env(env: Mapping[str, str], *, keep: tuple[str, ...] | None = None) -> dict[str, str]:
    """A copy of ``env`` without any variable whose name contains KEY, TOKEN, SECRET or PASSWORD.

    Secrets are dropped, not masked: even a masked name tells an attacker where to look, and
    nothing downstream needs them. ``keep`` restricts the result to names with those prefixes.
    """
    out = {}
    for name, value in env.items():
        if is_secret_name(name):
            continue
        if keep is not None and not name.startswith(keep):
            continue
        out[name] = value
    return out


def environment_snapshot() -> dict[str, str]:
    """A copy of ``os.environ`` taken without iterating it: another thread (MLflow's async
    logger sets variables) may change the environment while it is read, and iterating
    ``os.environ`` (``dict(os.environ)`` and ``os.environ.copy()`` included) then raises
    ``KeyError`` or ``RuntimeError``. CPython keeps the variables in a plain dict, whose
    ``copy()`` is one C-level step that no other Python thread can interleave with."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        raw = data.copy()
        return {os.environ.decodekey(k): os.environ.decodevalue(v) for k, v in raw.items()}
    for _ in range(1000):  # another implementation: retry until one pass sees no change
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)


def secret_values(env: Mapping[str, str] | None = None, min_length: int = 6) -> list[str]:
    """The values of secret variables (long enough to be meaningful) — for scrubbing text."""
    env = environment_snapshot() if env is None else env
    return [v for k, v in env.items() if is_secret_name(k) and len(v) >= min_length]


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """Replace any secret's value appearing in ``text`` (a log line, a command) by a marker."""
    for value in secret_values(env):
        text = text.replace(value, REDACTED)
    return text


def scrub_url(url: str) -> str:
    """A store's URL without its password (for messages, attributes and recorded results)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, _, host = rest.rpartition("@")
        return f"{scheme}://{creds.split(':')[0]}@{host}"
    return url


def scrub_file(path: str | Path, env: Mapping[str, str] | None = None) -> bool:
    """Rewrite ``path`` (atomically) with secret values replaced; True when something was found.

    Used on a finished run's ``launch/stdout.log``: the trainer writes that file directly (so a
    killed launcher never breaks its output pipe), and a trainer may print its environment.
    """
    from rlexp.experiment.files import atomic_write_bytes

    path = Path(path)
    values = secret_values(env)
    if not values or not path.is_file():
        return False
    data = path.read_bytes()
    cleaned = data
    for value in values:
        cleaned = cleaned.replace(value.encode(), REDACTED.encode())
    if cleaned == data:
        return False
    atomic_write_bytes(path, cleaned)
    return True


@dataclass(frozen=True)
class GitState:
    sha: str | None
    dirty: bool | None
    branch: str | None
    # Why there is no commit (``sha`` is None), or where it came from when git was not asked.
    note: str | None = None


def git_state(path: str | Path = ".") -> GitState:
    """The commit of the git checkout that tracks ``path``, and whether the checkout is dirty.

    ``path`` is a folder of the code whose commit we want. A folder git does not track gives no
    commit even inside a work tree: a wheel installed into a project's ``.venv`` sits in that
    project's checkout, whose commit says nothing about the installed code.
    """

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if not Path(path).is_dir():
        return GitState(None, None, None, note=f"not a folder: {path}")
    sha = run("rev-parse", "HEAD")
    if sha is None:
        return GitState(None, None, None, note=f"not a git checkout: {path}")
    if not run("ls-tree", "--name-only", "HEAD", "."):  # lists the folder's entries at HEAD
        return GitState(None, None, None, note=f"not tracked by the git checkout around it: {path}")
    status = run("status", "--porcelain", "--untracked-files=no")
    return GitState(sha=sha, dirty=bool(status), branch=run("rev-parse", "--abbrev-ref", "HEAD"))


def installed_commit(distribution: str) -> GitState | None:
    """The commit a distribution was installed from, when pip installed it from a git URL.

    pip records the origin of an install in the distribution's ``direct_url.json`` (PEP 610); a
    ``pip install git+https://...`` records the resolved commit there. None for anything else
    (an index, a wheel file, a local folder: their commit is not known).
    """
    import json

    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        origin = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    vcs = (origin or {}).get("vcs_info") if isinstance(origin, dict) else None
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git" or not vcs.get("commit_id"):
        return None
    return GitState(sha=str(vcs["commit_id"]), dirty=False, branch=vcs.get("requested_revision"),
                    note=f"installed by pip from {origin.get('url')}")


def code_git_state(repo_dir: str | Path, distribution: str = "rlexp") -> GitState:
    """The commit of rlexp's own code: its checkout's, else the one pip installed it from."""
    state = git_state(repo_dir)
    if state.sha is None:
        installed = installed_commit(distribution)
        if installed is not None:
            return installed
    return state


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def path_sha256(path: str | Path | None) -> str | None:
    """SHA-256 of a file, or of a directory tree (a local model), or None when it is not local
    (a hub id such as ``Qwen/Qwen2.5-14B-Instruct`` on a cluster node)."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if p.is_dir():
        return sha256_dir(p)
    return None


@dataclass(frozen=True)
class Provenance:
    attempt_id: str
    started_at: str
    host: str
    git: GitState
    seed: int | None
    datasets: dict[str, dict[str, Any]]  # role -> {path, sha256}
    model: dict[str, Any]  # {path, sha256}
    versions: dict[str, str | None]
    trainer: dict[str, Any]
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def collect(
    *,
    attempt_id: str,
    datasets: Mapping[str, str | Path | None],
    model: str | Path | None,
    seed: int | None,
    trainer: Mapping[str, Any],
    argv: list[str],
    repo_dir: str | Path = ".",
    env: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Provenance:
    """Everything needed to say what produced the run, gathered at launch. Only non-secret, run-relevant env vars.

    ``repo_dir`` is the folder above the ``rlexp`` package: a git checkout for a source or
    editable install (its commit is recorded), a site-packages folder for a wheel install (no
    commit, unless pip installed rlexp from a git URL; ``git.note`` says which).
    """
    env = environment_snapshot() if env is None else env
    return Provenance(
        attempt_id=attempt_id,
        started_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        git=code_git_state(repo_dir),
        seed=seed,
        datasets={role: {"path": str(p) if p else None, "sha256": path_sha256(p)} for role, p in datasets.items()},
        model={"path": str(model) if model else None, "sha256": path_sha256(model)},
        versions={
            "python": platform.python_version(),
            "rlexp": package_version("rlexp"),
            "torch": package_version("torch"),
            "transformers": package_version("transformers"),
            "peft": package_version("peft"),
            "openrlhf": package_version("openrlhf"),
            "vllm": package_version("vllm"),
            "ray": package_version("ray"),
            "mlflow": package_version("mlflow"),
        },
        trainer=dict(trainer),
        argv=[scrub(a, env) for a in argv],
        env=redact_env(env, keep=RECORDED_ENV_PREFIXES),
        extra=dict(extra or {}),
    )
