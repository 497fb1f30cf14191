"""`rlexp ladder propose` and `rlexp ladder run`: a single-variable ladder as an Optuna study.

- :func:`propose_rung` writes the next rung's ``attempt.yaml`` (the rule is
  :func:`rlexp.spec.ladder.propose`; a requested ``change`` of two variables is refused).
- :func:`run_rung` runs one rung's attempt through the SOP's sequence, guards included —
  plan → guard g0, g2 → launch → guard g1 → eval → guard g4, audit draw → decide → report — by
  calling the stage functions; it reads and writes only the experiment directory and the MLflow
  store, so it can run in another process (a Ray task) for the same experiment.
- :func:`run_ladder` is the loop around it: claim the next rung in the study (or take over a
  rung whose runner died), write its spec, run it, record the decision in its trial, until
  ``rungs`` rungs ran or the ladder stops (STOP-3a/3b, DEBUG, grid exhausted, spec's rungs). A
  confirmation seed claimed while its sibling still runs (``seeds_at_once``) decides after it.

Every stage resumes (training by its resume state, eval records by problem hash), so a killed
ladder run continues where it stopped without redoing a finished rung.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import CheckFailed, InputError
from rlexp.experiment.layout import ExperimentDir

if TYPE_CHECKING:
    from rlexp.spec.ladder import LadderSpec

HEADER = "# Written by `rlexp ladder`: a rung of the ladder in ladder.yaml (docs/ladders.md).\n"


def load_ladder(experiment_dir: str | Path):
    """The experiment's ladder spec (``ladder.yaml``), validated, its root attempt loaded."""
    from rlexp.experiment.files import load_yaml
    from rlexp.spec import load_attempt
    from rlexp.spec.ladder import parse_ladder_spec

    exp = ExperimentDir(experiment_dir)
    path = exp.ladder_spec
    if not path.is_file():
        raise InputError(path, None, "file not found (a ladder spec: root, variables, seeds, rungs; docs/ladders.md)")
    spec = parse_ladder_spec(load_yaml(path), str(path))
    if not exp.attempt(spec.root).spec.is_file():
        raise InputError(path, "root", f"attempt {spec.root!r} not found in {exp.root}")
    load_attempt(exp.attempt(spec.root).root)
    return spec


def _value_of(experiment_dir: Path) -> Callable[[str, str], Any]:
    from rlexp.spec import load_attempt

    cache: dict[str, Any] = {}

    def value_of(attempt: str, key: str) -> Any:
        if attempt not in cache:
            cache[attempt] = load_attempt(ExperimentDir(experiment_dir).attempt(attempt).root)
        return cache[attempt].recipe.get(key)

    return value_of


def ladder_rungs(experiment_dir: Path, claims: list[Any]) -> list[Any]:
    """The claimed rungs in claim order, each with the decision its ``decision.json`` holds now."""
    from rlexp.experiment.results import read_decision
    from rlexp.spec.ladder import Rung, fault_class_of

    rungs = []
    for c in claims:
        decision = read_decision(ExperimentDir(experiment_dir).attempt(c.attempt).root)
        rungs.append(Rung(c.attempt, c.rung.get("parent"), c.rung.get("variable"), c.rung.get("value"),
                          c.rung.get("seed"), c.rung.get("seed_of"),
                          decision.decision if decision else None,
                          fault_class_of(decision.record if decision else None)))
    return rungs


def _sota(experiment_dir: Path) -> str | None:
    from rlexp.experiment.ledger import read_sota

    pin = read_sota(experiment_dir)
    return pin.attempt if pin else None


# ----------------------------------------------------------------------------- writing a rung's spec


