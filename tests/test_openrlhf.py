"""OpenRLHF command builder: golden argv in both dialects, flag tables, inert values, Ray, reward file."""

from __future__ import annotations

import http.server
import importlib.util
import socket
import threading
from pathlib import Path

import pytest

from rlexp.backends import ray_jobs
from rlexp.errors import InputError
from rlexp.trainers.openrlhf import argv as openrlhf
from rlexp.trainers.openrlhf.reward import render_reward_file, write_reward_file

# The A30 recipe of the campaign behind the SOP (experiments/seed-a30 holds it as specs): A29B plus
# micro_train_batch_size 2, LoRA on an 8-GPU layout (vLLM 2 engines x TP 2, the reference model
# colocated with the actor on 4 GPUs), generate_max_len 4096, max_len 5120.
A30_RECIPE = {
    "pretrain": "openai/gpt-oss-20b",
    "advantage_estimator": "dr_grpo",
    "eps_clip": 0.1,
    "init_kl_coef": 0.001,
    "n_samples_per_prompt": 8,
    "rollout_batch_size": 16,
    "train_batch_size": 16,
    "micro_train_batch_size": 2,
    "max_len": 5120,
    "prompt_max_len": 1024,
    "generate_max_len": 4096,
    "actor_learning_rate": 5e-7,
    "lr_warmup_ratio": 0.05,
    "max_norm": 1.0,
    "lora_rank": 32,
    "lora_alpha": 64,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "num_episodes": 1,
    "eval_steps": 10,
    "save_steps": 10,
    "seed": 42,
    "zero_stage": 3,
    "gradient_checkpointing": True,
    "colocate_actor_ref": True,
    "ref_num_nodes": 1,
    "ref_num_gpus_per_node": 4,
    "vllm_num_engines": 2,
    "vllm_tensor_parallel_size": 2,
}

PATHS = openrlhf.AttemptPaths(
    pretrain="openai/gpt-oss-20b",
    prompt_data="/exp/data/sft_rl_pool_3200.jsonl",
    eval_dataset="/exp/data/probe_set_200_ood.jsonl",
    save_path=Path("/exp/a30/final"),
    ckpt_path=Path("/exp/a30/checkpoints"),
    reward_file=Path("/exp/a30/launch/reward_func.py"),
    tensorboard_dir=Path("/exp/a30/tensorboard"),
)

# Written by hand from the seed's train script flags, in the order of OpenRLHF v0.9.3's parser.
GOLDEN_V093 = """
python3 -m openrlhf.cli.train_ppo_ray
--ref_num_nodes 1
--ref_num_gpus_per_node 4
--colocate_actor_ref
--vllm_num_engines 2
--vllm_tensor_parallel_size 2
--eval_steps 10
--save_steps 10
--ckpt_path /exp/a30/checkpoints
--save_hf_ckpt
--zero_stage 3
--gradient_checkpointing
--lora_rank 32
--lora_alpha 64
--target_modules q_proj k_proj v_proj o_proj
--save_path /exp/a30/final
--num_episodes 1
--rollout_batch_size 16
--prompt_max_len 1024
--generate_max_len 4096
--max_len 5120
--max_norm 1.0
--eps_clip 0.1
--micro_train_batch_size 2
--train_batch_size 16
--seed 42
--n_samples_per_prompt 8
--actor_learning_rate 5e-7
--lr_warmup_ratio 0.05
--init_kl_coef 0.001
--advantage_estimator dr_grpo
--pretrain openai/gpt-oss-20b
--remote_rm_url /exp/a30/launch/reward_func.py
--prompt_data /exp/data/sft_rl_pool_3200.jsonl
--eval_dataset /exp/data/probe_set_200_ood.jsonl
--eval_temperature 0.0
--eval_n_samples_per_prompt 1
--input_key prompt
--label_key answer
--apply_chat_template
--use_tensorboard /exp/a30/tensorboard
"""

