"""MLflow mirror of a sweep: one parent run for the sweep, one child run per candidate.

The children carry ``mlflow.parentRunId`` (MLflow's own nesting: the UI folds them under the
parent). Runs are found again by tags (``rlexp.sweep_id`` + ``rlexp.sweep_candidate``), so
logging a sweep twice updates its runs instead of adding new ones; a point metric is logged only
when absent or changed. The MLflow experiment is the experiment directory's, as for attempts
(:mod:`rlexp.tracking.runs`). ``import mlflow`` happens inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlexp.experiment.provenance import scrub
from rlexp.tracking.comparison import run_link
from rlexp.tracking.metric_rows import metric_name
from rlexp.tracking.store import experiment_id, filter_literal, resolve_tracking_uri, store_client, store_lock

SWEEP_TAG = "rlexp.sweep_id"
CANDIDATE_TAG = "rlexp.sweep_candidate"
PARENT = "(sweep)"  # the parent run's value of CANDIDATE_TAG


def _run(client, exp_id: str, sweep_id: str, candidate: str, tags: Mapping[str, str]):
    """The run of (sweep, candidate), created on first use under the store lock."""
    query = (f"tags.`{SWEEP_TAG}` = {filter_literal(sweep_id)} "
             f"and tags.`{CANDIDATE_TAG}` = {filter_literal(candidate)}")
    found = client.search_runs([exp_id], filter_string=query, max_results=10)
    if found:
        return sorted(found, key=lambda r: (r.info.start_time or 0, r.info.run_id))[0]
    return client.create_run(exp_id, run_name=tags.get("mlflow.runName"),
                             tags={SWEEP_TAG: sweep_id, CANDIDATE_TAG: candidate, **tags})


def _log(client, run, metrics: Mapping[str, float | None], params: Mapping[str, Any], tags: Mapping[str, str]) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    current = run.data.metrics
    fresh = [Metric(metric_name(k), float(v), now, 0) for k, v in metrics.items()
             if v is not None and current.get(metric_name(k)) != float(v)]
    new_params = [Param(k, scrub(str(v))[:6000]) for k, v in params.items()
                  if v is not None and k not in run.data.params]
    client.log_batch(run.info.run_id, metrics=fresh, params=new_params[:100],
                     tags=[RunTag(k, scrub(v)) for k, v in tags.items()])


def _stats_metrics(prefix: str, stats: Mapping[str, Any]) -> dict[str, float]:
    return {f"{prefix}/{key}": stats[key] for key in ("acc", "n", "correct", "boxed_rate", "last_number_rate",
                                                      "fail_rate", "truncation_rate")}


def log_sweep(ranking: Mapping[str, Any], experiment_dir: Path, report_path: Path, ranking_path: Path,
              tracking_uri: str | None = None) -> dict[str, Any]:
    """Mirror ``result/ranking.json`` into MLflow; returns the parent run id and each child's."""
    uri = resolve_tracking_uri(tracking_uri)
    client = store_client(uri)
    exp_id = experiment_id(client, Path(experiment_dir), uri)
    sweep_id = str(ranking["sweep"])
    selection = ranking["selection"]
    stage1 = ranking["stage1_set"]
    with store_lock(uri):
        parent = _run(client, exp_id, sweep_id, PARENT, {"mlflow.runName": f"sweep {sweep_id}"})
    parent_id = parent.info.run_id
    criteria = ranking["criteria"]
    parent_metrics: dict[str, float | None] = {"band_low": criteria["band"][0], "band_high": criteria["band"][1],
                                               "candidates": len(ranking["candidates"])}
    truncation = ranking.get("truncation_check") or {}
    if truncation.get("comparison"):
        cmp = truncation["comparison"]
        parent_metrics.update({"truncation/delta_pp": cmp["delta_pp"], "truncation/b": cmp["b"],
                               "truncation/c": cmp["c"], "truncation/pvalue": cmp["mcnemar_p"],
                               "truncation/ci_low_pp": cmp["ci_pp"][0], "truncation/ci_high_pp": cmp["ci_pp"][1],
                               "truncation/n": cmp["n"]})
        for tokens, arm in truncation["arms"].items():
            parent_metrics[f"truncation/max_tokens_{tokens}/acc"] = arm["acc"]
            parent_metrics[f"truncation/max_tokens_{tokens}/truncation_rate"] = arm["truncation_rate"]
    ev = ranking["eval"]
    parent_params = {"stage1_set": stage1, "stage2_sets": ",".join(ranking["stage2_sets"]) or "none",
                     "engine": ev["engine"], "max_tokens": ev["max_tokens"], "decoding": ev["decoding"]["mode"],
                     "prompt_suffix": repr(ev["prompt_suffix"]), "format_tolerance_pp": criteria["format_tolerance_pp"],
                     "finalists": len(ranking["finalists"]), "spec_sha256": ranking["spec_sha256"]}
    note = (f"**Selected: {selection['candidate']}** — {selection['reason']}" if selection["candidate"]
            else f"**No model selected** — {selection['reason']}")
    parent_tags = {"mlflow.note.content": note, "rlexp.sweep_selected": str(selection["candidate"] or ""),
                   "rlexp.kind": "sweep"}
    _log(client, parent, parent_metrics, parent_params, parent_tags)

    children: dict[str, str] = {}
    for row in ranking["candidates"]:
        name = row["name"]
        tags = {"mlflow.runName": name, "mlflow.parentRunId": parent_id, "rlexp.kind": "sweep_candidate",
                "rlexp.sweep_selected": "true" if row["selected"] else "false",
                "rlexp.sweep_finalist": "true" if row["finalist"] else "false"}
        with store_lock(uri):
            child = _run(client, exp_id, sweep_id, name, tags)
        metrics: dict[str, float | None] = {**_stats_metrics(f"stage1/{stage1}", row["primary"]),
                                            "in_band": float(row["in_band"]),
                                            "band_distance_pp": row["band_distance_pp"], "rank": row["rank"],
                                            "params": row["params"]}
        for role, stats in row["stage2"].items():
            metrics.update(_stats_metrics(f"stage2/{role}", stats))
        if row["dropped"]:
            tags["rlexp.sweep_dropped"] = row["dropped"]
        _log(client, child, metrics, {"model": row["model"], "params_source": row["params_source"]}, tags)
        _finish(client, child.info.run_id)
        children[name] = child.info.run_id

    for path, folder in ((ranking_path, "sweep"), (report_path, "sweep")):
        if Path(path).exists():
            client.log_artifact(parent_id, str(path), artifact_path=folder)
    _finish(client, parent_id)
    return {"parent_run_id": parent_id, "children": children, "experiment_id": exp_id,
            "parent_link": run_link(exp_id, parent_id, uri)}


def _finish(client, run_id: str) -> None:
    if client.get_run(run_id).info.status != "FINISHED":
        client.set_terminated(run_id, status="FINISHED")
