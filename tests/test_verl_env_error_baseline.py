"""rlexp's GRPO for verl 0.9.1 (``rlexp_grpo``, rlexp/trainers/verl/advantage.py): an episode that
ended in an environment error (no response) is out of its group's baseline.

The generated module registers itself in the wheel's own registry (``register_adv_est`` and
``ADV_ESTIMATOR_REGISTRY`` of ``verl/trainer/ppo/core_algos.py``, taken by AST and installed as that
module), and verl's own ``compute_advantage`` (``verl/trainer/ppo/ray_trainer.py``, and the V1
trainer's ``compute_advantage_for_multi_trajectories``) calls it by name. The reference is the
wheel's ``compute_grpo_outcome_advantage`` reached through the same ``compute_advantage`` with
``grpo``: on the batch without the failed episodes for the others, on the whole batch when none
failed. Where verl imports the module (``external_lib``, in the driver) is read from the wheel's
source: verl itself needs GPUs and does not install here.
"""

from __future__ import annotations

import ast
import importlib
import sys
import zipfile
from collections import defaultdict
from enum import Enum
from types import ModuleType, SimpleNamespace
from typing import Any, Optional

import pytest

pytest.importorskip("torch")

from rlexp.trainers.verl import advantage  # noqa: E402
from tests.test_agent_verl import wheel  # noqa: E402, F401 - the pinned wheel (fixture)

VERSION = "0.9.1"
CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
CORE_NAMES = ("AdvantageEstimator", "ADV_ESTIMATOR_REGISTRY", "register_adv_est", "get_adv_estimator_fn",
              "compute_grpo_outcome_advantage")


def _kept(source: str, names: tuple[str, ...]) -> list[ast.stmt]:
    tree = ast.parse(source)
    kept = [n for n in tree.body
            if (isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name in names)
            or (isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) in names)]  # fmt: skip
    assert {getattr(n, "name", None) or n.target.id for n in kept} == set(names)
    return kept


@pytest.fixture(scope="module")
def verl(wheel):  # noqa: F811
    """The wheel's estimator registry and GRPO installed as ``verl.trainer.ppo.core_algos``, its
    ``compute_advantage`` (legacy trainer) and ``compute_advantage_for_multi_trajectories`` (V1)."""
    import numpy as np
    import torch

    with zipfile.ZipFile(wheel) as archive:
        sources = {p: archive.read(p).decode() for p in (CORE_ALGOS, "verl/trainer/ppo/ray_trainer.py",
                                                         "verl/trainer/ppo/v1/utils.py")}
    core = ModuleType("verl.trainer.ppo.core_algos")
    core.__dict__.update({"Enum": Enum, "defaultdict": defaultdict, "torch": torch, "np": np, "Any": Any,
                          "Optional": Optional, "AlgoConfig": object})
    exec(compile(ast.Module(body=_kept(sources[CORE_ALGOS], CORE_NAMES), type_ignores=[]),  # noqa: S102
                 f"{VERSION}/{CORE_ALGOS}", "exec"), core.__dict__)
    trainer = {"AdvantageEstimator": core.AdvantageEstimator, "core_algos": core, "DataProto": object,
               "AlgoConfig": object, "Optional": Optional, "Any": Any, "torch": torch, "np": np}
    for path, name in (("verl/trainer/ppo/ray_trainer.py", "compute_advantage"),
                       ("verl/trainer/ppo/v1/utils.py", "compute_advantage_for_multi_trajectories")):
        exec(compile(ast.Module(body=_kept(sources[path], (name,)), type_ignores=[]), f"{VERSION}/{path}",  # noqa: S102
                     "exec"), trainer)
    names = ["verl", "verl.trainer", "verl.trainer.ppo", core.__name__]
    saved = {name: sys.modules.get(name) for name in names}
    for package in names[:-1]:
        sys.modules[package] = ModuleType(package)
        sys.modules[package].__path__ = []
    sys.modules[core.__name__] = core
    try:
        yield SimpleNamespace(core=core, sources=sources, **trainer)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


@pytest.fixture(scope="module")
def registered(verl, tmp_path_factory):
    """The generated module imported as verl imports an ``external_lib`` (importlib by name)."""
    directory = tmp_path_factory.mktemp("estimator")
    (directory / f"{advantage.MODULE_NAME}.py").write_text(advantage.render_estimator())
    sys.path.insert(0, str(directory))
    try:
        importlib.import_module(advantage.MODULE_NAME)
        yield verl
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(advantage.MODULE_NAME, None)