# The same recipe in the dotted dialect of v0.11.0 (renamed flags, same values), parser order.
GOLDEN_V0110 = """
python3 -m openrlhf.cli.train_ppo_ray
--ref.num_nodes 1
--ref.num_gpus_per_node 4
--train.colocate_actor_ref
--vllm.num_engines 2
--vllm.tensor_parallel_size 2
--eval.steps 10
--ckpt.save_steps 10
--ckpt.path /exp/a30/checkpoints
--ckpt.save_hf
--ds.zero_stage 3
--actor.gradient_checkpointing_enable
--ds.lora.rank 32
--ds.lora.alpha 64
--ds.lora.target_modules q_proj k_proj v_proj o_proj
--ckpt.output_dir /exp/a30/final
--train.num_episodes 1
--rollout.batch_size 16
--data.max_len 5120
--rollout.max_new_tokens 4096
--actor.eps_clip 0.1
--train.micro_batch_size 2
--train.batch_size 16
--train.seed 42
--rollout.n_samples_per_prompt 8
--algo.kl.init_coef 0.001
--actor.adam.lr 5e-7
--actor.lr_warmup_ratio 0.05
--actor.max_norm 1.0
--algo.advantage.estimator dr_grpo
--actor.model_name_or_path openai/gpt-oss-20b
--reward.remote_url /exp/a30/launch/reward_func.py
--data.prompt_dataset /exp/data/sft_rl_pool_3200.jsonl
--eval.dataset /exp/data/probe_set_200_ood.jsonl
--eval.temperature 0.0
--eval.n_samples_per_prompt 1
--data.input_key prompt
--data.label_key answer
--data.apply_chat_template
--logger.tensorboard_dir /exp/a30/tensorboard
"""


def golden(text: str) -> list[str]:
    return text.split()


def build(version: str, recipe=None):
    return openrlhf.build_train_argv(openrlhf.attempt_recipe(recipe or A30_RECIPE, PATHS), version)


def test_a30_golden_v093_underscore_dialect():
    cmd = build("0.9.3")
    assert cmd.dialect == "underscore"
    assert cmd.argv == golden(GOLDEN_V093)


def test_a30_golden_v0110_dotted_dialect():
    cmd = build("0.11.0")
    assert cmd.dialect == "dotted"
    assert cmd.argv == golden(GOLDEN_V0110)
    assert cmd.dropped == ("prompt_max_len",)  # gone since v0.9.8: planning-only, reported


def test_v098_renames_generate_max_len_and_drops_prompt_max_len():
    argv = build("0.9.8").argv
    assert "--prompt_max_len" not in argv and "--generate_max_len" not in argv
    assert argv[argv.index("--max_new_tokens") + 1] == "4096"
    assert "--prompt_max_len" in build("0.9.7").argv


@pytest.mark.parametrize("version", openrlhf.known_versions())
def test_every_emitted_flag_exists_in_that_versions_table(version):
    table = openrlhf.load_flag_table(version)
    cmd = build(version)
    flags = [a for a in cmd.argv if a.startswith("--")]
    assert flags and all(f in table.flags for f in flags)
    assert set(cmd.flag_values) == set(flags)
    # the table itself comes from OpenRLHF's parser: these names are in every v0.9.x / v0.10.2+ one
    anchor = "--eps_clip" if table.dialect == "underscore" else "--actor.eps_clip"
    assert anchor in table.flags


def test_flag_tables_match_known_openrlhf_facts():
    assert "--prompt_max_len" in openrlhf.load_flag_table("0.9.3").flags
    assert "--prompt_max_len" not in openrlhf.load_flag_table("0.9.8").flags
    assert openrlhf.load_flag_table("0.10.1.post2").dialect == "underscore"
    assert openrlhf.load_flag_table("0.10.2").dialect == "dotted"
    t = openrlhf.load_flag_table("0.11.0").flags
    assert t["--ckpt.save_hf"].action == "store_true"
    assert (t["--ds.lora.target_modules"].nargs, t["--ds.lora.target_modules"].type) == ("*", "str")
    assert t["--algo.kl.estimator"].choices == ("k1", "k2", "k3")
    assert "--actor.min_lr_ratio" in t  # the configurable min LR (from 0.10.2; 0.9.x fixes it at 0.1 x peak)
    # 0.11.1 added one switch; 0.11.2 replaced the is_correction enable/type pair
    assert "--algo.kl.unbiased_gradient" in openrlhf.load_flag_table("0.11.1")
    assert "--algo.kl.unbiased_gradient" not in openrlhf.load_flag_table("0.11.0")
    t112 = openrlhf.load_flag_table("0.11.2").flags
    assert "--algo.advantage.is_correction_enable" not in t112 and "--algo.advantage.is_correction_type" not in t112
    assert t112["--algo.advantage.is_correction_threshold"].nargs == "+"
    assert t112["--actor.loss_agg_mode"].choices == ("token-mean", "seq-mean-token-mean")


