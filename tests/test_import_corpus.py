"""`rlexp import` + `rlexp plan` on launch scripts other people wrote (tests/data/launch_scripts: the
trainers' own examples at their release tags and public research repositories; sources in its
README). Each script is imported as written, given only what facts.json states (`--version`, the
dataset sizes, `--env`), and planned.

- Every outcome is pinned in EXPECTED: a script that plans, or a refusal in one line that names the
  script line or the attempt field it comes from (docs/import.md shows the same table).
- Every figure plan prints for an imported script is checked against the trainer's own computation:
  verl's global steps are `len(train_dataloader) * total_epochs` (verl/trainer/ppo/ray_trainer.py,
  `_create_dataloader`, a drop_last sampler) and its LR at every step is verl 0.9.1's own scheduler
  (its source read from the pinned wheel, as tests/test_verl_steps.py does); OpenRLHF's scheduler
  length is `prepare_datasets`' `max_steps` (openrlhf/trainer/ppo_trainer.py at every tag here:
  `len(prompts_dataset) * n_samples_per_prompt // train_batch_size * num_episodes * max_epochs`),
  with the values read by that release's own argument parser, and its LR at every optimizer step
  is transformers' `cosine_with_min_lr` as OpenRLHF builds it; TRL's step count is what its own
  objects give in the TRL venv (its parser, RepeatSampler, the generation-batch DataLoader of
  GRPOTrainer.get_train_dataloader and transformers' epoch arithmetic), its LR transformers'
  scheduler with TRL's warm-up.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from test_verl_steps import verl_schedulers  # noqa: F401  (verl 0.9.1's own LR schedulers, a fixture)
from test_verl_veomni_schedule import veomni  # noqa: F401  (VeOmni 0.1.11's own scheduler module, a fixture)

from rlexp.cli import main

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "launch_scripts"
FACTS = json.loads((CORPUS / "facts.json").read_text())

PLANS = "plans"
# script -> PLANS, or (the verb that refuses, words of its one-line refusal)
EXPECTED: dict[str, object] = {
    "openrlhf-0.10.0/train_vlm_math_hybrid_engine.sh": PLANS,
    "openrlhf-0.10.2/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    "openrlhf-0.9.3/train_dapo_ray_hybrid_engine.sh": ("import", "unrecognized arguments: --vllm_enable_is_correction"),
    "openrlhf-0.9.3/train_ppo_ray_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.3/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    "openrlhf-0.9.3/train_ppo_with_reward_fn.sh": PLANS,
    "openrlhf-0.9.3/train_prorlv2_math_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.3/train_reinforce_baseline_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.3/train_reinforce_baseline_ray_agent_async.sh": PLANS,
    "openrlhf-0.9.4/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    "openrlhf-0.9.5/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    # no OpenRLHF release has --vllm_enable_is_correction (0.9.x: --enable_vllm_is_correction)
    "openrlhf-0.9.8/train_dapo_ray_hybrid_engine.sh": ("import", "unrecognized arguments: --vllm_enable_is_correction"),
    "openrlhf-0.9.8/train_ppo_ray_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.8/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    "openrlhf-0.9.8/train_ppo_with_reward_fn.sh": PLANS,
    "openrlhf-0.9.8/train_prorlv2_math_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.8/train_reinforce_baseline_hybrid_engine.sh": PLANS,
    "openrlhf-0.9.8/train_reinforce_baseline_ray_agent_async.sh": PLANS,
    "openrlhf-0.9.9/train_reinforce_baseline_ray_agent_async.sh": PLANS,
    "openrlhf/train_dapo_ray_hybrid_engine.sh": PLANS,
    "openrlhf/train_ppo_ray_hybrid_engine.sh": PLANS,
    "openrlhf/train_ppo_ray_slurm.sh": ("import", "line 15: not bash that the grammar can read"),
    "openrlhf/train_ppo_with_reward_fn.sh": PLANS,
    "openrlhf/train_prorlv2_math_hybrid_engine.sh": PLANS,
    "openrlhf/train_reinforce_baseline_hybrid_engine.sh": PLANS,
    "openrlhf/train_reinforce_baseline_ray_agent_async.sh": PLANS,
    "openrlhf/train_vlm_math_hybrid_engine.sh": PLANS,
    # Search-R1 derivatives: written for the verl copy Search-R1 ships (v0.1-era keys); verl 0.9.1's
    # config already has trainer.val_only, which they add with `+`: Hydra refuses ("Could not append")
    "research/AgentSimHuman__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/BFCmath_Search-R1__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/CRRL__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/DINGzzz05_Search-R1__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/LangGFM__shortest_path.sh": PLANS,
    "research/OpenDeepSearch__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/RLVR-vs-SFT-Qwen2.5-1.5b__train_grpo.sh": PLANS,
    "research/Travel-R1__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/critique_rl__run_example_qwen25.sh": PLANS,
    "research/learn-Search-R1__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "research/swe_bench_rl__run_rl.sh": ("import", "argument --advantage_estimator: invalid choice: 'grpo'"),
    "research/word_guess_R1__train_grpo.sh": ("import", "+trainer.val_only: verl 0.9.1's config already has"),
    "trl/async_grpo_py__usage.sh": PLANS,
    "trl/clis_md__trl_grpo.sh": PLANS,
    # TRL's RLOOTrainer (RLOOConfig's fields and defaults: advantage_estimator rloo)
    "trl/clis_md__trl_rloo.sh": PLANS,
    "trl/grpo_agent_py__usage.sh": PLANS,
    "trl/grpo_continuous_batching_py__usage_1.sh": ("plan", "recipe.num_generations: the generation batch 8 × 1 × 1 = 8 completions is not a multiple of num_generations 32"),
    "trl/grpo_continuous_batching_py__usage_2.sh": PLANS,
    "trl/grpo_vlm_py__usage_1.sh": PLANS,
    "trl/grpo_vlm_py__usage_2.sh": PLANS,
    "trl/gspo_py__usage.sh": PLANS,
    "trl/gspo_vlm_py__usage.sh": PLANS,
    "trl/harbor__data_agent_py__usage.sh": PLANS,
    "trl/openenv__browsergym_llm_py__usage_1.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__browsergym_llm_py__usage_2.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__browsergym_py__usage_1.sh": PLANS,
    "trl/openenv__browsergym_py__usage_2.sh": PLANS,
    "trl/openenv__browsergym_py__usage_3.sh": PLANS,
    "trl/openenv__carla_py__usage_1.sh": ("plan", "recipe.num_generations: 1: GRPO takes its baseline within a prompt's group, and TRL refuses it at start"),
    "trl/openenv__carla_py__usage_2.sh": PLANS,
    "trl/openenv__carla_vlm_gemma_py__usage.sh": PLANS,
    "trl/openenv__carla_vlm_py__usage.sh": PLANS,
    "trl/openenv__catch_py__usage_1.sh": PLANS,
    "trl/openenv__catch_py__usage_2.sh": PLANS,
    "trl/openenv__catch_py__usage_3.sh": PLANS,
    "trl/openenv__echo_py__usage_1.sh": PLANS,
    "trl/openenv__echo_py__usage_2.sh": PLANS,
    "trl/openenv__multi_env_py__usage.sh": PLANS,
    "trl/openenv__opencode_py__usage.sh": ("import", "imports has_tool_call from trl.experimental.async_grpo.openenv_harness, which TRL 1.16.0 does not have"),
    "trl/openenv__sudoku_py__usage_1.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__sudoku_py__usage_2.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__sudoku_py__usage_3.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__sudoku_py__usage_4.sh": ("plan", "recipe.top_p: must not be null"),
    "trl/openenv__wordle_py__usage_1.sh": PLANS,
    "trl/openenv__wordle_py__usage_2.sh": PLANS,
    "trl/openenv__wordle_py__usage_3.sh": PLANS,
    "trl/openreward__seta_py__usage_1.sh": PLANS,
    "trl/openreward__seta_py__usage_2.sh": PLANS,
    "trl/ppo__ppo_py__usage_1.sh": ("import", "line 1: examples/scripts/ppo/ppo.py runs TRL's PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship"),
    "trl/ppo__ppo_py__usage_2.sh": ("import", "line 1: examples/scripts/ppo/ppo.py runs TRL's PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship"),
    "trl/ppo__ppo_tldr_py__usage_1.sh": ("import", "line 1: examples/scripts/ppo/ppo_tldr.py runs TRL's PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship"),
    "trl/ppo__ppo_tldr_py__usage_2.sh": ("import", "line 1: examples/scripts/ppo/ppo_tldr.py runs TRL's PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship"),
    "trl/rloo_py__usage_1.sh": PLANS,
    "trl/rloo_py__usage_2.sh": PLANS,
    "trl/rloo_vlm_py__usage_1.sh": PLANS,
    "trl/rloo_vlm_py__usage_2.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_235b_256k_megatron.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_30b_a3b_megatron.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_30b_a3b_mindspeed.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_32b_fsdp.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_32b_mindspeed.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_5_122b_a10b_32k_megatron.sh": PLANS,
    "verl/ascend_extras__grpo_trainer__run_qwen3_next_80b_fsdp.sh": PLANS,
    "verl/ascend_extras__gspo_trainer__run_qwen3_32b_fsdp.sh": PLANS,
    "verl/ascend_extras__ppo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/cispo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/dppo_trainer__run_qwen3_30b_a3b_megatron.sh": PLANS,
    "verl/gdpo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/gmpo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/gpg_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/gpg_trainer__run_qwen3_8b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_deepseek_v3_671b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_deepseek_v4_flash_megatron.sh": PLANS,
    "verl/grpo_trainer__run_deepseek_v4_veomni.sh": PLANS,
    "verl/grpo_trainer__run_glm4_1v_9b_fsdp.sh": PLANS,
    # the example adds (+) a key verl's own config has: Hydra refuses it ("Could not append to config")
    "verl/grpo_trainer__run_gpt_oss_20b_fsdp.sh": ("import", "line 132: +actor_rollout_ref.actor.fsdp_config.model_dtype: "
                                                             "verl 0.9.1's config already has"),
    "verl/grpo_trainer__run_hy_v3_megatron.sh": PLANS,
    "verl/grpo_trainer__run_kimi_k2_6_glm5_1_megatron_lite.sh": ("import",
        "line 201: 'actor@actor_rollout_ref.actor=mlite_actor': not a Hydra override key=value"),
    "verl/grpo_trainer__run_minicpm_o_2_6_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_mistral_nemo_12b_skyworkrm_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_moonlight_16b_a3b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_nemotron_nano_v3_30b_a3b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen2-7b_math_megatron_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen2_5_32b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen2_5_vl_7b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen2_5_vl_7b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_235b_a22b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_30b_a3b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_30b_a3b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_30b_veomni.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_4b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5-122b-a10b_veomni.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_122b_a10b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_27b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_2b_openr1_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_2b_video_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_35b_a3b_veomni.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_35b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_35b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_5_35b_megatron_lite.sh": ("import",
        "line 184: 'actor@actor_rollout_ref.actor=mlite_actor': not a Hydra override key=value"),
    "verl/grpo_trainer__run_qwen3_5_397b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_8b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_next_80b_a3b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_235b_a22b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_30b_a3b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_30b_a3b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_30b_moe_veomni.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_8b_fsdp.sh": PLANS,
    "verl/grpo_trainer__run_qwen3_vl_8b_megatron.sh": PLANS,
    "verl/grpo_trainer__run_seed_oss_36b_fsdp.sh": PLANS,
    "verl/gspo_trainer__run_qwen3_30b_a3b_megatron.sh": PLANS,
    "verl/gspo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    # verl's fully-async trainer: its figures are checked against its own loop in tests/test_verl_fully_async.py
    "verl/mtp_trainer__run_mimo_7b_mtp_fully_async_megatron_multinode.sh": PLANS,
    "verl/mtp_trainer__run_mimo_7b_mtp_megatron.sh": PLANS,
    "verl/mtp_trainer__run_mimo_7b_mtp_rl_vllm_sgl_megatron.sh": PLANS,
    "verl/otb_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/ppo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/ppo_trainer__run_qwen3_8b_megatron.sh": PLANS,
    "verl/prefix_grouper__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/profile__run_qwen2_5_7b_torch_profile.sh": PLANS,
    "verl/profile__run_qwen2_5_vl_7b_torch_memory.sh": PLANS,
    "verl/profile__run_qwen3_8b_npu_profile_discrete.sh": PLANS,
    "verl/profile__run_qwen3_8b_npu_profile_e2e.sh": PLANS,
    "verl/reinforce_plus_plus_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    # runs verl.trainer.main_ppo_sync, which verl removed before v0.9.0 (#6710): not in the 0.9.1 wheel
    "verl/remax_trainer__run_qwen2.5_math_7b_sync_fsdp.sh": ("import", "line 106: python -m verl.trainer.main_ppo_sync: "
                                                                       "rlexp plans verl's trainer as "
                                                                       "verl.trainer.main_ppo runs it"),
    "verl/remax_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/rloo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/rollout_correction__run_qwen2_5_7b_fsdp.sh": PLANS,
    "verl/rollout_correction__run_qwen2_5_7b_fsdp_multi_rs.sh": PLANS,
    # sets actor_rollout_ref.actor.model_engine, a key no engine's actor config has: Hydra refuses it
    "verl/router_replay__run_qwen3_30b_a3b_megatron.sh": ("plan",
        "recipe.actor_rollout_ref.actor.model_engine: unknown key"),
    "verl/router_replay__run_qwen3_5_35b_a3b_veomni.sh": PLANS,
    "verl/sapo_trainer__run_qwen3_30b_a3b_fsdp.sh": PLANS,
    "verl/sapo_trainer__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/tuning__lora__run_qwen2_5_vl_7b_fsdp.sh": PLANS,
    "verl/tuning__lora__run_qwen3_30b_a3b_megatron.sh": PLANS,
    "verl/tuning__lora__run_qwen3_8b_from_adapter_fsdp.sh": PLANS,
    "verl/tuning__lora__run_qwen3_8b_fsdp.sh": PLANS,
    "verl/tuning__lora__run_qwen3_8b_merge_fsdp.sh": ("import", "+actor_rollout_ref.model.lora.merge: verl 0.9.1's "
                                                                "config already has"),
    "verl/tuning__scaling__run_qwen2_5_32b_megatron.sh": ("plan",
        "recipe.actor_rollout_ref.actor.model_engine: unknown key"),
    "verl/tuning__scaling__run_qwen2_5_72b_fsdp.sh": PLANS,
}


def test_the_table_covers_the_corpus():
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.sh")}
    assert on_disk == set(EXPECTED) == set(FACTS)


def _trainer(rel: str) -> str:
    folder = rel.split("/")[0]
    if folder.startswith("openrlhf"):
        return "openrlhf"
    if folder == "research":
        return "openrlhf" if "openrlhf.cli" in (CORPUS / rel).read_text() else "verl"
    return folder


def _params():
    for rel in sorted(EXPECTED):
        marks = [pytest.mark.openrlhf_wheels] if _trainer(rel) == "openrlhf" else []
        yield pytest.param(rel, marks=marks, id=rel)


@pytest.fixture(scope="module")
def openrlhf_wheels():
    """{version: its wheel} for every OpenRLHF release the corpus's scripts are given (facts.json)."""
    from rlexp.trainers.openrlhf.parser import fetch, listed_releases

    wanted = {FACTS[rel]["version"] for rel in EXPECTED if _trainer(rel) == "openrlhf"}
    return {release.version: fetch(release) for release in listed_releases() if release.version in wanted}


