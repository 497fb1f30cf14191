"""Ladders: the spec's input gate, the proposal rules, the one-variable refusal, confirmation seeds,
the SOP pruner against Optuna's PatientPruner, and two runners on one study (two processes)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.spec.ladder import FAULT_CLASS_VARIABLES, LadderSpec, Rung, parse_ladder_spec, propose

ROOT_SPEC = "trainer: {name: local}\nrecipe: {pretrain: models/base, eps_clip: 0.2, seed: 42, lora_rank: 16}\n"


def experiment(tmp_path, ladder="root: r\nvariables: {eps_clip: [0.1, 0.3]}\nseeds: [42, 43]\nrungs: 5\n"):
    exp = tmp_path / "exp"
    (exp / "r").mkdir(parents=True)
    (exp / "r" / "attempt.yaml").write_text(ROOT_SPEC)
    (exp / "ladder.yaml").write_text(ladder)
    return exp


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "rlexp.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={**os.environ, "COLUMNS": "200"})


# ----------------------------------------------------------------------------- the spec's input gate


@pytest.mark.parametrize(("raw", "field", "words"), [
    ({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [1], "rungs": 3, "extra": 1}, "extra", "unknown key"),
    ({"variables": {"eps_clip": [0.1]}, "seeds": [1], "rungs": 3}, "root", "required"),
    ({"root": "../x", "variables": {"eps_clip": [0.1]}, "seeds": [1], "rungs": 3}, "root", "not an attempt id"),
    ({"root": "r", "variables": {"eps_clipp": [0.1]}, "seeds": [1], "rungs": 3}, "variables.eps_clipp", "recipe key"),
    ({"root": "r", "variables": {"eval_steps": [4]}, "seeds": [1], "rungs": 3}, "variables.eval_steps",
     "instrumentation"),
    ({"root": "r", "variables": {"seed": [1, 2]}, "seeds": [1], "rungs": 3}, "variables.seed", "replications"),
    ({"root": "r", "variables": {"eps_clip": [0.1, -1]}, "seeds": [1], "rungs": 3}, "variables.eps_clip[1]", "> 0"),
    ({"root": "r", "variables": {"eps_clip": [0.1, 0.10]}, "seeds": [1], "rungs": 3}, "variables.eps_clip[1]",
     "twice"),
    ({"root": "r", "variables": {"eps_clip": []}, "seeds": [1], "rungs": 3}, "variables.eps_clip", "list of 1"),
    ({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [1, True], "rungs": 3}, "seeds", "integer"),
    ({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [1], "rungs": 0}, "rungs", "between 1 and 1000"),
    ({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [1, 2], "rungs": 3, "seeds_at_once": "yes"},
     "seeds_at_once", "true or false"),
    ({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [1], "rungs": 3, "seeds_at_once": True},
     "seeds_at_once", "at least two seeds"),
])
def test_spec_refusals_name_the_file_and_the_field(raw, field, words):
    with pytest.raises(InputError) as err:
        parse_ladder_spec(raw, "exp/ladder.yaml")
    assert err.value.file == "exp/ladder.yaml" and err.value.field == field
    assert words in err.value.message


def test_a_bad_spec_on_the_command_line_is_one_line_exit_2_nothing_written(tmp_path):
    exp = experiment(tmp_path, "root: r\nvariables: {eps_clip: [0.1]}\nseeds: [1]\nrungs: 3\nrungs: 4\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    done = cli("ladder", "propose", exp, "--storage", f"sqlite:///{tmp_path / 'o.db'}", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "ladder.yaml" in done.stderr and "rungs" in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


# ----------------------------------------------------------------------------- the proposal rules

SPEC = LadderSpec("r", (("eps_clip", (0.1, 0.2, 0.3)), ("n_samples_per_prompt", (16,))), (42, 43, 44), 8)
VALUES = {"r": {"eps_clip": 0.2, "n_samples_per_prompt": 8, "seed": 42},
          "r-r1": {"eps_clip": 0.1, "n_samples_per_prompt": 8, "seed": 42},
          "r-r1s2": {"eps_clip": 0.1, "n_samples_per_prompt": 8, "seed": 43}}


def next_of(rungs, sota=None, spec=SPEC):
    return propose(spec, rungs, sota=sota, value_of=lambda a, k: VALUES[a][k])


def root(decision, fault=None):
    return Rung("r", None, None, None, 42, None, decision, fault)


def test_the_root_runs_first_and_everything_waits_for_its_decision():
    first = next_of([])
    assert (first.action, first.kind, first.attempt) == ("run", "root", "r")
    assert next_of([root(None)]).action == "wait"


def test_continue_takes_the_next_grid_value_from_the_same_parent_skipping_the_parents_own_value():
    p = next_of([root("CONTINUE")])
    # eps_clip 0.1 first; 0.2 is the root's own value and is never a rung
    assert (p.action, p.kind, p.attempt, p.parent, p.variable, p.value) == ("run", "grid", "r-r1", "r", "eps_clip", 0.1)
    p = next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "CONTINUE")])
    assert (p.attempt, p.variable, p.value) == ("r-r2", "eps_clip", 0.3)
    # a rung being run (no decision yet) is taken too: a second runner gets the next one
    p = next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, None),
                 Rung("r-r2", "r", "eps_clip", 0.3, 42, None, None)])
    assert (p.attempt, p.variable, p.value) == ("r-r3", "n_samples_per_prompt", 16)


def test_the_fault_tree_class_of_a_continue_picks_its_variable_first():
    assert FAULT_CLASS_VARIABLES["A"] == ("n_samples_per_prompt",)
    p = next_of([root("CONTINUE", fault="A")])
    assert (p.kind, p.variable, p.value, p.fault_class) == ("fault_tree", "n_samples_per_prompt", 16, "A")


def test_confirm_asks_for_a_confirmation_seed_sibling():
    rungs = [root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "CONFIRM")]
    p = next_of(rungs)
    assert (p.kind, p.attempt, p.parent, p.variable, p.value, p.seed, p.seed_of) == (
        "confirmation", "r-r1s2", "r", "eps_clip", 0.1, 43, "r-r1")
    # once the sibling exists (running or decided) the ladder goes on from the same parent
    rungs.append(Rung("r-r1s2", "r", "eps_clip", 0.1, 43, "r-r1", "CONTINUE"))
    assert (next_of(rungs).variable, next_of(rungs).value) == ("eps_clip", 0.3)
    # the root's own confirmation seed has no parent
    p = next_of([root("CONFIRM")])
    assert (p.attempt, p.parent, p.seed, p.seed_of) == ("rs2", None, 43, "r")


def test_seeds_at_once_proposes_each_rungs_confirmation_seed_with_it_before_any_decision():
    import dataclasses

    eager = dataclasses.replace(SPEC, seeds_at_once=True)
    assert parse_ladder_spec({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [42, 43], "rungs": 3,
                              "seeds_at_once": True}, "l.yaml").seeds_at_once
    assert not parse_ladder_spec({"root": "r", "variables": {"eps_clip": [0.1]}, "seeds": [42], "rungs": 3},
                                 "l.yaml").seeds_at_once
    # the root, undecided: without the setting everything waits; with it, its seed runs at once
    assert next_of([root(None)]).action == "wait"
    p = next_of([root(None)], spec=eager)
    assert (p.action, p.kind, p.attempt, p.parent, p.seed, p.seed_of) == ("run", "confirmation", "rs2", None, 43, "r")
    # both seeds claimed, the root undecided: the rest still waits for the root
    both = [root(None), Rung("rs2", None, None, None, 43, "r")]
    assert next_of(both, spec=eager).action == "wait"
    # a grid rung being run (no decision) gets its seed next, ahead of the next grid value
    rungs = [root("CONTINUE"), Rung("rs2", None, None, None, 43, "r", "CONTINUE"),
             Rung("r-r1", "r", "eps_clip", 0.1, 42, None, None)]
    p = next_of(rungs, spec=eager)
    assert (p.kind, p.attempt, p.parent, p.variable, p.value, p.seed, p.seed_of) == (
        "confirmation", "r-r1s2", "r", "eps_clip", 0.1, 43, "r-r1")
    rungs.append(Rung("r-r1s2", "r", "eps_clip", 0.1, 43, "r-r1"))
    assert (next_of(rungs, spec=eager).attempt, next_of(rungs, spec=eager).value) == ("r-r2", 0.3)
    # the spec's rung count caps the seeds too, and a stopped ladder adds none
    assert next_of(rungs[:3], spec=dataclasses.replace(eager, rungs=3)).kind == "complete"
    assert next_of([root("STOP-3a")], spec=eager).kind == "STOP-3a"


def test_after_stop_1_the_next_rung_starts_from_the_pinned_sota():
    rungs = [root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "CONFIRM"),
             Rung("r-r1s2", "r", "eps_clip", 0.1, 43, "r-r1", "STOP-1")]
    p = next_of(rungs, sota="r-r1s2")
    # from the SOTA: eps_clip 0.1 is its own value, 0.2 has not been tried from it
    assert (p.parent, p.variable, p.value) == ("r-r1s2", "eps_clip", 0.2)


@pytest.mark.parametrize("decision", ["STOP-3a", "STOP-3b"])
def test_stop_3_stops_the_ladder(decision):
    p = next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, decision)])
    assert (p.action, p.kind) == ("stop", decision)


def test_debug_stops_and_reports_the_fault_tree_class():
    p = next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "DEBUG", "D")])
    assert (p.action, p.kind, p.fault_class) == ("stop", "DEBUG", "D") and "fault-tree class D" in p.reason


def test_the_ladder_stops_at_its_rungs_and_when_the_grid_is_exhausted():
    small = LadderSpec("r", (("eps_clip", (0.1,)),), (42,), 2)
    assert next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "CONTINUE")],
                   spec=small).kind == "complete"
    wide = LadderSpec("r", (("eps_clip", (0.1,)),), (42,), 9)
    assert next_of([root("CONTINUE"), Rung("r-r1", "r", "eps_clip", 0.1, 42, None, "CONTINUE")],
                   spec=wide).kind == "exhausted"
    no_seed = next_of([root("CONFIRM")], spec=wide)
    assert (no_seed.action, no_seed.kind) == ("stop", "exhausted") and "seed" in no_seed.reason


# ----------------------------------------------------------------------------- writing rungs


def test_propose_writes_a_one_variable_child_and_refuses_two_variables(tmp_path):
    import yaml

    from rlexp.protocol.variable_checks import check_single_variable
    from rlexp.spec import diff_against_parent, load_attempt

    exp = experiment(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = cli("ladder", "propose", exp, "--storage", storage, cwd=tmp_path)
    assert first.returncode == 0 and "first rung: the root r" in first.stdout
    # a requested rung of one variable from the root
    done = cli("ladder", "propose", exp, "--storage", storage, "--change", "lora_rank=32", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    child = load_attempt(exp / out["attempt"])
    assert child.parent_id == "r" and yaml.safe_load(Path(out["spec"]).read_text())["change"] == {"lora_rank": 32}
    assert [(d.key, d.parent, d.value) for d in diff_against_parent(child) if d.kind == "training"] == [
        ("lora_rank", 16, 32)]
    assert check_single_variable(child) == []
    before = sorted(str(p) for p in exp.rglob("*"))
    two = cli("ladder", "propose", exp, "--storage", storage, "--change", "eps_clip=0.1", "--change", "lora_rank=8",
              cwd=tmp_path)
    assert two.returncode == 2
    assert two.stderr.strip() == ("rlexp: --change: a rung changes one training variable; this one changes "
                                  "2 from r: eps_clip 0.2 -> 0.1, lora_rank 16 -> 8")
    bad = cli("ladder", "propose", exp, "--storage", storage, "--change", "eps_clip=-1", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("rlexp: --change eps_clip: ")
    assert sorted(str(p) for p in exp.rglob("*")) == before
    # an instrumentation key alongside is not a second training variable, but it is not a rung's variable either
    instr = cli("ladder", "propose", exp, "--storage", storage, "--change", "eval_steps=4", cwd=tmp_path)
    assert instr.returncode == 2 and "changes no training variable" in instr.stderr


def test_a_confirmation_seed_plans_as_one_variable_and_a_seed_of_that_changes_more_is_refused(tmp_path):
    from rlexp.protocol.variable_checks import check_single_variable
    from rlexp.spec import load_attempt
    from rlexp.stages.ladder import write_rung

    exp = experiment(tmp_path)
    write_rung(exp, "r-r1", {"parent": "r", "variable": "eps_clip", "value": 0.1, "seed": 42})
    sibling = write_rung(exp, "r-r1s2", {"parent": "r", "variable": "eps_clip", "value": 0.1, "seed": 43,
                                         "seed_of": "r-r1"})
    att = load_attempt(sibling)
    assert att.parent_id == "r" and att.recipe["seed"] == 43 and att.recipe["eps_clip"] == 0.1
    assert check_single_variable(att) == []  # eps_clip vs the parent; the seed is the replication
    root_seed = load_attempt(write_rung(exp, "rs2", {"parent": None, "seed": 43, "seed_of": "r"}))
    assert root_seed.parent_id is None and root_seed.recipe["seed"] == 43 and check_single_variable(root_seed) == []
    (exp / "rs3").mkdir()  # a root's "confirmation seed" with the root's own seed is no replication
    (exp / "rs3" / "attempt.yaml").write_text((exp / "rs2" / "attempt.yaml").read_text().replace("seed: 43", "seed: 42"))
    assert [c.name for c in check_single_variable(load_attempt(exp / "rs3"))] == ["diff.seed_of"]
    # by hand: a "confirmation seed" that also changes lora_rank is two variables
    (exp / "bad").mkdir()
    (exp / "bad" / "attempt.yaml").write_text("parent: r\nseed_of: r-r1\nchange: {eps_clip: 0.1}\n"
                                              "recipe: {eps_clip: 0.1, seed: 44, lora_rank: 8}\n")
    names = {c.name: c.rule for c in check_single_variable(load_attempt(exp / "bad"))}
    assert names["diff.seed_of"] == ("a confirmation seed of r-r1 differs from it in the seed only; "
                                     "here: seed, lora_rank")
    assert "diff.training_variables" in names  # eps_clip and lora_rank against the parent
    # and write_rung refuses (and removes) a rung that would fail that check
    with pytest.raises(InputError):
        write_rung(exp, "r-r9", {"parent": "r", "variable": "eps_clip", "value": 0.2, "seed": 42})
    assert not (exp / "r-r9").exists()


# ----------------------------------------------------------------------------- the SOP pruner


def first_prune(pruner, values):
    """The 1-based eval at which a real Optuna trial, reporting ``values`` one by one, is pruned."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trial = study.ask()
    for step, value in enumerate(values, start=1):
        trial.report(value, step)
        if trial.should_prune():
            return step
    return None


