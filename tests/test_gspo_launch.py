"""A GRPO-vs-GSPO rung launches what it says on every trainer with an agent interface.

The rung is a child attempt whose only change is ``environment.loss: gspo`` over a GRPO parent (the
committed tool-task examples). Both dry-run launches are read back through the trainer's own code:
OpenRLHF's ``train_ppo_ray`` parser and post-parse checks from each release's wheel, verl's Hydra
config composed from the 0.9.1 wheel's ``ppo_trainer.yaml``, TRL's ``GRPOConfig`` in the TRL venv.
The two must differ in exactly the GSPO settings, written here from each trainer's documentation
of GSPO (OpenRLHF's ``policy_loss_type gspo``, verl's ``loss_mode gspo`` with
``seq-mean-token-mean``, TRL's ``importance_sampling_level="sequence"``), with the environment's
clip range 3e-4/4e-4 (GSPO's paper).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlexp.errors import InputError

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "experiments"
CLIP = [3e-4, 4e-4]
TOKEN_CLIP = [0.2, 0.2]  # OpenRLHF's post-parse code sets eps_clip_low_high to (eps_clip, eps_clip) when unset


def _rung(tmp_path: Path, example: str, *, version: str | None = None, drop: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """The example as a GRPO parent ``r0grpo`` (trainer version and recipe edits applied) and its
    child ``r1gspo`` changing only ``environment.loss``."""
    root = tmp_path / "exp"
    parent = root / "r0grpo"
    shutil.copytree(EXAMPLES / example, parent, ignore=shutil.ignore_patterns("launch", "plan.json"))
    spec = yaml.safe_load((parent / "attempt.yaml").read_text())
    spec["id"] = "r0grpo"
    if version is not None:
        spec["trainer"]["version"] = version
    for key in drop:
        del spec["recipe"][key]
    assert spec["environment"].get("loss", "grpo") == "grpo"
    (parent / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    child = root / "r1gspo"
    child.mkdir()
    (child / "attempt.yaml").write_text("id: r1gspo\nparent: r0grpo\nchange: {environment.loss: gspo}\n"
                                        "environment: {loss: gspo}\n")
    return parent, child


def _argv(attempt: Path) -> list[str]:
    """The dry-run argv with the attempt's own directory and id written as placeholders (the two
    attempts of a rung differ there by construction)."""
    from rlexp.stages.launch import prepare

    argv = prepare(attempt, backend="process", dry_run=True).argv
    return [a.replace(str(attempt), "ATTEMPT").replace(attempt.name, "ID") for a in argv]


def _flat(node, prefix: str = "") -> dict:
    """A parsed namespace or a composed config as ``{dotted name: value}``."""
    items = node.items() if isinstance(node, dict) else vars(node).items()
    out = {}
    for key, value in items:
        if isinstance(value, dict | argparse.Namespace | SimpleNamespace):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _differences(a: dict, b: dict) -> dict:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


# ----------------------------------------------------------------------------- OpenRLHF


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize(("version", "expected"), [
    # the underscore dialect, first and last listed releases of it
    ("0.9.3", {"policy_loss_type": ("ppo", "gspo"), "eps_clip_low_high": (TOKEN_CLIP, CLIP)}),
    ("0.10.1.post2", {"policy_loss_type": ("ppo", "gspo"), "eps_clip_low_high": (TOKEN_CLIP, CLIP)}),
    # the dotted dialect; 0.11.2 is the one release with a loss-aggregation flag
    ("0.10.2", {"actor.policy_loss_type": ("ppo", "gspo"), "actor.eps_clip_low_high": (TOKEN_CLIP, CLIP)}),
    ("0.11.2", {"actor.policy_loss_type": ("ppo", "gspo"), "actor.eps_clip_low_high": (TOKEN_CLIP, CLIP),
                "actor.loss_agg_mode": ("token-mean", "seq-mean-token-mean")}),
])  # fmt: skip
def test_openrlhf_rung_differs_exactly_in_gspo_through_the_release_parser(tmp_path, version, expected):
    from rlexp.trainers.openrlhf.parser import ReleaseParser, fetch, listed_releases

    (release,) = [r for r in listed_releases() if r.version == version]
    parser = ReleaseParser(version, fetch(release))
    parent, child = _rung(tmp_path, "tools-cluster/o1", version=version)
    parsed = [_flat(parser.parse(_argv(a)[3:]).args) for a in (parent, child)]
    diff = _differences(*parsed)
    assert diff.keys() == expected.keys(), diff
    for key, pair in expected.items():
        for got, want in zip(diff[key], pair, strict=True):
            if isinstance(want, list):
                assert list(got) == pytest.approx(want, rel=1e-12), key
            else:
                assert got == want, key


def test_openrlhf_release_without_gspo_is_refused_at_plan_in_one_line(tmp_path, monkeypatch, capsys):
    """Every listed release has ``policy_loss_type gspo``; one whose table lacked it is refused (a
    release table with the choice removed stands in for such a release)."""
    from rlexp.cli import main
    from rlexp.trainers.openrlhf import argv as openrlhf_argv

    real = openrlhf_argv.load_flag_table

    def without_gspo(version):
        table = real(version)
        flag = table.flags["--actor.policy_loss_type"]
        return dataclasses.replace(table, flags={**table.flags, flag.flag: dataclasses.replace(flag, choices=("ppo",))})

    _, child = _rung(tmp_path, "tools-cluster/o1")
    monkeypatch.setattr(openrlhf_argv, "load_flag_table", without_gspo)
    assert main(["plan", str(child)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "environment.loss" in line and "has no GSPO policy loss" in line and "r1gspo" in line
    assert not (child / "plan.json").exists()


def test_a_stated_setting_that_contradicts_gspo_is_refused_at_plan(tmp_path, capsys):
    from rlexp.cli import main

    _, child = _rung(tmp_path, "tools-cluster/o1")
    (child / "attempt.yaml").write_text((child / "attempt.yaml").read_text() + "recipe: {policy_loss_type: ppo}\n")
    assert main(["plan", str(child)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "recipe.policy_loss_type: 'ppo' contradicts environment.loss gspo" in line
    assert not (child / "plan.json").exists()


# ----------------------------------------------------------------------------- verl

_HYDRA_CHILD = """
import json, sys
request = json.load(sys.stdin)
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
out = []
with initialize_config_dir(config_dir=request["config_dir"], version_base=None):
    for overrides in request["overrides"]:
        out.append(OmegaConf.to_container(compose(config_name="ppo_trainer", overrides=overrides), resolve=False))