def import_and_plan(rel: str, tmp_path: Path) -> tuple[str, str, dict | None, dict | None]:
    """(the verb that refused or PLANS, its stderr, plan.json, attempt.yaml)"""
    import contextlib
    import io

    facts = FACTS[rel]
    attempt = tmp_path / "exp" / "a"
    args = ["import", str(CORPUS / rel), str(attempt), "--version", facts["version"]]
    if "pool_size" in facts:  # else the script's own code states the count (TRL's OpenEnv examples)
        args += ["--pool-size", str(facts["pool_size"])]
    if "workdir" in facts:  # where the command runs from: the training script it names is read there
        args += ["--workdir", str(CORPUS / facts["workdir"])]
    if "monitor_size" in facts:
        args += ["--monitor-size", str(facts["monitor_size"])]
    for name, value in facts.get("env", {}).items():
        args += ["--env", f"{name}={value}"]

    def run(argv: list[str]) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
        return rc, err.getvalue()

    rc, err = run(args)
    if rc != 0:
        assert rc == 2 and not attempt.exists(), err
        return "import", err, None, None
    spec = yaml.safe_load((attempt / "attempt.yaml").read_text())
    rc, err = run(["plan", str(attempt)])
    if rc not in (0, 1):
        assert rc == 2, err
        return "plan", err, None, spec
    return PLANS, err, json.loads((attempt / "plan.json").read_text()), spec


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """rel -> import_and_plan(rel), each script imported and planned once for all the tests below."""
    done: dict[str, tuple] = {}

    def of(rel: str) -> tuple[str, str, dict | None, dict | None]:
        if rel not in done:
            done[rel] = import_and_plan(rel, tmp_path_factory.mktemp("corpus"))
        return done[rel]

    return of


