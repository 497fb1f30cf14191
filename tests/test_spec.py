"""The attempt spec: the example experiment, inheritance, and every bad input named by file and key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.spec import (
    INFRASTRUCTURE,
    INSTRUMENTATION,
    RECIPE_KEYS,
    TRAINING,
    diff_against_parent,
    load_attempt,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "experiments" / "seed-a30"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    dest = tmp_path / "seed-a30"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("plan.json"))
    return dest


def write(exp: Path, attempt_id: str, spec: dict | str) -> Path:
    path = exp / attempt_id / "attempt.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
    return path


ROOT = {
    "trainer": {"name": "openrlhf", "version": "0.9.3", "gpus": 8},
    "recipe": {"rollout_batch_size": 16, "train_batch_size": 16, "n_samples_per_prompt": 8},
    "datasets": {"pool": {"size": 3200}},
}


# ----------------------------------------------------------------------------- the example


def test_example_a30_inherits_a29b_and_overrides_one_key(example):
    att = load_attempt(example / "a30")
    assert att.id == "a30" and att.parent_id == "a29b" and att.parent is not None
    assert att.recipe["micro_train_batch_size"] == 2 and att.parent.recipe["micro_train_batch_size"] == 1
    assert att.recipe["eps_clip"] == 0.1 and att.recipe["advantage_estimator"] == "dr_grpo"
    assert att.recipe["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert att.recipe["l2"] == 0.0  # a default applied (OpenRLHF v0.9.3 argparse)
    assert "l2" not in att.recipe_stated
    assert att.trainer.name == "openrlhf" and att.trainer.version == "0.9.3" and att.trainer.gpus == 8
    assert att.change == {"micro_train_batch_size": 2} and att.intent == {"global_steps": 200}
    assert att.checkpoints_mid == 100
    assert {r: d.size for r, d in att.datasets.items()} == {
        "pool": 3200, "ood_monitor": 202, "ood_primary": 1000, "id": 200, "sanity": 18,
    }  # fmt: skip
    pool = att.datasets["pool"]
    assert pool.path == (example / "data" / "sft_rl_pool_3200.jsonl").resolve() and not pool.exists
    assert att.eval.engine == "vllm" and att.eval.max_lora_rank == 32 and att.eval.temperature == 0.0
    assert att.attempt_dir == (example / "a30").resolve() and att.experiment_dir == example.resolve()
    assert att.spec_path.name == "attempt.yaml"
    assert load_attempt(example / "a30" / "attempt.yaml").id == "a30"  # dir or file


def test_example_diff_is_exactly_the_declared_change(example):
    diffs = diff_against_parent(load_attempt(example / "a30"))
    assert [(d.key, d.parent, d.value, d.kind) for d in diffs] == [("micro_train_batch_size", 1, 2, TRAINING)]


def test_key_kinds_follow_the_seed_a27_table():
    assert RECIPE_KEYS["eps_clip"].kind == TRAINING
    assert RECIPE_KEYS["num_episodes"].kind == TRAINING  # the seed called it instrumentation; it is not
    assert (
        RECIPE_KEYS["eval_steps"].kind == INSTRUMENTATION
        and RECIPE_KEYS["save_steps"].kind == INSTRUMENTATION
    )
    assert RECIPE_KEYS["vllm_num_engines"].kind == INFRASTRUCTURE


def test_issue_keys_all_accepted(tmp_path):
    # The keys the issue says scripts and docs rely on, exactly as written there.
    text = """
