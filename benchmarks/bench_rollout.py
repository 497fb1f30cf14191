"""Rollout throughput: B×G samples decoded together (KV cache, left padding) vs one sequence at a time.

    .venv/bin/python benchmarks/bench_rollout.py [--model DIR] [--B 16] [--G 8] [--tokens 16] [--threads 1] [--repeats 3]

Both sides run in the same process on the same prompts, the same model and the same decoding
settings (temperature 1.0, ``rlexp.evaluation.generation.generate``, the trainer's rollout path); only
``batch_size`` differs. Without ``--model`` the untrained tiny model is built in a temporary
directory (it rarely emits EOS, so nearly every sample runs to ``--tokens`` tokens; the rates
count the tokens actually decoded). Prints completion tokens/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--B", type=int, default=16, help="prompts per rollout batch")
    parser.add_argument("--G", type=int, default=8, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=16, help="max new tokens")
    parser.add_argument("--single", type=int, default=32, help="sequences timed one at a time")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side; the median is shown")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.arithmetic_task import ArithmeticTask, reservoir_sample
    from rlexp.evaluation.generation import generate, render_prompt
    from rlexp.models.tiny import build_tiny_model

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or build_tiny_model(Path(tmp) / "tiny", seed=0)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    problems = reservoir_sample(ArithmeticTask().problems(), args.B, seed=0)
    prompts = [render_prompt(tokenizer, p.prompt, "") for p in problems]

    def tokens_per_second(batch_size: int, prompts: list[str], samples: int) -> tuple[float, int, float]:
        runs = sorted((once(batch_size, prompts, samples) for _ in range(args.repeats)), key=lambda r: r[0])
        return runs[len(runs) // 2]

    def once(batch_size: int, prompts: list[str], samples: int) -> tuple[float, int, float]:
        start = time.perf_counter()
        out = generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=args.tokens,
            temperature=1.0,
            num_samples=samples,
            seed=0,
            batch_size=batch_size,
        )
        seconds = time.perf_counter() - start
        tokens = sum(c.completion_tokens for row in out for c in row)
        return tokens / seconds, tokens, seconds

    once(args.B * args.G, prompts[:2], 2)  # warm-up (allocations, first-call overheads)
    batched_rate, batched_tokens, batched_s = tokens_per_second(args.B * args.G, prompts, args.G)
    # One at a time: the first `single` rows of the same B×G work, each decoded alone.
    per_prompt = max(1, args.single // args.B)
    single_prompts = prompts[: max(1, args.single // per_prompt)]
    single_rate, single_tokens, single_s = tokens_per_second(1, single_prompts, per_prompt)

    print(
        f"model: {model_dir if args.model else 'untrained tiny model (built)'}; threads={args.threads}; "
        f"median of {args.repeats} runs"
    )
    print(
        f"batched  B×G = {args.B}×{args.G}: {batched_tokens} tokens in {batched_s:.2f} s = {batched_rate:,.0f} tok/s"
    )
    print(
        f"one at a time ({len(single_prompts) * per_prompt} seqs): {single_tokens} tokens in {single_s:.2f} s = {single_rate:,.0f} tok/s"
    )
    print(f"ratio batched / one-at-a-time: {batched_rate / single_rate:.1f}x")


if __name__ == "__main__":
    main()
