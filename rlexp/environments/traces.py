"""Eval episodes as MLflow traces: one trace per episode, a span per model turn, a tool span under
each turn that called a tool — what a reader opens in the run's Traces tab.

Read from the episode records ``rlexp eval`` wrote (``eval/<checkpoint>/<set>.jsonl``, each with
its ``trajectory``); the prompt and the environment of each episode come from the set's dataset
file (a record holds its hash, not its text; a row may name its own ``env``). Each evaluated
checkpoint gets its own MLflow run, nested under the attempt's run (``mlflow.parentRunId``, tagged
``rlexp.checkpoint``, named ``<attempt>/<checkpoint>``), holding that checkpoint's traces: MLflow's
own run comparison and its Traces tab then show two checkpoints' episodes side by side. A trace is
tagged with the attempt, checkpoint, set, environment, success, finish reason and problem hash, and
``rlexp.episode`` = ``<checkpoint>/<set>/<problem hash>`` with ``rlexp.record`` = the record's
digest: a later ``rlexp report`` logs only the episodes not yet traced, so reporting twice never
duplicates a trace, and an episode played again (a judge_error retried) replaces its trace. A
trace's status is OK only for a successful episode: a failed one, an environment error or a failed
reward is ERROR. A tool span is named after the tool the action called (``tool: calc``,
``tool: search``: the environment's declared tool whose action the turn matches), else the
episode's environment.

The records hold no wall-clock times, only each environment step's latency: the spans are laid
out one after another from the time of logging, a tool span lasting its step's latency, so the
timeline shows the order of turns, not when they ran.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt

EPISODE_TAG = "rlexp.episode"
RECORD_TAG = "rlexp.record"  # the record's digest: which version of the episode the trace shows
# MLflow exports traces on worker threads through a queue that *drops* export tasks once it holds
# 1,000 (a few per trace): the queue is flushed after every FLUSH_EVERY traces, and the traces
# found missing afterwards are logged once more.
FLUSH_EVERY = 100
TRACE_NAME = "episode"
CHECKPOINT_TAG = "rlexp.checkpoint"
EPISODES_OF_TAG = "rlexp.episodes_of"  # on a checkpoint's run: the attempt run whose episodes it holds
PARENT_RUN_TAG = "mlflow.parentRunId"


def episode_key(checkpoint: str, set_role: str, problem_hash: str) -> str:
    return f"{checkpoint}/{set_role}/{problem_hash}"


@contextlib.contextmanager
def _tracing_to(uri: str) -> Iterator[None]:
    """MLflow's tracer exports to the *global* tracking URI: point it at ``uri`` for the block,
    flush MLflow's export queue before leaving, and put the previous URI back."""
    import os

    import mlflow
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    stated = os.environ.get("MLFLOW_TRACKING_URI")  # restoring an unset global URI unsets the variable too
    try:
        with _use_tracking_uri(uri):
            try:
                yield
            finally:
                mlflow.flush_trace_async_logging()
    finally:
        if stated is not None:
            os.environ["MLFLOW_TRACKING_URI"] = stated


def record_digest(record: Mapping[str, Any]) -> str:
    """A short digest of an eval record: a record played again (a judge_error retried) is traced anew."""
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def traced_episodes(client: Any, experiment_id: str, run_id: str) -> dict[tuple[str, str], list[str]]:
    """The run's episode traces: ``(rlexp.episode, rlexp.record)`` → their trace ids."""
    seen: dict[tuple[str, str], list[str]] = {}
    token = None
    while True:
        page = client.search_traces(locations=[experiment_id], run_id=run_id, include_spans=False,
                                    max_results=500, page_token=token)  # fmt: skip
        for t in page:
            if EPISODE_TAG in t.info.tags:
                key = (t.info.tags[EPISODE_TAG], t.info.tags.get(RECORD_TAG, ""))
                seen.setdefault(key, []).append(t.info.trace_id)
        token = page.token
        if not token:
            return seen