# A plateau that creeps up by 0.1pp per eval after a real rise. By hand, with the SOP's 3-point
# moving average, +1pp threshold and patience 5: smoothed values 0.400 (eval 3), 0.467 (4), 0.501 (5)
# each set a new best (gains >= 1pp); evals 6..10 smooth to 0.502 ... 0.506, each < 1pp above 0.501,
# so the fifth of them (eval 10) stops the run. Every eval is a new raw maximum, so Optuna's
# PatientPruner(patience=5) never sees a stalled run.
PLATEAU = [0.30, 0.40, 0.50, 0.501, 0.502, 0.503, 0.504, 0.505, 0.506, 0.507, 0.508, 0.509]
# A real decline after a peak: both rules stop it. By hand: the SOP's smoothed values are 0.500 (eval 3),
# 0.517 (eval 4: +1.7pp, the best), then 0.497, 0.440, 0.430, 0.420, 0.410 (evals 5..9), the fifth
# without a gain stops at eval 9; PatientPruner at eval 9 too (the best raw value 0.60 of evals 1..3
# is above every value of evals 4..9).
DECLINE = [0.40, 0.50, 0.60, 0.45, 0.44, 0.43, 0.42, 0.41, 0.40]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_the_sop_pruner_prunes_a_plateau_that_patient_pruner_does_not():
    import optuna

    from rlexp.spec.sop import load_sop
    from rlexp.tracking.pruner import SopEarlyStopPruner

    sop = load_sop()
    assert (sop.early_stop.smoothing_window, sop.early_stop.patience_evals, sop.early_stop.min_improvement_pp) == (
        3, 5, 1.0)  # the numbers the hand computation above uses
    assert first_prune(SopEarlyStopPruner(), PLATEAU) == 10
    assert first_prune(optuna.pruners.PatientPruner(None, patience=5), PLATEAU) is None
    assert first_prune(SopEarlyStopPruner(), DECLINE) == 9
    assert first_prune(optuna.pruners.PatientPruner(None, patience=5), DECLINE) == 9