@pytest.mark.parametrize("rel", list(_params()))
def test_each_script_plans_or_is_refused_in_one_line_naming_where(rel, outcome, request):
    if _trainer(rel) == "openrlhf":
        request.getfixturevalue("openrlhf_wheels")
    verb, err, plan, _ = outcome(rel)
    expected = EXPECTED[rel]
    if expected == PLANS:
        assert verb == PLANS, err
        assert plan["steps"]["global_steps_total"] > 0
        return
    assert verb == expected[0], err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rlexp: "), err
    assert expected[1] in err, err
    # the line of the script or the attempt's field it came from
    assert "line " in err or "recipe." in err or "datasets." in err, err


# A verl example rlexp cannot plan for its own limits: one on an engine whose LR schedule rlexp does not
# model: on Megatron-Lite (an `actor@...=mlite_actor` group choice from a plugin outside verl's release,
# which composes another actor config than any table). FSDP (verl's default), Megatron (`model_engine=megatron`,
# or the `ppo_megatron_trainer` config), MindSpeed and VeOmni are planned, each with its own key table and LR
# schedule; so is verl's fully-async trainer (its own module, config and counts).
OTHER_ENGINE = re.compile(r"@actor_rollout_ref\.actor=mlite")
FULLY_ASYNC = re.compile(r"verl\.experimental\.fully_async_policy")  # its own config and counts (test_verl_fully_async)


def _fully_async(rel: str) -> bool:
    return _trainer(rel) == "verl" and bool(FULLY_ASYNC.search((CORPUS / rel).read_text()))


def _other_engine(rel: str) -> bool:
    return _trainer(rel) == "verl" and bool(OTHER_ENGINE.search((CORPUS / rel).read_text()))


def test_at_least_the_stated_share_plans():
    plans = sum(v == PLANS for v in EXPECTED.values())
    assert plans == 131 and len(EXPECTED) == 168  # docs/import.md states this table and these counts
    # those two verl scripts are refused, and nothing else is refused for rlexp's own limits: on the
    # others, 131 of 166 plan, and the 35 that do not are refused by the trainer itself (the PPO
    # examples: TRL 1.16.0 has no trl.experimental.ppo; opencode.py imports what its openenv_harness
    # lacks), its engine or bash (checked below); async_grpo.py, which runs AsyncGRPOTrainer, plans
    other = {rel for rel in EXPECTED if _other_engine(rel)}
    assert len(other) == 2 and all(EXPECTED[rel] != PLANS for rel in other)
    examples = {rel: EXPECTED[rel] for rel in EXPECTED if _trl_async_example(rel)}
    assert examples == {"trl/async_grpo_py__usage.sh": PLANS, "trl/openenv__opencode_py__usage.sh": (
        "import", "imports has_tool_call from trl.experimental.async_grpo.openenv_harness, which TRL 1.16.0 does not have")}
    rest = [rel for rel in EXPECTED if rel not in other]
    assert len(rest) == 166 and sum(EXPECTED[rel] == PLANS for rel in rest) == 131


# TRL's examples that run AsyncGRPOTrainer: each source read at huggingface/trl f2cd577
# (tests/data/launch_scripts/README.md): `from trl.experimental.async_grpo import AsyncGRPOConfig,
# AsyncGRPOTrainer`, which TRL 1.16.0 ships (tests/test_trl_examples.py::test_trl_1_16_ships_async_grpo_and_not_ppo)
TRL_ASYNC_EXAMPLES = re.compile(r"examples/scripts/(async_grpo|openenv/opencode)\.py")


def _trl_async_example(rel: str) -> bool:
    return _trainer(rel) == "trl" and bool(TRL_ASYNC_EXAMPLES.search((CORPUS / rel).read_text()))


def _reader_refused(rel: str) -> bool:
    """A script refused by the reader (bash the grammar cannot read): verl never sees its overrides."""
    return EXPECTED[rel] != PLANS and "not bash that the grammar can read" in EXPECTED[rel][1]


# the refusals that are verl's own (Hydra's, or a module the release lacks), checked against verl below
VERL_SCRIPTS = [rel for rel in sorted(EXPECTED) if _trainer(rel) == "verl" and not _other_engine(rel)
                and not _fully_async(rel) and not _reader_refused(rel)]