def test_post_releases_are_listed_releases_and_nothing_else_is_guessed():
    assert openrlhf.load_flag_table("0.10.1.post1").version == "0.10.1.post1"
    assert openrlhf.load_flag_table("v0.9.3").version == "0.9.3"
    for unlisted in ("0.9.3.post1", "0.9.2", "0.10", "latest"):
        with pytest.raises(InputError) as info:
            openrlhf.load_flag_table(unlisted)
        assert info.value.field == "trainer.version" and "scripts/refresh-openrlhf-flags" in info.value.message


def test_dotted_map_sources_and_targets_exist_in_the_tables():
    old = set(openrlhf.load_flag_table("0.9.3").flags) | set(openrlhf.load_flag_table("0.10.1").flags)
    new = set(openrlhf.load_flag_table("0.10.2").flags)
    for key, dotted in openrlhf.DOTTED_NAMES.items():
        assert f"--{key}" in old or key == "min_lr_ratio", key
        assert f"--{dotted}" in new, dotted


def test_shell_metacharacters_stay_one_inert_argument(tmp_path):
    nasty = "model; rm -rf / && echo $(whoami) `id` | cat > x 'q' \"d\" --eps_clip 9"
    recipe = {**A30_RECIPE, "pretrain": nasty}
    paths = openrlhf.AttemptPaths(**{**PATHS.__dict__, "pretrain": nasty})
    argv = openrlhf.build_train_argv(openrlhf.attempt_recipe(recipe, paths), "0.9.3").argv
    assert argv.count(nasty) == 1
    assert argv[argv.index("--pretrain") + 1] == nasty
    assert argv.count("--eps_clip") == 1
    # and it really is inert when executed as an argv list (no shell): echo prints it verbatim
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys; print(sys.argv[1])", nasty],
                         capture_output=True, text=True, check=True).stdout
    assert out.rstrip("\n") == nasty
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("recipe", "field", "words"),
    [
        ({"not_a_flag": 1}, "recipe.not_a_flag", "no flag"),
        ({"colocate_actor_ref": "yes"}, "recipe.colocate_actor_ref", "switch"),
        ({"target_modules": {"a": 1}}, "recipe.target_modules", "unsupported"),
        ({"eps_clip": [0.1, 0.2]}, "recipe.eps_clip", "one value"),
        ({"eps_clip_low_high": [0.1]}, "recipe.eps_clip_low_high", "takes 2 values"),
        ({"rollout_batch_size": 1.5}, "recipe.rollout_batch_size", "takes an integer in OpenRLHF 0.9.3"),
        ({"policy_loss_type": "grpo"}, "recipe.policy_loss_type", "takes one of ppo, gspo"),
        ({"vllm_is_correction_type": "seq-mask-tis-2"}, "recipe.vllm_is_correction_type", "takes one of tis"),
        ({"min_lr_ratio": 0.2}, "recipe.min_lr_ratio", "fixes it at 0.1"),
        ({"eps_clip": 0.1, "actor.eps_clip": 0.1}, "recipe.actor.eps_clip", "recipe.eps_clip"),
        ({"eps_clip": float("nan")}, "recipe.eps_clip", "non-finite"),
        ({"use_wandb": "abc123"}, "recipe.use_wandb", "secrets"),
        ({"perf": True, "ptx_coef": 0.1}, "recipe.perf", "no flag"),  # v0.9.x-only flags in v0.11
    ],
)
def test_bad_recipe_values_are_one_line_errors(recipe, field, words):
    version = "0.11.0" if "perf" in recipe else "0.9.3"
    with pytest.raises(InputError) as info:
        openrlhf.build_train_argv(recipe, version, spec_file="a/attempt.yaml")
    assert info.value.field == field and words in info.value.message
    assert "\n" not in str(info.value)