def test_the_pruner_applies_the_in_run_monitors_rule():
    """The pruner and the live run's monitor are one rule: the same verdict on the same points."""
    from rlexp.tracking.pruner import SopEarlyStopPruner
    from rlexp.training.monitor import early_stop_verdict

    rows = [{"global_step": 8 * i, "monitor_acc": v} for i, v in enumerate(PLATEAU, start=1)]
    live = early_stop_verdict(rows)

    class Frozen:
        intermediate_values = {8 * i: v for i, v in enumerate(PLATEAU, start=1)}

    mine = SopEarlyStopPruner().verdict(Frozen())
    assert mine.passed is live.passed is True
    assert mine.numbers == live.numbers and mine.numbers["stop_step"] == 80


# ----------------------------------------------------------------------------- two runners, one study

RUNNER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from rlexp.stages.ladder import RungResult, run_ladder
    from rlexp.experiment.files import atomic_write_json

    exp, storage, log = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def runner(experiment_dir, attempt_id, **_):
        # stands in for run_rung (training takes minutes): record who ran the rung, then decide CONTINUE
        with open(log, "a") as fh:
            fh.write(f"{attempt_id} {os.getpid()} start\\n")
        time.sleep(0.4)
        atomic_write_json(experiment_dir / attempt_id / "decision.json",
                          {"decision": "CONTINUE", "reason": "test", "checkpoints": {}, "fault_tree": None})
        with open(log, "a") as fh:
            fh.write(f"{attempt_id} {os.getpid()} end\\n")
        return RungResult(attempt_id, "CONTINUE", "test", 0.5, None)

    result = run_ladder(exp, rungs=100, storage=storage, runner=runner, poll_s=0.1)
    print(json.dumps({"ran": [r.attempt for r in result.ran], "stopped": result.stopped.kind}))
