"""OpenRLHF's own parsers judge rlexp's argv: every listed release, read from its real wheel.

The wheels are fetched into the cache by ``scripts/fetch-openrlhf`` (the session fixture below
does the same, idempotently, so the test never runs against a missing release). Each release's
``train_ppo_ray.py`` is read from its wheel; its parser and its post-parse validation run here.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlexp.errors import InputError
from rlexp.trainers.openrlhf import argv as openrlhf
from rlexp.trainers.openrlhf.parser import (
    Rejected,
    ReleaseParser,
    fetch,
    format_table,
    listed_releases,
    table_path,
)

pytestmark = pytest.mark.openrlhf_wheels

REPO = Path(__file__).resolve().parent.parent

# Every final release from 0.9.3 to 0.11.2 (`pip index versions openrlhf`, 2026-11-26).
EXPECTED_RELEASES = [
    "0.9.3", "0.9.4", "0.9.5", "0.9.6", "0.9.7", "0.9.8", "0.9.9", "0.9.10",
    "0.10.0", "0.10.1", "0.10.1.post1", "0.10.1.post2", "0.10.2", "0.10.3", "0.10.4",
    "0.11.0", "0.11.1", "0.11.2",
]  # fmt: skip
VERSIONS = openrlhf.known_versions()
# What every train command needs for OpenRLHF's post-parse code to reach the point where it starts
# Ray (a policy, a reward, a group estimator: no critic model to derive from the reward model).
BASE = {"pretrain": "base-model", "remote_rm_url": "/x/reward_func.py", "advantage_estimator": "dr_grpo",
        "n_samples_per_prompt": 8}


@pytest.fixture(scope="session")
def parsers() -> dict[str, ReleaseParser]:
    out = {}
    for release in listed_releases():
        out[release.version] = ReleaseParser(release.version, fetch(release))
    return out


def accept(parser: ReleaseParser, argv: list[str]):
    """The check every recipe must pass: ``argv`` (a whole train command) parsed by the release's
    parser, then its post-parse validation run to the point where it would start Ray."""
    assert argv[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"] or argv[1:3] == [
        "-m", "openrlhf.cli.train_ppo_ray"]
    try:
        parsed = parser.parse(argv[3:])
    except Rejected as exc:
        raise AssertionError(f"OpenRLHF {parser.version} rejects the argv: {exc}") from None
    assert parsed.post_parse_ran
    return parsed.args


def get(args, v09_key: str):
    """A parsed value by its v0.9 key, in either dialect (the dotted one is hierarchized)."""
    if hasattr(args, v09_key):
        return getattr(args, v09_key)
    node = args
    for part in openrlhf.DOTTED_NAMES[v09_key].split("."):
        node = getattr(node, part)
    return node


def _seed_a30(tmp_path: Path, version: str) -> Path:
    """experiments/seed-a30 copied, its root attempt's trainer.version set to ``version``."""
    exp = tmp_path / "seed-a30"
    shutil.copytree(REPO / "experiments" / "seed-a30", exp)
    spec = exp / "a29b" / "attempt.yaml"
    data = yaml.safe_load(spec.read_text())
    data["trainer"]["version"] = version
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return exp / "a30"


