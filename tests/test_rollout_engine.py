"""The local trainer's rollout engine setting (``RLEXP_ROLLOUT_ENGINE``), checked without vLLM: the
default, the refusals (one line naming the variable, nothing started or written). Greedy equality
of the ``vllm`` engine with transformers is tests/test_vllm_rollouts.py (CI's vLLM stage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.errors import InputError

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "rlexp" / "assets" / "demo-base"


def test_the_default_engine_is_transformers_and_an_unknown_one_is_refused(monkeypatch):
    from rlexp.trainers.local.train import rollout_engine

    monkeypatch.delenv("RLEXP_ROLLOUT_ENGINE", raising=False)
    assert rollout_engine() == "transformers"
    monkeypatch.setenv("RLEXP_ROLLOUT_ENGINE", "vllm")
    assert rollout_engine() == "vllm"
    monkeypatch.setenv("RLEXP_ROLLOUT_ENGINE", "VLLM ")
    with pytest.raises(InputError, match=r"^RLEXP_ROLLOUT_ENGINE: one of transformers, vllm, got 'VLLM '$"):
        rollout_engine()


def test_a_missing_vllm_python_is_refused_before_anything_starts(tmp_path):
    from rlexp.evaluation.engines.vllm_server import VllmRolloutServer

    missing = tmp_path / "no-venv" / "bin" / "python"
    with pytest.raises(InputError, match=r"^RLEXP_VLLM_PYTHON: .*does not exist"):
        VllmRolloutServer(TINY, missing, max_lora_rank=8, max_model_len=128, log_path=tmp_path / "vllm.log")
    assert not (tmp_path / "vllm.log").exists()


def test_the_vllm_engine_refuses_a_full_fine_tune_before_writing(tmp_path, monkeypatch):
    from rlexp.evaluation.arithmetic_task import problem_hash
    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.trainers.local.train import train

    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"prompt": "What is 1 + 1?", "answer": "2", "problem_hash": problem_hash("What is 1 + 1?")}) + "\n")
    cfg = TrainerConfig(pretrain=TINY, pool_path=pool, advantage_estimator="group_norm", n_samples_per_prompt=2,
                        rollout_batch_size=1, train_batch_size=2, micro_train_batch_size=2, lora_rank=0)
    monkeypatch.setenv("RLEXP_ROLLOUT_ENGINE", "vllm")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    with pytest.raises(InputError, match=r"^RLEXP_ROLLOUT_ENGINE: the rollout engine 'vllm' takes single-turn LoRA"):
        train(cfg, attempt, log=lambda _line: None)
    assert list(attempt.iterdir()) == []