def rung_spec_text(experiment_dir: Path, rung: Mapping[str, Any]) -> str:
    """The YAML of a rung's ``attempt.yaml`` (no ``id``: it is the directory's name)."""
    import yaml

    from rlexp.experiment.files import load_yaml

    parent, variable, value = rung.get("parent"), rung.get("variable"), rung.get("value")
    seed_of, seed = rung.get("seed_of"), rung.get("seed")
    if seed_of is not None and parent is None:
        # the root's confirmation seed: a copy of the root with another seed (the root has no parent)
        doc = dict(load_yaml(ExperimentDir(experiment_dir).attempt(seed_of).spec))
        doc.pop("id", None)
        doc["seed_of"] = seed_of
        doc["description"] = f"Confirmation seed of {seed_of} (SOP Gate-2): the same recipe, seed {seed}."
        doc["recipe"] = {**(doc.get("recipe") or {}), "seed": seed}
    else:
        doc = {"parent": parent}
        if seed_of is not None:
            doc["seed_of"] = seed_of
            doc["description"] = (f"Confirmation seed of {seed_of} (SOP Gate-2): {variable} {value} from {parent}, "
                                  f"seed {seed}.")
        else:
            doc["description"] = f"Ladder rung: {variable} {value} from {parent}."
        doc["change"] = {variable: value}
        doc["recipe"] = {variable: value, **({"seed": seed} if seed_of is not None else {})}
    return HEADER + yaml.safe_dump(doc, sort_keys=False)


def write_rung(experiment_dir: Path, attempt_id: str, rung: Mapping[str, Any]) -> Path:
    """Write the rung's ``attempt.yaml`` and check it as ``rlexp plan`` will: one training variable
    against the parent (a confirmation seed: the seed against its sibling). A refused rung is removed."""
    import shutil

    from rlexp.experiment.files import atomic_write_text
    from rlexp.protocol.variable_checks import check_single_variable
    from rlexp.protocol.verdict import ERROR
    from rlexp.spec import load_attempt

    ad = ExperimentDir(experiment_dir).attempt(attempt_id)
    text = rung_spec_text(experiment_dir, rung)
    if ad.spec.exists():
        if ad.spec.read_text(encoding="utf-8") == text:
            return ad.spec
        raise InputError(ad.spec, None, f"exists and is not the rung the ladder claimed ({rung}): move it away")
    created = not ad.root.exists()
    atomic_write_text(ad.spec, text)

    def remove() -> None:
        ad.spec.unlink(missing_ok=True)
        if created:
            shutil.rmtree(ad.root, ignore_errors=True)

    try:
        errors = [c for c in check_single_variable(load_attempt(ad.root)) if c.severity == ERROR]
    except InputError:
        remove()
        raise
    if errors:
        remove()
        raise InputError(ad.spec, "change", errors[0].rule)
    return ad.spec


@dataclass(frozen=True)
class ProposeResult:
    proposal: Any                   # rlexp.spec.ladder.Proposal
    spec: Path | None               # the attempt.yaml written (None when the ladder stops or waits)

    def to_dict(self) -> dict[str, Any]:
        return {**self.proposal.to_dict(), "spec": str(self.spec) if self.spec else None}


def propose_rung(experiment: str | Path, *, change: Mapping[str, Any] | None = None, storage: str | None = None,
                 tracking_uri: str | None = None, write: bool = True) -> ProposeResult:
    """The ladder's next rung, its ``attempt.yaml`` written (unless ``write`` is False).

    ``change`` asks for a rung of one's own choosing (``{key: value}``) from the ladder's current
    parent; more than one training variable is refused (InputError, nothing written)."""
    from rlexp.spec import load_attempt
    from rlexp.spec.ladder import Proposal, check_one_variable, next_attempt_id, propose
    from rlexp.tracking.study import LadderStudy

    exp = ExperimentDir(experiment).root.resolve()
    spec = load_ladder(exp)
    sota = _sota(exp)
    if change:  # checked before the study is opened: a refused --change creates no optuna.db
        if "seed" in change:
            raise InputError(None, "--change", "seeds are replications, not a rung's variable: list them under "
                                               "seeds in ladder.yaml")
        parent = sota or spec.root
        parent_att = load_attempt(ExperimentDir(exp).attempt(parent).root)
        diff = check_one_variable(parent_att, change, None, "--change")
    study = LadderStudy(exp, storage, tracking_uri)
    rungs = ladder_rungs(exp, study.claims())
    if change:
        proposal = Proposal("run", "requested", f"requested: {diff.key} {diff.parent} -> {diff.value} from {parent}",
                            attempt=next_attempt_id(spec.root, rungs), parent=parent, variable=diff.key,
                            value=diff.value, seed=parent_att.recipe.get("seed"))
    else:
        proposal = propose(spec, rungs, sota=sota, value_of=_value_of(exp))
    written = None
    if write and proposal.action == "run" and proposal.kind != "root":
        attempt = _free_attempt_id(exp, spec.root, proposal, rungs)
        if attempt != proposal.attempt:
            from dataclasses import replace

            proposal = replace(proposal, attempt=attempt)
        written = write_rung(exp, proposal.attempt, _rung_doc(proposal))
    return ProposeResult(proposal, written)