def test_unknown_version_names_the_newest_known_and_the_refresh_script():
    with pytest.raises(InputError) as info:
        openrlhf.build_train_argv({"eps_clip": 0.1}, "0.8.0", spec_file="a/attempt.yaml")
    assert info.value.field == "trainer.version" and info.value.file == "a/attempt.yaml"
    assert "newest 0.11.2" in info.value.message and "scripts/refresh-openrlhf-flags" in info.value.message
    with pytest.raises(InputError, match="newer than 0.11.2, the newest listed release: run scripts/refresh"):
        openrlhf.load_flag_table("0.12.0")


def test_float_formatting_matches_the_seed_script():
    assert [openrlhf.format_value(v) for v in (5e-7, 0.001, 1.0, 1e-10, 3)] == ["5e-7", "0.001", "1.0", "1e-10", "3"]
    assert float(openrlhf.format_value(5e-7)) == 5e-7


def test_ray_job_submit_wraps_the_train_argv():
    train = build("0.9.3").argv
    argv = ray_jobs.ray_job_argv(train, "127.0.0.1:8265", runtime_env={"env_vars": {"A": "1"}},
                                 submission_id="rlexp-a30-1")
    assert argv[:5] == ["ray", "job", "submit", "--address", "http://127.0.0.1:8265"]
    assert argv[5:7] == ["--runtime-env-json", '{"env_vars":{"A":"1"}}']
    assert argv[7:9] == ["--submission-id", "rlexp-a30-1"]
    assert argv[9] == "--" and argv[10:] == train
    assert ray_jobs.ray_stop_argv("http://h:8265/", "rlexp-a30-1") == [
        "ray", "job", "stop", "--address", "http://h:8265", "rlexp-a30-1"]
    with pytest.raises(InputError):
        ray_jobs.normalize_ray_address("ray://127.0.0.1:10001")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address_is_one_line():
    port = _free_port()  # nothing listens there
    with pytest.raises(InputError) as info:
        ray_jobs.check_ray_dashboard(f"http://127.0.0.1:{port}", timeout_s=2)
    assert info.value.field == "--ray-address" and "unreachable" in info.value.message
    assert "\n" not in info.value.one_line()