def _hydra_job(args: list) -> dict:
    """The config and config-group choices a verl command makes (``--config-name``, ``model_engine=``),
    and its key overrides, as Hydra's compose takes them."""
    config_name, groups, overrides = "ppo_trainer", [], []
    for arg in args:
        text = arg if isinstance(arg, str) else arg.known
        if text.startswith("--config-name"):
            config_name = text.partition("=")[2].strip("'\"").removesuffix(".yaml")
        elif text.startswith("--config"):
            continue
        elif text.startswith("model_engine="):
            groups.append(text)
        elif isinstance(arg, str) or "=" in text:
            overrides.append(text)
    return {"config_name": config_name, "groups": groups, "overrides": overrides}


@pytest.fixture(scope="module")
def hydras_verdicts(tmp_path_factory):
    """{script: "ok" or the error verl's start-up meets}: the module `python -m` runs looked up in
    the wheel of the script's release (facts.json's `--version`), then the script's overrides composed
    by Hydra itself with that release's own config (its ppo_trainer.yaml and defaults list from the
    wheel, with the engine the script chooses), as `python -m verl.trainer.main_ppo` does at start. A
    value only running tells (a run name from `$(date)`) is composed as the text around it."""
    import zipfile

    from test_verl_backend import config_dir_of, pinned_wheel, run_hydra

    from rlexp.training.launch_script import launch_of, read_script

    verdicts = {}
    for version in sorted({FACTS[rel]["version"] for rel in VERL_SCRIPTS}):
        rels = [rel for rel in VERL_SCRIPTS if FACTS[rel]["version"] == version]
        wheel = pinned_wheel(version)
        with zipfile.ZipFile(wheel) as archive:
            shipped = set(archive.namelist())
        config_dir = config_dir_of(wheel, tmp_path_factory.mktemp("verl-config"))
        jobs, missing = [], {}
        for rel in rels:
            launch = launch_of(read_script((CORPUS / rel).read_text(), FACTS[rel].get("env", {})).argv)
            if launch.module.replace(".", "/") + ".py" not in shipped:
                missing[rel] = f"ModuleNotFoundError: No module named '{launch.module}'"
            jobs.append(_hydra_job(launch.args))
        answer = run_hydra({"kind": "compose_each", "config_dir": str(config_dir), "overrides_each": jobs})
        verdicts.update({rel: missing.get(rel, v) for rel, v in zip(rels, answer["verdicts"], strict=True)})
    return verdicts


@pytest.mark.parametrize("rel", VERL_SCRIPTS)
def test_verl_scripts_are_refused_where_verls_hydra_refuses_them(rel, hydras_verdicts):
    """rlexp refuses a verl script exactly where verl's own start-up (Hydra composing its config
    with the script's overrides) would: the refusals are the trainer's, not the reader's."""
    verdict = hydras_verdicts[rel]
    if EXPECTED[rel] == PLANS:
        assert verdict == "ok", verdict
    elif "python -m " in EXPECTED[rel][1]:  # the module rlexp's refusal names is not in the release
        module = re.search(r"python -m ([\w.]+):", EXPECTED[rel][1]).group(1)
        assert verdict == f"ModuleNotFoundError: No module named '{module}'", verdict
    elif "model_engine=" in EXPECTED[rel][1]:  # an engine the release's config group lacks
        engine = re.search(r"model_engine=(\w+)", EXPECTED[rel][1]).group(1)
        assert f"model_engine/{engine}" in verdict or f"'{engine}'" in verdict, verdict
    elif ": unknown key" in EXPECTED[rel][1]:  # a key the composed config (with the script's engine) lacks
        from rlexp.trainers.verl import releases

        # Hydra stops at the first such key in argv order, rlexp names the first in the recipe's: both
        # are keys the config verl composes for the script lacks (its engine's table, which
        # tests/test_verl_backend.py holds equal to Hydra's composition)
        key = re.search(r"recipe\.([\w.]+): unknown key", EXPECTED[rel][1]).group(1)
        found = re.search(r"model_engine=(\w+)|--config-name=\S*ppo_(megatron)", (CORPUS / rel).read_text())
        engine = (found.group(1) or found.group(2)) if found else "dp"
        assert re.match(r"ConfigCompositionException: Could not override '[\w.]+'", verdict), verdict
        assert key not in releases.read_table(FACTS[rel]["version"], engine)
    else:  # the key rlexp's refusal names is the one Hydra refuses to add again
        key = re.search(r"\+([\w.]+): verl 0\.9\.1's config already has", EXPECTED[rel][1]).group(1)
        first = re.match(r"ConfigCompositionException: Could not override '([\w.]+)'", verdict)
        if first is None:
            assert "Could not append to config" in verdict and f"'{key}'" in verdict, verdict
        else:  # Hydra stops at an earlier override in argv order, a key the release's config lacks
            # (the Search-R1 scripts' v0.1-era keys); the `+` key rlexp names is one the config has,
            # which Hydra refuses to append as well
            from rlexp.trainers.verl import releases

            table = releases.read_table(FACTS[rel]["version"], "dp")
            assert first.group(1) not in table and key in table, verdict