id: a30
trainer: {name: openrlhf, version: "0.9.3", gpus: 8}
recipe: {advantage_estimator: dr_grpo, eps_clip: 0.1, n_samples_per_prompt: 8, rollout_batch_size: 16,
         train_batch_size: 16, micro_train_batch_size: 2, num_episodes: 1, max_epochs: 1,
         actor_learning_rate: 5.0e-7, lr_warmup_ratio: 0.05, eval_steps: 10, save_steps: 10, seed: 42,
         actor_num_gpus_per_node: 4, vllm_num_engines: 2, vllm_tensor_parallel_size: 2,
         colocate_actor_ref: true, ref_num_nodes: 1, ref_num_gpus_per_node: 4, init_kl_coef: 0.001,
         use_kl_loss: true, kl_estimator: k3, lora_rank: 32, lora_alpha: 64, target_modules: all-linear,
         lora_dropout: 0.0, max_norm: 1.0, generate_max_len: 4096, prompt_max_len: 1024, max_len: 5120,
         temperature: 1.0, top_p: 1.0, zero_stage: 3, bf16: true, gradient_checkpointing: true,
         actor_num_nodes: 1, colocate_all_models: false, vllm_gpu_memory_utilization: 0.9,
         input_key: prompt, label_key: answer, apply_chat_template: true, max_ckpt_num: 2,
         save_hf_ckpt: true, disable_ds_ckpt: true, min_lr_ratio: 0.1, max_samples: 100000,
         micro_rollout_batch_size: 8, pretrain: Qwen/Qwen2.5-14B-Instruct}
datasets: {pool: {path: data/pool_3200.jsonl, size: 3200}, ood_monitor: {size: 202},
           ood_primary: {path: data/x.jsonl, size: 1000}, id: {size: 200}, sanity: {size: 18}}
