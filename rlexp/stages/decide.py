"""The decide stage: gather an evaluated attempt's inputs, decide, record.

1. :func:`gather` reads the attempt spec, the pre-registered checkpoints
   (``eval/selection.json``), the eval records of those checkpoints and of the baselines, the
   parser audit, the training metrics, G4 and the experiment's ledger, and validates all of it;
2. :func:`rlexp.protocol.decision.decide` applies the SOP (pure);
3. :func:`record` writes the paired records, appends the ledger, writes ``decision.json`` and
   moves the SOTA pin only on STOP-1 (Gate-1b and Gate-2).

Everything is read and checked before anything is written, so bad input (exit 2) leaves the
attempt untouched. The writes are each atomic (a temporary name, then a rename; the ledger one
complete line) and come in an order that a failure at any point leaves the old state or a state
that a rerun of ``rlexp decide`` completes to the new one:

- paired records first: derived files, rewritten identically by a rerun;
- the ledger line next: the history other attempts' decisions read; a rerun appends nothing more
  (the same result is never appended twice);
- ``decision.json`` then: when it is there, so is its ledger line;
- the SOTA pin last: a moved pin always has its decision and ledger line behind it, and while it
  has not moved a rerun decides exactly as the first run did and moves it (re-deciding the pin
  holder would otherwise see "already pinned" and record no move).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.layout import AttemptDir, Checkpoint
from rlexp.protocol.decision import BASELINES, AttemptFacts, DecideInputs, Decision

if TYPE_CHECKING:
    from rlexp.spec.model import Attempt


def decide(attempt: str | Path, *, sop_path: str | Path | None = None, now: str | None = None) -> Decision:
    """Decide an evaluated attempt under the SOP in force (or ``sop_path``) and record the decision.

    >>> import rlexp
    >>> rlexp.decide("experiments/demo/d2").decision        # doctest: +SKIP
    'CONFIRM'
    """
    from rlexp.protocol.decision import decide as decide_pure
    from rlexp.spec.sop import load_sop

    sop = load_sop(sop_path)
    inputs, context = gather(attempt, sop)
    decision = decide_pure(inputs, sop, decided_at=now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    record(decision, inputs, context)
    return decision


def _read_selection(ad: AttemptDir) -> tuple[tuple[Checkpoint, ...], str | None]:
    """The selected checkpoints in role order (each with its role(s) and its adapter folder) and the
    SHA-256 of the SOP file the selection was made under, from eval/selection.json."""
    path = ad.evals.selection
    if not path.exists():
        raise InputError(path, None, "file not found: run `rlexp eval` first (it pre-registers the K=3 checkpoints)")
    from rlexp.experiment.results import read_selection

    selection = read_selection(ad.root)
    assert selection is not None  # it exists (above)
    selected = tuple(replace(c, path=ad.checkpoint_files.adapter(c.step)) for c in selection.selected())
    if not selected:
        raise InputError(path, "checkpoints", "no checkpoint selected")
    return selected, selection.sop_sha256


def _parser_audit(ad: AttemptDir) -> dict[str, Any] | None:
    """guards/parser_audit.json (written by ``rlexp guard audit``) → {"misparse_rate", "audit_passed",
    "file"}; None when the audit was not run."""
    from rlexp.numbers import finite_number
    from rlexp.protocol.verdict import Verdict

    path = ad.guards.verdict("parser_audit")
    data = ad.guards.read("parser_audit")
    if data is None:
        return None
    passed = data.get("passed")
    if not isinstance(passed, bool):  # first: an audit is decided, never pending
        raise InputError(path, "passed", f"must be true or false, got {passed!r}")
    numbers = Verdict.from_dict(data, path).numbers
    if "mis_parse_rate" not in numbers:
        raise InputError(path, "numbers.mis_parse_rate", "missing (write the file with `rlexp guard audit ATTEMPT "
                         "--verdicts FILE`)")
    rate = finite_number(numbers["mis_parse_rate"])
    if rate is None or not 0.0 <= rate <= 1.0:
        raise InputError(path, "numbers.mis_parse_rate", f"must be a fraction in [0, 1], got "
                         f"{numbers['mis_parse_rate']!r}")
    return {"misparse_rate": rate, "audit_passed": passed, "file": str(path)}


def _g4_numbers(ad: AttemptDir) -> dict[str, Any] | None:
    from rlexp.experiment.verdicts import read_verdict

    verdict = read_verdict(ad.root, "g4")
    return dict(verdict.numbers) if verdict is not None else None


def gather(attempt: str | Path, sop: Any) -> tuple[DecideInputs, dict[str, Any]]:
    """Read and validate everything the decision needs; return the inputs and what recording needs."""
    from rlexp.experiment.files import sha256_file
    from rlexp.experiment.ledger import latest_by_attempt, read_ledger, read_sota
    from rlexp.experiment.paired import pair_files
    from rlexp.protocol.decision import diagnostics_from
    from rlexp.spec import TRAINING, attempt_recipe_sha256, diff_against_parent, load_attempt
    from rlexp.training.metrics_file import read_metrics

    att = load_attempt(attempt)
    ad = AttemptDir(att.attempt_dir)
    exp_dir = Path(att.experiment_dir)
    selected, selected_under = _read_selection(ad)
    names = [c.name for c in selected]
    roles = {c.name: c.role or "" for c in selected}
    selection_note = None
    if selected_under is not None and selected_under != sop.sha256:
        # K=3 (smoothing window, ties) was applied under another SOP file than the gates are now
        selection_note = (f"the K=3 checkpoints were selected under another SOP file (sha256 {selected_under[:12]}) "
                          f"than this decision's ({sop.sha256[:12]}): rerun `rlexp eval` to reselect")

    pin = read_sota(exp_dir)
    sets = (sop.primary.set_role, sop.primary.secondary_role, sop.primary.sanity_role)
    primary_role = sets[0]
    present = tuple(b for b in BASELINES if ad.evals.records(b, primary_role).exists())
    if "baseline_s0" not in present:
        raise InputError(ad.evals.records("baseline_s0", primary_role), None,
                         "file not found: Baseline-S0 must be evaluated with the same pipeline (run `rlexp eval`)")
    pin_is_self = pin is not None and pin.attempt == att.id  # re-deciding the attempt that moved the pin
    if pin is not None and not pin_is_self and "baseline_sota" not in present:
        raise InputError(ad.evals.records("baseline_sota", primary_role), None,
                         f"file not found: a SOTA is pinned ({pin.attempt}/{pin.checkpoint}) but was not evaluated "
                         f"(run `rlexp eval`)")
    for name in names:
        if not ad.evals.records(name, primary_role).exists():
            raise InputError(ad.evals.records(name, primary_role), None,
                             "file not found: every pre-registered checkpoint must be evaluated (run `rlexp eval`)")

    _check_record_metadata(ad, present, names, sets)
    paired: dict[tuple[str, str, str], Any] = {}
    skipped: list[str] = []
    for baseline in present:
        for name in names:
            for role in sets:
                base_file, new_file = ad.evals.records(baseline, role), ad.evals.records(name, role)
                if role != primary_role and not (base_file.exists() and new_file.exists()):
                    if base_file.exists() or new_file.exists():
                        skipped.append(f"{role}: records of {baseline} or {name} missing; that comparison is skipped")
                    continue
                paired[(baseline, name, role)] = pair_files(base_file, new_file)

    clusters, cluster_labels = _clusters(att, paired, sets)
    pool = att.datasets.get("pool")
    pool_sha = sha256_file(pool.path) if pool is not None and pool.path is not None and pool.path.is_file() else None
    seed = att.recipe.get("seed")
    facts = AttemptFacts(
        id=att.id, parent=att.parent_id,
        changed=tuple(sorted({d.key for d in diff_against_parent(att) if d.kind == TRAINING})),
        pool_sha256=pool_sha, pool_size=pool.size if pool else None,
        recipe_sha256=attempt_recipe_sha256(att), seed=seed)
    history = {k: v for k, v in latest_by_attempt(read_ledger(exp_dir)).items() if k != att.id}
    rows = read_metrics(ad.metrics) if ad.metrics.exists() else []
    from rlexp.reporting import compare_with_parent

    try:  # for the regression flags only: a parent that cannot be compared does not block the decision
        vs_parent = {c["new"]: c for c in compare_with_parent(att.attempt_dir, sop).values()}
    except InputError as exc:
        vs_parent = {}
        skipped.append(f"no comparison with the parent for the regression flags: {exc}")
    primary_metric = att.environment.primary_metric if att.environment is not None else "success"
    if att.environment is not None:
        _refuse_reward_errors(ad)
    rewards = _episode_rewards(ad, paired) if primary_metric == "mean_reward" else {}
    inputs = DecideInputs(
        primary_metric=primary_metric, rewards=rewards,
        attempt=facts, checkpoints=tuple(names), roles=roles, baselines=present, sets=sets, paired=paired,
        history=history, sota=pin.to_dict() if pin else None, pin_is_self=pin_is_self,
        parser_audit=_parser_audit(ad), diagnostics=diagnostics_from(rows, _g4_numbers(ad), sop),
        selection_note=selection_note, skipped=tuple(skipped), vs_parent=vs_parent,
        clusters=clusters, cluster_labels=cluster_labels)
    return inputs, {"attempt_dir": ad, "experiment_dir": exp_dir, "selected": {c.name: c for c in selected}}


def _clusters(att: Attempt, paired: dict[tuple[str, str, str], Any], sets: tuple[str, ...]
              ) -> tuple[dict[str, str], dict[tuple[str, str, str], list[Any]]]:
    """The sets that declare a cluster column (role -> column) and, for each paired key on them, the
    cluster of each paired record in its order. A record whose problem is not in the set's file is an
    InputError naming the records file (the set changed since it was evaluated)."""
    clusters: dict[str, str] = {}
    labels: dict[tuple[str, str, str], list[Any]] = {}
    for role in sets:
        ref = att.datasets.get(role)
        if ref is None or ref.cluster is None:
            continue
        if ref.path is None or not ref.exists:
            raise InputError(att.display_path, f"datasets.{role}.cluster", "the set's file is needed to read its "
                                                                           "clusters: state a path to it")
        from rlexp.evaluation.arithmetic_task import cluster_labels

        by_hash = cluster_labels(ref.path, ref.cluster, declared_in=f"{att.display_path}: datasets.{role}.cluster")
        clusters[role] = ref.cluster
        for key, ps in paired.items():
            if key[2] != role:
                continue
            missing = next((r.problem_hash for r in ps.records if r.problem_hash not in by_hash), None)
            if missing is not None:
                raise InputError(ps.new_path, "problem_hash",
                                 f"{missing[:12]} is not a row of {ref.path.name}, whose column {ref.cluster!r} "
                                 "clusters this set: re-run `rlexp eval` on the set as it is")
            labels[key] = [by_hash[r.problem_hash] for r in ps.records]
    return clusters, labels


def _refuse_reward_errors(ad: AttemptDir) -> None:
    """Episode records whose composed reward failed (a judge_error) are counted and refused, never
    scored: one InputError naming the first such file and the count."""
    from rlexp.environments.rewards import reward_error_counts
    from rlexp.experiment.records import read_records

    for _checkpoint, _role, path in ad.evals.record_files():
        counts = reward_error_counts(read_records(path, allow_empty=True))
        failed = {k: v for k, v in counts.items() if k != "episodes" and v}
        if failed:
            listed = ", ".join(f"{v} {k}" for k, v in sorted(failed.items()))
            raise InputError(path, "reward_error", f"{listed} of {counts['episodes']} episodes: their reward is "
                                                   "unknown, not 0; rerun `rlexp eval` (failed judge calls are "
                                                   "asked again, judged answers come from the cache)")


def _episode_rewards(ad: AttemptDir, paired: dict[tuple[str, str, str], Any]) -> dict[tuple[str, str, str], Any]:
    """Each paired key's per-episode rewards (baseline, new), aligned as its paired records; a
    record without a reward in [0, 1] is one InputError naming its file."""
    from rlexp.experiment.records import read_records

    cache: dict[str, dict[str, float]] = {}

    def rewards_of(name: str, role: str) -> dict[str, float]:
        path = ad.evals.records(name, role)
        if str(path) not in cache:
            out = {}
            for i, r in enumerate(read_records(path), 1):
                value = r.get("reward")
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                    raise InputError(path, f"record {i}: reward", "the mean_reward primary metric needs a reward in "
                                                                  f"[0, 1] per episode, got {value!r}")
                out[r["problem_hash"]] = float(value)
            cache[str(path)] = out
        return cache[str(path)]

    result = {}
    for (baseline, name, role), ps in paired.items():
        base, new = rewards_of(baseline, role), rewards_of(name, role)
        result[(baseline, name, role)] = ([base[r.problem_hash] for r in ps.records],
                                          [new[r.problem_hash] for r in ps.records])
    return result


# What every record file of one set shares (rlexp.stages.evaluate writes them for all targets alike):
# records made under different values of these are not comparable.
SHARED_META_KEYS = ("decoding", "model_sha256", "dataset_sha256", "prompt_suffix", "chat_template_sha256",
                    "grading", "parser_version")


def _check_record_metadata(ad: AttemptDir, baselines: tuple[str, ...], names: list[str], sets: tuple[str, ...]) -> None:
    """The ``.meta.json`` beside each record file the decision reads: a JSON object naming what produced
    the records; within one set, every file's decoding, base model, dataset, prompt, template, grading and
    parser agree; a set where some files have metadata and others lack it is refused."""
    from rlexp.experiment.records import meta_path, read_meta

    for role in sets:
        metas: dict[Path, dict[str, Any]] = {}
        missing: list[Path] = []
        for name in (*baselines, *names):
            records = ad.evals.records(name, role)
            if not records.exists():
                continue
            mpath = meta_path(records)
            if not mpath.exists() and not mpath.is_symlink():
                missing.append(mpath)
                continue
            meta = read_meta(records)
            for key in SHARED_META_KEYS:
                if key not in meta:
                    raise InputError(mpath, key, "missing: the metadata of eval records names what produced them")
            metas[mpath] = meta
        if metas and missing:
            raise InputError(missing[0], None, f"file not found: the other record files of set {role} have their "
                                               "metadata; re-run `rlexp eval` for this checkpoint")
        if len(metas) > 1:
            (first_path, first), *rest = metas.items()
            for mpath, meta in rest:
                for key in SHARED_META_KEYS:
                    if meta[key] != first[key]:
                        raise InputError(mpath, key, f"{_short(meta[key])} differs from {first_path.parent.name}'s "
                                                     f"{_short(first[key])}: records made under other settings are "
                                                     "not comparable (re-run `rlexp eval`)")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def record(decision: Decision, inputs: DecideInputs, context: dict[str, Any]) -> None:
    """Write the paired records, append the ledger, write decision.json, move the SOTA pin on
    STOP-1 — in this order (see the module docstring)."""
    from rlexp.experiment.files import atomic_write_json
    from rlexp.experiment.ledger import LedgerEntry, SotaPin, pin_sota, record_decision
    from rlexp.experiment.paired import write_pairs_for_attempt

    ad: AttemptDir = context["attempt_dir"]
    exp_dir: Path = context["experiment_dir"]
    rec = decision.record
    if decision.new_sota_checkpoint is not None:
        # decide() pins one of the selected checkpoints, each with its adapter folder
        ck_dir = context["selected"][decision.new_sota_checkpoint].path
        pin = SotaPin(decision.attempt, decision.new_sota_checkpoint,
                      str(ck_dir.relative_to(exp_dir)) if ck_dir.is_relative_to(exp_dir) else str(ck_dir),
                      rec["decided_at"], (rec.get("sota") or {}).get("selection_correction_pp"))
        rec["sota"] = pin.to_dict()  # type: ignore[index]  (the path the pure decision left open)
    write_pairs_for_attempt(ad.root, list(inputs.baselines), list(inputs.checkpoints), inputs.sets,
                            joined=inputs.paired)
    primary = rec["checkpoints"][rec["primary_checkpoint"]]
    facts = inputs.attempt
    record_decision(exp_dir, LedgerEntry(
        attempt=facts.id, parent=facts.parent, changed=facts.changed, pool_sha256=facts.pool_sha256,
        pool_size=facts.pool_size, pool_method=None, recipe_sha256=facts.recipe_sha256,
        seed=facts.seed if isinstance(facts.seed, int) else None, checkpoint=rec["primary_checkpoint"],
        baseline=rec["baseline"], delta_pp=primary["delta_pp"], ci_pp=tuple(primary["ci_pp"]),
        mcnemar_p=primary["mcnemar_p"], decision=rec["decision"], sop_version=rec["sop_version"],
        decided_at=rec["decided_at"], adjusted_delta_pp=(rec.get("selection_adjusted") or {}).get("replication_pp")))
    atomic_write_json(ad.decision, rec)
    if rec["sota_moved"]:
        pin_sota(exp_dir, SotaPin(**rec["sota"]))