def test_reachable_ray_dashboard_answers_version():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b'{"version": "4", "ray_version": "2.40.0"}' if self.path == "/api/version" else b"{}"
            self.send_response(200 if self.path == "/api/version" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        info = ray_jobs.check_ray_dashboard(f"http://127.0.0.1:{server.server_address[1]}")
        assert info["ray_version"] == "2.40.0"
    finally:
        server.shutdown()
        server.server_close()


def _load_reward_module(path: Path):
    spec = importlib.util.spec_from_file_location("reward_func_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reward_file_grades_like_rlexp_answers(tmp_path):
    from rlexp.evaluation import answers

    path = write_reward_file(tmp_path / "reward_func.py")
    module = _load_reward_module(path)
    prompts = ["Q1 ", "Q2 ", "Q3 ", "Q4 "]
    responses = ["so \\boxed{47}", "the answer is **12** in base 7", "\\boxed{\\frac{6}{3}}", "no idea"]
    labels = ["47", "12", "2", "5"]
    out = module.reward_func([p + r for p, r in zip(prompts, responses, strict=True)], prompts, labels)
    expected = [1.0 if answers.is_correct(answers.extract_answer(r)[0], g) else 0.0
                for r, g in zip(responses, labels, strict=True)]
    assert expected == [1.0, 1.0, 1.0, 0.0]  # the shared parser's own verdicts on these cases
    assert [float(x) for x in out["rewards"]] == expected
    assert [float(x) for x in out["scores"]] == expected
    assert [float(x) for x in out["extra_logs"]["has_boxed"]] == [1.0, 0.0, 1.0, 0.0]
    # the prompt is not graded: a number in the prompt cannot earn the reward
    assert float(module.reward_func(["What is 47? none"], ["What is 47?"], ["47"])["rewards"][0]) == 0.0


def test_reward_file_embeds_the_parser_verbatim():
    import inspect

    from rlexp.evaluation import answers
    from rlexp.experiment.files import sha256_text

    text = render_reward_file()
    source = inspect.getsource(answers)
    assert text.startswith(source.rstrip("\n"))
    assert f'RLEXP_ANSWERS_SHA256 = "{sha256_text(source)}"' in text


@pytest.mark.parametrize("version", openrlhf.known_versions())
def test_every_flag_table_logs_tensorboard_into_the_attempt(version):
    """`rlexp launch --metrics-source tensorboard` follows ATTEMPT/tensorboard: every OpenRLHF
    version must be asked for TensorBoard logging there (v0.9.x --use_tensorboard DIR, dotted
    dialect --logger.tensorboard_dir DIR)."""
    table = openrlhf.load_flag_table(version)
    flag = openrlhf.flag_name("use_tensorboard", table)
    assert flag in ("--use_tensorboard", "--logger.tensorboard_dir") and table.flags[flag].action == "value"
    built = openrlhf.build_train_argv(openrlhf.attempt_recipe(A30_RECIPE, PATHS), version)
    assert "use_tensorboard" not in built.dropped
    assert built.argv[built.argv.index(flag) + 1] == str(PATHS.tensorboard_dir)


def _flags(argv: list[str]) -> dict[str, list[str]]:
    """``--flag v1 v2`` pairs of an argv (after python -m module)."""
    out: dict[str, list[str]] = {}
    for arg in argv[3:]:
        if arg.startswith("--"):
            current = out.setdefault(arg, [])
        else:
            current.append(arg)
    return out


# The 0.11.2 mapping, written out by hand from both releases' PolicyLoss (docs in openrlhf.py).
@pytest.mark.parametrize(("old_type", "expected"), [
    (None, ["token", "clip"]), ("tis", ["token", "clip"]), ("icepop", ["token", "mask"]),
    ("seq-mask-tis", ["seq", "mask"]), ("mis", ["seq", "mask"]),
])
def test_is_correction_enable_and_type_become_level_and_mode_in_0112(old_type, expected):
    recipe = {"enable_vllm_is_correction": True, "vllm_is_truncated_threshold": [0.5, 2.0]}
    if old_type:
        recipe["vllm_is_correction_type"] = old_type
    built = openrlhf.build_train_argv(recipe, "0.11.2")
    flags = _flags(built.argv)
    assert [flags["--algo.advantage.is_correction_level"][0], flags["--algo.advantage.is_correction_mode"][0]] == expected
    assert flags["--algo.advantage.is_correction_threshold"] == ["0.5", "2.0"]
    assert not any("is_correction_enable" in f or "is_correction_type" in f for f in flags)
    assert any("is_correction_level" in note for note in built.notes)
    # 0.11.1 keeps the old pair, verbatim ("mis" is 0.9.3's name of seq-mask-tis)
    old = _flags(openrlhf.build_train_argv(recipe, "0.11.1").argv)
    assert old["--algo.advantage.is_correction_enable"] == []
    assert old.get("--algo.advantage.is_correction_type", ["tis"]) == [
        {"mis": "seq-mask-tis"}.get(old_type, old_type or "tis")]


def test_is_correction_off_writes_nothing_in_0112_and_an_unmappable_type_is_refused():
    flags = _flags(openrlhf.build_train_argv({"vllm_is_correction_type": "icepop"}, "0.11.2").argv)
    assert not any("is_correction" in f for f in flags)  # off: 0.11.2's default level
    with pytest.raises(InputError) as info:
        openrlhf.build_train_argv({"enable_vllm_is_correction": True, "vllm_is_correction_type": "geo"}, "0.11.2")
    assert info.value.field == "recipe.vllm_is_correction_type" and "no equivalent" in info.value.message


@pytest.mark.parametrize(("recipe", "field", "words"), [
    # PolicyLoss of 0.11.2 refuses these at start-up (after Ray came up); rlexp refuses them at plan time
    ({"enable_vllm_is_correction": True, "algo.advantage.is_correction_gating": "binary_kl",
      "vllm_is_truncated_threshold": [0.0, 0.05]}, "recipe.enable_vllm_is_correction", "mode clip needs"),
    ({"algo.advantage.is_correction_level": "token", "algo.advantage.is_correction_gating": "tv"},
     "recipe.algo.advantage.is_correction_gating", "upper bound only"),
    ({"enable_vllm_is_correction": True, "algo.advantage.is_correction_level": "seq"},
     "recipe.algo.advantage.is_correction_level", "set twice"),
    ({"algo.advantage.is_correction_threshold": [0.5, 5.0]}, "recipe.algo.advantage.is_correction_threshold",
     "recipe.vllm_is_truncated_threshold"),
])
def test_0112_is_correction_combinations_refused(recipe, field, words):
    with pytest.raises(InputError) as info:
        openrlhf.build_train_argv(recipe, "0.11.2")
    assert info.value.field == field and words in info.value.message


def test_0112_gating_with_an_upper_bound_only_is_written_out():
    recipe = {"algo.advantage.is_correction_level": "seq", "algo.advantage.is_correction_gating": "binary_kl",
              "vllm_is_truncated_threshold": [0.0, 0.003]}
    flags = _flags(openrlhf.build_train_argv(recipe, "0.11.2").argv)
    assert flags["--algo.advantage.is_correction_level"] == ["seq"]
    assert flags["--algo.advantage.is_correction_gating"] == ["binary_kl"]
    assert flags["--algo.advantage.is_correction_threshold"] == ["0.0", "0.003"]


def test_newer_only_dotted_keys_only_for_releases_that_have_them():
    assert _flags(openrlhf.build_train_argv({"algo.kl.unbiased_gradient": True}, "0.11.1").argv) == {
        "--algo.kl.unbiased_gradient": []}
    for version, words in (("0.11.0", "0.11.0 has no --algo.kl.unbiased_gradient (releases that have it: 0.11.1"),
                           ("0.9.3", "0.9.3 has no --algo.kl.unbiased_gradient")):
        with pytest.raises(InputError) as info:
            openrlhf.build_train_argv({"algo.kl.unbiased_gradient": True}, version)
        assert info.value.field == "recipe.algo.kl.unbiased_gradient" and words in info.value.message
    with pytest.raises(InputError, match="no listed release has it"):
        openrlhf.build_train_argv({"actor.not_a_flag": 1}, "0.11.2")


@pytest.mark.parametrize("version", ["0.10.1", "0.10.2", "0.11.2"])
def test_split_and_renamed_keys(version):
    flags = _flags(openrlhf.build_train_argv({"ref_reward_offload": True, "freezing_actor_steps": 3,
                                              "local_rank": 0}, version).argv)
    if version == "0.10.1":
        assert flags == {"--freezing_actor_steps": ["3"], "--ref_reward_offload": [], "--local_rank": ["0"]}
    else:
        assert flags == {"--critic.freezing_steps": ["3"], "--ref.offload": [], "--reward.offload": [],
                         "--local_rank": ["0"]}


def test_min_lr_ratio_fixed_value_is_left_out_with_a_note():
    built = openrlhf.build_train_argv({"min_lr_ratio": 0.1, "eps_clip": 0.2}, "0.9.3")
    assert built.dropped == ("min_lr_ratio",) and "--min_lr_ratio" not in built.argv
    assert any("fixes it at 0.1" in note for note in built.notes)
    assert _flags(openrlhf.build_train_argv({"min_lr_ratio": 0.2}, "0.10.2").argv) == {"--actor.min_lr_ratio": ["0.2"]}


def test_value_aliases_follow_the_release():
    assert _flags(openrlhf.build_train_argv({"vllm_is_correction_type": "seq-mask-tis"}, "0.9.3").argv) == {
        "--vllm_is_correction_type": ["mis"]}
    assert _flags(openrlhf.build_train_argv({"vllm_is_correction_type": "mis"}, "0.10.2").argv) == {
        "--algo.advantage.is_correction_type": ["seq-mask-tis"]}
