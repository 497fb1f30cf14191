"""verl's backend: the key table against the pinned wheel, the argv composed by Hydra with verl's
own config, recipe checks, and ingestion of verl's ``file`` logger JSONL.

The wheel and Hydra come from scripts/fetch-verl (``RLEXP_VERL_CACHE``); the tests that need them
skip without them (CI runs the script first, from scripts/run-tests).
"""

from __future__ import annotations

import json
import math
import os
import sys
import zipfile
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.trainers.verl import file_logger
from rlexp.trainers.verl import hydra as verl
from rlexp.trainers.verl import releases as verl_config
from rlexp.trainers.verl.steps import verl_kind
from rlexp.training import metrics_file

VERSION = "0.9.1"


def pinned_wheel(version: str = VERSION) -> Path:
    """A listed release's pinned wheel (and Hydra) from the cache; on CI fetched if missing, never skipped."""
    if os.environ.get("CI"):
        verl_config.fetch_hydra()
        return verl_config.fetch(next(r for r in verl_config.listed_releases() if r.version == version))
    try:
        return verl_config.wheel_for(version)
    except verl_config.ReleaseError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def wheel() -> Path:
    return pinned_wheel()


# Hydra runs in a child process with only its own install (scripts/fetch-verl, pip --target) ahead
# of site-packages: Hydra 1.3 needs antlr4 4.9, while math-verify's LaTeX parser, imported earlier in
# the same test session, has loaded antlr4 4.13 into this process (a generated parser only runs on
# the antlr4 release that generated it).
_HYDRA_CHILD = """
import json, sys
request = json.load(sys.stdin)
if request["kind"] == "compose":
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    try:
        with initialize_config_dir(config_dir=request["config_dir"], version_base=None):
            cfg = compose(config_name=request.get("config_name", "ppo_trainer"), overrides=request["overrides"])
        print(json.dumps({"config": OmegaConf.to_container(cfg, resolve=False)}))
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
elif request["kind"] == "compose_each":  # one verdict per list of overrides: "ok" or Hydra's error
    # composed once; then each list of key overrides applied to a copy by the function Hydra's
    # compose applies them with (a config-group choice among them would be refused, not missed)
    import copy
    from hydra import compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf
    # a job may choose its config and config groups (["model_engine=megatron"], "ppo_megatron_trainer"):
    # composed once per choice, with Hydra's compose
    bases = {}
    with initialize_config_dir(config_dir=request["config_dir"], version_base=None):
        for job in request["overrides_each"]:
            choice = (job["config_name"], tuple(job["groups"])) if isinstance(job, dict) else ("ppo_trainer", ())
            if choice not in bases:
                try:
                    bases[choice] = compose(config_name=choice[0], overrides=list(choice[1]))
                except Exception as exc:
                    bases[choice] = f"{type(exc).__name__}: {exc}"
    parser, verdicts = OverridesParser.create(), []
    for job in request["overrides_each"]:
        choice = (job["config_name"], tuple(job["groups"])) if isinstance(job, dict) else ("ppo_trainer", ())
        overrides = job["overrides"] if isinstance(job, dict) else job
        if isinstance(bases[choice], str):  # the choice itself is refused (a config group verl lacks)
            verdicts.append(bases[choice])
            continue
        cfg = copy.deepcopy(bases[choice])
        OmegaConf.set_struct(cfg, True)
        try:
            ConfigLoaderImpl._apply_overrides_to_config(parser.parse_overrides(overrides), cfg)
            verdicts.append("ok")
        except Exception as exc:
            verdicts.append(f"{type(exc).__name__}: {exc}")
    print(json.dumps({"verdicts": verdicts}))
else:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parser = OverridesParser.create()
    print(json.dumps({"values": [parser.parse_override(o).value() for o in request["overrides"]]}))
"""


