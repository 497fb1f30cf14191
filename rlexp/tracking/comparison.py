"""The comparison surface of the MLflow mirror: the decision's numbers by role, the lineage and
decision tags, a rung's seed siblings grouped under one run, the datasets, and the shared runs
view that shows the columns attempts are compared by.

A rung's seed siblings (same parent, same recipe but the seed, same pool) are nested under one
group run (``mlflow.parentRunId``): MLflow's nesting for grouping only; lineage stays a tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlexp.errors import InputError
from rlexp.experiment.layout import checkpoint_name, checkpoint_step
from rlexp.experiment.records import eval_accuracies
from rlexp.tracking.store import ATTEMPT_TAG, filter_literal, find_run, store_lock

SEED_GROUP_TAG = "rlexp.seed_group"   # same parent, same recipe but the seed, same pool: one rung's seeds
GROUP_RUN_TAG = "rlexp.group_run"     # "seeds" on the run that only groups a rung's seed siblings
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's nesting: used for grouping only, never for lineage


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
        runs = client.search_runs([experiment_id], filter_string=f"tags.`{SEED_GROUP_TAG}` = {filter_literal(group)}",
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
