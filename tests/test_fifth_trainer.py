"""A fifth trainer is one package and one registry line (docs/ARCHITECTURE.md, "Adding a trainer").

The test writes such a package (rules that differ from the defaults in their backends and metric
names, a launch that builds its own argv), adds its one line to ``rlexp.trainers.TRAINERS``, and
plans and prepares an attempt for it: no other module is touched.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
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
        from rlexp.core.trainers.metric_names import COMMON, Vocabulary

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


@pytest.fixture
def toy(tmp_path, monkeypatch):
    package = tmp_path / "pkgs" / "toytrainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(RULES_SOURCE)
    (package / "launch.py").write_text(LAUNCH_SOURCE)
    monkeypatch.syspath_prepend(str(package.parent))
    from rlexp import trainers
    from rlexp.core import recipe
    from rlexp.core.trainers import metric_names

    monkeypatch.setitem(trainers.TRAINERS, "toy", "toytrainer")  # the one registry line
    yield
    recipe.TRAINER_KEY_TABLES.pop("toy", None)
    metric_names.vocabulary.cache_clear()
    for name in [m for m in sys.modules if m.startswith("toytrainer")]:
        del sys.modules[name]


def test_a_fifth_trainer_is_one_package_and_one_registry_line(toy, tmp_path, capsys):
    from rlexp.cli import main
    from rlexp.core.recipe import RECIPE_KEYS, key_table
    from rlexp.core.spec import load_attempt
    from rlexp.core.trainers.metric_names import canonical_row
    from rlexp.storage.layout import AttemptDir
    from rlexp.trainers import names, rules
    from rlexp.trainers.launch import launcher

    assert names()[-1] == "toy" and rules("toy").backends == ("process",)
    assert key_table("toy").keys is RECIPE_KEYS  # OpenRLHF's key names unless it builds its own table
    assert canonical_row({"toy/score": 0.5}, "toy") == {"reward": 0.5}  # its own metric names

    experiment = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, experiment, ignore=shutil.ignore_patterns("plan.json"))
    spec = yaml.safe_load((experiment / "a29b" / "attempt.yaml").read_text())
    spec["id"] = "t1"
    spec["trainer"]["name"] = "toy"
    (experiment / "t1").mkdir()
    (experiment / "t1" / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    assert main(["plan", str(experiment / "t1"), "--json"]) in (0, 1)  # a plan, its checks as they fall
    data = json.loads(capsys.readouterr().out)
    assert data["trainer"]["name"] == "toy"
    # it counts steps as OpenRLHF does unless its rules say otherwise: the same spec as openrlhf's
    spec["id"], spec["trainer"]["name"] = "o1", "openrlhf"
    (experiment / "o1").mkdir()
    (experiment / "o1" / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    main(["plan", str(experiment / "o1"), "--json"])
    reference = json.loads(capsys.readouterr().out)
    assert data["steps"] == reference["steps"] and data["lr_rows"] == reference["lr_rows"]
    att = load_attempt(experiment / "t1")
    plan = launcher("toy").prepare(att, AttemptDir(experiment / "t1"), resume=False, must_exist=False)
    assert plan.argv == ["toy-train", "--lr", str(spec["recipe"]["actor_learning_rate"])]