class Data(SimpleNamespace):
    """The DataProto fields compute_advantage reads (``batch``, ``non_tensor_batch``) and the V1
    trainer's ``select_idxs`` and length."""

    def __len__(self):
        return len(self.non_tensor_batch["uid"])

    def select_idxs(self, idxs):
        return Data(batch={k: v[idxs] for k, v in self.batch.items()},
                    non_tensor_batch={k: v[idxs] for k, v in self.non_tensor_batch.items()})


class Cfg(dict):
    def __getattr__(self, name):
        return self[name]


GROUPS, GROUP, LENGTH = 4, 5, 7


def batch(failed: dict[int, float], seed: int = 0):
    """GROUPS groups of GROUP episodes, shuffled as verl's batch may be; each reward on its last
    response token (verl's placement); ``failed``: episode -> its reward, with no response."""
    import numpy as np
    import torch

    gen = torch.Generator().manual_seed(seed)
    n = GROUPS * GROUP
    order = torch.randperm(n, generator=gen).tolist()
    uids = np.array([f"uid-{i // GROUP}" for i in order], dtype=object)
    lengths = torch.randint(1, LENGTH + 1, (n,), generator=gen).tolist()
    rewards = torch.rand(n, generator=gen).round(decimals=1)
    mask = torch.zeros(n, LENGTH)
    scores = torch.zeros(n, LENGTH)
    for i in range(n):
        if i in failed:
            scores[i, -1] = failed[i]  # an empty response: verl's rm_scores[-1] lands on the last slot
            continue
        mask[i, : lengths[i]] = 1
        scores[i, lengths[i] - 1] = rewards[i]
    return Data(batch={"token_level_rewards": scores, "response_mask": mask}, non_tensor_batch={"uid": uids})


def advantages(verl, data, estimator, norm=True):
    out = verl.compute_advantage(data.select_idxs(list(range(len(data.non_tensor_batch["uid"])))),
                                 adv_estimator=estimator, norm_adv_by_std_in_grpo=norm,
                                 config=Cfg(norm_adv_by_std_in_grpo=norm))
    return out.batch["advantages"]


def group_members(data, uid):
    return [i for i, u in enumerate(data.non_tensor_batch["uid"]) if u == uid]


def test_registered_in_verls_registry_by_the_generated_module(registered):
    fn = registered.core.get_adv_estimator_fn(advantage.ESTIMATOR)
    assert fn.__module__ == advantage.MODULE_NAME
    assert registered.core.get_adv_estimator_fn("grpo") is registered.core.compute_grpo_outcome_advantage


@pytest.mark.parametrize("norm", [True, False])
def test_equals_verls_grpo_when_no_episode_failed(registered, norm):
    import torch

    for seed in range(3):
        data = batch({}, seed)
        ours, theirs = advantages(registered, data, advantage.ESTIMATOR, norm), advantages(registered, data, "grpo", norm)
        assert torch.equal(ours, theirs)  # the same operations on the same values, in the same order
        assert ours.abs().sum() > 0


@pytest.mark.parametrize("norm", [True, False])
def test_failed_episodes_are_out_of_the_baseline(registered, norm):
    """One failure in a group, four in another (one episode left: verl's group of one, its raw
    score), a whole group failed (no baseline at all), one group intact; the failed rewards 0, a
    partial return and NaN. The others' advantages are verl's GRPO on the batch without the failed
    episodes; the failed ones get 0."""
    import torch

    probe = batch({})
    groups = [group_members(probe, f"uid-{g}") for g in range(GROUPS)]
    failed_ids = [groups[0][2], *groups[1][:4], *groups[2]]
    values = [0.0, 1.0, float("nan"), 0.0, 0.5, 0.0, 0.0, float("nan"), 0.0, 0.0]
    data = batch(dict(zip(failed_ids, values, strict=True)))
    ours = advantages(registered, data, advantage.ESTIMATOR, norm)
    kept = [i for i in range(GROUPS * GROUP) if i not in failed_ids]
    reference = advantages(registered, data.select_idxs(kept), "grpo", norm)
    torch.testing.assert_close(ours[kept], reference, rtol=1e-6, atol=1e-7)
    assert torch.equal(ours[failed_ids], torch.zeros(len(failed_ids), LENGTH))
    assert not torch.isnan(ours).any()
    # the group left with one episode: its raw score, as verl gives a group of one
    [alone] = [i for i in groups[1] if i not in failed_ids]
    assert ours[alone].sum() == pytest.approx(float(data.batch["token_level_rewards"][alone].sum()) *
                                              float(data.batch["response_mask"][alone].sum()), rel=1e-5)
    # verl's own GRPO on the same batch: the failed rewards move the others' baseline (NaN: the whole group)
    plain = advantages(registered, data, "grpo", norm)
    assert torch.isnan(plain[groups[0]]).any() or not torch.allclose(plain[groups[0]], ours[groups[0]])
    assert torch.isnan(plain[groups[1]]).all()


