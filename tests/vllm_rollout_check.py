"""Greedy rollouts through ``vllm serve`` against transformers' ``generate``: run in the MAIN venv.

``python tests/vllm_rollout_check.py MODEL_DIR VLLM_PYTHON OUT_JSON [--prompts N] [--tokens T]``

Builds a LoRA adapter that is not the identity (peft's ``init_lora_weights=False``: B is random,
not zero, on every projection), saves it, and decodes the same chat-template prompts greedily with
transformers (the trainer's :func:`rlexp.evaluation.generation.generate_ids`, as ``collect_rollout``
does) with and without the adapter, then through :class:`rlexp.evaluation.engines.vllm_server.VllmRolloutServer`
(started from ``VLLM_PYTHON``) with the adapter loaded at run time and without it. Writes every
side's token ids, finish reasons and timings to OUT_JSON. tests/test_vllm_rollouts.py asserts on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QUESTIONS = ["What is 12 + 7?", "Name a colour.", "What is 3 times 4?", "Say hello.", "What is 9 - 5?",
             "Count to three.", "What is 2 + 2?", "Give a number."]


def _problems(tmp: Path) -> tuple[list[dict], Path]:
    from rlexp.evaluation.arithmetic_task import problem_hash

    problems = [{"prompt": q, "answer": "7", "problem_hash": problem_hash(q)} for q in QUESTIONS]
    path = tmp / "pool.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return problems, path


def rollout_tensors_equal(model, tokenizer, server, tmp: Path) -> dict:
    """The trainer's greedy rollout (``collect_rollout``, temperature 0) decoded by the server holding
    the adapter and by the policy itself: every tensor the update reads, compared exactly."""
    import torch

    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.trainers.local.train import collect_rollout

    problems, pool = _problems(tmp)
    cfg = TrainerConfig(pretrain=tmp, pool_path=pool, advantage_estimator="group_norm", n_samples_per_prompt=2, rollout_batch_size=4,
                        train_batch_size=8, micro_train_batch_size=4, generate_max_len=16, temperature=0.0)
    sides = [collect_rollout(model, tokenizer, problems[:4], cfg, seed=1, server=s) for s in (None, server)]
    names = ("input_ids", "attention_mask", "action_mask", "rewards", "advantages", "old_logp", "ref_logp")
    return {"equal": {n: bool(torch.equal(getattr(sides[0], n), getattr(sides[1], n))) for n in names},
            "stats_equal": sides[0].stats == sides[1].stats, "response_tokens": int(sides[0].action_mask.sum())}


def train_two_steps(model_dir: Path, server, tmp: Path) -> dict:
    """Two global steps of :func:`rlexp.trainers.local.train.train` with the server as rollout engine
    (sampling at temperature 1): the adapter of each step is loaded under its own name."""
    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.trainers.local.train import train

    _, pool = _problems(tmp)
    cfg = TrainerConfig(pretrain=model_dir, pool_path=pool, advantage_estimator="group_norm", n_samples_per_prompt=4, rollout_batch_size=2,
                        train_batch_size=8, micro_train_batch_size=4, generate_max_len=16, temperature=1.0,
                        actor_learning_rate=5e-3, lr_warmup_ratio=0.0, max_global_steps=2, init_kl_coef=0.01,
                        lora_rank=8, lora_alpha=16, eval_steps=1000, save_steps=1000)
    attempt = tmp / "attempt"
    attempt.mkdir()
    before = set(Path(tempfile.gettempdir()).glob("rlexp-rollout-adapters-*"))
    done = train(cfg, attempt, log=lambda _line: None, rollout_server=server)
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    leftovers = sorted(p.name for p in set(Path(tempfile.gettempdir()).glob("rlexp-rollout-adapters-*")) - before)
    return {"steps": done, "adapter": server.adapter, "rows": rows, "temp_adapter_dirs": leftovers}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("vllm_python", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--max-model-len", type=int, default=128)
    args = parser.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.engines.vllm_server import VllmRolloutServer
    from rlexp.evaluation.generation import encode_prompt, generate_ids, render_prompt

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    prompts = [encode_prompt(tokenizer, render_prompt(tokenizer, q, "")) for q in QUESTIONS[: args.prompts]]
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM", init_lora_weights=False))
    with torch.no_grad():  # peft's random B is small; scaled so the adapter changes greedy outputs
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(4.0)
    out: dict = {"prompts": prompts}
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / "adapter"
        model.save_pretrained(adapter)

        def hf(adapter_on: bool) -> list:
            started = time.perf_counter()
            if adapter_on:
                result = generate_ids(model, tokenizer, prompts, max_new_tokens=args.tokens, batch_size=len(prompts))
            else:
                with model.disable_adapter():
                    result = generate_ids(model, tokenizer, prompts, max_new_tokens=args.tokens,
                                          batch_size=len(prompts))
            out[f"hf_{'lora' if adapter_on else 'base'}_s"] = time.perf_counter() - started
            return [[list(c.token_ids), c.finish_reason] for (c,) in result]

        out["hf_lora"], out["hf_base"] = hf(True), hf(False)
        started = time.perf_counter()
        with VllmRolloutServer(args.model_dir, args.vllm_python, max_lora_rank=8, max_model_len=args.max_model_len,
                               log_path=args.out.with_suffix(".vllm.log")) as server:
            out["vllm_start_s"] = time.perf_counter() - started

            def vl() -> list:
                started = time.perf_counter()
                result = server.generate_ids(prompts, max_new_tokens=args.tokens, tokenizer=tokenizer)
                out[f"vllm_{'lora' if server.adapter else 'base'}_s"] = time.perf_counter() - started
                return [[list(c.token_ids), c.finish_reason] for (c,) in result]

            out["vllm_base"] = vl()
            started = time.perf_counter()
            server.load_adapter("step1", adapter)
            out["vllm_load_s"] = time.perf_counter() - started
            out["vllm_lora"] = vl()
            out["collect_rollout"] = rollout_tensors_equal(model, tokenizer, server, Path(tmp))
            out["train"] = train_two_steps(args.model_dir, server, Path(tmp))
            pid = server.process.pid
        out["server_pid"] = pid
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