def _rows(att: Attempt, set_role: str) -> dict[str, tuple[str, str]]:
    """problem hash → (prompt as played, the row's environment name) of one set's dataset file."""
    ref = att.datasets.get(set_role)
    if ref is None or ref.path is None or not Path(ref.path).is_file():
        return {}
    from rlexp.experiment.datasets import read_dataset

    try:
        return {str(p["problem_hash"]): (str(p["prompt"]) + (ref.prompt_suffix or ""),
                                         str(p.get("env") or att.environment.name))
                for p in read_dataset(ref.path)}  # fmt: skip
    except Exception:  # noqa: BLE001 - the prompt is a convenience of the view; the trace stands without it
        return {}


def tool_name(env_name: str, action: str) -> str:
    """The tool an action called: the environment's declared tool whose action text starts with
    the same command word (``calc 12*34`` → ``calc``), else the environment's name."""
    from rlexp.environments.interface import environment_tools, resolve

    word = action.strip().split(maxsplit=1)[0] if action.strip() else ""
    try:
        tools = environment_tools(resolve(env_name))
    except Exception:  # noqa: BLE001 - an environment that no longer imports: the trace stands without it
        return env_name
    for tool in tools:
        if word and tool.action.split(maxsplit=1)[0] == word:
            return tool.name
    return env_name


def checkpoint_runs(client: Any, experiment_id: str, run_id: str, attempt_id: str,
                    checkpoints: list[str]) -> dict[str, str]:
    """The run of each evaluated checkpoint, nested under the attempt's run ``run_id`` (created on
    first use): checkpoint → run id."""
    found = client.search_runs([experiment_id], filter_string=f"tags.`{EPISODES_OF_TAG}` = '{run_id}'",
                               max_results=1000)
    runs = {}
    for r in sorted(found, key=lambda r: (r.info.start_time or 0, r.info.run_id)):
        runs.setdefault(r.data.tags.get(CHECKPOINT_TAG, ""), r.info.run_id)
    for checkpoint in checkpoints:
        if checkpoint not in runs:
            run = client.create_run(experiment_id, run_name=f"{attempt_id}/{checkpoint}",
                                    tags={PARENT_RUN_TAG: run_id, EPISODES_OF_TAG: run_id, CHECKPOINT_TAG: checkpoint,
                                          "rlexp.attempt": attempt_id})  # fmt: skip
            client.set_terminated(run.info.run_id)
            runs[checkpoint] = run.info.run_id
    return runs


