"""One GRPO step's rollout on SmolLM2-135M-Instruct: the local trainer's two rollout engines.

    .venv/bin/python benchmarks/bench_rollout_engine.py [--B 4] [--G 4] [--tokens 64] [--threads 1]
        [--vllm-python .venv-vllm/bin/python]

One run, both sides, the same policy (the published Q4_1 GGUF, converted by ``scripts/fetch-models``,
with a LoRA adapter of rank 16 on every projection whose B is not zero) and the same B prompts x G
samples at temperature 0.7 through :func:`rlexp.trainers.local.train.collect_rollout`:

- ``RLEXP_ROLLOUT_ENGINE=transformers``: the policy's own ``generate``;
- ``RLEXP_ROLLOUT_ENGINE=vllm``: one ``vllm serve`` (:class:`rlexp.evaluation.engines.vllm_server.VllmRolloutServer`),
  the step's adapter saved and loaded into it (:func:`rlexp.trainers.local.train.sync_adapter`, counted
  in the step), then the server decodes.

Both then compute the old and reference log-probs with the trainer's model (work that grows with the
tokens sampled). Prints each side's completion tokens/s over the whole rollout step and over its
decode alone, the vllm / transformers ratios, and the server's start-up apart (paid once per run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--B", type=int, default=4)
    parser.add_argument("--G", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    args = parser.parse_args()
    os.environ["RLEXP_TORCH_THREADS"] = str(args.threads)

    from random import Random

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.math_task import MATH_PROMPT_SUFFIX, gsm_generators, gsm_problem
    from rlexp.models.base_models import converted_dir, fetch_published
    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.trainers.local.train import collect_rollout, start_rollout_server, sync_adapter

    torch.set_num_threads(args.threads)
    model_dir = converted_dir(fetch_published("smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generators = gsm_generators()
    templates = sorted(generators)
    problems = [gsm_problem(generators, templates[i], Random(i)).to_record() for i in range(args.B)]
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=list(TARGETS), lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM", init_lora_weights=False))
    cfg = TrainerConfig(pretrain=model_dir, pool_path=model_dir, prompt_suffix=MATH_PROMPT_SUFFIX,
                        advantage_estimator="group_norm", n_samples_per_prompt=args.G, rollout_batch_size=args.B,
                        train_batch_size=args.B * args.G, micro_train_batch_size=args.G,
                        generate_max_len=args.tokens, temperature=0.7, lora_rank=16, lora_alpha=32)
    model.eval()

    import rlexp.evaluation.generation as generation

    decode_s = [0.0]

    def timed(fn):
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                decode_s[0] += time.perf_counter() - started
        return wrapper

    generation.generate = timed(generation.generate)  # collect_rollout imports it at each call

    def step(server=None, adapters=None) -> tuple[float, float, int]:
        decode_s[0] = 0.0
        started = time.perf_counter()
        if server is not None:
            sync_adapter(server, model, adapters, 1)
            server.generate_ids = timed(server.generate_ids)
        rollout = collect_rollout(model, tokenizer, problems, cfg, seed=1, server=server)
        return time.perf_counter() - started, decode_s[0], int(rollout.action_mask.sum())

    hf_s, hf_decode_s, hf_tokens = step()
    os.environ["RLEXP_VLLM_PYTHON"] = str(args.vllm_python)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        server = start_rollout_server(model_dir, cfg, Path(tmp))
        startup_s = time.perf_counter() - started
        try:
            adapters = Path(tmp) / "adapters"
            adapters.mkdir()
            vl_s, vl_decode_s, vl_tokens = step(server, adapters)
        finally:
            server.close()
    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised float32), LoRA r16 on all projections, "
          f"{args.threads} thread(s); load average {os.getloadavg()[0]:.1f}")
    print(f"one GRPO step's rollout: {args.B} prompts x {args.G} samples, T 0.7, <= {args.tokens} tokens, "
          "then the trainer's old/ref log-probs")
    for name, total, decode, tokens in (("transformers", hf_s, hf_decode_s, hf_tokens),
                                        ("vllm serve", vl_s, vl_decode_s, vl_tokens)):
        print(f"  {name:<13} {tokens:5d} tokens; step {total:6.1f} s = {tokens / total:5.1f} tok/s; decode "
              f"{decode:6.1f} s = {tokens / decode:5.1f} tok/s; log-probs and the rest {total - decode:6.1f} s")
    print("  (vllm: the adapter saved and loaded in the step, outside the decode)")
    print(f"  vllm / transformers, tokens/s: step {(vl_tokens / vl_s) / (hf_tokens / hf_s):.2f}x, "
          f"decode {(vl_tokens / vl_decode_s) / (hf_tokens / hf_decode_s):.2f}x")
    print(f"vllm serve start-up (once per run): {startup_s:.1f} s")


if __name__ == "__main__":
    main()