""")


def test_two_runners_on_one_study_never_run_the_same_rung_twice(tmp_path):
    two_runners(tmp_path, f"sqlite:///{tmp_path / 'optuna.db'}")


@pytest.mark.postgres
def test_two_runners_on_a_postgresql_study(tmp_path):
    """The same, with the study in PostgreSQL (the team's server): a fresh database per test."""
    uri = os.environ.get("RLEXP_TEST_POSTGRES_URI")
    if not uri:
        pytest.skip("RLEXP_TEST_POSTGRES_URI is not set (scripts/start-postgres prints one)")
    import uuid

    import psycopg2

    db = f"rlexp_ladder_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(uri)
    admin.autocommit = True
    try:
        admin.cursor().execute(f"CREATE DATABASE {db}")
        two_runners(tmp_path, uri.rsplit("/", 1)[0] + "/" + db)
    finally:
        admin.cursor().execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db,))
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db}")
        admin.close()


def two_runners(tmp_path, storage):
    import optuna

    from rlexp.tracking.study import resolve_storage

    grid = [0.05, 0.1, 0.15, 0.25, 0.3, 0.35, 0.4, 0.45]
    exp = experiment(tmp_path, f"root: r\nvariables: {{eps_clip: {grid}}}\nseeds: [42]\nrungs: 20\n")
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    log = tmp_path / "runs.log"
    procs = [subprocess.Popen([sys.executable, str(script), str(exp), storage, str(log)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out) for out, _ in outs]
    ran = [a for r in results for a in r["ran"]]
    starts = [line.split()[0] for line in log.read_text().splitlines() if line.endswith("start")]
    # every rung ran exactly once, the root and each grid value, split between the two processes
    assert sorted(starts) == sorted(ran) and len(set(starts)) == len(starts) == 1 + len(grid)
    assert all(r["stopped"] == "exhausted" for r in results)
    trials = optuna.load_study(study_name="ladder:exp", storage=resolve_storage(storage)).get_trials()
    assert sorted(t.user_attrs["attempt_id"] for t in trials) == sorted(ran)
    values = sorted(t.params["eps_clip"] for t in trials if t.params)
    assert values == sorted(grid)
    pids = {line.split()[1] for line in log.read_text().splitlines()}
    assert len(pids) == 2, "one runner did every rung: the test did not exercise two runners"


def test_a_killed_runner_is_resumed_without_redoing_finished_rungs(tmp_path):
    """A runner killed inside a rung: the next run takes the rung over (same attempt, same trial)
    and does not rerun the rungs that were done."""
    import optuna

    exp = experiment(tmp_path, "root: r\nvariables: {eps_clip: [0.1, 0.3]}\nseeds: [42]\nrungs: 5\n")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    script = tmp_path / "runner.py"
    # the first runner dies (SIGKILL, no clean-up) on its second rung
    killer = RUNNER.replace("time.sleep(0.4)", "time.sleep(0.4)\n    if attempt_id == 'r-r1': os.kill(os.getpid(), 9)")
    script.write_text(killer)
    log = tmp_path / "runs.log"
    first = subprocess.run([sys.executable, str(script), str(exp), storage, str(log)], capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == -9
    script.write_text(RUNNER)
    second = subprocess.run([sys.executable, str(script), str(exp), storage, str(log)], capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["ran"] == ["r-r1", "r-r2"]
    starts = [line.split()[0] for line in log.read_text().splitlines() if line.endswith("start")]
    assert starts == ["r", "r-r1", "r-r1", "r-r2"]  # r-r1 again (killed inside), r never again
    trials = optuna.load_study(study_name="ladder:exp", storage=storage).get_trials()
    assert [t.user_attrs["attempt_id"] for t in trials] == ["r", "r-r1", "r-r2"]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


SEEDS_RUNNER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from rlexp.stages.ladder import RungResult, run_ladder
    from rlexp.experiment.files import atomic_write_json

    exp, storage, log = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def note(text):
        with open(log, "a") as fh:
            fh.write(f"{text} {time.time():.3f}\\n")

    def runner(experiment_dir, attempt_id, before_decide=None, **_):
        # stands in for run_rung: the root trains longer than its seed, which must still decide after it
        note(f"{attempt_id} start waits={before_decide is not None}")
        time.sleep(6.0 if attempt_id == "r" else 0.1)
        if attempt_id == "r" and os.environ.get("FAIL_ROOT"):
            raise RuntimeError("the root's training failed")
        if before_decide is not None:
            before_decide()
        atomic_write_json(experiment_dir / attempt_id / "decision.json",
                          {"decision": "CONTINUE", "reason": "test", "checkpoints": {}, "fault_tree": None})
        note(f"{attempt_id} decided")
        return RungResult(attempt_id, "CONTINUE", "test", 0.5, None)

    result = run_ladder(exp, rungs=1, storage=storage, runner=runner, poll_s=0.1)
    print(json.dumps({"ran": [r.attempt for r in result.ran]}))
""")


@pytest.mark.parametrize("root_fails", [False, True])
def test_with_seeds_at_once_the_seed_runs_beside_its_sibling_and_decides_after_it(tmp_path, root_fails):
    import optuna

    exp = experiment(tmp_path, "root: r\nvariables: {eps_clip: [0.1]}\nseeds: [42, 43]\nrungs: 2\n"
                               "seeds_at_once: true\n")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    script, log = tmp_path / "runner.py", tmp_path / "runs.log"
    script.write_text(SEEDS_RUNNER)
    env = {**os.environ, **({"FAIL_ROOT": "1"} if root_fails else {})}
    procs = [subprocess.Popen([sys.executable, str(script), str(exp), storage, str(log)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    done = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    events = {" ".join(line.split()[:-1]): float(line.split()[-1]) for line in log.read_text().splitlines()}
    # one runner took the root, the other its seed at once (the root undecided: the seed waits to decide)
    assert events.keys() >= {"r start waits=False", "rs2 start waits=True"}
    assert events["rs2 start waits=True"] < events["r start waits=False"] + 6.0
    trials = {t.user_attrs["attempt_id"]: t for t in
              optuna.load_study(study_name="ladder:exp", storage=storage).get_trials()}
    assert (trials["rs2"].user_attrs["seed_of"], trials["rs2"].user_attrs["seed"]) == ("r", 43)
    if not root_fails:
        assert sorted(code for code, _, _ in done) == [0, 0], [err[-2000:] for _, _, err in done]
        assert events["rs2 decided"] > events["r decided"]  # in order, though the seed finished first
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials.values())
    else:
        # the root's rung failed: its seed does not decide without it, and both trials fail
        assert all(code != 0 for code, _, _ in done)
        assert any("rs2 decides after r, whose rung failed" in err for _, _, err in done)
        assert "rs2 decided" not in events and not (exp / "rs2" / "decision.json").exists()
        assert all(t.state == optuna.trial.TrialState.FAIL for t in trials.values())


def test_a_requested_rung_on_disk_keeps_its_name_when_the_ladder_runs(tmp_path):
    from rlexp.experiment.files import atomic_write_json
    from rlexp.stages.ladder import RungResult, propose_rung, run_ladder

    exp = experiment(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    requested = propose_rung(exp, change={"lora_rank": 32}, storage=storage)
    assert requested.proposal.attempt == "r-r1" and requested.spec.is_file()
    text = requested.spec.read_text()

    def runner(experiment_dir, attempt_id, **_):
        atomic_write_json(experiment_dir / attempt_id / "decision.json", {"decision": "CONTINUE"})
        return RungResult(attempt_id, "CONTINUE", "test", 0.0, None)

    ran = run_ladder(exp, rungs=2, storage=storage, runner=runner)
    assert [r.attempt for r in ran.ran] == ["r", "r-r2"]
    assert "eps_clip: 0.1" in (exp / "r-r2" / "attempt.yaml").read_text()
    assert requested.spec.read_text() == text  # the requested rung is left as it was
