"""A fifth trainer is one package and one registry line (docs/ARCHITECTURE.md, "Adding a trainer").

The test writes such a package (rules that differ from the defaults in their backends and metric
names, a launch that builds its own argv), adds its one line to ``rlexp.trainers.TRAINERS`` before
anything else is imported (in a fresh Python, as an edited registry would be), and plans and
prepares an attempt for it: no other module is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "experiments" / "seed-a30"

RULES_SOURCE = '''
from rlexp.trainers.base import TrainerRules


class ToyRules(TrainerRules):
    name = "toy"
    backends = ("process",)
    metrics_sources = ("stdout",)
    log_trainer = "toy"

    def metric_vocabulary(self):
        from rlexp.training.metric_names import COMMON, Vocabulary

        return Vocabulary({**COMMON, "reward": ("toy/score",)})


RULES = ToyRules()
'''

LAUNCH_SOURCE = '''
from rlexp.trainers.launch import LaunchPlan, TrainerLaunch
from toytrainer import RULES


class ToyLaunch(TrainerLaunch):
    rules = RULES

    def prepare(self, att, ad, *, resume, must_exist):
        return LaunchPlan(["toy-train", "--lr", str(att.recipe["actor_learning_rate"])])


LAUNCH = ToyLaunch()
'''

# run in a fresh Python: the registry line first, as if rlexp/trainers/__init__.py had it
PROBE = '''
import contextlib, io, json, sys
from rlexp import trainers
trainers.TRAINERS["toy"] = "toytrainer"
from rlexp.cli import main
from rlexp.spec.recipe import RECIPE_KEYS, key_table
from rlexp.spec import load_attempt
from rlexp.training.metric_names import canonical_row
from rlexp.experiment.layout import AttemptDir
from rlexp.trainers.launch import launcher

out = {"names": list(trainers.names()), "backends": list(trainers.rules("toy").backends),
       "openrlhf_keys": key_table("toy").keys is RECIPE_KEYS,
       "row": canonical_row({"toy/score": 0.5}, "toy"), "plans": {}}
for attempt in sys.argv[1:]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["plan", attempt, "--json"])
    out["plans"][attempt] = {"code": code, "plan": json.loads(buffer.getvalue())}
att = load_attempt(sys.argv[1])
out["argv"] = launcher("toy").prepare(att, AttemptDir(sys.argv[1]), resume=False, must_exist=False).argv
print(json.dumps(out))
'''


def test_a_fifth_trainer_is_one_package_and_one_registry_line(tmp_path):
    package = tmp_path / "pkgs" / "toytrainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(RULES_SOURCE)
    (package / "launch.py").write_text(LAUNCH_SOURCE)
    experiment = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, experiment, ignore=shutil.ignore_patterns("plan.json"))
    spec = yaml.safe_load((experiment / "a29b" / "attempt.yaml").read_text())
    for attempt, trainer in (("t1", "toy"), ("o1", "openrlhf")):
        spec["id"], spec["trainer"]["name"] = attempt, trainer
        (experiment / attempt).mkdir()
        (experiment / attempt / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", PROBE, str(experiment / "t1"), str(experiment / "o1")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)

    assert out["names"][-1] == "toy" and out["backends"] == ["process"]
    assert out["openrlhf_keys"]  # OpenRLHF's key names unless it builds its own table
    assert out["row"] == {"reward": 0.5}  # its own metric names
    toy, reference = out["plans"][str(experiment / "t1")], out["plans"][str(experiment / "o1")]
    assert toy["code"] in (0, 1) and toy["plan"]["trainer"]["name"] == "toy"  # planned: exit 2 is bad input
    # it counts steps as OpenRLHF does unless its rules say otherwise: the same spec run by openrlhf
    assert toy["plan"]["steps"] == reference["plan"]["steps"]
    assert toy["plan"]["lr_rows"] == reference["plan"]["lr_rows"]
    assert out["argv"] == ["toy-train", "--lr", str(spec["recipe"]["actor_learning_rate"])]