def _rung_doc(proposal: Any) -> dict[str, Any]:
    return {"parent": proposal.parent, "variable": proposal.variable, "value": proposal.value,
            "seed": proposal.seed, "seed_of": proposal.seed_of, "kind": proposal.kind}


def _free_attempt_id(exp: Path, root: str, proposal: Any, rungs: list[Any]) -> str:
    """The proposal's id, or the next ``<root>-r<N>`` free on disk when a directory of that name
    holds another spec (a rung proposed earlier and not run stays where it is)."""
    from rlexp.spec.ladder import Rung, next_attempt_id

    attempt, seen = proposal.attempt, list(rungs)
    text = rung_spec_text(exp, _rung_doc(proposal))
    while proposal.kind != "confirmation":
        spec = ExperimentDir(exp).attempt(attempt).spec
        if not spec.exists() or spec.read_text(encoding="utf-8") == text:
            break
        seen.append(Rung(attempt, None, None, None, None, None))
        attempt = next_attempt_id(root, seen)
    return attempt


# ----------------------------------------------------------------------------- running rungs


@dataclass(frozen=True)
class RungResult:
    attempt: str
    decision: str
    reason: str
    delta_pp: float | None
    mlflow_run_id: str | None
    fault_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_rung(experiment_dir: str | Path, attempt_id: str, *, tracking_uri: str | None = None,
             console: Any = None, g1_limit: int | None = None, g4_limit: int = 200,
             before_decide: Callable[[], None] | None = None) -> RungResult:
    """One rung through the SOP's sequence, calling the stages as ``rlexp demo`` does:
    plan → guard g0, g2 → launch (local backend) → guard g1 → eval → guard g4, audit draw → decide → report.

    ``before_decide`` is called before decide: a confirmation seed run at once with its sibling
    waits there for the sibling's decision, so that its Gate-2 sees both seeds.

    A failed guard is a verdict written to guards/ (shown in the report), as in the demo; a plan
    with error checks or a failed training run stops the rung (CheckFailed)."""
    from rich.console import Console

    from rlexp.spec.ladder import fault_class_of
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard import guard
    from rlexp.stages.guard_audit import run_audit_draw
    from rlexp.stages.launch import launch
    from rlexp.stages.plan import plan
    from rlexp.stages.report import report

    console = console or Console(stderr=True)
    ad = ExperimentDir(experiment_dir).attempt(attempt_id)
    name = ad.id

    def show(verdict: Any) -> None:
        console.print(f"{name}: {verdict.name}: {verdict.status} — {verdict.reason}", highlight=False)

    planned = plan(ad.root)
    if not planned.ok:
        first = planned.errors[0]
        raise CheckFailed(f"ladder: plan of {name} has error checks, first {first['name']}: {first['rule']}")
    show(guard("g0", ad.root))
    show(guard("g2", ad.root))
    launched = launch(ad.root, backend="local", tracking_uri=tracking_uri, resume=ad.launch.state.exists())
    if launched.state == "failed":
        raise CheckFailed(f"ladder: the training run of {name} failed: {launched.run.get('reason')}")
    show(guard("g1", ad.root, **({"limit": g1_limit} if g1_limit else {})))
    evaluate(ad.root, show_progress=False)
    show(guard("g4", ad.root, limit=g4_limit))
    run_audit_draw(ad.root)
    if before_decide is not None:
        before_decide()
    decided = decide(ad.root)
    console.print(f"{name}: decision {decided.decision} — {decided.reason}", highlight=False)
    written = report(ad.root, tracking_uri=tracking_uri)
    doc = decided.to_dict()
    primary = (doc.get("checkpoints") or {}).get(doc.get("primary_checkpoint")) or {}
    return RungResult(name, decided.decision, decided.reason, primary.get("delta_pp"), written.mlflow_run_id,
                      fault_class_of(doc))


