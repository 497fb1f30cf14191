"""The preflight catalogue: one test per incident told in docs/plan.md, "Why each check exists" (and its fixed twin)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.protocol.checks import has_errors, preflight
from rlexp.protocol.verdict import ERROR, WARNING
from rlexp.spec import load_attempt
from rlexp.trainers.openrlhf.checks import gpu_layout

# The A29B recipe (experiments/seed-a30/a29b): the fixed recipe every incident below is a variation of.
A29B_RECIPE = {
    "advantage_estimator": "dr_grpo", "eps_clip": 0.1, "init_kl_coef": 0.001, "n_samples_per_prompt": 8,
    "rollout_batch_size": 16, "train_batch_size": 16, "micro_train_batch_size": 1, "num_episodes": 1,
    "max_epochs": 1, "actor_learning_rate": 5e-7, "lr_warmup_ratio": 0.05, "lora_rank": 32, "lora_alpha": 64,
    "max_norm": 1.0, "prompt_max_len": 1024, "generate_max_len": 4096, "max_len": 5120, "eval_steps": 10,
    "save_steps": 10, "seed": 42, "actor_num_nodes": 1, "actor_num_gpus_per_node": 4, "ref_num_nodes": 1,
    "ref_num_gpus_per_node": 4, "colocate_actor_ref": True, "vllm_num_engines": 2,
    "vllm_tensor_parallel_size": 2, "save_hf_ckpt": True, "disable_ds_ckpt": True,
}  # fmt: skip


def spec(pool: int = 3200, recipe: dict | None = None, **sections) -> dict:
    out = {
        "trainer": {"name": "openrlhf", "version": "0.9.3", "gpus": 8},
        "intent": {"global_steps": 200},
        "recipe": {**A29B_RECIPE, **(recipe or {})},
        "datasets": {"pool": {"size": pool}, "ood_primary": {"size": 1000}, "ood_monitor": {"size": 202}},
        "eval": {"engine": "vllm", "max_lora_rank": 32},
        "checkpoints": {"mid": 100},
    }
    out.update(sections)
    return out


def write(exp: Path, attempt_id: str, content: dict) -> Path:
    path = exp / attempt_id / "attempt.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


def checks_of(tmp_path: Path, content: dict, attempt_id: str = "a1") -> dict[str, object]:
    found = preflight(load_attempt(write(tmp_path / "exp", attempt_id, content)))
    return {c.name: c for c in found}


def test_fixed_recipe_has_no_errors(tmp_path):
    found = checks_of(tmp_path, spec())
    assert not has_errors(found.values()), [c.rule for c in found.values()]
    assert set(found) == {"data.overlap_unchecked", "power.underpowered"}  # data files absent; MDE 3.07 pp


# ----------------------------------------------------------------------------- LR (A26, A27)


def test_a26_lr_never_leaves_warmup(tmp_path):
    found = checks_of(tmp_path, spec(pool=50_000, recipe={"num_episodes": 20}, intent={"global_steps": 40}))
    check = found["lr.low_early"]
    assert check.severity == ERROR
    assert "0.6% of peak by global step 20" in check.rule and "25,000 optimizer steps" in check.rule
    assert check.ref == "docs/plan.md#warm-up-and-early-lr"
    assert found["lr.warmup_share"].severity == ERROR


def test_a27_warmup_longer_than_the_run(tmp_path):
    found = checks_of(tmp_path, spec(pool=50_000, recipe={"num_episodes": 5}, intent={"global_steps": 46}))
    assert "6,250 optimizer steps" in found["lr.warmup_share"].rule
    assert "781.2 global steps" in found["lr.warmup_share"].rule


def test_warmup_share_ignores_a_rounded_up_single_step(tmp_path):
    # 64 prompts × 8 // 64 = 8 optimizer steps; ceil(8 × 0.05) = 1 step = half a global step of 4
    tiny = spec(pool=64, recipe={"train_batch_size": 64, "micro_train_batch_size": 16, "eval_steps": 2,
                                 "save_steps": 2}, intent={"global_steps": 4}, checkpoints={"mid": 2})  # fmt: skip
    assert "lr.warmup_share" not in checks_of(tmp_path, tiny)
    long = spec(recipe={"lr_warmup_ratio": 0.2})  # 320 optimizer steps = 40 global steps of 200
    assert "40.0 global steps" in checks_of(tmp_path / "b", long)["lr.warmup_share"].rule


def test_a28_is_not_flagged_for_low_lr(tmp_path):
    # A28 decays to 21.5% by step 20, but it did reach its peak: the rule is about warm-up
    found = checks_of(tmp_path, spec(pool=400, intent={"global_steps": 25}, checkpoints={"mid": 10},
                                     recipe={"eval_steps": 5, "save_steps": 5}))  # fmt: skip
    assert "lr.low_early" not in found and "lr.warmup_share" not in found


# 16,000 prompts / rollout 16 = 1,000 global steps of 8 optimizer steps (8,000: OpenRLHF's max_steps)
LONG_RUN = {"pool": 16_000, "intent": {"global_steps": 1000}, "checkpoints": {"mid": 500}}


def test_a_ten_percent_warmup_on_a_long_run_is_not_low_early(tmp_path):
    """Issue #30: a 10 % warm-up of 1,000 global steps is at 20 % of peak at step 20 (OpenRLHF's
    linear warm-up: 20 × 8 / 800 optimizer steps), under the old rule's 30 %, and at its peak by step
    100: a sound recipe, no longer an error."""
    found = checks_of(tmp_path, spec(pool=LONG_RUN["pool"], recipe={"lr_warmup_ratio": 0.10},
                                     intent=LONG_RUN["intent"], checkpoints=LONG_RUN["checkpoints"]))
    assert 20 * 8 / (0.10 * 8000) < 0.30  # what the old rule judged at step 20
    assert "lr.low_early" not in found and "lr.warmup_share" not in found
    assert not has_errors(found.values()), [c.rule for c in found.values() if c.severity == ERROR]


@pytest.mark.parametrize(("ratio", "percent"), [(0.5, "20.0%"), (1.0, "10.0%")])
def test_an_lr_that_stays_in_warmup_on_a_long_run_is_still_caught(tmp_path, ratio, percent):
    """Half the run (or all of it) in warm-up: judged at step 100 (the end of the 10 % a warm-up may
    take), where the LR is 100 × 8 / (ratio × 8,000) of peak."""
    found = checks_of(tmp_path, spec(pool=LONG_RUN["pool"], recipe={"lr_warmup_ratio": ratio},
                                     intent=LONG_RUN["intent"], checkpoints=LONG_RUN["checkpoints"]))
    assert found["lr.low_early"].severity == ERROR
    assert f"only {percent} of peak by global step 100" in found["lr.low_early"].rule
    assert found["lr.warmup_share"].severity == ERROR


def test_min_lr_ratio_has_no_flag_before_0_10_2(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"min_lr_ratio": 0.2}))
    assert found["lr.min_lr_ratio_fixed"].severity == ERROR
    newer = spec(recipe={"min_lr_ratio": 0.2}, trainer={"name": "openrlhf", "version": "0.11.0", "gpus": 8})
    assert "lr.min_lr_ratio_fixed" not in checks_of(tmp_path / "b", newer)


# ----------------------------------------------------------------------------- step counts: A28


def test_a28_intended_200_global_steps_got_25(tmp_path):
    found = checks_of(tmp_path, spec(pool=400))
    msg = found["steps.intent"].rule
    assert found["steps.intent"].severity == ERROR
    assert "25 global steps (200 optimizer steps" in msg
    assert "a pool of 3,200 prompts with num_episodes 1" in msg and "num_episodes 8 with this pool" in msg


def test_pool_smaller_than_one_rollout_batch(tmp_path):
    assert checks_of(tmp_path, spec(pool=8, intent={}))["steps.empty"].severity == ERROR


def test_partial_rollout_batch_says_which_version_drops_it(tmp_path):
    old = checks_of(tmp_path, spec(pool=3208))["steps.partial_batch"]
    assert old.severity == WARNING and "drops it" in old.rule and "3,200 of 3,208" in old.rule
    new = spec(pool=3208, trainer={"name": "openrlhf", "version": "0.11.0", "gpus": 8})
    found = checks_of(tmp_path / "b", new)
    assert "trains it as a short last global step" in found["steps.partial_batch"].rule
    assert "201 global steps" in found["steps.intent"].rule  # ceil: 201, not the intended 200


def test_run_longer_than_the_scheduler_horizon(tmp_path):
    # v0.11 trains the partial batch: 3 prompts × 8 / 16 = 1.5 optimizer steps per episode, floored to 1
    new = spec(pool=3, recipe={"rollout_batch_size": 2, "num_episodes": 2}, intent={},
               trainer={"name": "openrlhf", "version": "0.11.0", "gpus": 8})  # fmt: skip
    found = checks_of(tmp_path, new)
    assert "runs 3 optimizer steps but max_steps" in found["steps.beyond_schedule"].rule
    assert "is 2" in found["steps.beyond_schedule"].rule


# ----------------------------------------------------------------------------- batches


def test_train_batch_not_multiple_of_micro_times_dp(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"micro_train_batch_size": 3}))
    assert (
        "micro_train_batch_size 3 × 4 data-parallel actor GPUs = 12" in found["batch.train_divisible"].rule
    )


def test_rollout_samples_not_multiple_of_train_batch(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"rollout_batch_size": 15}, intent={}))
    assert "7.5 optimizer steps per global step" in found["batch.rollout_divisible"].rule


# ----------------------------------------------------------------------------- eval / save schedule


def test_a28_no_eval_and_no_save_at_the_final_step(tmp_path):
    found = checks_of(tmp_path, spec(pool=400, intent={}, checkpoints={"mid": 10}))
    assert "final global step 25" in found["schedule.final_eval"].rule
    assert "fires at 10, 20" in found["schedule.final_eval"].rule
    assert found["schedule.final_save"].severity == ERROR


def test_mid_checkpoint_rules(tmp_path):
    assert checks_of(tmp_path / "a", spec(checkpoints={}))["schedule.mid_missing"].severity == WARNING
    assert (
        checks_of(tmp_path / "b", spec(checkpoints={"mid": 300}))["schedule.mid_beyond_run"].severity == ERROR
    )
    found = checks_of(tmp_path / "c", spec(checkpoints={"mid": 105}))
    assert found["schedule.mid_save"].severity == ERROR and found["schedule.mid_eval"].severity == WARNING
    found = checks_of(tmp_path / "d", spec(checkpoints={"mid": 100, "extra": [150, 155]}))
    assert "155" in found["schedule.extra_save"].rule


# ----------------------------------------------------------------------------- one variable: A27


def test_a27_changed_two_training_variables(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a26", spec(pool=50_000, recipe={"eps_clip": 0.2, "num_episodes": 20}))
    child = {"parent": "a26", "change": {"eps_clip": 0.1},
             "recipe": {"eps_clip": 0.1, "num_episodes": 5, "eval_steps": 5, "save_steps": 5},
             "datasets": {"ood_monitor": {"size": 202, "path": "data/probe_set_200_ood.jsonl"}}}  # fmt: skip
    found = {c.name: c for c in preflight(load_attempt(write(exp, "a27", child)))}
    msg = found["diff.training_variables"].rule
    assert "2 training variables" in msg and "eps_clip 0.2 → 0.1" in msg and "num_episodes 20 → 5" in msg
    assert "eval_steps" not in msg.split("(")[0] and "ood_monitor" not in msg  # instrumentation is exempt


def test_a30_single_declared_change_passes(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a29b", spec())
    child = {
        "parent": "a29b",
        "change": {"micro_train_batch_size": 2},
        "recipe": {"micro_train_batch_size": 2},
    }
    found = {c.name for c in preflight(load_attempt(write(exp, "a30", child)))}
    assert not any(i.startswith("diff.") for i in found)


def test_change_must_match_the_recipe(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "p", spec())
    wrong = {
        c.name: c
        for c in preflight(
            load_attempt(
                write(
                    exp,
                    "c1",
                    {
                        "parent": "p",
                        "change": {"micro_train_batch_size": 4},
                        "recipe": {"micro_train_batch_size": 2},
                    },
                )
            )
        )
    }
    assert "says micro_train_batch_size: 4 but the resolved value is 2" in wrong["diff.change_value"].rule
    noop = {
        c.name for c in preflight(load_attempt(write(exp, "c2", {"parent": "p", "change": {"eps_clip": 0.1}})))
    }
    assert "diff.change_noop" in noop
    undeclared = {
        c.name for c in preflight(load_attempt(write(exp, "c3", {"parent": "p", "recipe": {"seed": 7}})))
    }
    assert "diff.undeclared" in undeclared
    pool = {c.name for c in preflight(load_attempt(write(exp, "c4", {
        "parent": "p", "change": {"datasets.pool.size": 6400}, "datasets": {"pool": {"size": 6400}},
        "intent": {"global_steps": 400}})))}  # fmt: skip
    assert not any(i.startswith("diff.") for i in pool)  # the pool is one training variable


# ----------------------------------------------------------------------------- GPU layout: A26


def test_a26_reference_model_without_colocation_does_not_fit(tmp_path):
    a26 = {"colocate_actor_ref": False}
    a26_recipe = {**A29B_RECIPE, **a26}
    del a26_recipe["ref_num_gpus_per_node"]  # default 8
    content = spec()
    content["recipe"] = a26_recipe
    found = checks_of(tmp_path, content)
    msg = found["gpu.layout"].rule
    assert "needs 16 GPUs" in msg and "reference 8" in msg and "trainer.gpus is 8" in msg
    assert "colocate_actor_ref" in msg
    layout = gpu_layout(load_attempt(tmp_path / "exp" / "a1").recipe)
    assert (layout.vllm, layout.actor, layout.reference, layout.total) == (4, 4, 8, 16)


def test_colocated_reference_needs_the_actor_layout(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"ref_num_gpus_per_node": 8}))
    assert found["gpu.colocate_layout"].severity == ERROR


# Issue #30: 2 vLLM GPUs + 4 actor GPUs (reference co-located) = 6, and the critic gae creates
GAE_LAYOUT = {"vllm_num_engines": 2, "vllm_tensor_parallel_size": 1, "critic_num_gpus_per_node": 2,
              "remote_rm_url": "/x/reward_func.py", "n_samples_per_prompt": 8}


def test_gae_without_critic_pretrain_counts_its_critic(tmp_path):
    found = checks_of(tmp_path, spec(recipe={**GAE_LAYOUT, "advantage_estimator": "gae"},
                                     trainer={"name": "openrlhf", "version": "0.9.3", "gpus": 6}))
    msg = found["gpu.layout"].rule
    assert "needs 8 GPUs" in msg and "critic 2" in msg and "trainer.gpus is 6" in msg
    assert "gae creates a critic on 2 GPUs" in msg
    layout = gpu_layout(load_attempt(tmp_path / "exp" / "a1").recipe)
    assert (layout.vllm, layout.actor, layout.reference, layout.critic, layout.total) == (2, 4, 0, 2, 8)


def test_a_group_estimator_has_no_critic_even_with_critic_pretrain(tmp_path):
    """OpenRLHF sets critic_pretrain to None for every estimator but gae: 6 GPUs are enough."""
    found = checks_of(tmp_path, spec(recipe={**GAE_LAYOUT, "critic_pretrain": "some/critic"},
                                     trainer={"name": "openrlhf", "version": "0.9.3", "gpus": 6}))
    assert "gpu.layout" not in found
    assert gpu_layout(load_attempt(tmp_path / "exp" / "a1").recipe).total == 6


def test_a_critic_under_colocate_all_models_takes_no_gpu_of_its_own(tmp_path):
    recipe = {**GAE_LAYOUT, "advantage_estimator": "gae", "colocate_all_models": True, "vllm_num_engines": 4}
    layout = gpu_layout(load_attempt(write(tmp_path / "exp", "a1", spec(recipe=recipe))).recipe)
    assert (layout.vllm, layout.critic, layout.total) == (0, 0, 4)


# ----------------------------------------------------------------------------- one sample per prompt


@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "reinforce_baseline"])
def test_one_sample_per_prompt_is_flagged_outside_environment_tasks(tmp_path, estimator):
    found = checks_of(tmp_path, spec(recipe={"advantage_estimator": estimator, "n_samples_per_prompt": 1,
                                             "train_batch_size": 16}))
    check = found["samples.group_of_one"]
    assert check.severity == ERROR and "n_samples_per_prompt is 1" in check.rule
    assert f"OpenRLHF 0.9.3 refuses it at start (train_ppo_ray.py: 'AssertionError: {estimator} requires" in check.rule


def test_dr_grpo_with_one_sample_says_what_each_openrlhf_release_does(tmp_path):
    old = checks_of(tmp_path, spec(recipe={"n_samples_per_prompt": 1}))["samples.group_of_one"]
    assert "runs it" in old.rule and "every advantage is 0" in old.rule
    new = spec(recipe={"n_samples_per_prompt": 1}, trainer={"name": "openrlhf", "version": "0.11.0", "gpus": 8})
    assert "refuses it at start" in checks_of(tmp_path / "b", new)["samples.group_of_one"].rule


def test_several_samples_or_no_group_is_not_flagged(tmp_path):
    assert "samples.group_of_one" not in checks_of(tmp_path, spec())  # dr_grpo, 8 samples
    reinforce = spec(recipe={"advantage_estimator": "reinforce", "n_samples_per_prompt": 1})
    assert "samples.group_of_one" not in checks_of(tmp_path / "b", reinforce)


def test_no_reference_model_without_kl(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"init_kl_coef": 0.0, "colocate_actor_ref": False}))
    assert "gpu.layout" not in found


# ----------------------------------------------------------------------------- lengths, suffix, LoRA


def test_max_len_shorter_than_prompt_plus_generation(tmp_path):
    found = checks_of(tmp_path, spec(recipe={"max_len": 4096}))
    assert (
        "max_len 4096 < prompt_max_len 1024 + generate_max_len 4096 = 5120" in found["length.max_len"].rule
    )


def test_boxed_suffix_on_the_pool_only(tmp_path):
    boxed = " Put your final answer in \\boxed{}."
    content = spec()
    content["datasets"]["pool"]["prompt_suffix"] = boxed
    found = checks_of(tmp_path, content)
    assert found["suffix.mismatch"].severity == ERROR and found["suffix.mismatch"].ref == "docs/plan.md#prompt-suffix-parity"
    content["eval"]["prompt_suffix"] = boxed
    assert "suffix.mismatch" not in checks_of(tmp_path / "b", content)


def test_vllm_default_lora_rank_refuses_rank_32(tmp_path):
    found = checks_of(tmp_path, spec(eval={"engine": "vllm"}))
    assert "lora_rank 32 > eval.max_lora_rank 16" in found["eval.lora_rank"].rule
    assert "eval.lora_rank" not in checks_of(tmp_path / "b", spec(eval={"engine": "local"}))


# ----------------------------------------------------------------------------- datasets


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_pool_overlapping_an_eval_set_by_hash(tmp_path):
    exp = tmp_path / "exp"
    shared = "What is 2+2?"
    write_jsonl(exp / "data" / "pool.jsonl", [{"prompt": shared}, {"prompt": "1+1"}, {"prompt": "3+3"},
                                              {"prompt": "9+9"}])  # fmt: skip
    write_jsonl(exp / "data" / "ood.jsonl", [
        {"problem_hash": hashlib.sha256(shared.encode()).hexdigest(), "prompt": f" {shared}\n"},  # stated, true
        {"prompt": "  1+1  "},  # sha256(prompt.strip())
        {"prompt": "5+5"},
    ])  # fmt: skip
    content = spec(pool=3, intent={})
    content["datasets"] = {"pool": {"path": "data/pool.jsonl", "size": 3},
                           "ood_primary": {"path": "data/ood.jsonl"}}  # fmt: skip
    found = {c.name: c for c in preflight(load_attempt(write(exp, "a1", content)))}
    assert "2 of 3 ood_primary problems are in the training pool" in found["data.overlap"].rule
    assert "4 records, spec says 3" in found["data.size"].rule


def test_disjoint_sets_pass_and_bad_jsonl_is_input_error(tmp_path):
    exp = tmp_path / "exp"
    write_jsonl(exp / "data" / "pool.jsonl", [{"prompt": "1+1"}])
    write_jsonl(exp / "data" / "ood.jsonl", [{"prompt": "2+2"}])
    content = spec(pool=1, intent={})
    content["datasets"] = {"pool": {"path": "data/pool.jsonl"}, "ood_primary": {"path": "data/ood.jsonl"}}
    found = {c.name for c in preflight(load_attempt(write(exp, "a1", content)))}
    assert "data.overlap" not in found and "data.overlap_unchecked" not in found
    (exp / "data" / "ood.jsonl").write_text('{"prompt": "2+2"}\n{"prompt": 7}\n')
    with pytest.raises(InputError, match="line 2"):
        preflight(load_attempt(exp / "a1"))


# ----------------------------------------------------------------------------- disk, power


def test_checkpoint_disk_budget(tmp_path):
    found = checks_of(tmp_path, spec(budget={"free_disk_gb": 400, "checkpoint_size_gb": 42}))
    assert "20 HF checkpoints × 42 GB = 840.0 GB > free disk 400.0 GB" in found["disk.budget"].rule
    assert "disk.budget" not in checks_of(
        tmp_path / "b", spec(budget={"free_disk_gb": 1000, "checkpoint_size_gb": 0.2})
    )
    no_hf = checks_of(tmp_path / "c", spec(recipe={"save_hf_ckpt": False}))
    assert no_hf["disk.hf_ckpt"].severity == WARNING


def test_ood_202_as_primary_is_underpowered(tmp_path):
    content = spec()
    content["datasets"]["ood_primary"] = {"size": 202}
    check = checks_of(tmp_path, content)["power.underpowered"]
    assert (
        check.severity == WARNING
        and "MDE 6.83 pp" in check.rule
        and "power to see +3.0 pp is 23%" in check.rule
    )  # statsmodels: 0.234
    content["datasets"]["ood_primary"] = {"size": 2000}
    assert "power.underpowered" not in checks_of(tmp_path / "b", content)


def test_errors_sort_before_warnings(tmp_path):
    found = preflight(load_attempt(write(tmp_path / "exp", "a1", spec(pool=400))))
    severities = [c.severity for c in found]
    assert severities == sorted(severities, key=lambda s: s != ERROR) and severities[0] == ERROR


def test_a_local_base_model_that_is_no_directory_is_a_warning(tmp_path):
    """The local trainer loads its base model from disk: a pretrain naming no directory was accepted without a
    word at plan and failed at launch."""
    local = spec(trainer={"name": "local", "version": "0.11.0", "gpus": 0},
                 recipe={"pretrain": "models/not-built", "lora_rank": 8, "lora_alpha": 16})
    found = checks_of(tmp_path, local)
    assert found["model.missing"].severity == WARNING and "models/not-built" in found["model.missing"].rule
    (tmp_path / "exp" / "models" / "not-built").mkdir(parents=True)
    assert "model.missing" not in checks_of(tmp_path, local)
    # a cluster trainer resolves a hub id itself: no warning
    assert "model.missing" not in checks_of(tmp_path, spec(recipe={"pretrain": "Qwen/Qwen2.5-7B"}))


def test_a_local_base_model_file_must_be_gguf(tmp_path):
    """A .gguf file is a base (converted once at first load); any other file is a warning at plan."""
    local = spec(trainer={"name": "local", "version": "0.11.0", "gpus": 0},
                 recipe={"pretrain": "models/model.bin", "lora_rank": 8, "lora_alpha": 16})
    (tmp_path / "exp" / "models").mkdir(parents=True)
    (tmp_path / "exp" / "models" / "model.bin").write_bytes(b"\0" * 8)
    found = checks_of(tmp_path, local)
    assert found["model.not_a_directory"].severity == WARNING and "model.bin" in found["model.not_a_directory"].rule
    assert "model.missing" not in found
    (tmp_path / "exp" / "models" / "model.gguf").write_bytes(b"GGUF")
    gguf = spec(trainer={"name": "local", "version": "0.11.0", "gpus": 0},
                recipe={"pretrain": "models/model.gguf", "lora_rank": 8, "lora_alpha": 16})
    found = checks_of(tmp_path, gguf)
    assert "model.not_a_directory" not in found and "model.missing" not in found
