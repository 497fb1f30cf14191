"""The parser builder's own rules, on a wheel written here (no download, no OpenRLHF code).

The wheel below mimics the layout of OpenRLHF's (a ``.data/purelib`` tree, a ``train_ppo_ray.py``
that imports GPU libraries at the top and builds its parser under ``__main__``); the tests check
what runs, what does not, and what is reported.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

from rlexp.trainers.openrlhf.parser import (
    NeedsDependency,
    Rejected,
    Release,
    ReleaseError,
    ReleaseParser,
    fetch,
    format_table,
    format_versions_file,
    listed_releases,
    version_key,
)

TRAIN = '''
import argparse
import os
import re

import torch
from openrlhf.utils import get_strategy


def train(args):
    raise RuntimeError("train() must never run")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--actor.eps_clip", type=float, default=0.2)
    parser.add_argument("--algo.advantage.estimator", type=str, default="gae", choices=["gae", "dr_grpo"])
    parser.add_argument("--rollout.n_samples_per_prompt", type=int, default=1)
    parser.add_argument("--algo.advantage.is_correction_threshold", type=float, nargs="+", default=[0.5, 5.0])
    parser.add_argument("--train.colocate_all", action="store_true", default=False)
    for prefix in ("actor", "critic"):
        parser.add_argument(f"--{prefix}.adam.lr", type=float, default=1e-6)
    parser.add_argument("--use_ms", action="store_true", default=False)
    args = parser.parse_args()
    from openrlhf.utils.config import hierarchize

    args = hierarchize(args)
    threshold = args.algo.advantage.is_correction_threshold
    if len(threshold) == 1:
        threshold.insert(0, 0.0)
    if args.algo.advantage.estimator == "dr_grpo":
        assert args.rollout.n_samples_per_prompt > 1, "dr_grpo requires n_samples_per_prompt > 1"
    print("[Warning] checked")
    if args.use_ms:
        from openrlhf.utils.heavy import patch

        patch()
    train(args)
'''

CONFIG = '''
from types import SimpleNamespace

from .names import split


def hierarchize(args):
    root = {}
    for key, value in vars(args).items():
        *groups, leaf = split(key)
        node = root
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = value

    def build(x):
        return SimpleNamespace(**{k: build(v) for k, v in x.items()}) if isinstance(x, dict) else x

    return build(root)
'''

HEAVY = '''
import os
import re

os.environ["RLEXP_TEST_HEAVY_MODULE_RAN"] = "1"  # must never happen: the module imports torch below
import torch  # noqa: E402


def patch():
    pass
'''


def make_wheel(tmp_path: Path, version: str = "9.9.9", train: str = TRAIN) -> Path:
    path = tmp_path / f"openrlhf-{version}-cp311-cp311-manylinux1_x86_64.whl"
    root = f"openrlhf-{version}.data/purelib/openrlhf"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{root}/__init__.py", "import torch\n")
        archive.writestr(f"{root}/cli/train_ppo_ray.py", train)
        archive.writestr(f"{root}/utils/__init__.py", "import deepspeed\n")
        archive.writestr(f"{root}/utils/config.py", CONFIG)
        archive.writestr(f"{root}/utils/names.py", "def split(key):\n    return key.split('.')\n")
        archive.writestr(f"{root}/utils/heavy.py", HEAVY)
    return path


@pytest.fixture
def parser(tmp_path) -> ReleaseParser:
    return ReleaseParser("9.9.9", make_wheel(tmp_path))


def test_flags_in_parser_order_with_loop_generated_names(parser):
    rows = [spec.row() for spec in parser.flags()]
    assert rows == [
        "--actor.eps_clip\tvalue\t-\tfloat\t-\t-",
        "--algo.advantage.estimator\tvalue\t-\tstr\tgae,dr_grpo\t-",
        "--rollout.n_samples_per_prompt\tvalue\t-\tint\t-\t-",
        "--algo.advantage.is_correction_threshold\tvalue\t+\tfloat\t-\t-",
        "--train.colocate_all\tstore_true\t-\t-\t-\t-",
        "--actor.adam.lr\tvalue\t-\tfloat\t-\t-",
        "--critic.adam.lr\tvalue\t-\tfloat\t-\t-",
        "--use_ms\tstore_true\t-\t-\t-\t-",
    ]
    assert parser.skipped_imports == ["import torch", "from openrlhf.utils import get_strategy"]


def test_post_parse_runs_with_the_wheels_plain_modules(parser):
    parsed = parser.parse(["--actor.eps_clip", "0.1", "--algo.advantage.is_correction_threshold", "3"])
    assert parsed.post_parse_ran and parsed.printed == ["[Warning] checked"]
    assert parsed.args.actor.eps_clip == 0.1  # hierarchize (with its relative import) ran from the wheel
    assert parsed.args.algo.advantage.is_correction_threshold == [0.0, 3.0]  # the post-parse insert ran


def test_parser_and_post_parse_rejections(parser):
    with pytest.raises(Rejected) as info:
        parser.parse(["--eps_clip", "0.1"])
    assert info.value.stage == "parse" and "unrecognized arguments: --eps_clip" in info.value.message
    with pytest.raises(Rejected, match="invalid choice: 'grpo'"):
        parser.parse(["--algo.advantage.estimator", "grpo"])
    with pytest.raises(Rejected) as info:
        parser.parse(["--algo.advantage.estimator", "dr_grpo"])
    assert info.value.stage == "post-parse" and info.value.message == "dr_grpo requires n_samples_per_prompt > 1"
    assert parser.parse(["--algo.advantage.estimator", "dr_grpo"], post_parse=False).args


def test_a_module_importing_a_gpu_library_never_runs(parser, monkeypatch):
    monkeypatch.delenv("RLEXP_TEST_HEAVY_MODULE_RAN", raising=False)
    with pytest.raises(NeedsDependency) as info:
        parser.parse(["--use_ms"])
    assert info.value.module == "torch"
    assert "RLEXP_TEST_HEAVY_MODULE_RAN" not in os.environ


@pytest.mark.parametrize(("train", "words"), [
    (TRAIN.replace('if __name__ == "__main__":', "if True:"), "no `if __name__"),
    (TRAIN.replace("    train(args)\n", ""), "does not end with train(args)"),
    (TRAIN.replace("args = parser.parse_args()", "args = parser.parse_args(['--x'])"), "no `args = parser.parse_args()`"),
    (TRAIN.replace("    parser = argparse.ArgumentParser()\n",
                   "    parser = argparse.ArgumentParser()\n    import deepspeed\n"), "needs deepspeed"),
])
def test_a_changed_layout_is_an_error_not_a_guess(tmp_path, train, words):
    with pytest.raises(ReleaseError, match=re.escape(words)):
        ReleaseParser("9.9.9", make_wheel(tmp_path, train=train))


def test_fetch_checks_the_pinned_sha256(tmp_path):
    wheel = make_wheel(tmp_path)
    import hashlib

    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert fetch(Release("9.9.9", wheel.name, digest), tmp_path) == wheel  # cached: no download
    with pytest.raises(ReleaseError, match="differs from the pinned"):
        fetch(Release("9.9.9", wheel.name, "0" * 64), tmp_path)


def test_release_order_and_files_round_trip():
    versions = ["0.10.1.post1", "0.9.10", "0.10.1", "0.11.2", "0.9.3", "0.10.1.post2", "0.10.2"]
    assert sorted(versions, key=version_key) == [
        "0.9.3", "0.9.10", "0.10.1", "0.10.1.post1", "0.10.1.post2", "0.10.2", "0.11.2"]
    releases = listed_releases()
    assert [r.version for r in releases] == sorted((r.version for r in releases), key=version_key)
    from rlexp.trainers.openrlhf.parser import VERSIONS_FILE

    assert format_versions_file(releases) == VERSIONS_FILE.read_text(encoding="utf-8")


def test_table_text_round_trips(parser, tmp_path, monkeypatch):
    import rlexp.trainers.openrlhf.parser as module

    monkeypatch.setattr(module, "FLAGS_DIR", tmp_path)
    release = Release("9.9.9", "w.whl", "a" * 64)
    text = format_table(release, parser.flags())
    (tmp_path / "v9.9.9.txt").write_text(text)
    assert module.read_table("9.9.9") == parser.flags()