@dataclass
class LadderRunResult:
    ran: list[RungResult] = field(default_factory=list)
    stopped: Any = None            # the Proposal that ended the loop (stop), or None when --rungs ran out
    study: str = ""
    storage: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ran": [r.to_dict() for r in self.ran], "stopped": self.stopped.to_dict() if self.stopped else None,
                "study": self.study, "storage": self.storage}


RungRunner = Callable[..., RungResult]


def run_ladder(experiment: str | Path, *, rungs: int, storage: str | None = None, tracking_uri: str | None = None,
               console: Any = None, runner: RungRunner | None = None, poll_s: float = 5.0,
               wait_s: float = 24 * 3600.0, **rung_options: Any) -> LadderRunResult:
    """Run up to ``rungs`` rungs of the experiment's ladder, one after another.

    ``runner(experiment_dir, attempt_id, tracking_uri=..., **rung_options)`` runs one rung
    (:func:`run_rung` by default; another process or a cluster job runs the same function)."""
    from rich.console import Console

    from rlexp.experiment.provenance import scrub_url
    from rlexp.tracking.study import LadderStudy, owner_id

    console = console or Console(stderr=True)
    runner = runner or run_rung
    exp = ExperimentDir(experiment).root.resolve()
    spec = load_ladder(exp)
    study = LadderStudy(exp, storage, tracking_uri)
    me = owner_id()
    result = LadderRunResult(study=study.name, storage=scrub_url(study.url))
    waited = 0.0
    while len(result.ran) < rungs:
        step = _next_rung(exp, spec, study, me)
        if step.action == "stop":
            result.stopped = step
            console.print(f"ladder stops: {step.reason}", highlight=False)
            break
        if step.action == "wait":
            if waited >= wait_s:
                result.stopped = step
                break
            time.sleep(poll_s)
            waited += poll_s
            continue
        waited = 0.0
        attempt = step.attempt
        claim = next(c for c in study.claims() if c.attempt == attempt)
        if claim.rung.get("kind") != "root":
            write_rung(exp, attempt, claim.rung)
        number = claim.trial_number
        if number is None or study.trial_state(number) != "RUNNING":
            number = study.start_trial(attempt, _trial_attrs(attempt, claim.rung), _trial_params(spec, claim.rung))
        console.print(f"ladder: rung {attempt} ({step.kind}): {step.reason} [trial {number}]", highlight=False)
        options = dict(rung_options)
        base = claim.rung.get("seed_of")
        if base and ExperimentDir(exp).attempt(base).read_decision() is None:
            # run at once with its sibling (seeds_at_once): decide after it, in order, as Gate-2 needs
            options["before_decide"] = _sibling_decided(exp, study, attempt, base, min(poll_s, 2.0), wait_s)
        try:
            done = runner(exp, attempt, tracking_uri=tracking_uri, **options)
        except BaseException:
            study.finish(number, None, failed=True)
            study.set_claim(attempt, state="failed")
            raise
        study.set_attrs(number, {"decision": done.decision, "reason": done.reason,
                                 "mlflow_run_id": done.mlflow_run_id or "", "fault_class": done.fault_class or ""})
        study.finish(number, done.delta_pp)
        study.set_claim(attempt, state="done")
        result.ran.append(done)
    return result


