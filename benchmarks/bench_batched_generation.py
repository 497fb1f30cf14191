"""Batched KV-cache decoding vs one problem at a time (one request per problem once made every eval slow).

Runs rlexp.evaluation.generation.generate on the tiny local model over N problems (default 1,000) both ways,
in the same process, and prints the speed-up ratio. Also checks both give the same tokens.
The default of 16 new tokens is the demo's eval budget (`eval.max_tokens`): an answer
`\\boxed{NNN}` plus EOS needs 10-12 tokens of the character tokenizer, so 8 would truncate.

    .venv/bin/python benchmarks/bench_batched_generation.py [--problems 1000] [--new-tokens 16] [--batch 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.generation import generate, render_prompt
    from rlexp.models.tiny import build_tiny_model

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny", seed=0)
        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [render_prompt(tok, f"{i % 97}+{(i * 7) % 89}=", " Answer in \\boxed{}.") for i in range(args.problems)]
    generate(model, tok, prompts[:4], max_new_tokens=2)  # warm-up

    start = time.perf_counter()
    batched = generate(model, tok, prompts, max_new_tokens=args.new_tokens, batch_size=args.batch)
    t_batched = time.perf_counter() - start

    start = time.perf_counter()
    single = [generate(model, tok, [p], max_new_tokens=args.new_tokens)[0] for p in prompts]
    t_single = time.perf_counter() - start

    same = sum(b[0].token_ids == s[0].token_ids for b, s in zip(batched, single, strict=True))
    print(f"problems={args.problems} new_tokens={args.new_tokens} batch={args.batch} threads={args.threads}")
    print(f"one-at-a-time: {t_single:8.2f} s  ({args.problems / t_single:7.1f} problems/s)")
    print(f"batched:       {t_batched:8.2f} s  ({args.problems / t_batched:7.1f} problems/s)")
    print(f"speed-up: {t_single / t_batched:.1f}x   token-identical: {same}/{args.problems}")


if __name__ == "__main__":
    main()