# OpenRLHF's examples that rlexp refuses: each is refused by bash itself or by the release's own parser
OPENRLHF_EXAMPLES_REFUSED = [rel for rel, v in sorted(EXPECTED.items()) if v != PLANS and rel.startswith("openrlhf")]


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize("rel", OPENRLHF_EXAMPLES_REFUSED)
def test_openrlhf_example_refusals_are_bashs_or_openrlhfs_own(rel, openrlhf_wheels):
    """A Slurm template (`<...>` placeholders) is not bash: `bash -n`, which reads a script without running
    any of it, stops at the line rlexp names; a flag rlexp's import refuses is one the release's
    train_ppo_ray.py (read from its wheel) does not define."""
    import subprocess

    refusal = EXPECTED[rel][1]
    if "not bash that the grammar can read" in refusal:
        line = re.search(r"line (\d+):", refusal).group(1)
        done = subprocess.run(["bash", "-n", str(CORPUS / rel)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and f"line {line}: syntax error" in done.stderr, done.stderr
        return
    flag = re.search(r"unrecognized arguments: (--\w+)", refusal).group(1)
    assert flag in (CORPUS / rel).read_text()
    source = _wheel_source(openrlhf_wheels[FACTS[rel]["version"]], "openrlhf/cli/train_ppo_ray.py")
    assert "add_argument(" in source and f'"{flag}"' not in source


def _wheel_source(wheel: Path, module_path: str) -> str:
    """A file of an OpenRLHF wheel, at its root or under ``<dist>.data/purelib/`` (where its wheels put it)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n == module_path or n.endswith(f".data/purelib/{module_path}")]
        return archive.read(name).decode("utf-8")


# --- the figures equal each trainer's own computation ---------------------------------------------

VERL_PLANS = [rel for rel, v in sorted(EXPECTED.items())
              if v == PLANS and _trainer(rel) == "verl" and not _fully_async(rel)]
OPENRLHF_PLANS = [rel for rel, v in sorted(EXPECTED.items()) if v == PLANS and _trainer(rel) == "openrlhf"]


def _verl_config(rel: str, spec: dict) -> dict:
    """The script's verl release's config with its engine (the release's table for it) and its recipe."""
    from rlexp.trainers.verl import releases

    engine = spec["recipe"].get("model_engine", "dp")
    table = releases.read_table(FACTS[rel]["version"], engine)
    return {**{k: key.default for k, key in table.items()}, **spec["recipe"]}


def _verls_step_count(rel: str, config: dict) -> tuple[int, int]:
    """(the scheduler's horizon, the global steps run) as verl's trainer counts them, whatever the engine:
    ray_trainer._create_dataloader: StatefulDataLoader(drop_last=True) over the train set, then
    total_training_steps = len(train_dataloader) * trainer.total_epochs, or trainer.total_training_steps
    when stated (the scheduler's horizon, written into the actor's optim.total_training_steps); fit()
    loops over the epochs' batches and stops at total_training_steps, so the run makes the smaller."""
    batches = FACTS[rel]["pool_size"] // int(config["data.train_batch_size"])
    horizon = config["trainer.total_training_steps"] or batches * int(config["trainer.total_epochs"])
    return horizon, min(horizon, batches * int(config["trainer.total_epochs"]))


# Megatron's scheduler: model_engine=megatron, its config name, and MindSpeed (verl 0.9.0's MindSpeed
# engines subclass the Megatron engine and build its scheduler from the same optim config)
VERL_MEGATRON_PLANS = [rel for rel in VERL_PLANS if re.search(r"model_engine=(megatron|mindspeed)|--config-name=\S*ppo_megatron",
                                                              (CORPUS / rel).read_text())]


@pytest.fixture(scope="module")
def megatron_cores_lrs(outcome):
    """{script: the LR megatron-core's OptimizerParamScheduler gives each update, and logs after it},
    built by verl 0.9.1's get_megatron_optimizer_param_scheduler (tests/test_verl_megatron_lr.py; one
    child process for all the Megatron scripts)."""
    from test_verl_megatron_lr import run_megatron

    answers = {}
    for version in sorted({FACTS[rel]["version"] for rel in VERL_MEGATRON_PLANS}):  # each release's own code
        rels, requests = [rel for rel in VERL_MEGATRON_PLANS if FACTS[rel]["version"] == version], []
        for rel in rels:
            verb, err, _, spec = outcome(rel)
            assert verb == PLANS, err
            config = _verl_config(rel, spec)
            horizon, total = _verls_step_count(rel, config)
            prefix = "actor_rollout_ref.actor.optim."
            optim = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
            requests.append({**optim, "total_training_steps": horizon, "updates": total})
        answers.update(zip(rels, run_megatron(requests, version), strict=True))
    return answers


@pytest.mark.parametrize("rel", VERL_PLANS)
def test_verl_figures_equal_verls_own(rel, outcome, verl_schedulers, request):  # noqa: F811
    verb, err, plan, spec = outcome(rel)
    assert verb == PLANS, err
    config = _verl_config(rel, spec)
    horizon, total = _verls_step_count(rel, config)
    assert plan["steps"]["global_steps_total"] == total
    if rel in VERL_MEGATRON_PLANS:  # the Megatron engine's scheduler: megatron-core's, as verl builds it
        assert config["model_engine"] in ("megatron", "mindspeed")
        answer = request.getfixturevalue("megatron_cores_lrs")[rel]
        assert "error" not in answer, answer
        applied, logged = answer["applied"], answer["logged"]
    elif config.get("model_engine") == "veomni":  # VeOmni's own scheduler, as verl's VeOmni engine builds it
        # (0.9.0's _build_lr_scheduler, its step per update and its optim defaults are 0.9.1's, line for line)
        assert FACTS[rel]["version"] in ("0.9.0", "0.9.1")
        applied, logged = _veomni_lrs(config, horizon, total, request.getfixturevalue("veomni"))
    else:
        assert FACTS[rel]["version"] == "0.9.1"  # verl_schedulers are 0.9.1's (0.9.0's torch_functional.py is the same)
        applied, logged = _fsdp_lrs(config, horizon, total, verl_schedulers)
    rows = plan["lr"]  # every global step, or an even sample of a long run (plan.json's lr_rows says which)
    assert rows[-1]["global_step"] == total and (len(rows) == total or plan["lr_rows"] != "all")
    for row in rows:
        step = row["global_step"]
        assert row["lr_first"] == pytest.approx(applied[step - 1], rel=1e-12, abs=1e-30), step
        assert row["actor_lr_logged"] == pytest.approx(logged[step - 1], rel=1e-12, abs=1e-30), step


def _veomni_lrs(config: dict, horizon: int, total: int, veomni_module) -> tuple[list, list]:
    """The LR of each update and the one logged after it (``get_last_lr()``), from VeOmni 0.1.11's own
    ``build_lr_scheduler`` called with the keys verl 0.9.1's VeOmni engine passes (one step per update)."""
    from test_verl_veomni_schedule import _veomni_scheduler

    prefix = "actor_rollout_ref.actor.optim."
    optim = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
    optimizer, scheduler = _veomni_scheduler(veomni_module, horizon, optim)
    applied, logged = [], []
    for _ in range(total):
        applied.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        logged.append(scheduler.get_last_lr()[0])
    return applied, logged


def _fsdp_lrs(config: dict, horizon: int, total: int, schedulers) -> tuple[list, list]:
    """The LR of each update and the one logged after it, from verl 0.9.1's own FSDP schedulers."""
    torch, verl = schedulers
    optim = {k.rsplit(".", 1)[-1]: v for k, v in config.items() if k.startswith("actor_rollout_ref.actor.optim.")}
    # verl 0.9.1 fsdp_workers: warmup = lr_warmup_steps, or int(ratio * total) when it is negative
    warmup = optim["lr_warmup_steps"] if optim["lr_warmup_steps"] > 0 else \
        int(optim["lr_warmup_steps_ratio"] * horizon)
    lr = float(optim["lr"])
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    if optim["lr_scheduler_type"] == "constant":
        scheduler = verl["get_constant_schedule_with_warmup"](optimizer=optimizer, num_warmup_steps=warmup)
    else:
        scheduler = verl["get_cosine_schedule_with_warmup"](
            optimizer=optimizer, num_warmup_steps=warmup, num_training_steps=horizon,
            min_lr_ratio=optim["min_lr_ratio"], num_cycles=optim["num_cycles"],
            zero_indexed_step=optim["zero_indexed_step"])
    applied, logged = [], []
    for _ in range(total):  # one scheduler step per global step (no separate-async mode in these scripts)
        applied.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        logged.append(scheduler.get_last_lr()[0])
    return applied, logged


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize("rel", OPENRLHF_PLANS)
def test_openrlhf_figures_equal_openrlhfs_own(rel, outcome, openrlhf_wheels):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from rlexp.trainers.openrlhf import parser as openrlhf_parser
    from rlexp.training.launch_script import launch_of, read_script

    verb, err, plan, _ = outcome(rel)
    assert verb == PLANS, err
    version = FACTS[rel]["version"]
    parser = openrlhf_parser.load_release_parser(version)
    args = [a if isinstance(a, str) else "x" for a in launch_of(read_script((CORPUS / rel).read_text()).argv).args]
    parsed = parser.parse(args, post_parse=False).args
    by_flag = {o: a.dest for a in parser.parser._actions for o in a.option_strings}

    def value(*flags):
        return getattr(parsed, next(by_flag[f] for f in flags if f in by_flag))

    pool = min(FACTS[rel]["pool_size"], value("--max_samples", "--data.max_samples"))
    n = value("--n_samples_per_prompt", "--rollout.n_samples_per_prompt")
    # openrlhf/trainer/ppo_trainer.py prepare_datasets (the same at every tag of the corpus, v0.9.3 to v0.11.0,
    # in either dialect's names): read in the release's wheel
    trainer = re.sub(r"\s+", "", _wheel_source(openrlhf_wheels[version], "openrlhf/trainer/ppo_trainer.py"))
    assert ("max_steps=(len(prompts_dataset)*args.n_samples_per_prompt//args.train_batch_size*args.num_episodes"
            "*args.max_epochs)") in trainer or ("max_steps=(len(prompts_dataset)*args.rollout.n_samples_per_prompt"
                                                "//args.train.batch_size*args.train.num_episodes*args.train.max_epochs)"
                                                ) in trainer, version
    max_steps = (pool * n // value("--train_batch_size", "--train.batch_size")
                 * value("--num_episodes", "--train.num_episodes") * value("--max_epochs", "--train.max_epochs"))
    assert plan["steps"]["optimizer_steps_total"] == max_steps
    lr = value("--actor_learning_rate", "--actor.adam.lr")
    ratio = value("--lr_warmup_ratio", "--actor.lr_warmup_ratio")
    # the actor's scheduler as the release's own ppo_actor.py (read from its wheel) builds it: up to
    # 0.10.1.post2 with min_lr = 0.1 x --actor_learning_rate, from 0.10.2 through its DeepSpeed strategy,
    # which passes min_lr_rate = --actor.min_lr_ratio
    actor = _wheel_source(openrlhf_wheels[version], "openrlhf/trainer/ray/ppo_actor.py")
    if 'scheduler_specific_kwargs={"min_lr": args.actor_learning_rate * 0.1}' in actor:
        kwargs = {"min_lr": lr * 0.1}
    else:
        assert "min_lr_ratio=args.actor.min_lr_ratio" in actor, version
        kwargs = {"min_lr_rate": value("--actor.min_lr_ratio")}
    schedulers = [getattr(parsed, by_flag[f]) for f in ("--lr_scheduler", "--actor.lr_scheduler") if f in by_flag]
    assert schedulers in ([], ["cosine_with_min_lr"])  # what OpenRLHF builds by default (every tag)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = transformers.get_scheduler("cosine_with_min_lr", optimizer, num_warmup_steps=math.ceil(max_steps * ratio),
                                           num_training_steps=max_steps, scheduler_specific_kwargs=kwargs)
    applied = []
    for _ in range(plan["steps"]["optimizer_steps_run"]):
        applied.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert plan["lr"][-1]["last_optimizer_step"] == plan["steps"]["optimizer_steps_run"]
    # global steps per episode: the prompts drawn rollout_batch_size at a time, the last draw short
    per_episode = -(-pool // value("--rollout_batch_size", "--rollout.batch_size"))
    for row in plan["lr"]:
        first, last = row["first_optimizer_step"], row["last_optimizer_step"]
        if first > last:  # a short global step (an episode's last, its prompts run out) with fewer
            # samples than one optimizer step: no optimizer step ends in it
            assert first == last + 1 and row["global_step"] % per_episode == 0, row
            continue
        assert row["lr_first"] == pytest.approx(applied[first - 1], rel=1e-12, abs=1e-20)
        assert row["lr_mean"] == pytest.approx(math.fsum(applied[first - 1:last]) / (last - first + 1), rel=1e-9,
                                               abs=1e-20)


# the examples of the releases (0.9.8 to 0.10.1.post2) whose parser names the response budget --max_new_tokens
OPENRLHF_MAX_NEW_TOKENS = [rel for rel in OPENRLHF_PLANS if re.search(r"^\s*--max_new_tokens ", (CORPUS / rel).read_text(), re.M)]


@pytest.mark.openrlhf_wheels
@pytest.mark.parametrize("rel", OPENRLHF_MAX_NEW_TOKENS)
def test_max_new_tokens_is_imported_as_the_response_budget(rel, outcome, openrlhf_wheels):
    """--max_new_tokens (0.9.8's name of --generate_max_len) is the recipe's generate_max_len, and the
    command rlexp builds for the imported attempt gives the release's own parser the script's value."""
    from rlexp.trainers.openrlhf import argv as openrlhf_argv
    from rlexp.trainers.openrlhf import parser as openrlhf_parser
    from rlexp.training.launch_script import launch_of, read_script

    verb, err, _, spec = outcome(rel)
    assert verb == PLANS, err
    version = FACTS[rel]["version"]
    parser = openrlhf_parser.load_release_parser(version)
    args = [a if isinstance(a, str) else "x" for a in launch_of(read_script((CORPUS / rel).read_text()).argv).args]
    stated = parser.parse(args, post_parse=False).args.max_new_tokens
    assert stated is not None and spec["recipe"]["generate_max_len"] == stated
    assert "max_new_tokens" not in spec["recipe"]
    argv = openrlhf_argv.build_train_argv({"generate_max_len": spec["recipe"]["generate_max_len"]}, version).argv
    assert parser.parse(argv[3:], post_parse=False).args.max_new_tokens == stated


TRL_PLANS = [rel for rel, v in sorted(EXPECTED.items()) if v == PLANS and _trainer(rel) == "trl"]
# refused at plan for what TRL's own config refuses (GRPOConfig.__post_init__ on one process)
TRL_REFUSED = [rel for rel, v in sorted(EXPECTED.items()) if v != PLANS and v[0] == "plan" and _trainer(rel) == "trl"]
# In the TRL venv, TRL's own objects give each command's figures:
# - a command whose words are its config's fields (`trl grpo`, `trl rloo`, a TrlParser script): the
#   words parsed by TRL's own parser (`trl rloo`'s: trl.scripts.rloo.make_parser, RLOOConfig among its
#   dataclasses);
# - a TRL example that builds its config in its own code (the OpenEnv, Harbor and OpenReward agents,
#   rloo.py): the example itself, run with the command's words (runpy, from the folder the command runs
#   in) up to its trainer, which is replaced by a stand-in that keeps the config and the training set the
#   example built (its environments' client packages, which the TRL venv lacks, answer any attribute; a
#   hub dataset or a Harbor/OpenReward task suite is the given count of rows; no process is started);
# then, on the config: the sampler the trainer's own _get_train_sampler builds (GRPOTrainer's or
# RLOOTrainer's) and the generation-batch DataLoader of its get_train_dataloader, sharded over the
# processes by accelerate's own prepare_data_loader as the Trainer's accelerator does (W processes:
# TrainingArguments.world_size, which GRPOConfig.__post_init__ reads, reports W), and transformers'
# Trainer.set_initial_training_values' step count (trainer.py of transformers 5.24:
# num_update_steps_per_epoch = max(len_dataloader // GA + (len_dataloader % GA > 0), 1), then
# max_steps = ceil(num_train_epochs * that) unless max_steps is given). AsyncGRPOTrainer's stand-in
# captures the AsyncGRPOConfig the example builds; its loader (the rollout queue) has no length, so
# the figures are set_initial_training_values' own on such a loader.
TRL_STEPS = """
import ast, importlib.abc, importlib.machinery, importlib.util, json, math, os, runpy, subprocess, sys, types
from types import SimpleNamespace
from unittest import mock

import torch
import transformers

WORLD = [1]
transformers.TrainingArguments.world_size = property(lambda self: WORLD[0])

import datasets
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader
import trl
from trl import GRPOConfig, GRPOTrainer, ModelConfig, RLOOTrainer, TrlParser
from trl.scripts.grpo import GRPOScriptArguments
from trl import RLOOConfig, ScriptArguments
from trl.scripts.rloo import make_parser as rloo_parser
import trl.experimental.async_grpo as async_grpo
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer


class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    tops = set()

    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in self.tops else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__getattr__ = lambda attr: mock.MagicMock(name=f"{spec.name}.{attr}")
        return module

    def exec_module(self, module):
        module.__path__ = []


STUB = Stub()
sys.meta_path.append(STUB)


def no_process(*args, **kwargs):
    raise RuntimeError("the reference run starts no process")


subprocess.Popen = subprocess.run = no_process
POOL = [0]


class Rows:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getattr__(self, name):  # map, filter, remove_columns...: the rows the plan is given stay
        return lambda *a, **k: self


def load_dataset(*args, split=None, **kwargs):
    return [Rows(POOL[0]) for _ in split] if isinstance(split, (list, tuple)) else Rows(POOL[0])


class Suite:
    def __init__(self, *args, **kwargs):
        self.train_dataset = Rows(POOL[0])

    def __getattr__(self, name):
        return mock.MagicMock(name=name)


datasets.load_dataset = load_dataset
import trl.experimental.harbor as harbor, trl.experimental.openreward as openreward
harbor.HarborSpec = openreward.OpenRewardSpec = Suite
for cls in (GRPOConfig, RLOOConfig, AsyncGRPOConfig):  # on a CPU, TrainingArguments refuses bf16 unless use_cpu
    def init(self, *a, _init=cls.__init__, **k):
        k.setdefault("use_cpu", True)
        _init(self, *a, **k)
    cls.__init__ = init


class Built(Exception):
    pass


def stand_in(trainer):
    def build(*args, **kwargs):
        raise Built(trainer, kwargs)
    return build


def run_example(path, words, workdir):
    tops = set()
    for node in ast.walk(ast.parse(open(os.path.join(workdir, path)).read())):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    STUB.tops = {t for t in tops if importlib.util.find_spec(t) is None}
    trl.GRPOTrainer, trl.RLOOTrainer = stand_in(GRPOTrainer), stand_in(RLOOTrainer)
    async_grpo.AsyncGRPOTrainer = stand_in(AsyncGRPOTrainer)
    here, sys.argv = os.getcwd(), [path] + words
    os.chdir(workdir)
    try:
        runpy.run_path(path, run_name="__main__")
    except Built as built:
        trainer, kwargs = built.args
        return kwargs["args"], len(kwargs["train_dataset"]), trainer
    finally:
        os.chdir(here)
        trl.GRPOTrainer, trl.RLOOTrainer = GRPOTrainer, RLOOTrainer
        async_grpo.AsyncGRPOTrainer = AsyncGRPOTrainer
    raise AssertionError(f"{path} built no trainer")


def figures(job):
    WORLD[0], POOL[0] = job["processes"], job["n"] or 0
    words = job["words"]
    try:
        if job["workdir"]:
            t, n, trainer = run_example(job["module"], words, job["workdir"])
            return figures_of(n, t, trainer)
        words = words + ["--output_dir", "o", "--use_cpu", "True"]
        if job["module"].endswith("rloo"):
            _, t, _, _ = rloo_parser().parse_args_and_config(words)
            return figures_of(job["n"], t, RLOOTrainer)
        if job["module"].endswith("examples/scripts/rloo_vlm.py"):  # its own parser (rloo_vlm.py at f2cd577, line 81)
            _, t, _ = TrlParser((ScriptArguments, RLOOConfig, ModelConfig)).parse_args_and_config(words)
            return figures_of(job["n"], t, RLOOTrainer)
        _, t, _ = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig)).parse_args_and_config(words)
    except ValueError as exc:  # the config's own __post_init__ refuses the command
        return {"error": str(exc)}
    return figures_of(job["n"], t, GRPOTrainer)


def async_figures(n, t):
    # AsyncGRPOTrainer's DataLoader is an IterableDataset (its rollout queue): transformers' own
    # set_initial_training_values on a loader without a length, as the trainer's train() calls it
    assert t.max_steps > 0  # else AsyncGRPOTrainer.__init__ sets its own "safety ceiling" (not planned)
    class Queue(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())
    own = SimpleNamespace(get_total_train_batch_size=lambda args: 0, get_sp_size=lambda: 1)
    values = transformers.Trainer.set_initial_training_values(own, t, DataLoader(Queue()))
    per_epoch, steps_in_epoch, steps = values[1], values[5], values[-1]
    return {"max_steps": steps, "warmup": t.get_warmup_steps(steps), "lr": t.learning_rate,
            "scheduler": str(getattr(t.lr_scheduler_type, "value", t.lr_scheduler_type)),
            "kwargs": t.lr_scheduler_kwargs or {}, "num_generations": t.num_generations,
            "update_steps_per_epoch": per_epoch, "micro_batches_per_epoch": steps_in_epoch,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "eval_strategy": str(getattr(t.eval_strategy, "value", t.eval_strategy)),
            "save_strategy": str(getattr(t.save_strategy, "value", t.save_strategy)), "save_steps": t.save_steps,
            "config": type(t).__name__, "rows": n, "processes": WORLD[0]}


def figures_of(n, t, trainer):
    if trainer is AsyncGRPOTrainer:
        return async_figures(n, t)
    # the trainer's own sampler method, on an object holding what it reads (no model is loaded)
    own = SimpleNamespace(args=t, num_generations=t.num_generations, num_iterations=t.num_iterations,
                          shuffle_dataset=False, train_dataset=range(n))
    sampler = trainer._get_train_sampler(own, range(n))
    loader = DataLoader(list(range(n)), batch_size=t.per_device_train_batch_size * t.steps_per_generation,
                        sampler=sampler, drop_last=t.dataloader_drop_last)
    if WORLD[0] > 1:
        loader = prepare_data_loader(loader, num_processes=WORLD[0], process_index=0, put_on_device=False)
    length, ga = len(loader), t.gradient_accumulation_steps
    per_epoch = max(length // ga + int(length % ga > 0), 1)
    steps = math.ceil(t.num_train_epochs * per_epoch) if t.max_steps < 0 else t.max_steps
    return {"max_steps": steps, "warmup": t.get_warmup_steps(steps), "lr": t.learning_rate,
            "scheduler": str(getattr(t.lr_scheduler_type, "value", t.lr_scheduler_type)),
            "kwargs": t.lr_scheduler_kwargs or {}, "num_generations": t.num_generations,
            "prompts_per_generation_batch": t.generation_batch_size // t.num_generations,
            "steps_per_generation": t.steps_per_generation, "batches_per_epoch": length,
            "config": type(t).__name__, "rows": n, "processes": WORLD[0], "top_p": t.top_p,
            "use_vllm": t.use_vllm}


print(json.dumps([figures(job) for job in json.loads(sys.stdin.read())]))
"""


def _trl_job(rel: str) -> dict:
    """What the TRL venv is given for one command: the rows (None where the example's code builds
    them), the module or example, its words, the processes (from the launcher, as the command states
    them: its own --num_processes, or its accelerate config file's num_processes) and, for an example
    that builds its config in code, the folder the command runs in."""
    from rlexp.training.launch_script import launch_of, read_script

    launch = launch_of(read_script((CORPUS / rel).read_text()).argv)
    facts = FACTS[rel]
    workdir = CORPUS / facts["workdir"] if "workdir" in facts else None
    launcher = [str(w) for w in launch.launcher]
    processes = 1
    if launcher[0] == "accelerate":
        if "--num_processes" in launcher:
            processes = int(launcher[launcher.index("--num_processes") + 1])
        elif "--config_file" not in launcher:  # async_grpo.py's: one GPU visible (CUDA_VISIBLE_DEVICES=0)
            processes = 1
        else:
            config = yaml.safe_load((workdir / launcher[launcher.index("--config_file") + 1]).read_text())
            processes = config["num_processes"]
    built = workdir is not None and (workdir / launch.module).is_file() and "TrlParser" not in (
        workdir / launch.module).read_text()
    return {"n": facts.get("pool_size"), "module": launch.module, "words": [str(w) for w in launch.args],
            "processes": processes, "workdir": str(workdir) if built else None}


@pytest.fixture(scope="module")
def trls_own_figures():
    """{script: TRL's own figures}, all computed in one run of the TRL venv."""
    import subprocess

    from trl_venv import trl_python_or_skip

    python = trl_python_or_skip()
    rels = TRL_PLANS + TRL_REFUSED
    done = subprocess.run([str(python), "-c", TRL_STEPS], input=json.dumps([_trl_job(rel) for rel in rels]),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(zip(rels, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))


@pytest.mark.parametrize("rel", TRL_REFUSED)
def test_trl_refusals_are_trls_own(rel, trls_own_figures):
    """rlexp refuses a TRL command at plan where TRL (or the vLLM engine it generates with) refuses it:
    TRL's config, built from the command on the processes it starts, refuses it in its own words
    (the same numbers), or the config it builds holds ``top_p=None`` for vLLM's SamplingParams, which
    refuses None (tests/test_vllm_real.py::test_vllm_sampling_params_refuse_top_p_none)."""
    trl, refusal = trls_own_figures[rel], EXPECTED[rel][1]
    error = trl.get("error", "")
    if "top_p" in refusal:
        assert not error and trl["top_p"] is None and trl["use_vllm"] is True, trl
        return
    if "at least 2 generations" in error:
        assert "recipe.num_generations: 1:" in refusal and "You provided 1" in error, error
        return
    assert re.search(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)", error), error
    found = re.search(r"generation batch .* = (\d+) completions is not a multiple of num_generations (\d+)", refusal)
    assert f"generation_batch_size ({found.group(1)}) must be divisible by num_generations ({found.group(2)})" in error


@pytest.mark.parametrize("rel", TRL_PLANS)
def test_trl_figures_equal_trls_own(rel, outcome, trls_own_figures):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    verb, err, plan, spec = outcome(rel)
    assert verb == PLANS, err
    trl = trls_own_figures[rel]
    total = trl["max_steps"]
    # the processes the command starts, and the prompts the example's own code builds (when it does)
    assert plan["trl"]["processes"] == trl["processes"]
    assert spec["datasets"]["pool"]["size"] == trl["rows"] or "pool_size" in FACTS[rel]
    assert plan["steps"]["optimizer_steps_total"] == plan["steps"]["global_steps_total"] == total
    assert plan["steps"]["warmup_steps"] == trl["warmup"]
    if trl["config"] == "AsyncGRPOConfig":
        # transformers' loop over a loader without a length: one "epoch" of max_steps optimizer steps of GA
        # micro-batches; what a step trains (prompts, passes over them) the plan states as not known
        assert plan["trl"]["trainer"] == "AsyncGRPOTrainer" and plan["trl"]["max_steps_stated"] == total > 0
        assert plan["steps"]["global_steps_per_episode"] == trl["update_steps_per_epoch"] == total
        assert plan["trl"]["gradient_accumulation_steps"] == trl["gradient_accumulation_steps"] == (
            trl["micro_batches_per_epoch"] // total)
        assert plan["trl"]["num_generations"] == trl["num_generations"]
        assert plan["trl"]["prompts_per_optimizer_step"] is None and plan["trl"]["not_known_before_the_run"]
        assert plan["trl"]["lr_scheduler_type"] == trl["scheduler"] and trl["eval_strategy"] == "no"
        assert trl["save_strategy"] == "no" and plan["save_global_steps"] == []  # both examples save nothing
    else:
        _trl_batches_equal(plan, trl)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=trl["lr"])
    scheduler = transformers.get_scheduler(trl["scheduler"], optimizer, num_warmup_steps=trl["warmup"],
                                           num_training_steps=total, scheduler_specific_kwargs=trl["kwargs"])
    # the LR step k applies, read before its scheduler.step(): LambdaLR's own base_lr × lr_lambda(k - 1)
    # (what optimizer.param_groups holds after k - 1 steps, without stepping through every one)
    lr_lambda, base_lr = scheduler.lr_lambdas[0], scheduler.base_lrs[0]
    for row in plan["lr"]:
        assert row["lr_first"] == pytest.approx(base_lr * lr_lambda(row["global_step"] - 1), rel=1e-12, abs=1e-18)


def _trl_batches_equal(plan: dict, trl: dict) -> None:
    # the generation batches as the trainer forms them, and the class that runs (RLOOConfig for `trl rloo`)
    assert plan["trl"]["trainer"] == trl["config"].replace("Config", "Trainer")
    assert (plan["trl"]["num_generations"], plan["trl"]["prompts_per_generation_batch"],
            plan["trl"]["steps_per_generation"], plan["trl"]["batches_per_epoch"]) == (
        trl["num_generations"], trl["prompts_per_generation_batch"], trl["steps_per_generation"],
        trl["batches_per_epoch"])


def test_the_docs_table_states_each_scripts_outcome():
    """docs/import.md's corpus table has one row per script, and each row says what EXPECTED pins."""
    rows = dict(re.findall(r"^\| `([^`]+\.sh)` \| [^|]* \| (.*) \|$", (REPO / "docs" / "import.md").read_text(), re.M))
    assert set(rows) == set(EXPECTED)
    for rel, expected in EXPECTED.items():
        if expected == PLANS:
            assert rows[rel].startswith("imports and plans"), rel
        else:
            assert rows[rel].startswith(f"refused at {expected[0]}"), rel
