"""A fifth trainer is one package and nothing else (docs/ARCHITECTURE.md, "Adding a trainer").

The test writes a trainer's skeleton into a temporary package, outside rlexp: its own step math (one
global step per 8 prompts, one optimizer step each: not OpenRLHF's), its own console log format and
reader, its own resume-state folder and state names, and a launch that writes its own config file.
It registers the package as one outside rlexp does (``RLEXP_TRAINER_PACKAGES``, read by the registry
rlexp.trainers) and runs plan, launch (dry run, then a resume), and ingest through the CLI in a fresh
Python. Every figure asserted comes from the toy's rules: were rlexp to fall back on OpenRLHF's step
math, resume folder or log reader anywhere, the numbers below would differ. Nothing in rlexp names it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "experiments" / "seed-a30"
PROMPTS_PER_STEP = 8  # the toy's step math: one global step per 8 prompts

RULES_SOURCE = '''
import dataclasses
import re

from rlexp.trainers.base import TrainerRules

PROMPTS_PER_STEP = 8
_LINE = re.compile(r"^toy\\| step=(\\d+)((?: [\\w/]+=\\S+)*)$")


def read_toy_console(text, trainer):
    """Its console format: ``toy| step=N name=value ...``; any other non-blank line not understood."""
    from rlexp.training.metric_logs import LogRead, StepRows, metrics_of

    read = LogRead("toy-console", trainer)
    steps = StepRows(read)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        read.lines += 1
        match = _LINE.match(line)
        if match is None:
            read.not_understood.append(number)
            continue
        step = int(match.group(1))
        raw = dict(pair.split("=", 1) for pair in match.group(2).split())
        steps.add(step, metrics_of(raw, trainer, read, step), number, repeat_restarts=False)
    return read


class ToyRules(TrainerRules):
    name = "toy"
    backends = ("process",)
    metrics_sources = ("stdout",)
    log_trainer = "toy"
    console_log_format = "toy-console"
    resume_state_folder = "toy_state"
    own_state_names = r"toy-(\\d+)"

    def build_key_table(self):
        from rlexp.spec.recipe import openrlhf_key_table  # it reads OpenRLHF's key names

        return openrlhf_key_table(self.name)

    def steps(self, att):
        """Its own step math: one global step (and one optimizer step) per 8 prompts of each episode."""
        from rlexp.training.schedule import compute_steps

        shared = compute_steps(att.recipe, att.datasets["pool"].size, att.trainer.version, trainer="openrlhf")
        per_episode = shared.prompts // PROMPTS_PER_STEP
        total = per_episode * shared.num_episodes
        return dataclasses.replace(
            shared, global_steps_per_episode=per_episode, global_steps_total=total,
            optimizer_steps_per_episode=per_episode, optimizer_steps_total=total, optimizer_steps_run=total,
            optimizer_steps_per_global_step=1.0, partial_batch_prompts=shared.prompts % PROMPTS_PER_STEP)

    def metric_vocabulary(self):
        from rlexp.training.metric_names import COMMON, Vocabulary

        return Vocabulary({**COMMON, "reward": ("toy/score",)})

    def log_readers(self):
        return {"toy-console": read_toy_console}


RULES = ToyRules()
'''

LAUNCH_SOURCE = '''
import json

from rlexp.trainers.launch import LaunchPlan, TrainerLaunch
from toytrainer import RULES


class ToyLaunch(TrainerLaunch):
    rules = RULES

    def prepare(self, att, ad, *, resume, must_exist):
        config = ad.root / "launch" / "toy.json"
        argv = ["toy-train", "--config", str(config), "--save", str(ad.checkpoint_files.resume_state_dir(RULES))]
        if resume and (latest := ad.checkpoint_files.latest_resume_state(RULES)) is not None:
            argv += ["--resume-from", str(latest.path)]
        own = json.dumps({"lr": att.recipe["actor_learning_rate"], "steps": RULES.steps(att).global_steps_total})
        return LaunchPlan(argv, files={config: own})


LAUNCH = ToyLaunch()
'''

TOY_LOG = "toy| step=1 toy/score=0.25\nnot a metrics line\ntoy| step=2 toy/score=0.75\n"


def _rlexp(args: list[str], env: dict[str, str]) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "rlexp", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)
    assert done.returncode in (0, 1), done.stderr  # 2 would be bad input
    return done.returncode, json.loads(done.stdout)


def test_a_fifth_trainer_is_one_package_and_nothing_else(tmp_path):
    package = tmp_path / "pkgs" / "toytrainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(RULES_SOURCE)
    (package / "launch.py").write_text(LAUNCH_SOURCE)
    experiment = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, experiment, ignore=shutil.ignore_patterns("plan.json"))
    spec = yaml.safe_load((experiment / "a29b" / "attempt.yaml").read_text())
    spec["id"], spec["trainer"]["name"] = "t1", "toy"
    spec["recipe"]["max_samples"] = 3197  # a partial last batch for both step maths (8 and 16 prompts)
    attempt = experiment / "t1"
    attempt.mkdir()
    (attempt / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), str(REPO)]),
           "RLEXP_TRAINER_PACKAGES": "toy=toytrainer"}

    # plan: the toy's step math, not OpenRLHF's
    _, plan = _rlexp(["plan", str(attempt), "--json"], env)
    steps = plan["steps"]
    assert plan["trainer"]["name"] == "toy"
    prompts = min(steps["pool_size"], spec["recipe"].get("max_samples") or steps["pool_size"])
    expected = (prompts // PROMPTS_PER_STEP) * spec["recipe"]["num_episodes"]
    assert steps["global_steps_total"] == expected and steps["optimizer_steps_total"] == expected
    openrlhf_total = math.ceil(prompts / spec["recipe"]["rollout_batch_size"]) * spec["recipe"]["num_episodes"]
    assert expected != openrlhf_total  # the figures tell the two step maths apart
    # OpenRLHF's rules are not assumed: no GPU layout of its placement, no word of its partial-batch rule
    assert plan["gpu_layout"] is None and not [c for c in plan["checks"] if c["name"].startswith("gpu.")]
    partial = [c for c in plan["checks"] if c["name"] == "steps.partial_batch"]
    assert partial and "OpenRLHF" not in json.dumps(partial), partial

    # launch, dry run: its argv, its config file named and not written, its own resume folder
    _, launched = _rlexp(["launch", str(attempt), "--dry-run", "--force", "--reason", "test", "--json"], env)
    state = attempt / "checkpoints" / "toy_state"
    assert launched["argv"] == ["toy-train", "--config", str(attempt / "launch" / "toy.json"), "--save", str(state)]
    assert not (attempt / "launch" / "toy.json").exists()

    # resume: from ITS folder and ITS state names (toy-{N}); OpenRLHF's _actor/global_step{N} is not its
    for name in ("toy-3", "toy-12", "toy-x", "global_step5"):
        (state / name).mkdir(parents=True)
    (attempt / "checkpoints" / "_actor" / "global_step40").mkdir(parents=True)
    _, resumed = _rlexp(["launch", str(attempt), "--dry-run", "--resume", "--force", "--reason", "test",
                         "--json"], env)
    assert resumed["argv"][-2:] == ["--resume-from", str(state / "toy-12")]

    # ingest: ITS log reader (chosen by its console format) and ITS metric names
    log = tmp_path / "toy.log"
    log.write_text(TOY_LOG)
    _, read = _rlexp(["ingest", str(log), "--trainer", "toy", "--json"], env)
    assert read["format"] == "toy-console"
    assert [(s["step"], s["metrics"]["reward"]) for s in read["steps"]] == [(1, 0.25), (2, 0.75)]
    assert read["not_understood"] == [2]


def test_rlexp_names_no_package_outside_it():
    """The toy is registered from outside: no module of rlexp names it."""
    hits = [p for p in (REPO / "rlexp").rglob("*.py") if "toytrainer" in p.read_text()]
    assert not hits


def test_a_trainer_that_names_no_resume_folder_is_an_error_not_openrlhfs(tmp_path):
    """A trainer whose rules name no resume-state folder: asking for its resume state is an error,
    where the layout used to fall back silently to OpenRLHF's checkpoints/_actor."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.trainers import rules
    from rlexp.trainers.base import TrainerRules

    class Unsaved(TrainerRules):
        name = "unsaved"

    (tmp_path / "a" / "checkpoints" / "_actor" / "global_step4").mkdir(parents=True)
    with pytest.raises(ValueError, match="names no resume-state folder"):
        AttemptDir(tmp_path / "a").checkpoint_files.latest_resume_state(Unsaved())
    assert AttemptDir(tmp_path / "a").checkpoint_files.latest_resume_state(rules("openrlhf")).step == 4


@pytest.mark.parametrize("stated, says", [
    ("toy", "RLEXP_TRAINER_PACKAGES: 'toy': expected name=package"),
    ("openrlhf=elsewhere", "RLEXP_TRAINER_PACKAGES: trainer 'openrlhf' is registered already"),
    ("toy=no_such_package_here", "RLEXP_TRAINER_PACKAGES: trainer toy: package no_such_package_here has no RULES"),
])
def test_a_bad_registration_is_one_line_and_exit_2(stated, says):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLEXP_TRAINER_PACKAGES": stated}
    done = subprocess.run([sys.executable, "-m", "rlexp", "launch", str(EXAMPLE / "a30"), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlexp: {says}")