checkpoints: {mid: 100}
"""
    att = load_attempt(write(tmp_path / "exp", "a30", text))
    assert att.recipe["kl_estimator"] == "k3" and att.recipe["target_modules"] == "all-linear"


def test_pyyaml_exponent_without_dot_is_still_a_number(tmp_path):
    # PyYAML reads 5e-7 (no dot) as the string "5e-7"; the schema coerces it
    att = load_attempt(write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"actor_learning_rate": "5e-7"}}))
    assert att.recipe["actor_learning_rate"] == 5e-7


def test_existing_file_line_count_wins(tmp_path):
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    (exp / "data" / "pool.jsonl").write_text('{"prompt": "1+1"}\n\n{"prompt": "2+2"}\n')
    att = load_attempt(
        write(exp, "a1", {**ROOT, "datasets": {"pool": {"path": "data/pool.jsonl", "size": 5}}})
    )
    assert (
        att.datasets["pool"].size == 2
        and att.datasets["pool"].stated_size == 5
        and att.datasets["pool"].exists
    )


def test_suffix_resolution(tmp_path):
    spec = {**ROOT, "eval": {"prompt_suffix": " S"},
            "datasets": {"pool": {"size": 10, "prompt_suffix": " P"}, "ood_primary": {"size": 10}}}  # fmt: skip
    att = load_attempt(write(tmp_path / "exp", "a1", spec))
    assert att.datasets["pool"].prompt_suffix == " P" and att.datasets["ood_primary"].prompt_suffix == " S"


def test_local_trainer_defaults_to_v011_semantics(tmp_path):
    att = load_attempt(write(tmp_path / "exp", "a1", {**ROOT, "trainer": {"name": "local"}}))
    assert att.trainer.version == "0.11.0"


def test_three_level_chain_merges_nested_sections(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a1", {**ROOT, "eval": {"engine": "vllm", "max_tokens": 100}})
    write(exp, "a2", {"parent": "a1", "eval": {"max_tokens": 200}, "recipe": {"seed": 1}})
    att = load_attempt(write(exp, "a3", {"parent": "a2", "recipe": {"eps_clip": 0.1}}))
    assert [a.id for a in att.chain()] == ["a3", "a2", "a1"]
    assert att.eval.engine == "vllm" and att.eval.max_tokens == 200
    assert (
        att.recipe["seed"] == 1 and att.recipe["eps_clip"] == 0.1 and att.recipe["rollout_batch_size"] == 16
    )


# ----------------------------------------------------------------------------- bad input


def expect_error(path: Path, field: str | None, *needles: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_attempt(path)
    err = info.value
    assert err.file is not None and Path(err.file).name == path.name
    assert err.field == field, err.one_line()
    for needle in needles:
        assert needle in err.one_line(), err.one_line()
    assert "\n" not in err.one_line()
    return err


def test_malformed_yaml(tmp_path):
    path = write(tmp_path / "exp", "a1", "id: a1\nrecipe: {eps_clip: 0.1\n")
    err = expect_error(path, err_field(path), "malformed YAML")
    assert err.field.startswith("line ")


def err_field(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_attempt(path)
    return info.value.field


def test_unknown_key_with_suggestion(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"eps_clipp": 0.1}})
    expect_error(path, "recipe.eps_clipp", "unknown key", "did you mean 'eps_clip'")


def test_unknown_top_level_key_and_dataset_role(tmp_path):
    expect_error(write(tmp_path / "e1", "a1", {**ROOT, "recipie": {}}), "recipie", "did you mean 'recipe'")
    expect_error(write(tmp_path / "e2", "a1", {**ROOT, "datasets": {"ood_primry": {"size": 1}}}),
                 "datasets.ood_primry", "did you mean 'ood_primary'")  # fmt: skip


def test_dashed_flag_name_is_unknown(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"micro-train-batch-size": 2}})
    expect_error(path, "recipe.micro-train-batch-size", "did you mean 'micro_train_batch_size'")


def test_wrong_type(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"micro_train_batch_size": "two"}})
    expect_error(path, "recipe.micro_train_batch_size", "must be an integer")


def test_negative_batch_size(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"micro_train_batch_size": -2}})
    err = expect_error(path, "recipe.micro_train_batch_size", "must be >= 1")
    assert err.one_line().endswith("recipe.micro_train_batch_size: must be >= 1 (got -2)")


def test_unknown_advantage_estimator(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "recipe": {"advantage_estimator": "grpo"}})
    expect_error(path, "recipe.advantage_estimator", "group_norm", "dr_grpo")


def test_unquoted_version(tmp_path):
    path = write(tmp_path / "exp", "a1", {**ROOT, "trainer": {"name": "openrlhf", "version": 0.10}})
    expect_error(path, "trainer.version", "must be a string", "quote")


def test_missing_parent(tmp_path):
    path = write(tmp_path / "exp", "a2", {"parent": "a1", "recipe": {"seed": 1}})
    expect_error(path, "parent", "'a1' not found")


def test_cyclic_parent_chain(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a1", {**ROOT, "parent": "a2"})
    path = write(exp, "a2", {"parent": "a1"})
    expect_error(path, "parent", "cyclic parent chain", "a1", "a2")
    expect_error(write(exp, "a3", {**ROOT, "parent": "a3"}), "parent", "cyclic")


def test_id_must_match_directory_and_parent_must_be_an_id(tmp_path):
    expect_error(write(tmp_path / "e1", "a1", {**ROOT, "id": "a2"}), "id", "does not match")
    expect_error(write(tmp_path / "e2", "a1", {**ROOT, "parent": "../x"}), "parent", "not an attempt id")


def test_not_a_mapping_and_missing_file(tmp_path):
    expect_error(write(tmp_path / "e1", "a1", "- 1\n- 2\n"), None, "expected a mapping")
    expect_error(write(tmp_path / "e2", "a1", ""), None, "empty file")
    with pytest.raises(InputError, match="file not found"):
        load_attempt(tmp_path / "nowhere")


def test_trainer_and_pool_size_required(tmp_path):
    expect_error(write(tmp_path / "e1", "a1", {"recipe": {}}), "trainer.name", "required")
    spec = {**ROOT, "datasets": {"pool": {"path": "data/missing.jsonl"}}}
    expect_error(write(tmp_path / "e2", "a1", spec), "datasets.pool", "state a size")


def test_unknown_change_key(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a1", ROOT)
    path = write(exp, "a2", {"parent": "a1", "change": {"eps_clp": 0.1}})
    expect_error(path, "change.eps_clp", "did you mean 'eps_clip'")


def test_new_pool_path_does_not_inherit_the_old_size(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a28", {**ROOT, "datasets": {"pool": {"path": "data/pool_400.jsonl", "size": 400}}})
    path = write(exp, "a29", {"parent": "a28", "datasets": {"pool": {"path": "data/pool_3200.jsonl"}}})
    expect_error(path, "datasets.pool", "state a size")
    att = load_attempt(write(exp, "a29b", {"parent": "a28", "datasets": {"pool": {"size": 3200}}}))
    assert att.datasets["pool"].size == 3200 and att.datasets["pool"].path.name == "pool_400.jsonl"


@pytest.mark.parametrize(
    ("section", "field", "needle"),
    [
        ({"eval": {"engine": "tpu"}}, "eval.engine", "must be one of local, vllm, openai"),
        ({"eval": {"max_lora_rank": 0}}, "eval.max_lora_rank", "must be > 0"),
        ({"eval": {"engine_name": "vllm"}}, "eval.engine_name", "did you mean 'engine'"),
        ({"intent": {"global_steps": 2.5}}, "intent.global_steps", "must be an integer"),
        ({"checkpoints": {"extra": [100, 0]}}, "checkpoints.extra", "must be > 0"),
        ({"budget": {"free_disk_gb": -1}}, "budget.free_disk_gb", "must be >= 0"),
        ({"baseline": {"accuracy": 1.5}}, "baseline.accuracy", "must be <= 1"),
        ({"trainer": {"name": "nemo-rl", "version": "0.5"}}, "trainer.name", "must be one of openrlhf, local"),
        ({"trainer": {"name": "openrlhf", "version": "latest"}}, "trainer.version", "not a version"),
        ({"recipe": {"lr_warmup_ratio": 1.5}}, "recipe.lr_warmup_ratio", "between 0 and 1"),
        ({"recipe": {"eval_steps": 0}}, "recipe.eval_steps", "-1 (never) or >= 1"),
        ({"recipe": {"bf16": "yes please"}}, "recipe.bf16", "true or false"),
        ({"recipe": {"seed": None}}, "recipe.seed", "must not be null"),
        ({"recipe": {"adam_betas": [0.9]}}, "recipe.adam_betas", "two numbers"),
        ({"recipe": ["eps_clip"]}, "recipe", "must be a mapping"),
    ],
)
def test_schema_errors_name_the_key(tmp_path, section, field, needle):
    expect_error(write(tmp_path / "exp", "a1", {**ROOT, **section}), field, needle)


# ----------------------------------------------------------------------------- answer_mode


def test_answer_mode_per_eval_and_per_set(tmp_path):
    sets = {"pool": {"size": 10}, "ood_monitor": {"size": 5}, "ood_primary": {"size": 10},
            "id": {"size": 5, "answer_mode": "exact"}, "sanity": {"size": 3}}  # fmt: skip
    att = load_attempt(write(tmp_path / "exp", "a1", {**ROOT, "datasets": sets, "eval": {"answer_mode": "math_verify"}}))
    modes = {role: ref.answer_mode for role, ref in att.datasets.items()}
    # eval's mode for the sets rlexp eval grades, the set's own where stated; the trainer's sets stay exact
    assert modes == {"pool": "exact", "ood_monitor": "exact", "ood_primary": "math_verify", "id": "exact",
                     "sanity": "math_verify"}  # fmt: skip
    assert att.eval.answer_mode == "math_verify"
    plain = load_attempt(write(tmp_path / "exp2", "a1", {**ROOT, "datasets": sets}))
    assert plain.eval.answer_mode == "exact" and plain.datasets["sanity"].answer_mode == "exact"


def test_answer_mode_is_inherited_and_its_change_is_instrumentation(tmp_path):
    exp = tmp_path / "exp"
    write(exp, "a1", {**ROOT, "datasets": {"pool": {"size": 10}, "ood_primary": {"size": 10}}})
    att = load_attempt(write(exp, "a2", {"parent": "a1", "datasets": {"ood_primary": {"answer_mode": "math_verify"}},
                                         "change": {"datasets.ood_primary.answer_mode": "math_verify"}}))  # fmt: skip
    assert att.datasets["ood_primary"].answer_mode == "math_verify" and att.datasets["ood_primary"].size == 10
    diffs = [(d.key, d.parent, d.value, d.kind) for d in diff_against_parent(att)]
    assert diffs == [("datasets.ood_primary.answer_mode", "exact", "math_verify", INSTRUMENTATION)]
    child = load_attempt(write(exp, "a3", {"parent": "a2", "eval": {"seed": 1}}))
    assert child.datasets["ood_primary"].answer_mode == "math_verify"


@pytest.mark.parametrize(
    ("section", "field", "needle"),
    [
        ({"eval": {"answer_mode": "sympy"}}, "eval.answer_mode", "must be one of exact, math_verify"),
        ({"datasets": {"pool": {"size": 10}, "id": {"size": 5, "answer_mode": "fuzzy"}}},
         "datasets.id.answer_mode", "must be one of exact, math_verify"),
        ({"datasets": {"pool": {"size": 10, "answer_mode": "math_verify"}}},
         "datasets.pool.answer_mode", "trainer's exact-match reward"),
        ({"datasets": {"pool": {"size": 10}, "ood_monitor": {"size": 5, "answer_mode": "exact"}}},
         "datasets.ood_monitor.answer_mode", "applies to ood_primary, id and sanity"),
    ],
)
def test_bad_answer_mode_is_one_line_naming_the_key(tmp_path, section, field, needle):
    expect_error(write(tmp_path / "exp", "a1", {**ROOT, **section}), field, needle)


# ----------------------------------------------------------------------------- cluster


def test_a_cluster_column_is_read_from_the_sets_rows_and_its_change_is_instrumentation(tmp_path):
    import json

    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    rows = [{"prompt": f"q{i}", "answer": "1", "doc": i % 3 if i < 6 else "x"} for i in range(8)]
    (exp / "data" / "ood.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write(exp, "a1", {**ROOT, "datasets": {"pool": {"size": 10}, "ood_primary": {"path": "data/ood.jsonl"}}})
    att = load_attempt(write(exp, "a2", {"parent": "a1", "datasets": {"ood_primary": {"cluster": "doc"}},
                                         "change": {"datasets.ood_primary.cluster": "doc"}}))
    ref = att.datasets["ood_primary"]
    assert (ref.cluster, ref.n_clusters, ref.cluster_sizes) == ("doc", 4, (2, 2, 2, 2))  # 0, 1, 2 and "x"
    assert ref.plan_row()["cluster"] == "doc" and "cluster" not in att.parent.datasets["ood_primary"].plan_row()
    diffs = [(d.key, d.parent, d.value, d.kind) for d in diff_against_parent(att)]
    assert diffs == [("datasets.ood_primary.cluster", None, "doc", INSTRUMENTATION)]


@pytest.mark.parametrize(
    ("datasets", "field", "needle"),
    [
        ({"pool": {"size": 10, "cluster": "doc"}}, "datasets.pool.cluster", "ood_primary, id and sanity"),
        ({"pool": {"size": 10}, "ood_monitor": {"size": 5, "cluster": "doc"}}, "datasets.ood_monitor.cluster",
         "ood_primary, id and sanity"),
        ({"pool": {"size": 10}, "id": {"size": 5, "cluster": 7}}, "datasets.id.cluster", "non-empty string"),
        ({"pool": {"size": 10}, "id": {"size": 5, "cluster": " "}}, "datasets.id.cluster", "non-empty string"),
    ],
)
def test_a_bad_cluster_field_is_one_line_naming_the_key(tmp_path, datasets, field, needle):
    expect_error(write(tmp_path / "exp", "a1", {**ROOT, "datasets": datasets}), field, needle)
