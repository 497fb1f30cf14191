"""One sample per prompt with a group-normalised estimator, and the critic ``gae`` creates: rlexp's
rules against each trainer's own code.

- OpenRLHF: the release's own parser and post-parse code (its wheel, as tests/test_openrlhf_releases.py
  runs it) says which estimators it refuses with ``n_samples_per_prompt 1`` and which keep a critic;
  rlexp's ``samples.group_of_one`` and GPU layout must say the same, release by release.
- verl 0.9.1: the estimators of ``verl/trainer/ppo/core_algos.py``, taken from the wheel by AST and run
  on a batch of groups of one: what they return is what rlexp's message says they do.
- TRL 1.16: the message its ``GRPOConfig`` raises for ``num_generations=1`` (its own code, from
  .venv-trl) is what rlexp's plan quotes (TRL's step math refuses the recipe before any check).
- the local trainer: its own loss gives a group of one sample advantage 0.
"""

from __future__ import annotations

import ast
import os
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from rlexp.spec.recipe import Recipe
from rlexp.trainers.openrlhf import argv as openrlhf
from rlexp.trainers.openrlhf.checks import critic_created
from rlexp.trainers.openrlhf.checks import group_of_one as openrlhf_group_of_one
from rlexp.trainers.trl.steps import ONE_GENERATION
from rlexp.trainers.verl import releases as verl_releases
from rlexp.trainers.verl.checks import VERL_GROUP_OF_ONE
from rlexp.trainers.verl.checks import group_of_one as verl_group_of_one

REPO = Path(__file__).resolve().parent.parent
# a release of each dialect, the last before dr_grpo was refused, the first after, and the newest
OPENRLHF_VERSIONS = ("0.9.3", "0.10.4", "0.11.0", "0.11.2")
OPENRLHF_ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
BASE = {"pretrain": "base-model", "remote_rm_url": "/x/reward_func.py"}


@pytest.fixture(scope="module")
def openrlhf_parsers():
    from rlexp.trainers.openrlhf.parser import ReleaseParser, fetch, listed_releases

    return {r.version: ReleaseParser(r.version, fetch(r)) for r in listed_releases() if r.version in OPENRLHF_VERSIONS}


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize("version", OPENRLHF_VERSIONS)
def test_openrlhf_refusals_are_the_releases_own(openrlhf_parsers, version):
    from rlexp.trainers.openrlhf.parser import Rejected

    for estimator in OPENRLHF_ESTIMATORS:
        recipe = {**BASE, "advantage_estimator": estimator, "n_samples_per_prompt": 1}
        argv = openrlhf.build_train_argv(recipe, version).argv
        try:
            openrlhf_parsers[version].parse(argv[3:])
            refused = None
        except Rejected as exc:
            refused = str(exc)
        found = openrlhf_group_of_one(Recipe.of(recipe), version)
        if refused is not None:  # rlexp quotes the release's own assertion
            assert found is not None and "refuses it at start" in found.outcome, (estimator, refused)
            assert f"{estimator} requires n_samples_per_prompt > 1" in refused
            assert f"'AssertionError: {estimator} requires n_samples_per_prompt > 1'" in found.outcome
        elif estimator == "dr_grpo":  # accepted, and its advantages are the reward minus the group's mean: 0
            assert found is not None and "every advantage is 0" in found.outcome
        else:  # gae (a critic), reinforce (no baseline): no group, nothing to flag
            assert found is None, estimator
        # with two samples no release refuses any of them, and rlexp flags none
        assert openrlhf_group_of_one(Recipe.of({**recipe, "n_samples_per_prompt": 2}), version) is None


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize("version", OPENRLHF_VERSIONS)
def test_openrlhf_creates_a_critic_exactly_where_rlexp_counts_one(openrlhf_parsers, version):
    """The release's post-parse code leaves ``critic_pretrain`` set (or derives it) for gae only."""
    from tests.test_openrlhf_releases import get

    for estimator in OPENRLHF_ESTIMATORS:
        for critic in (None, "critic-model"):
            recipe = {**BASE, "advantage_estimator": estimator, "n_samples_per_prompt": 8}
            if critic:
                recipe["critic_pretrain"] = critic
            args = openrlhf_parsers[version].parse(openrlhf.build_train_argv(recipe, version).argv[3:]).args
            assert bool(get(args, "critic_pretrain")) == critic_created(Recipe.of(recipe)), (estimator, critic)


# ----------------------------------------------------------------------------- verl 0.9.1

CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
VERL_FUNCTIONS = {"grpo": "compute_grpo_outcome_advantage", "rloo": "compute_rloo_outcome_advantage",
                  "opo": "compute_opo_outcome_advantage", "rloo_vectorized": "compute_rloo_vectorized_outcome_advantage",
                  "grpo_passk": "compute_grpo_passk_outcome_advantage"}


@pytest.fixture(scope="module")
def verl_estimators():
    """verl's estimator functions from the wheel, their decorators and annotations dropped (the
    registry and AlgoConfig import verl's whole stack); they need torch, numpy and defaultdict."""
    import numpy as np
    import torch

    try:
        wheel = verl_releases.wheel_for("0.9.1")
    except verl_releases.ReleaseError as exc:
        if os.environ.get("CI"):
            wheel = verl_releases.fetch("0.9.1")
        else:
            pytest.skip(str(exc))
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(CORE_ALGOS).decode())
    wanted = set(VERL_FUNCTIONS.values())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    for node in found:
        node.decorator_list, node.returns = [], None
        for arg in [*node.args.args, *node.args.kwonlyargs]:
            arg.annotation = None
    assert {n.name for n in found} == wanted
    namespace = {"torch": torch, "np": np, "defaultdict": defaultdict}
    exec(compile(ast.Module(body=found, type_ignores=[]), f"verl-0.9.1/{CORE_ALGOS}", "exec"), namespace)  # noqa: S102
    return {name: namespace[fn] for name, fn in VERL_FUNCTIONS.items()}


