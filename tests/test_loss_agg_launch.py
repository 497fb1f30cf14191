"""``recipe.loss_agg_mode`` launches what it says on every trainer, or ``rlexp plan`` refuses it.

A rung is a child attempt whose only change is ``loss_agg_mode`` over a parent that does not state it
(the committed examples). Both dry-run launches are read back through the trainer's own code, as
tests/test_gspo_launch.py reads GSPO's: OpenRLHF's ``train_ppo_ray`` parser from the release's wheel,
verl's Hydra config composed from the 0.9.1 wheel's ``ppo_trainer.yaml``, TRL's ``GRPOConfig`` in
the TRL venv. The two must differ in exactly the trainer's aggregation setting, with the value each
trainer documents for the mode: verl's ``actor.loss_agg_mode`` (and ``loss_scale_factor``, Dr.
GRPO's constant, set to ``data.max_response_length``), OpenRLHF 0.11.2's ``--actor.loss_agg_mode``,
TRL's ``loss_type`` (dapo, grpo, dr_grpo); a stated mode equal to the trainer's default changes
nothing. Where the trainer or release has no exact equivalent, ``plan`` exits 2 with one line naming
the field and the trainer's release, and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
import yaml
from test_gspo_launch import _HYDRA_CHILD, _TRL_CHILD, EXAMPLES, _argv, _differences, _flat

from rlexp.cli import main


def _rung(tmp_path, example: str, mode: str, *, version: str | None = None, edit: dict | None = None,
          drop: tuple[str, ...] = (), environment: dict | None = None):  # fmt: skip
    """The example as a parent ``r0`` (trainer version and recipe edits applied, no loss_agg_mode)
    and its child ``r1`` changing only ``loss_agg_mode``."""
    import shutil

    root = tmp_path / "exp"
    parent = root / "r0"
    shutil.copytree(EXAMPLES / example, parent, ignore=shutil.ignore_patterns("launch", "plan.json"))
    spec = yaml.safe_load((parent / "attempt.yaml").read_text())
    spec["id"] = "r0"
    spec.pop("parent", None), spec.pop("change", None)
    if version is not None:
        spec["trainer"]["version"] = version
    for key in drop:
        spec["recipe"].pop(key, None)
    spec["recipe"].update(edit or {})
    if environment is not None:
        spec["environment"] = {**spec.get("environment", {}), **environment}
    assert "loss_agg_mode" not in spec["recipe"]
    (parent / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    child = root / "r1"
    child.mkdir()
    (child / "attempt.yaml").write_text(f"id: r1\nparent: r0\nchange: {{loss_agg_mode: {mode}}}\n"
                                        f"recipe: {{loss_agg_mode: {mode}}}\n")
    return parent, child


def _refused(child, capsys) -> str:
    assert main(["plan", str(child)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "r1/attempt.yaml: recipe." in line
    assert not (child / "plan.json").exists()
    return line


# ----------------------------------------------------------------------------- OpenRLHF


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize(("version", "mode", "expected"), [
    ("0.11.2", "seq-mean-token-mean", {"actor.loss_agg_mode": ("token-mean", "seq-mean-token-mean")}),
    ("0.11.2", "token-mean", {}),  # the flag's default, written all the same
    ("0.11.1", "token-mean", {}),  # no flag: the release's own aggregation, nothing written
])  # fmt: skip
def test_openrlhf_rung_differs_exactly_in_the_aggregation_through_the_release_parser(tmp_path, version, mode,
                                                                                       expected):
    from rlexp.trainers.openrlhf.parser import ReleaseParser, fetch, listed_releases

    (release,) = [r for r in listed_releases() if r.version == version]
    parser = ReleaseParser(version, fetch(release))
    parent, child = _rung(tmp_path, "tools-cluster/o1", mode, version=version)
    argvs = [_argv(a) for a in (parent, child)]
    parsed = [_flat(parser.parse(argv[3:]).args) for argv in argvs]
    assert _differences(*parsed) == expected
    assert ("--actor.loss_agg_mode" in argvs[1]) == (version == "0.11.2")
    assert main(["plan", str(child), "--json"]) in (0, 1)
    agg = json.loads((child / "plan.json").read_text())["loss_aggregation"]
    assert agg["mode"] == mode and agg["stated"] is True
    assert agg["trainer_settings"] == ({"actor.loss_agg_mode": mode} if version == "0.11.2" else {})


@pytest.mark.parametrize(("version", "mode", "says"), [
    ("0.11.2", "seq-mean-token-sum", "OpenRLHF 0.11.2's --actor.loss_agg_mode takes token-mean, seq-mean-token-mean only"),
    ("0.11.2", "seq-mean-token-sum-norm", "OpenRLHF 0.11.2's --actor.loss_agg_mode takes"),
    ("0.11.1", "seq-mean-token-mean", "OpenRLHF 0.11.1 has no --actor.loss_agg_mode (0.11.2 has): it aggregates token-mean"),
    ("0.9.3", "token-mean", "OpenRLHF 0.9.3 divides each micro-batch's loss by that micro-batch's own count"),
])  # fmt: skip
def test_openrlhf_release_without_the_mode_is_refused_at_plan(tmp_path, capsys, version, mode, says):
    _, child = _rung(tmp_path, "tools-cluster/o1", mode, version=version)
    line = _refused(child, capsys)
    assert f"recipe.loss_agg_mode: {mode}: {says}" in line and "r1" in line


def test_a_mode_other_than_gspos_with_gspo_is_refused_at_plan(tmp_path, capsys):
    _, child = _rung(tmp_path, "tools-cluster/o1", "token-mean", environment={"loss": "gspo"})
    line = _refused(child, capsys)
    assert "recipe.loss_agg_mode: 'token-mean' contradicts environment.loss gspo, which aggregates " \
           "seq-mean-token-mean" in line
    _, child = _rung(tmp_path / "b", "tools-cluster/o1", "seq-mean-token-mean", environment={"loss": "gspo"})
    assert main(["plan", str(child), "--json"]) in (0, 1)  # GSPO's own: consistent
    capsys.readouterr()


def test_a_stated_trainer_setting_that_contradicts_the_mode_is_refused(tmp_path, capsys):
    _, child = _rung(tmp_path, "tools-cluster/o1", "seq-mean-token-mean", edit={"actor.loss_agg_mode": "token-mean"})
    line = _refused(child, capsys)
    assert "recipe.actor.loss_agg_mode: 'token-mean' contradicts recipe.loss_agg_mode seq-mean-token-mean" in line


# ----------------------------------------------------------------------------- verl


@pytest.fixture(scope="module")
def verl_compose(tmp_path_factory):
    """Compose verl 0.9.1's trainer config from dry-run argvs (in a child with the wheel's Hydra)."""
    from rlexp.trainers.verl import releases as verl_config
    from rlexp.trainers.verl.hydra import ENTRYPOINT

    try:
        wheel = verl_config.fetch(verl_config.listed_releases()[0]) if os.environ.get("CI") else \
            verl_config.wheel_for("0.9.1")
    except verl_config.ReleaseError as exc:
        pytest.skip(str(exc))
    hydra_path = verl_config.hydra_dir()
    if not (hydra_path / "hydra").is_dir():
        pytest.skip(f"Hydra is not in {hydra_path}: run {verl_config.FETCH_SCRIPT}")
    cfg = tmp_path_factory.mktemp("verl-cfg")
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(verl_config.CONFIG_DIR + "/") and n.endswith(".yaml")]
        archive.extractall(cfg, members)

    def compose(argvs):
        assert all(argv[:len(ENTRYPOINT)] == list(ENTRYPOINT) for argv in argvs)
        request = {"config_dir": str(cfg / verl_config.CONFIG_DIR), "overrides": [a[len(ENTRYPOINT):] for a in argvs]}
        done = subprocess.run([sys.executable, "-c", _HYDRA_CHILD], input=json.dumps(request),
                              env={**os.environ, "PYTHONPATH": str(hydra_path)}, capture_output=True, text=True,
                              check=False, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return [_flat(c) for c in json.loads(done.stdout)]

    return compose


def test_verl_rung_differs_exactly_in_the_aggregation_through_hydra(tmp_path, verl_compose):
    """All four modes in one composition: each child against the parent."""
    actor = "actor_rollout_ref.actor."
    modes = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    rungs = [_rung(tmp_path / mode, "tools-cluster/v1", mode) for mode in modes]
    parent_argv = _argv(rungs[0][0])
    configs = verl_compose([parent_argv, *(_argv(child) for _, child in rungs)])
    parent, children = configs[0], dict(zip(modes, configs[1:], strict=True))
    budget = parent["data.max_response_length"]
    assert _differences(parent, children["token-mean"]) == {}  # verl's default
    for mode in modes[1:]:
        expected = {f"{actor}loss_agg_mode": ("token-mean", mode)}
        if mode == "seq-mean-token-sum-norm":  # Dr. GRPO's constant: the response budget, not the padded length
            expected[f"{actor}loss_scale_factor"] = (None, budget)
        assert _differences(parent, children[mode]) == expected, mode
    child = rungs[-1][1]
    assert main(["plan", str(child), "--json"]) in (0, 1)
    agg = json.loads((child / "plan.json").read_text())["loss_aggregation"]
    assert agg == {"mode": "seq-mean-token-sum-norm", "stated": True, "token_budget": budget, "trainer_settings": {
        f"{actor}loss_agg_mode": "seq-mean-token-sum-norm", f"{actor}loss_scale_factor": budget}}


# ----------------------------------------------------------------------------- TRL


@pytest.mark.slow
def test_trl_rung_differs_exactly_in_loss_type_through_grpo_config(tmp_path, monkeypatch):
    from trl_venv import trl_python_or_skip

    from rlexp.stages.launch import prepare

    python = trl_python_or_skip()
    monkeypatch.setenv("RLEXP_TRL_PYTHON", str(python))
    modes = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
    attempts = []
    for mode in modes:  # the parent leaves loss_type at TRL's default, dapo
        parent, child = _rung(tmp_path / mode, "tools-trl/t1", mode, drop=("loss_type",))
        attempts += [parent, child] if not attempts else [child]
    kwargs = []
    for attempt in attempts:
        launch = prepare(attempt, backend="process", dry_run=True)
        script = next(text for path, text in launch.files.items() if path.name == "train_trl.py")
        config = json.loads(script.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])["grpo_config"]
        config["output_dir"] = str(tmp_path / "out")  # the attempt's own directory, by construction
        kwargs.append(config)
    done = subprocess.run([str(python), "-c", _TRL_CHILD], input=json.dumps(kwargs), capture_output=True,
                          text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    parent, *children = json.loads(done.stdout)
    for (mode, loss_type), child in zip(modes.items(), children, strict=True):
        assert _differences(parent, child) == ({} if loss_type == "dapo" else {"loss_type": ("dapo", loss_type)}), mode


@pytest.mark.parametrize(("mode", "edit", "field", "says"), [
    ("seq-mean-token-sum", {}, "recipe.loss_agg_mode", "seq-mean-token-sum: TRL 1.16.0's loss_type has no such "
                                                       "aggregation (dapo = token-mean, grpo = seq-mean-token-mean"),
    ("seq-mean-token-mean", {"mask_truncated_completions": True}, "recipe.loss_agg_mode",
     "TRL 1.16.0's grpo counts a completion that mask_truncated_completions masks whole"),
    ("token-mean", {"steps_per_generation": 2}, "recipe.loss_agg_mode",
     "the optimizer step's own only when steps_per_generation (2) equals gradient_accumulation_steps (1)"),
    ("seq-mean-token-sum-norm", {"loss_type": "grpo"}, "recipe.loss_type",
     "'grpo' contradicts recipe.loss_agg_mode seq-mean-token-sum-norm, which sets it to 'dr_grpo'"),
])  # fmt: skip
def test_trl_without_the_mode_is_refused_at_plan(tmp_path, capsys, mode, edit, field, says):
    _, child = _rung(tmp_path, "tools-trl/t1", mode, drop=("loss_type",), edit=edit)
    line = _refused(child, capsys)
    assert f"{field}: " in line and says in line, line


# ----------------------------------------------------------------------------- the local trainer


def test_the_local_trainer_reads_the_mode_and_the_plan_shows_it(tmp_path, capsys):
    from rlexp.spec import load_attempt
    from rlexp.trainers.local.config import config_from_attempt

    parent, child = _rung(tmp_path, "demo/d1", "seq-mean-token-sum-norm")
    cfg = config_from_attempt(load_attempt(child))
    assert cfg.loss_agg_mode == "seq-mean-token-sum-norm" and cfg.loss_token_budget == cfg.generate_max_len
    assert config_from_attempt(load_attempt(parent)).loss_agg_mode is None
    for attempt in (parent, child):
        assert main(["plan", str(attempt), "--json"]) in (0, 1)
    capsys.readouterr()
    plans = [json.loads((a / "plan.json").read_text()) for a in (parent, child)]
    assert plans[0]["loss_aggregation"]["mode"] == "token-mean" and plans[0]["loss_aggregation"]["stated"] is False
    assert plans[1]["loss_aggregation"] == {"mode": "seq-mean-token-sum-norm", "stated": True,
                                            "trainer_settings": {"loss_agg_mode": "seq-mean-token-sum-norm"},
                                            "token_budget": cfg.generate_max_len}
    # one training variable, and the recipe digest moves only because the key is stated
    assert [(d["key"], d["kind"]) for d in plans[1]["diff"]] == [("loss_agg_mode", "training")]