def _sibling_decided(exp: Path, study: Any, attempt: str, base: str, poll_s: float,
                     wait_s: float) -> Callable[[], None]:
    """Wait until ``base``'s rung is done (decided, the SOTA pin moved on STOP-1, its trial recorded);
    CheckFailed when its rung failed, its runner on this host died before deciding, or ``wait_s``
    passed (this seed's trial fails; the next ladder run runs it again)."""
    from rlexp.tracking.study import DONE, FAILED, owner_alive

    def wait() -> None:
        started = time.monotonic()
        while True:
            claim = next((c for c in study.claims() if c.attempt == base), None)
            decided = ExperimentDir(exp).attempt(base).read_decision() is not None
            if claim is not None and (claim.state == DONE or (decided and owner_alive(claim.owner) is False)):
                return
            if claim is None or claim.state == FAILED or owner_alive(claim.owner) is False:
                raise CheckFailed(f"ladder: {attempt} decides after {base}, whose rung failed or whose runner "
                                  f"stopped: run the ladder again")
            if time.monotonic() - started > wait_s:
                raise CheckFailed(f"ladder: {attempt} waited {wait_s:.0f} s for {base}'s decision")
            time.sleep(poll_s)

    return wait


def _trial_attrs(attempt: str, rung: Mapping[str, Any]) -> dict[str, Any]:
    return {"attempt_id": attempt, "parent": rung.get("parent") or "", "kind": rung.get("kind") or "",
            "changed_variable": rung.get("variable") or ("seed" if rung.get("seed_of") else "none"),
            "value": rung.get("seed") if rung.get("seed_of") else rung.get("value") if rung.get("variable") else "",
            "seed": rung.get("seed"), "seed_of": rung.get("seed_of") or ""}


def _trial_params(spec: LadderSpec, rung: Mapping[str, Any]) -> dict[str, tuple[Any, tuple]]:
    grid = dict(spec.variables)
    variable, value = rung.get("variable"), rung.get("value")
    scalar = (type(None), bool, int, float, str)
    if (variable in grid and isinstance(value, scalar) and all(isinstance(v, scalar) for v in grid[variable])
            and value in grid[variable]):
        return {variable: (value, grid[variable])}
    return {}


def _next_rung(exp: Path, spec: LadderSpec, study: Any, me: str) -> Any:
    """Claim the next rung for ``me``: a rung of mine or of a dead runner not yet done (resume), else
    the proposal, claimed atomically (another runner's claim of the same rung or id: propose again)."""
    from dataclasses import replace

    from rlexp.spec.ladder import propose
    from rlexp.tracking.study import DONE, FAILED, owner_alive

    for _ in range(100):
        claims = study.claims()
        for c in claims:
            if c.state == DONE:
                continue
            if c.owner == me:
                return _resumed(c)
            if (owner_alive(c.owner) is False or c.state == FAILED) and study.take_over(c.attempt, c.owner, c.state, me):
                return _resumed(c)
        rungs = ladder_rungs(exp, claims)
        proposal = propose(spec, rungs, sota=_sota(exp), value_of=_value_of(exp))
        if proposal.action != "run":
            return proposal
        if proposal.kind != "root":  # a directory of that name holding another spec (a requested rung) stays
            proposal = replace(proposal, attempt=_free_attempt_id(exp, spec.root, proposal, rungs))
        doc = _rung_doc(proposal)
        if study.claim(proposal.rung().key(), proposal.attempt, doc, me):
            return proposal
        # another runner claimed this rung or this id first: propose again with the claims as they are now
    raise CheckFailed("ladder: could not claim a rung after 100 tries (runners keep racing)")


def _resumed(claim: Any) -> Any:
    from rlexp.spec.ladder import Proposal

    r = claim.rung
    return Proposal("run", r.get("kind") or "resumed", f"resuming {claim.attempt} (its runner stopped)",
                    attempt=claim.attempt, parent=r.get("parent"), variable=r.get("variable"), value=r.get("value"),
                    seed=r.get("seed"), seed_of=r.get("seed_of"))