print(json.dumps(out))
"""


def test_verl_rung_differs_exactly_in_gspo_through_hydra(tmp_path):
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
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(verl_config.CONFIG_DIR + "/") and n.endswith(".yaml")]
        archive.extractall(tmp_path / "cfg", members)
    parent, child = _rung(tmp_path, "tools-cluster/v1")
    argvs = [_argv(a) for a in (parent, child)]
    assert all(argv[:len(ENTRYPOINT)] == list(ENTRYPOINT) for argv in argvs)
    request = {"config_dir": str(tmp_path / "cfg" / verl_config.CONFIG_DIR),
               "overrides": [argv[len(ENTRYPOINT):] for argv in argvs]}
    done = subprocess.run([sys.executable, "-c", _HYDRA_CHILD], input=json.dumps(request),
                          env={**os.environ, "PYTHONPATH": str(hydra_path)}, capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    grpo, gspo = (_flat(c) for c in json.loads(done.stdout))
    diff = _differences(grpo, gspo)
    actor = "actor_rollout_ref.actor."
    assert diff == {
        f"{actor}clip_ratio_high": (0.2, 4e-4),
        f"{actor}clip_ratio_low": (0.2, 3e-4),
        f"{actor}loss_agg_mode": ("token-mean", "seq-mean-token-mean"),
        f"{actor}policy_loss.loss_mode": ("vanilla", "gspo"),
    }, diff
    # the plan lists the same settings as the attempt's own
    from rlexp.cli import main

    assert main(["plan", str(child), "--json"]) == 0
    plan = json.loads((child / "plan.json").read_text())
    assert plan["environment"]["gspo"]["trainer_settings"] == {"verl": {
        f"{actor}policy_loss.loss_mode": "gspo", f"{actor}loss_agg_mode": "seq-mean-token-mean",
        f"{actor}clip_ratio_low": 3e-4, f"{actor}clip_ratio_high": 4e-4}}


# ----------------------------------------------------------------------------- TRL

_TRL_CHILD = """
import json, sys
from trl import GRPOConfig
out = [GRPOConfig(**kwargs).to_dict() for kwargs in json.load(sys.stdin)]
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_trl_rung_differs_exactly_in_gspo_through_grpo_config(tmp_path, monkeypatch):
    from trl_venv import trl_python_or_skip

    python = trl_python_or_skip()
    monkeypatch.setenv("RLEXP_TRL_PYTHON", str(python))
    # the example's token-level epsilon 0.2 would contradict GSPO's range: the parent leaves it at TRL's
    # default, and loss_type at TRL's dapo (GSPO on TRL is loss_type grpo)
    parent, child = _rung(tmp_path, "tools-trl/t1", drop=("epsilon", "loss_type"))
    kwargs = []
    for attempt in (parent, child):
        from rlexp.stages.launch import prepare

        launch = prepare(attempt, backend="process", dry_run=True)
        script = next(text for path, text in launch.files.items() if path.name == "train_trl.py")
        config = json.loads(script.split('CONFIG = json.loads(r"""', 1)[1].split('""")', 1)[0])["grpo_config"]
        config["output_dir"] = str(tmp_path / "out")  # the attempt's own directory, by construction
        kwargs.append(config)
    done = subprocess.run([str(python), "-c", _TRL_CHILD], input=json.dumps(kwargs), capture_output=True,
                          text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    grpo, gspo = json.loads(done.stdout)
    diff = _differences(grpo, gspo)
    assert diff == {
        "epsilon": (0.2, 3e-4),
        "epsilon_high": (None, 4e-4),  # None: GRPOTrainer clips above with epsilon
        "importance_sampling_level": ("token", "sequence"),
        "loss_type": ("dapo", "grpo"),
    }, diff


def test_trl_contradicting_clip_is_refused(tmp_path):
    from rlexp.stages.launch import prepare

    _, child = _rung(tmp_path, "tools-trl/t1")  # the example states epsilon 0.2
    with pytest.raises(InputError) as caught:
        prepare(child, backend="process", dry_run=True)
    assert caught.value.field == "recipe.epsilon"