def _groups_of_one():
    import numpy as np
    import torch

    scores = torch.tensor([1.0, 0.0, 1.0, 0.5])
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = scores
    return rewards, torch.ones(4, 3), np.array(["a", "b", "c", "d"], dtype=object), scores


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "opo", "rloo_vectorized", "grpo_passk"])
def test_verl_estimators_do_what_the_message_says(verl_estimators, estimator):
    import torch

    rewards, mask, index, scores = _groups_of_one()
    recipe = {"algorithm.adv_estimator": estimator, "actor_rollout_ref.rollout.n": 1}
    outcome = verl_group_of_one(recipe, "0.9.1").outcome
    fn = verl_estimators[estimator]
    kwargs = {"config": {"norm_adv_by_std_in_grpo": True}} if estimator == "grpo_passk" else {}
    if estimator == "opo":
        kwargs = {}
    if "stops at the first step" in outcome:
        with pytest.raises(ValueError, match="Pass@k requires at least 2 samples per group"):
            fn(rewards, mask, index, **kwargs)
        return
    advantages, _ = fn(rewards, mask, index, **kwargs)
    per_sample = advantages[:, -1]
    if "raw score" in outcome:
        assert torch.allclose(per_sample, scores, atol=1e-5), per_sample  # grpo: (s - 0) / (1 + 1e-6)
    else:
        assert "every advantage is 0" in outcome
        assert torch.count_nonzero(per_sample) == 0
    # and with two samples a prompt, the group's own baseline is used (the rule's other side)
    advantages, _ = fn(rewards, mask, index[[0, 0, 1, 1]], **kwargs) if estimator != "grpo_passk" else (None, None)
    if advantages is not None:
        assert not torch.allclose(advantages[:, -1], scores)
    assert verl_group_of_one({**recipe, "actor_rollout_ref.rollout.n": 2}, "0.9.1") is None


def test_verl_estimators_without_a_group_are_not_flagged():
    for estimator in ("gae", "reinforce_plus_plus", "remax"):
        assert verl_group_of_one({"algorithm.adv_estimator": estimator, "actor_rollout_ref.rollout.n": 1}, "0.9.1") is None
    assert set(VERL_GROUP_OF_ONE) >= {"grpo", "rloo", "reinforce_plus_plus_baseline", "grpo_vectorized"}


# ----------------------------------------------------------------------------- TRL 1.16

def trl_one_generation_message() -> str:
    """The message TRL 1.16's ``GRPOConfig.__post_init__`` raises for ``num_generations=1``: its own
    ``if self.num_generations < 2: raise ValueError(...)`` taken from .venv-trl's grpo_config.py
    by AST and its message evaluated (importing trl takes ~15 s; this reads one file)."""
    import types

    sources = sorted((REPO / ".venv-trl" / "lib").glob("python*/site-packages/trl/trainer/grpo_config.py"))
    if not sources:
        if os.environ.get("CI"):
            pytest.fail(".venv-trl is missing: scripts/run-tests builds it with scripts/setup-trl")
        pytest.skip(".venv-trl not built (scripts/setup-trl)")
    tree = ast.parse(sources[0].read_text())
    [check] = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "self.num_generations < 2"]
    [raised] = [n for n in check.body if isinstance(n, ast.Raise)]
    assert ast.unparse(raised.exc.func) == "ValueError"
    message = ast.Expression(raised.exc.args[0])
    return eval(compile(message, str(sources[0]), "eval"), {"self": types.SimpleNamespace(num_generations=1)})  # noqa: S307


def test_trl_refuses_one_generation_in_its_own_words(tmp_path):
    out = trl_one_generation_message()
    assert out.startswith("GRPO requires at least 2 generations"), out
    from rlexp.errors import InputError
    from tests.test_trl_plan import BASE, plan_of

    with pytest.raises(InputError) as info:  # what rlexp plan says: TRL's step math refuses the recipe
        plan_of(tmp_path, {**BASE, "num_generations": 1})
    assert info.value.field == "recipe.num_generations" and info.value.message == ONE_GENERATION
    assert f"'ValueError: {out}'" in ONE_GENERATION


# ----------------------------------------------------------------------------- the local trainer


@pytest.mark.parametrize("estimator", ["group_norm", "dr_grpo"])
def test_local_trainer_gives_a_group_of_one_advantage_zero(estimator):
    import torch

    from rlexp.trainers.local.checks import group_of_one as local_group_of_one
    from rlexp.trainers.local.loss import group_advantages

    rewards = torch.tensor([[1.0], [0.0], [0.5]])  # three prompts, one sample each
    assert torch.count_nonzero(group_advantages(rewards, estimator)) == 0  # the trainer's own loss
    found = local_group_of_one(Recipe.of({"advantage_estimator": estimator, "n_samples_per_prompt": 1}), "local")
    assert found is not None and "advantage 0" in found.outcome
    assert local_group_of_one(Recipe.of({"advantage_estimator": estimator, "n_samples_per_prompt": 2}), "local") is None