def _traced(client: Any, experiment_id: str, runs: Mapping[str, str]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for run in runs.values():
        for key, tids in traced_episodes(client, experiment_id, run).items():
            out.setdefault(key, []).extend(tids)
    return out


def log_episode_traces(client: Any, uri: str, experiment_id: str, run_id: str, attempt_dir: str | Path) -> int:
    """Log every eval episode of an environment attempt not yet traced in ``run_id``; the number
    of traces logged (0 for an attempt without an environment task)."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.experiment.records import read_records
    from rlexp.spec import load_attempt

    att = load_attempt(attempt_dir)
    if att.environment is None:
        return 0
    ad = AttemptDir(att.attempt_dir)
    files = [(c, s, p) for c, s, p in ad.evals.record_files()]
    if not files:
        return 0
    clock = [time.time_ns()]

    def tick(seconds: float = 0.0) -> int:
        clock[0] += max(1_000, int(seconds * 1e9))  # at least 1 µs: spans keep their order
        return clock[0]

    import mlflow

    current: dict[tuple[str, str], tuple[str, str, Mapping[str, Any]]] = {}
    for checkpoint, set_role, path in files:
        for r in read_records(path):
            if isinstance(r.get("trajectory"), Mapping):
                current[(episode_key(checkpoint, set_role, r["problem_hash"]), record_digest(r))] = (checkpoint,
                                                                                                     set_role, r)
    runs = checkpoint_runs(client, experiment_id, run_id, att.id, sorted({c for c, _, _ in current.values()}))
    before = done = _traced(client, experiment_id, runs)
    # traces of records since replaced (an episode played again) go: one trace per episode as it stands
    episodes = {key for key, _ in current}
    stale = [tid for (key, digest), tids in done.items() if key in episodes and (key, digest) not in current
             for tid in tids]
    if stale:
        client.delete_traces(experiment_id, trace_ids=stale)
    rows: dict[str, dict[str, tuple[str, str]]] = {}
    for _pass in range(2):  # the second pass logs what the export queue may have dropped
        todo = [(ident, item) for ident, item in current.items() if ident not in done]
        if not todo:
            break
        with _tracing_to(uri):
            for i, ((_, digest), (checkpoint, set_role, record)) in enumerate(todo, 1):
                if set_role not in rows:
                    rows[set_role] = _rows(att, set_role)
                prompt, env_name = rows[set_role].get(record["problem_hash"], (None, att.environment.name))
                _log_one(client, experiment_id, runs[checkpoint], att, checkpoint, set_role, record,
                         prompt, env_name, digest, tick)  # fmt: skip
                if i % FLUSH_EVERY == 0:
                    mlflow.flush_trace_async_logging()
        done = _traced(client, experiment_id, runs)
    return len(set(done) - set(before))


def _log_one(client: Any, experiment_id: str, run_id: str, att: Attempt, checkpoint: str, set_role: str,
             record: Mapping[str, Any], prompt: str | None, env_name: str, digest: str, tick) -> None:
    from mlflow.entities import SpanType

    trajectory = record["trajectory"]
    tags = {EPISODE_TAG: episode_key(checkpoint, set_role, record["problem_hash"]), RECORD_TAG: digest,
            "rlexp.attempt": att.id, CHECKPOINT_TAG: checkpoint, "rlexp.set": set_role,
            "rlexp.environment": env_name,
            "rlexp.problem_hash": str(record["problem_hash"]), "rlexp.success": str(int(record["correct"])),
            "rlexp.finish_reason": str(trajectory["finish_reason"])}  # fmt: skip
    root = client.start_trace(TRACE_NAME, span_type=SpanType.AGENT,
                              inputs={"prompt": prompt, "gold": record.get("gold")},
                              attributes={"checkpoint": checkpoint, "set": set_role, "environment": env_name},
                              tags=tags, experiment_id=experiment_id, run_id=run_id, start_time_ns=tick())  # fmt: skip
    observation = prompt
    for i, turn in enumerate(trajectory["turns"], start=1):
        span = client.start_span(f"turn {i}", trace_id=root.trace_id, parent_id=root.span_id,
                                 span_type=SpanType.LLM, inputs={"observation": observation},
                                 start_time_ns=tick())  # fmt: skip
        if turn.get("tool_call"):
            tool = client.start_span(f"tool: {tool_name(env_name, str(turn['action']))}", trace_id=root.trace_id, parent_id=span.span_id,
                                     span_type=SpanType.TOOL, inputs={"call": turn["action"]},
                                     start_time_ns=tick())  # fmt: skip
            client.end_span(root.trace_id, tool.span_id, outputs={"result": turn["feedback"]},
                            end_time_ns=tick(float(turn.get("latency_s") or 0.0)))  # fmt: skip
        client.end_span(root.trace_id, span.span_id, outputs={"action": turn["action"]},
                        attributes={"reward": float(turn["reward"]), "tool_call": bool(turn.get("tool_call"))},
                        end_time_ns=tick())  # fmt: skip
        observation = turn["feedback"]
    error = trajectory.get("error")
    reward = record.get("reward")
    client.end_trace(root.trace_id,
                     outputs={"answer": record.get("answer"), "reward": None if reward is None else float(reward),
                              "success": int(record["correct"]), "finish_reason": trajectory["finish_reason"],
                              **({"error": error} if error else {}),
                              # a composed reward: its parts, and the failure that left it unknown
                              **{k: record[k] for k in ("reward_parts", "reward_error") if k in record}},
                     # green only for a success: a failed episode, an environment error or a failed reward is not OK
                     status="OK" if int(record["correct"]) == 1 and trajectory["finish_reason"] != "env_error"
                     and not record.get("reward_error") else "ERROR",
                     end_time_ns=tick())  # fmt: skip
