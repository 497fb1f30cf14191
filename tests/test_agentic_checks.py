"""Plan rules for agentic recipes (rlexp.protocol.agentic_checks) and ``rlexp plan`` on such recipes.

Reference numbers come from the trainers' sources: OpenRLHF's ``max_length`` (``max_len``,
default 2048, from 0.9.8; ``prompt_max_len + generate_max_len``, 1024 each, before —
``experience_maker.py``), the multi-turn executor's ``max_length - max_tokens`` on None (checked
against the real executors in tests/test_agent_openrlhf.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from rlexp.protocol import agentic_checks as ac
from rlexp.spec.recipe import Recipe, key_table
from rlexp.trainers import rules as trainer_rules
from rlexp.trainers.openrlhf import checks as openrlhf_checks


def names(verdicts):
    return [v.name for v in verdicts]


def test_release_keys_order_post_releases():
    assert ac.release_key("0.10.1") < ac.release_key("0.10.1.post2") < ac.release_key("0.10.2")
    assert ac.release_key("v0.9.10") > ac.release_key("0.9.9")


@pytest.mark.parametrize(("trainer", "version", "refused"), [
    ("openrlhf", "0.8.6", True), ("openrlhf", "0.8.7", False), ("openrlhf", "0.9.3", False),
    ("verl", "0.5.0", True), ("verl", "0.9.1", False), ("trl", "0.27.2", True), ("trl", "1.16.0", False),
])  # fmt: skip
def test_releases_before_the_agent_api_are_refused_in_one_line(trainer, version, refused):
    found = ac.check_release(trainer, version, trainer_rules(trainer).agent_api_since)
    assert bool(found) == refused
    if refused:
        [v] = found
        assert v.severity == "error" and "\n" not in v.rule and version in v.rule and trainer in v.rule


def test_openrlhf_max_length_per_release():
    assert openrlhf_checks.openrlhf_max_length("0.9.3", Recipe.of({})) == (2048, "prompt_max_len 1024 + generate_max_len 1024")
    assert openrlhf_checks.openrlhf_max_length("0.9.7", Recipe.of({"prompt_max_len": 100, "generate_max_len": 50, "max_len": 9999}))[0] == 150
    assert openrlhf_checks.openrlhf_max_length("0.9.8", Recipe.of({})) == (2048, "max_len")
    assert openrlhf_checks.openrlhf_max_length("0.11.2", Recipe.of({"max_len": 300})) == (300, "max_len")


def test_turn_budget_names_both_numbers():
    [v] = ac.check_turn_budget("openrlhf", prompt_tokens=64, max_turns=4, max_tokens_per_turn=128, limit=512,
                               limit_name="max_len", prompt_included=True)
    # 64 + 4 × 128 = 576 > 512
    assert v.severity == "error" and "576" in v.rule and "512" in v.rule and "max_len" in v.rule
    assert ac.check_turn_budget("openrlhf", prompt_tokens=0, max_turns=4, max_tokens_per_turn=128, limit=512,
                                limit_name="max_len", prompt_included=True) == []  # 512 fits exactly
    # verl/TRL limits hold the response only: the prompt does not count
    assert ac.check_turn_budget("verl", prompt_tokens=10_000, max_turns=2, max_tokens_per_turn=256, limit=512,
                                limit_name="response_length", prompt_included=False) == []
    [v] = ac.check_turn_budget("trl", prompt_tokens=0, max_turns=3, max_tokens_per_turn=200, limit=512,
                               limit_name="max_completion_length", prompt_included=False)
    assert "600" in v.rule and "512" in v.rule


@pytest.mark.parametrize(("version", "needs"), [
    ("0.9.3", False), ("0.9.7", False), ("0.9.8", True), ("0.10.1.post2", True), ("0.10.2", False), ("0.11.2", False),
])  # fmt: skip
def test_max_new_tokens_required_where_the_executor_needs_it(version, needs):
    assert openrlhf_checks.openrlhf_needs_max_new_tokens(version) == needs
    assert bool(openrlhf_checks.check_openrlhf_max_new_tokens(version, {})) == needs
    assert openrlhf_checks.check_openrlhf_max_new_tokens(version, {"generate_max_len": 64}) == []


def test_gspo_left_at_the_token_clip_is_a_warning():
    [v] = ac.check_gspo_clip("gspo", 0.2, "recipe.eps_clip")
    assert v.severity == "warning" and "0.2" in v.rule
    assert ac.check_gspo_clip("gspo", 4e-4, "recipe.eps_clip") == []
    assert ac.check_gspo_clip("grpo", 0.2, "recipe.eps_clip") == []


# ----------------------------------------------------------------------------- rlexp plan


def _experiment(tmp_path: Path, trainer: dict, recipe: dict, environment: dict) -> Path:
    data = tmp_path / "exp" / "data"
    data.mkdir(parents=True)
    from rlexp.evaluation.arithmetic_task import problem_hash

    sizes = {"pool": 64, "ood_monitor": 8, "ood_primary": 40, "id": 8, "sanity": 4}
    n = 0
    datasets = {}
    for role, size in sizes.items():
        lines = []
        for _ in range(size):
            prompt = f"{100 + n}*{10 + n % 90}="
            lines.append(json.dumps({"prompt": prompt, "answer": str((100 + n) * (10 + n % 90)),
                                     "problem_hash": problem_hash(prompt)}))
            n += 1
        (data / f"{role}.jsonl").write_text("\n".join(lines) + "\n")
        datasets[role] = {"path": f"data/{role}.jsonl", "size": size, "prompt_suffix": ""}
    attempt = tmp_path / "exp" / "t1"
    attempt.mkdir()
    spec = {"id": "t1", "description": "agentic", "intent": {"global_steps": 4}, "trainer": trainer,
            "recipe": recipe, "datasets": datasets, "eval": {"engine": "local", "prompt_suffix": "", "max_tokens": 16},
            "checkpoints": {"mid": 2}, "environment": environment}
    (attempt / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return attempt


OPENRLHF_RECIPE = {"pretrain": "models/base", "advantage_estimator": "group_norm", "n_samples_per_prompt": 4,
                   "rollout_batch_size": 16, "train_batch_size": 64, "micro_train_batch_size": 8,
                   "actor_learning_rate": 1e-6, "num_episodes": 1, "eval_steps": 2, "save_steps": 2,
                   "prompt_max_len": 64, "generate_max_len": 192, "max_len": 256, "init_kl_coef": 0.0,
                   "actor_num_gpus_per_node": 1, "vllm_num_engines": 1, "input_key": "prompt", "label_key": "answer"}  # fmt: skip


def test_plan_of_an_openrlhf_recipe_whose_turns_exceed_max_len_is_an_error(tmp_path, capsys):
    from rlexp.cli import main

    env = {"name": "calculator", "max_turns": 4, "max_tokens_per_turn": 64, "max_total_tokens": 256}
    attempt = _experiment(tmp_path, {"name": "openrlhf", "version": "0.11.2", "gpus": 2}, OPENRLHF_RECIPE, env)
    main(["plan", str(attempt), "--json"])
    checks = json.loads((attempt / "plan.json").read_text())["checks"]
    [budget] = [c for c in checks if c["name"] == "agent.turn_budget"]
    # prompt 64 + 4 turns × 64 = 320 > max_len 256
    assert budget["severity"] == "error" and "320" in budget["rule"] and "max_len 256" in budget["rule"]
    [cap] = [c for c in checks if c["name"] == "agent.openrlhf_turn_cap"]
    assert cap["severity"] == "warning" and "room left in max_len (256" in cap["rule"]
    capsys.readouterr()


def test_plan_of_a_fitting_openrlhf_recipe_only_notes_the_turn_cap(tmp_path, capsys):
    from rlexp.cli import main

    env = {"name": "calculator", "max_turns": 3, "max_tokens_per_turn": 64, "max_total_tokens": 192, "loss": "gspo"}
    attempt = _experiment(tmp_path, {"name": "openrlhf", "version": "0.10.1", "gpus": 2}, OPENRLHF_RECIPE, env)
    main(["plan", str(attempt), "--json"])
    checks = json.loads((attempt / "plan.json").read_text())["checks"]
    agentic = {c["name"]: c["severity"] for c in checks if c["name"].startswith("agent.")}
    # 64 + 3 × 64 = 256 fits; generate_max_len is set (0.10.1 needs it); eps_clip stays at 0.2 but GSPO
    # clips with the environment's range (rlexp writes --eps_clip_low_high), so no clip warning
    # 0.10.1's loss cannot leave an environment-error episode out: said, not refused
    assert agentic == {"agent.openrlhf_turn_cap": "warning", "agent.env_error_baseline": "warning"}
    assert json.loads((attempt / "plan.json").read_text())["environment"]["gspo"]["trainer_settings"]["openrlhf"] == {
        "--policy_loss_type": "gspo", "--eps_clip_low_high": [3e-4, 4e-4]}
    capsys.readouterr()


# ----------------------------------------------------------------------------- the committed examples

EXAMPLES = Path(__file__).resolve().parent.parent / "experiments" / "tools-cluster"


@pytest.mark.parametrize(("attempt_id", "expected"), [
    ("o1", ["--train.agent_func_path", "launch/agent_func.py"]),
    ("v1", ["actor_rollout_ref.rollout.agent.agent_loop_config_path=", "launch/agent_loop/agent_loop.yaml",
            "actor_rollout_ref.rollout.agent.default_agent_loop=rlexp_env",
            # its recipe's grpo replaced by rlexp's (the environment errors out of the group baseline)
            "algorithm.adv_estimator=rlexp_grpo", "actor_rollout_ref.model.external_lib=rlexp_verl_advantage"]),
])  # fmt: skip
def test_the_tool_task_examples_plan_and_dry_run(attempt_id, expected, tmp_path, capsys):
    """``rlexp plan`` has no error on the committed examples, and ``rlexp launch --dry-run`` shows
    the argv naming the generated adapter and writes that adapter (nothing else), for a reader to open."""
    import shutil

    from rlexp.cli import main

    copy = tmp_path / "experiments" / "tools-cluster" / attempt_id
    shutil.copytree(EXAMPLES / attempt_id, copy)
    assert main(["plan", str(copy), "--json"]) == 0
    assert not [c for c in json.loads((copy / "plan.json").read_text())["checks"] if c["severity"] == "error"]
    (copy / "plan.json").unlink()
    capsys.readouterr()
    assert main(["launch", str(copy), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for piece in expected:
        assert piece in out
    assert "algorithm.adv_estimator=grpo" not in out
    assert "remote_rm_url" not in out and sorted(p.name for p in copy.iterdir()) == ["attempt.yaml", "launch"]
    written = sorted(p.relative_to(copy / "launch").as_posix() for p in (copy / "launch").rglob("*") if p.is_file())
    assert written == (["agent_func.py"] if attempt_id == "o1" else
                       ["agent_loop/agent_loop.yaml", "agent_loop/rlexp_verl_advantage.py",
                        "agent_loop/rlexp_verl_agent_loop.py"])
    assert all(f"# adapter written: {copy / 'launch' / w}" in out for w in written)


def test_launch_writes_the_adapter_files_beside_the_argv(tmp_path):
    """What ``rlexp launch`` writes before starting the trainer (the start itself needs a cluster):
    the agent file OpenRLHF loads — by the release's own loader rules — and verl's loop and YAML."""
    import shutil

    from rlexp.experiment.layout import AttemptDir
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_datasets
    from rlexp.stages.launch import prepare, write_launch_files
    from rlexp.trainers.openrlhf import agent as agent_openrlhf
    from rlexp.trainers.openrlhf.files import OpenRLHFFiles
    from rlexp.trainers.verl import agent as agent_verl
    from rlexp.trainers.verl.files import VerlFiles

    root = tmp_path / "experiments" / "tools-cluster"
    # the sizes the examples state; the calculator task alone (an OpenRLHF or verl run plays one environment)
    build_datasets(root / "data", dataclasses.replace(ToolsDemoConfig(), search_share=0.0))
    for attempt_id in ("o1", "v1"):
        shutil.copytree(EXAMPLES / attempt_id, root / attempt_id)
        write_launch_files(prepare(root / attempt_id))
    o1, v1 = AttemptDir(root / "o1"), AttemptDir(root / "v1")
    argv = json.loads(o1.launch.argv.read_text())["argv"]
    assert argv[argv.index("--train.agent_func_path") + 1] == str(OpenRLHFFiles.of(o1).agent_func)
    assert not o1.launch.reward_func.exists()  # OpenRLHF sets remote_rm_url to "agent" with an agent file
    with agent_openrlhf.release_agent_module("0.11.2"):
        executor = agent_openrlhf.load_agent_executor(OpenRLHFFiles.of(o1).agent_func)
        assert type(executor).__name__ == "AgentExecutor"
    loop_dir = VerlFiles.of(v1).agent_loop_dir
    assert (loop_dir / f"{agent_verl.MODULE_NAME}.py").exists()
    assert yaml.safe_load((loop_dir / agent_verl.CONFIG_FILE).read_text())[0]["name"] == agent_verl.AGENT_NAME
    argv = json.loads(v1.launch.argv.read_text())["argv"]
    assert f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_dir / agent_verl.CONFIG_FILE}" in argv


@pytest.mark.parametrize("attempt_id", ["o1", "v1"])
def test_a_row_naming_another_environment_is_refused_at_launch(attempt_id, tmp_path):
    import shutil

    from rlexp.errors import InputError
    from rlexp.stages.demo_tools import ToolsDemoConfig, build_datasets
    from rlexp.stages.launch import prepare

    root = tmp_path / "experiments" / "tools-cluster"
    pool = build_datasets(root / "data", dataclasses.replace(ToolsDemoConfig(), search_share=0.0))["pool"]
    lines = pool.read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "env": "exact_match"})
    pool.write_text("\n".join(lines) + "\n")
    shutil.copytree(EXAMPLES / attempt_id, root / attempt_id)
    with pytest.raises(InputError) as caught:
        prepare(root / attempt_id)
    assert "line 3: env" in str(caught.value) and pool.name in str(caught.value)
    assert not (root / attempt_id / "launch").exists()


def _att(trainer, version, recipe, **env):
    from types import SimpleNamespace

    from rlexp.spec import EnvironmentSettings

    settings = EnvironmentSettings(**{"name": "calculator", "max_turns": 3, "max_tokens_per_turn": 100,
                                      "max_total_tokens": 300, **env})
    # the recipe as load_attempt resolves it for that trainer (OpenRLHF's, the local trainer's: a typed Recipe)
    return SimpleNamespace(environment=settings, trainer=SimpleNamespace(name=trainer, version=version),
                           recipe=key_table(trainer).recipe(recipe))


def test_check_agentic_per_trainer():
    # no environment, or the local trainer (rlexp's own budgets): nothing
    assert ac.check_agentic(_att("local", "0.11.0", {})) == []
    plain = _att("openrlhf", "0.11.2", {})
    plain.environment = None
    assert ac.check_agentic(plain) == []
    # OpenRLHF: GSPO chosen by the trainer's own flag counts too; max_len default 2048 holds 3 × 100
    found = ac.check_agentic(_att("openrlhf", "0.11.2", {"actor.policy_loss_type": "gspo", "eps_clip": 0.2}))
    assert names(found) == ["agent.openrlhf_turn_cap", "agent.env_error_baseline", "agent.gspo_clip"]
    # verl: the turns against data.max_response_length; GSPO's two clip keys at their 0.2 defaults
    recipe = {"data.max_response_length": 256, "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
              "actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.2}
    found = ac.check_agentic(_att("verl", "0.9.1", recipe))
    assert names(found) == ["agent.turn_budget", "agent.env_error_baseline", "agent.gspo_clip", "agent.gspo_clip"]
    assert "300" in found[0].rule and "256" in found[0].rule
    recipe.update({"actor_rollout_ref.actor.clip_ratio_low": 3e-4, "actor_rollout_ref.actor.clip_ratio_high": 4e-4})
    assert names(ac.check_agentic(_att("verl", "0.9.1", recipe))) == ["agent.turn_budget", "agent.env_error_baseline"]
    # TRL: sequence-level importance sampling is GSPO; max_completion_length 512 holds 3 × 100
    found = ac.check_agentic(_att("trl", "1.16.0", {"importance_sampling_level": "sequence"}))
    assert names(found) == ["agent.gspo_clip"] and "recipe.epsilon" in found[0].rule
    # environment.loss gspo: rlexp writes the environment's range, so that range is what is checked
    for trainer, version in (("openrlhf", "0.11.2"), ("verl", "0.9.1"), ("trl", "1.16.0")):
        token = {"eps_clip": 0.2, "actor_rollout_ref.actor.clip_ratio_low": 0.2, "epsilon": 0.2}
        assert "agent.gspo_clip" not in names(ac.check_agentic(_att(trainer, version, token, loss="gspo")))
        found = ac.check_agentic(_att(trainer, version, {}, loss="gspo", gspo_eps_low=0.2, gspo_eps_high=0.2))
        [clip] = [v for v in found if v.name == "agent.gspo_clip"]
        assert "environment.gspo_eps_low 0.2" in clip.rule, trainer
    # a release before the agent API: that one line only
    assert names(ac.check_agentic(_att("trl", "0.20.0", {"max_completion_length": 10}))) == ["agent.release"]


def test_env_error_lines_per_trainer_and_release():
    """An environment-error episode: out of the loss but in its group's baseline on OpenRLHF 0.11+ and
    verl (a warning, not a refusal), trained as a failure on OpenRLHF before 0.11.0 (a warning naming
    it); the adaptive KL controller with the in-reward KL is refused where the mask makes its KL 0/0."""
    def lines(trainer, version, recipe):
        return {v.name: v for v in ac.check_agentic(_att(trainer, version, recipe))}

    new = lines("openrlhf", "0.11.2", {})["agent.env_error_baseline"]
    assert new.severity == "warning" and "out of the loss" in new.rule and "baseline" in new.rule
    old = lines("openrlhf", "0.10.4", {})["agent.env_error_baseline"]
    assert old.severity == "warning" and "trained as a failure" in old.rule
    verl = lines("verl", "0.9.1", {})["agent.env_error_baseline"]  # verl's default estimator, gae
    assert verl.severity == "warning" and "baseline" in verl.rule and "aborted_ratio" in verl.rule
    # on grpo rlexp's estimator leaves them out (rlexp.trainers.verl.advantage): no warning, unless the
    # recipe names its own external_lib (rlexp would have to replace it, so it keeps verl's grpo)
    assert "agent.env_error_baseline" not in lines("verl", "0.9.1", {"algorithm.adv_estimator": "grpo"})
    assert "agent.env_error_baseline" in lines("verl", "0.9.1", {"algorithm.adv_estimator": "rloo"})
    assert "agent.env_error_baseline" in lines("verl", "0.9.1", {"algorithm.adv_estimator": "grpo",
                                                                 "actor_rollout_ref.model.external_lib": "x"})
    assert "agent.env_error_baseline" not in lines("trl", "1.16.0", {})  # TRL leaves them out of the baseline
    for recipe in ({"kl_target": 0.1}, {"algo.kl.target": 0.1}):
        refused = lines("openrlhf", "0.11.2", recipe)["agent.env_error_kl_target"]
        assert refused.severity == "error" and "use_kl_loss" in refused.rule
        assert "agent.env_error_kl_target" not in lines("openrlhf", "0.11.2", {**recipe, "use_kl_loss": True})
        assert "agent.env_error_kl_target" not in lines("openrlhf", "0.10.4", recipe)