def _demo(tmp_path: Path, version: str) -> Path:
    """The demo's root attempt (rlexp.demo.attempt_specs) on the OpenRLHF trainer at ``version``."""
    from rlexp.stages.demo import DemoConfig, attempt_specs

    config = DemoConfig()
    sizes = {"pool": config.pool_size, "ood_monitor": config.monitor_size, "ood_primary": config.primary_size,
             "id": config.id_size, "sanity": config.sanity_size}
    datasets = {role: SimpleNamespace(path=f"data/{role}.jsonl", size=n) for role, n in sizes.items()}
    spec = yaml.safe_load(attempt_specs(config, datasets)["d1"])
    # the demo's recipe as written, on the smallest OpenRLHF layout: one vLLM engine, the actor
    # and its co-located reference on one GPU (the demo's batch sizes fit one data-parallel rank)
    spec["trainer"] = {"name": "openrlhf", "version": version, "gpus": 2}
    spec["recipe"].update({"actor_num_gpus_per_node": 1, "ref_num_gpus_per_node": 1, "colocate_actor_ref": True,
                           "vllm_num_engines": 1})
    (tmp_path / "demo" / "d1").mkdir(parents=True)
    (tmp_path / "demo" / "d1" / "attempt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return tmp_path / "demo" / "d1"


def _launch_argv(attempt: Path) -> list[str]:
    """The argv `rlexp launch --backend process` would run (dry run: nothing written)."""
    from rlexp.stages.launch import prepare

    return prepare(attempt, backend="process", dry_run=True).argv


def test_the_list_holds_every_release_from_093_to_0112():
    assert VERSIONS == EXPECTED_RELEASES
    assert len(VERSIONS) == 18
    for release in listed_releases():
        assert release.wheel.startswith(f"openrlhf-{release.version}-") and len(release.sha256) == 64


@pytest.mark.parametrize("version", VERSIONS)
def test_seed_a30_argv_passes_that_releases_parser(parsers, tmp_path, version):
    argv = _launch_argv(_seed_a30(tmp_path, version))
    args = accept(parsers[version], argv)
    # values as the trainer sees them, read back through the release's own namespace
    assert get(args, "eps_clip") == 0.1 and get(args, "micro_train_batch_size") == 2
    assert get(args, "n_samples_per_prompt") == 8 and get(args, "actor_learning_rate") == 5e-7
    assert get(args, "target_modules") == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert get(args, "advantage_estimator") == "dr_grpo" and get(args, "zero_stage") == 3
    budget = "generate_max_len" if "--generate_max_len" in argv else "max_new_tokens"
    assert get(args, budget) == 4096
    # the post-parse code ran: it fills eps_clip_low_high from eps_clip and splits the reward URL
    assert tuple(get(args, "eps_clip_low_high")) == (0.1, 0.1)
    reward = get(args, "remote_rm_url")
    assert isinstance(reward, list) and reward[0].endswith("launch/reward_func.py")


@pytest.mark.parametrize("version", VERSIONS)
def test_demo_argv_passes_that_releases_parser(parsers, tmp_path, version):
    argv = _launch_argv(_demo(tmp_path, version))
    args = accept(parsers[version], argv)
    assert get(args, "lora_rank") == 16 and get(args, "lora_alpha") == 32
    assert len(get(args, "target_modules")) == 7 and get(args, "temperature") == 1.0
    assert get(args, "rollout_batch_size") == 16 and get(args, "train_batch_size") == 64
    # post-parse: vllm_generate_batch_size defaults to the rollout batch size
    assert get(args, "vllm_generate_batch_size") == 16


@pytest.mark.parametrize(("built_for", "parsed_by"), [("0.11.2", "0.9.3"), ("0.9.3", "0.11.2"),
                                                      ("0.10.2", "0.10.1.post2")])
def test_a_wrong_dialect_fails_the_check(parsers, built_for, parsed_by):
    from test_openrlhf import A30_RECIPE, PATHS

    argv = openrlhf.build_train_argv(openrlhf.attempt_recipe(A30_RECIPE, PATHS), built_for).argv
    accept(parsers[built_for], argv)  # its own release takes it
    with pytest.raises(AssertionError, match="unrecognized arguments"):
        accept(parsers[parsed_by], argv)


def test_post_parse_checks_really_run(parsers):
    """0.11.0 added dr_grpo to the estimators that need several samples per prompt (an assert
    after parse_args); 0.10.4 lets the same argv through."""
    argv = openrlhf.build_train_argv({**BASE, "n_samples_per_prompt": 1}, "0.11.0").argv
    with pytest.raises(Rejected, match="dr_grpo requires n_samples_per_prompt > 1") as info:
        parsers["0.11.0"].parse(argv[3:])
    assert info.value.stage == "post-parse"
    parsers["0.11.0"].parse(argv[3:], post_parse=False)  # the parser alone accepts it
    accept(parsers["0.10.4"], openrlhf.build_train_argv({**BASE, "n_samples_per_prompt": 1}, "0.10.4").argv)


@pytest.mark.parametrize("version", VERSIONS)
def test_committed_table_is_what_the_release_parser_says(parsers, version):
    release = next(r for r in listed_releases() if r.version == version)
    assert table_path(version).read_text(encoding="utf-8") == format_table(release, parsers[version].flags()), (
        f"{table_path(version).name} is stale: run scripts/refresh-openrlhf-flags")


def test_no_table_without_a_listed_release():
    tables = sorted(p.name for p in openrlhf.FLAGS_DIR.glob("v[0-9]*.txt"))
    assert tables == sorted(f"v{v}.txt" for v in VERSIONS)


def test_release_facts_from_the_real_parsers(parsers):
    flags = {v: {spec.flag: spec for spec in p.flags()} for v, p in parsers.items()}
    assert "--algo.kl.unbiased_gradient" in flags["0.11.1"] and "--algo.kl.unbiased_gradient" not in flags["0.11.0"]
    gone = ("--algo.advantage.is_correction_enable", "--algo.advantage.is_correction_type")
    assert all(f in flags["0.11.1"] for f in gone) and not any(f in flags["0.11.2"] for f in gone)
    assert flags["0.11.2"]["--actor.loss_agg_mode"].choices == ("token-mean", "seq-mean-token-mean")
    assert flags["0.11.2"]["--algo.advantage.is_correction_level"].choices == ("off", "token", "seq")
    assert flags["0.11.2"]["--algo.advantage.is_correction_mode"].choices == ("mask", "clip")
    assert flags["0.11.2"]["--algo.advantage.is_correction_gating"].choices == ("ratio", "binary_kl", "tv")
    assert flags["0.11.2"]["--algo.advantage.is_correction_threshold"].nargs == "+"
    assert flags["0.11.1"]["--algo.advantage.is_correction_threshold"].nargs == "2"
    assert "--prompt_max_len" in flags["0.9.7"] and "--prompt_max_len" not in flags["0.9.8"]
    assert flags["0.9.3"]["--vllm_is_correction_type"].choices == ("tis", "icepop", "mis")


@pytest.mark.parametrize(("old_type", "level", "mode"), [(None, "token", "clip"), ("tis", "token", "clip"),
                                                         ("icepop", "token", "mask"), ("seq-mask-tis", "seq", "mask")])
def test_is_correction_reaches_0112_as_level_and_mode(parsers, old_type, level, mode):
    recipe = {**BASE, "enable_vllm_is_correction": True, "vllm_is_truncated_threshold": [0.5, 2.0]}
    if old_type:
        recipe["vllm_is_correction_type"] = old_type
    new = accept(parsers["0.11.2"], openrlhf.build_train_argv(recipe, "0.11.2").argv).algo.advantage
    assert (new.is_correction_level, new.is_correction_mode, new.is_correction_gating) == (level, mode, "ratio")
    assert new.is_correction_threshold == [0.5, 2.0]
    old = accept(parsers["0.11.1"], openrlhf.build_train_argv(recipe, "0.11.1").argv).algo.advantage
    assert old.is_correction_enable is True and old.is_correction_type == (old_type or "tis")
    assert old.is_correction_threshold == [0.5, 2.0]
    # 0.9.3 spells the sequence-level mask "mis"
    v093 = accept(parsers["0.9.3"], openrlhf.build_train_argv(recipe, "0.9.3").argv)
    assert v093.vllm_is_correction_type == {"seq-mask-tis": "mis"}.get(old_type, old_type or "tis")


def test_newer_only_flags_reach_the_releases_that_have_them(parsers):
    recipe = {**BASE, "actor.loss_agg_mode": "seq-mean-token-mean", "algo.kl.unbiased_gradient": True,
              "use_kl_loss": True}
    args = accept(parsers["0.11.2"], openrlhf.build_train_argv(recipe, "0.11.2").argv)
    assert args.actor.loss_agg_mode == "seq-mean-token-mean" and args.algo.kl.unbiased_gradient is True
    with pytest.raises(InputError, match=r"0.11.1 has no --actor.loss_agg_mode \(releases that have it: 0.11.2"):
        openrlhf.build_train_argv(recipe, "0.11.1")
    only_kl = {**BASE, "algo.kl.unbiased_gradient": True, "use_kl_loss": True}
    assert accept(parsers["0.11.1"], openrlhf.build_train_argv(only_kl, "0.11.1").argv).algo.kl.unbiased_gradient
    with pytest.raises(InputError, match="0.11.0 has no --algo.kl.unbiased_gradient"):
        openrlhf.build_train_argv(only_kl, "0.11.0")


@pytest.mark.parametrize("version", ["0.9.3", "0.10.1", "0.10.2", "0.11.2"])
def test_renamed_and_split_flags_parse(parsers, version):
    recipe = {**BASE, "freezing_actor_steps": 5, "ref_reward_offload": True, "max_ckpt_mem": 1000, "local_rank": 0}
    args = accept(parsers[version], openrlhf.build_train_argv(recipe, version).argv)
    if openrlhf.load_flag_table(version).dialect == "dotted":
        assert args.critic.freezing_steps == 5 and args.ref.offload is True and args.reward.offload is True
        assert args.ckpt.max_mem == 1000
    else:
        assert args.freezing_actor_steps == 5 and args.ref_reward_offload is True and args.max_ckpt_mem == 1000
    assert args.local_rank == 0


def test_a_post_parse_statement_needing_a_gpu_stack_library_is_reported_not_faked(parsers):
    from rlexp.trainers.openrlhf.parser import NeedsDependency

    argv = openrlhf.build_train_argv({**BASE, "use_ms": True}, "0.11.2").argv
    with pytest.raises(NeedsDependency) as info:
        parsers["0.11.2"].parse(argv[3:])
    assert info.value.module == "modelscope.utils.hf_util"
    # what the module level of train_ppo_ray.py imports besides the standard library stays unrun
    skipped = parsers["0.11.2"].skipped_imports
    assert "import ray" in skipped and "from openrlhf.utils import get_strategy" in skipped
    assert "import argparse" not in skipped


def test_parsers_are_built_without_torch_ray_vllm_or_deepspeed():
    import subprocess
    import sys

    code = ("import sys; from rlexp.trainers.openrlhf.parser import load_release_parser;"
            "p = load_release_parser('0.11.2'); p.parse(['--actor.model_name_or_path', 'm', '--reward.remote_url', 'r',"
            "'--algo.advantage.estimator', 'dr_grpo', '--rollout.n_samples_per_prompt', '4']);"
            "heavy = {'torch', 'ray', 'vllm', 'deepspeed', 'transformers'};"
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