def run_hydra(request: dict) -> dict:
    import subprocess

    hydra_path = verl_config.hydra_dir()
    if not (hydra_path / "hydra").is_dir():
        pytest.skip(f"Hydra is not in {hydra_path}: run {verl_config.FETCH_SCRIPT}")
    env = {**os.environ, "PYTHONPATH": str(hydra_path)}
    done = subprocess.run([sys.executable, "-c", _HYDRA_CHILD], input=json.dumps(request), env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def config_dir_of(wheel: Path, root: Path) -> Path:
    """verl's trainer config folder (ppo_trainer.yaml and the files of its defaults list), out of the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(verl_config.CONFIG_DIR + "/") and n.endswith(".yaml")]
        archive.extractall(root, members)
    return root / verl_config.CONFIG_DIR


@pytest.fixture(scope="module")
def hydra_compose(wheel, tmp_path_factory):
    """verl's ``main_ppo`` config (ppo_trainer.yaml and its defaults list, from the wheel) composed
    with a list of overrides by Hydra itself, as ``python -m verl.trainer.main_ppo`` would (another
    listed release's with ``version``)."""
    config_dirs = {VERSION: config_dir_of(wheel, tmp_path_factory.mktemp("verl-config"))}

    def run(overrides: list[str], config_name: str = "ppo_trainer", version: str = VERSION) -> dict:
        if version not in config_dirs:
            config_dirs[version] = config_dir_of(pinned_wheel(version), tmp_path_factory.mktemp("verl-config"))
        config_dir = config_dirs[version]
        answer = run_hydra({"kind": "compose", "config_dir": str(config_dir),
                            "overrides": overrides, "config_name": config_name})
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["config"]

    return run


def _flat(container: dict) -> dict:
    return {k.name: k.default for k in verl_config.flatten(container)}


# ----------------------------------------------------------------------------- the key table


def test_committed_keys_match_the_wheel(wheel):
    assert verl_config.sha256_of(wheel) == verl_config.listed_releases()[0].sha256
    from_wheel = {k.name: (k.type, k.default) for k in verl_config.wheel_keys(wheel)}
    committed = {k.name: (k.type, k.default) for k in verl_config.read_table(VERSION).values()}
    assert from_wheel == committed


def test_committed_keys_are_what_hydra_composes(hydra_compose):
    composed = _flat(hydra_compose([]))
    committed = {name: key.default for name, key in verl_config.read_table(VERSION).items()}
    # the composed config also holds the defaults-list choice model_engine (dp), a config group, not a key
    assert set(composed) - set(committed) == {"model_engine"}
    assert {k: composed[k] for k in committed} == committed


@pytest.mark.parametrize(("version", "engine"), [(VERSION, "megatron"), (VERSION, "veomni"), ("0.9.0", "dp"),
                                                ("0.9.0", "megatron"), ("0.9.0", "veomni")])
def test_engine_tables_match_the_wheel(version, engine):
    wheel = pinned_wheel(version)
    assert verl_config.sha256_of(wheel) == next(r.sha256 for r in verl_config.listed_releases() if r.version == version)
    from_wheel = {k.name: (k.type, k.default) for k in verl_config.wheel_keys(wheel, engine)}
    committed = {k.name: (k.type, k.default) for k in verl_config.read_table(version, engine).values()}
    assert from_wheel == committed
    assert verl_config.engine_choices(version) == verl_config.engine_choices_of(wheel)


@pytest.mark.parametrize(("overrides", "config_name", "engine", "version"), [
    (["model_engine=megatron"], "ppo_trainer", "megatron", VERSION),
    ([], "ppo_megatron_trainer", "megatron", VERSION),  # verl's deprecated spelling of the same choice
    (["model_engine=veomni"], "ppo_trainer", "veomni", VERSION),
    (["model_engine=megatron"], "ppo_trainer", "megatron", "0.9.0"),  # the release the corpus's examples are from
    (["model_engine=mindspeed"], "ppo_trainer", "mindspeed", "0.9.0"),  # no flattened file: composed at refresh
])  # fmt: skip
def test_an_engine_choice_composes_to_its_table(hydra_compose, overrides, config_name, engine, version):
    """The engine's table (the wheel's flattened config for it) is what Hydra composes when a script
    chooses the engine, as verl's own examples do: the same keys, the same defaults."""
    composed = _flat(hydra_compose(overrides, config_name, version))
    committed = {name: key.default for name, key in verl_config.read_table(version, engine).items()}
    assert composed.pop("model_engine") == engine  # the choice itself: a defaults-list group, not a table key
    assert composed == committed
    # and it is another config: FSDP's optimizer and engine keys are not there
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" not in committed
    assert committed["actor_rollout_ref.actor.optim._target_"] != "verl.workers.config.FSDPOptimizerConfig"


def test_a_megatron_recipe_is_checked_against_megatron_keys():
    stated = {"model_engine": "megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
              "actor_rollout_ref.actor.optim.lr_decay_style": "cosine"}
    assert verl.check_recipe(stated, VERSION, "spec.yaml")["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == 2
    # the same keys without the engine: FSDP's config lacks them, and the refusal names the engine that has them
    with pytest.raises(InputError, match=r"megatron\.tensor_model_parallel_size: not a key of verl 0\.9\.1's config "
                       r"with model_engine dp .*state model_engine: megatron"):
        verl.check_recipe({k: v for k, v in stated.items() if k != "model_engine"}, VERSION, "spec.yaml")
    # FSDP's own keys are outside the megatron config
    with pytest.raises(InputError, match="fsdp_config.param_offload: not a key of verl 0.9.1's config with "
                                         "model_engine megatron"):
        verl.check_recipe({**stated, "actor_rollout_ref.actor.fsdp_config.param_offload": True}, VERSION, "spec.yaml")
    with pytest.raises(InputError, match="recipe.model_engine: 'mindspeed': verl 0.9.1's config group model_engine "
                                         "has no such engine"):
        verl.check_recipe({"model_engine": "mindspeed"}, VERSION, "spec.yaml")
    # an engine verl offers but rlexp has no table for
    with pytest.raises(InputError, match="recipe.model_engine: 'torchtitan': rlexp has no key table"):
        verl.check_recipe({"model_engine": "torchtitan"}, VERSION, "spec.yaml")
    argv = verl.build_argv(stated, VERSION)
    assert "model_engine=megatron" in argv


# ----------------------------------------------------------------------------- Hydra values


HYDRA_VALUES = [
    1024, -1, 0, 1e-6, 5e-7, 0.5, 1.0, True, False, None, "constant", "Qwen/Qwen2.5-0.5B-Instruct",
    "/data/models/x y/model", "true", "null", "1e-6", "42", "a,b", "it's", "back\\slash", "${oc.env:HOME}", "end\\", "q\\'x", "\\\\'",
    ["console", "file"], [1, 2], {"temperature": 0.0, "n": 1}, "", "weird=value", "[x]",
]  # fmt: skip


@pytest.fixture(scope="module")
def hydra_parsed(wheel):
    """What Hydra's own override parser reads back from each rendered value (one child process)."""
    overrides = [f"trainer.project_name={verl.hydra_value(v)}" for v in HYDRA_VALUES]
    return run_hydra({"kind": "parse", "overrides": overrides})["values"]


@pytest.mark.parametrize("index", range(len(HYDRA_VALUES)), ids=[repr(v) for v in HYDRA_VALUES])
def test_hydra_parses_each_value_back(hydra_parsed, index):
    """Hydra's own override parser reads every rendered value back to the same Python value."""
    value, got = HYDRA_VALUES[index], hydra_parsed[index]
    if isinstance(value, str):
        assert str(got) == value and not isinstance(got, bool | int | float)
    else:
        assert got == value and type(got) is type(value)


# ----------------------------------------------------------------------------- the argv


RECIPE = {
    "data.train_batch_size": 64,
    "trainer.total_epochs": 2,
    "trainer.test_freq": 10,
    "trainer.save_freq": 10,
    "trainer.n_gpus_per_node": 8,
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.05,
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "cosine",
    "actor_rollout_ref.actor.optim.min_lr_ratio": 0.1,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.rollout.val_kwargs.temperature": 0.0,
    "actor_rollout_ref.model.lora_rank": 16,
    "trainer.logger": ["console"],
}
PATHS = verl.VerlPaths(model="/models/Qwen2.5-0.5B", train_file=Path("/x/a1/launch/data/pool.verl.jsonl"),
                       val_file=Path("/x/a1/launch/data/monitor.verl.jsonl"), reward_file=Path("/x/a1/launch/reward_func.py"),
                       checkpoints=Path("/x/a1/checkpoints/verl"), metrics_file=Path("/x/a1/launch/verl_metrics.jsonl"))


def test_argv_composes_with_verls_config(hydra_compose):
    stated = verl.check_recipe(RECIPE, VERSION, "attempt.yaml")
    config = verl.attempt_config(stated, PATHS, "a1", resume=False)
    argv = verl.build_argv(config, VERSION, "attempt.yaml")
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert all("=" in item and not item.startswith("+") for item in argv[3:])  # overrides of existing keys only
    composed = _flat(hydra_compose(argv[3:]))  # Hydra refuses a key verl's config lacks
    for key, value in config.items():
        assert composed[key] == value, key
    assert composed["trainer.logger"] == ["console", "file"]
    assert composed["reward.custom_reward_function.name"] == "compute_score"
    assert composed["trainer.resume_mode"] == "disable"
    assert verl.attempt_config(stated, PATHS, "a1", resume=True)["trainer.resume_mode"] == "auto"


def test_hydra_refuses_an_unknown_key(hydra_compose):
    # the reference the table stands in for: verl's composed config is in struct mode
    with pytest.raises(Exception, match="Could not override 'data.train_batch_sizes'"):
        hydra_compose(["data.train_batch_sizes=64"])


def test_unknown_key_did_you_mean():
    with pytest.raises(InputError) as err:
        verl.check_recipe({"data.train_batch_sizes": 64}, VERSION, "exp/a1/attempt.yaml")
    line = err.value.one_line()
    assert "exp/a1/attempt.yaml" in line and "recipe.data.train_batch_sizes" in line
    assert "did you mean 'data.train_batch_size'" in line
    with pytest.raises(InputError, match="did you mean 'trainer.total_epochs'"):
        verl.check_recipe({"data.total_epochs": 2}, VERSION, "attempt.yaml")


@pytest.mark.parametrize(("key", "value", "message"), [
    ("data.train_batch_size", "many", "must be a number"),
    ("data.train_batch_size", True, "must be a number"),
    ("actor_rollout_ref.actor.optim.lr", "fast", "must be a number"),
    ("trainer.val_before_train", "yes", "must be true or false"),
    ("trainer.logger", "console", "must be a list"),
    ("data.train_files", "/x.parquet", "set by rlexp launch"),
])  # fmt: skip
def test_bad_values_are_one_line(key, value, message):
    with pytest.raises(InputError, match=message) as err:
        verl.check_recipe({key: value}, VERSION, "attempt.yaml")
    assert f"recipe.{key}" in err.value.one_line()


def test_a_yaml_number_written_as_text_is_a_float():
    assert verl.check_recipe({"actor_rollout_ref.actor.optim.lr": "5e-7"}, VERSION, None) == {
        "actor_rollout_ref.actor.optim.lr": 5e-7}


def test_unlisted_version():
    with pytest.raises(InputError, match="trainer.version.*0.8.0 is not a listed release"):
        verl.check_recipe({}, "0.8.0", "attempt.yaml")


def test_key_kinds():
    assert verl_kind("actor_rollout_ref.actor.optim.lr") == "training"
    assert verl_kind("data.train_batch_size") == "training"
    assert verl_kind("trainer.test_freq") == "instrumentation"
    assert verl_kind("actor_rollout_ref.rollout.val_kwargs.temperature") == "instrumentation"
    assert verl_kind("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") == "infrastructure"
    assert verl_kind("actor_rollout_ref.rollout.gpu_memory_utilization") == "infrastructure"
    assert verl_kind("actor_rollout_ref.actor.fsdp_config.param_offload") == "infrastructure"
    assert verl_kind("trainer.n_gpus_per_node") == "infrastructure"


def test_verl_rows(tmp_path):
    source = tmp_path / "pool.jsonl"
    source.write_text(json.dumps({"problem_hash": "h", "prompt": "What is 2+3?", "answer": "5"}) + "\n")
    target = verl.write_verl_dataset(source, tmp_path / "pool.verl.jsonl", " Put the answer in \\boxed{}.", "rlexp_pool")
    row = json.loads(target.read_text())
    # verl's RLHFDataset reads data.prompt_key ("prompt") as chat messages and the naive reward
    # manager passes reward_model.ground_truth and data_source to compute_score
    assert row["prompt"] == [{"role": "user", "content": "What is 2+3? Put the answer in \\boxed{}."}]
    assert row["reward_model"]["ground_truth"] == "5" and row["data_source"] == "rlexp_pool"


def test_reward_file_grades_with_rlexp_answers(tmp_path):
    from rlexp.trainers.verl.reward import write_verl_reward_file

    path = write_verl_reward_file(tmp_path / "reward_func.py")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - our own generated file
    score = namespace["compute_score"]
    assert score("rlexp_pool", "so the answer is \\boxed{5}", "5") == 1.0
    assert score("rlexp_pool", "\\boxed{6}", "5") == 0.0
    assert score("rlexp_pool", "no answer here", "5") == 0.0


# ----------------------------------------------------------------------------- metrics

# verl's file logger (verl/utils/tracking.py FileLogger.log, 0.9.1) writes one orjson line per
# logger.log call: {"step": N, "data": {...}}. Step 0 holds the validation before training
# (RayPPOTrainer.fit logs val_metrics at global_steps 0); each training step one line with the
# actor, critic/score, response_length, timing_s metrics and, at test_freq steps, val-core. These
# lines are hand-written in that format, with metric names read from verl 0.9.1's source.
VERL_LINES = [
    {"step": 0, "data": {"val-core/rlexp_ood_monitor/acc/mean@1": 0.25, "val-aux/rlexp_ood_monitor/reward/mean@1": 0.25}},
    {"step": 1, "data": {"actor/pg_loss": -0.01, "actor/lr": 2e-7, "actor/grad_norm": 0.8, "actor/pg_clipfrac": 0.01,
                         "actor/kl_loss": 0.001, "critic/score/mean": 0.31, "critic/rewards/mean": 0.31,
                         "response_length/mean": 212.5, "response_length/clip_ratio": 0.02, "timing_s/step": 41.3,
                         "training/global_step": 1, "training/epoch": 0}},
    {"step": 2, "data": {"actor/lr": 4e-7, "actor/grad_norm": None, "critic/score/mean": 0.36, "timing_s/step": 40.9,
                         "val-core/rlexp_ood_monitor/acc/mean@1": 0.3, "training/global_step": 2}},
]


def test_file_logger_lines_become_metrics_rows(tmp_path):
    source = tmp_path / "verl_metrics.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in VERL_LINES))
    rows, stats = file_logger.read_verl_metrics(source)
    assert [r["global_step"] for r in rows] == [0, 1, 2]
    assert rows[0]["monitor_acc"] == 0.25
    assert rows[1]["actor_lr"] == 2e-7 and rows[1]["grad_norm"] == 0.8 and rows[1]["reward"] == 0.31
    assert rows[1]["policy_loss"] == -0.01 and rows[1]["kl"] == 0.001 and rows[1]["ppo_clip_ratio"] == 0.01
    assert rows[1]["response_length"] == 212.5 and rows[1]["truncated"] == 0.02 and rows[1]["step_time_s"] == 41.3
    assert rows[1]["critic/rewards/mean"] == 0.31 and "training/global_step" not in rows[1]
    assert rows[2]["monitor_acc"] == 0.3 and math.isnan(rows[2]["grad_norm"])  # orjson's null for a NaN: kept
    assert stats.dropped_keys == {} and stats.nonfinite_steps == {2: ["grad_norm"]}


def test_follower_appends_new_steps_once(tmp_path):
    source, metrics = tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl"
    follower = file_logger.follower(source, metrics)
    assert follower.poll() == []
    source.write_text(json.dumps(VERL_LINES[0]) + "\n" + json.dumps(VERL_LINES[1]) + "\n" + '{"step": 2, "da')
    assert [r["global_step"] for r in follower.poll()] == [0, 1]  # the torn line waits
    with source.open("a") as fh:
        fh.write('ta": {"actor/lr": 4e-7}}\n')
    assert [r["global_step"] for r in follower.close()] == [2]
    assert [r["global_step"] for r in metrics_file.read_metrics(metrics)] == [0, 1, 2]
    # a resumed verl truncates its file (FileLogger opens it "wb") and logs from its checkpoint on
    source.write_text(json.dumps(VERL_LINES[2]) + "\n" + json.dumps({"step": 3, "data": {"actor/lr": 6e-7}}) + "\n")
    assert [r["global_step"] for r in follower.poll()] == [3]


@pytest.mark.parametrize("line", ['{"step": 1}', '[1, 2]', '{"step": -1, "data": {}}', '{"step": "1", "data": {}}',
                                  "not json"])
def test_bad_file_logger_lines_name_file_and_line(tmp_path, line):
    source = tmp_path / "verl_metrics.jsonl"
    source.write_text(json.dumps(VERL_LINES[0]) + "\n" + line + "\n")
    with pytest.raises(InputError) as err:
        file_logger.read_verl_metrics(source)
    assert "verl_metrics.jsonl" in err.value.one_line() and "line 2" in err.value.one_line()


def test_a_verl_resume_continues_from_its_latest_complete_save(tmp_path):
    """verl's saves are ``global_step_{N}/actor`` under checkpoints/verl: the latest is a Checkpoint
    with that folder, and the launch's resume step is its step (a save without ``actor`` is none)."""
    from rlexp.experiment.layout import AttemptDir, Checkpoint
    from rlexp.trainers.verl import RULES
    from rlexp.trainers.verl.launch import LAUNCH

    ad = AttemptDir(tmp_path / "a")
    saves = ad.checkpoint_files.resume_state_dir(RULES)
    assert saves == tmp_path / "a" / "checkpoints" / "verl"
    assert ad.checkpoint_files.latest_resume_state(RULES, complete="actor") is None and LAUNCH.resume_step(None, ad) == 0
    for name, actor in (("global_step_2", True), ("global_step_10", True), ("global_step_12", False),
                        ("global_step10_hf", True)):
        (saves / name / ("actor" if actor else "optim")).mkdir(parents=True)
    assert ad.checkpoint_files.latest_resume_state(RULES, complete="actor") == Checkpoint(10, path=tmp_path / "a" / "checkpoints" / "verl" / "global_step_10")
    assert LAUNCH.resume_step(None, ad) == 10