def test_the_v1_trainers_path_too(registered):
    """The V1 trainer (trainer.use_v1, the default) sends a name other than grpo straight to
    compute_advantage; one output per agent-loop session (rlexp's loop) makes its grpo merge a no-op."""
    import torch

    data = batch({}, seed=5)
    keys = [f"{u}_session{i}_0" for i, u in enumerate(data.non_tensor_batch["uid"])]

    def v1(estimator):
        return registered.compute_advantage_for_multi_trajectories(
            data.select_idxs(list(range(len(keys)))), batch_keys=keys, adv_estimator=estimator,
            norm_adv_by_std_in_grpo=True, config=Cfg(norm_adv_by_std_in_grpo=True)).batch["advantages"]

    assert torch.equal(v1(advantage.ESTIMATOR), v1("grpo"))


def _function(source: str, name: str, owner: str | None = None) -> str:
    tree = ast.parse(source)
    nodes = tree.body if owner is None else next(n for n in tree.body if getattr(n, "name", None) == owner).body
    return ast.unparse(next(n for n in nodes if getattr(n, "name", None) == name))


def test_verl_imports_external_lib_in_the_driver(wheel, verl):  # noqa: F811
    """Where the registration happens: HFModelConfig imports ``external_lib`` on construction, and
    both trainers construct it from actor_rollout_ref.model in the driver (the Ray TaskRunner),
    which is where compute_advantage runs; no other branch compares the estimator with grpo."""
    with zipfile.ZipFile(wheel) as archive:
        read = {p: archive.read(p).decode() for p in (
            "verl/workers/config/model.py", "verl/trainer/ppo/v1/trainer_base.py", "verl/trainer/main_ppo_v0.py",
            "verl/trainer/ppo/utils.py")}  # fmt: skip
    assert "import_external_libs(self.external_lib)" in _function(read["verl/workers/config/model.py"],
                                                                   "__post_init__", "HFModelConfig")
    base = read["verl/trainer/ppo/v1/trainer_base.py"]
    setup = [n for n in ast.walk(ast.parse(base)) if isinstance(n, ast.FunctionDef) and n.name in
             ("_setup", "_init_tokenizer", "_compute_advantage")]
    text = {n.name: ast.unparse(n) for n in setup}
    assert "self._init_tokenizer()" in text["_setup"]
    assert "omega_conf_to_dataclass(self.config.actor_rollout_ref.model)" in text["_init_tokenizer"]
    assert "compute_advantage_for_multi_trajectories(" in text["_compute_advantage"]
    assert "omega_conf_to_dataclass(config.actor_rollout_ref.model)" in _function(
        read["verl/trainer/main_ppo_v0.py"], "run", "TaskRunner")
    # the critic comes on for gae only: grpo and rlexp_grpo alike run without one
    assert "config.algorithm.adv_estimator == AdvantageEstimator.GAE" in _function(read["verl/trainer/ppo/utils.py"],
                                                                                    "need_critic")


def test_keys_only_for_grpo_without_an_external_lib():
    assert advantage.estimator_keys({"algorithm.adv_estimator": "grpo"}) == {
        "algorithm.adv_estimator": advantage.ESTIMATOR, "actor_rollout_ref.model.external_lib": advantage.MODULE_NAME}
    assert advantage.estimator_keys({}) == {}  # verl's default, gae
    assert advantage.estimator_keys({"algorithm.adv_estimator": "rloo"}) == {}
    assert advantage.estimator_keys({"algorithm.adv_estimator": "grpo",
                                     "actor_rollout_ref.model.external_lib": "my_models"}) == {}
