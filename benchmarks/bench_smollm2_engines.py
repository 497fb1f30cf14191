"""Rollout and eval throughput on SmolLM2-135M-Instruct: transformers (rlexp's local path) vs vLLM's CPU build.

    .venv/bin/python benchmarks/bench_smollm2_engines.py [--problems 16] [--eval-tokens 64]
        [--B 4] [--G 4] [--rollout-tokens 64] [--steps 2] [--threads 1] [--vllm-python .venv-vllm/bin/python]

One run, both sides, the same prompts and model (the published Q4_1 GGUF, converted by
``scripts/fetch-models``): this process times transformers, then runs itself under
``.venv-vllm``'s Python (``--vllm-side``) for vLLM, handing over the prompts' token ids.

- **eval**: greedy decoding of ``--problems`` GSM-Symbolic prompts, ``--eval-tokens`` new tokens at
  most; transformers through :class:`rlexp.evaluation.engines.local.LocalEngine` (the base model), vLLM through
  ``LLM.generate`` (float32, eager). Also counts the outputs that are token-identical.
- **rollout**: ``--steps`` global steps of the local trainer's rollout, B prompts x G samples at
  temperature 0.7 with a LoRA adapter on all seven projections: transformers decodes with the peft
  model (:func:`rlexp.evaluation.generation.generate`, as ``collect_rollout`` does); vLLM gets the
  weights as OpenRLHF syncs LoRA to its vLLM engines: the adapter saved to disk and loaded by a new
  ``LoRARequest`` every step (a load per step is counted in the step's time).

Prints completion tokens/s of each side and the vLLM/transformers ratios, and vLLM's start-up time
apart (a trainer pays it once). torch threads: ``--threads`` on both sides (vLLM:
``VLLM_CPU_OMP_THREADS_BIND=nobind`` and OMP_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def transformers_side(args, model_dir: Path, prompts: list[list[int]], adapter_dir: Path) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlexp.evaluation.engines.local import LocalEngine
    from rlexp.evaluation.generation import generate_ids

    torch.set_num_threads(args.threads)
    os.environ["RLEXP_TORCH_THREADS"] = str(args.threads)
    engine = LocalEngine(model_dir, batch_size=len(prompts))
    tokenizer = engine.tokenizer
    started = time.perf_counter()
    greedy = generate_ids(engine.base, tokenizer, prompts, max_new_tokens=args.eval_tokens, batch_size=len(prompts))
    eval_s = time.perf_counter() - started
    eval_tokens = sum(c.completion_tokens for (c,) in greedy)
    engine.close()

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM", init_lora_weights=False))
    model.save_pretrained(adapter_dir)  # nonzero LoRA weights: the vLLM side loads exactly these
    rollout_prompts = prompts[: args.B]
    rollout_tokens, rollout_s = 0, 0.0
    for step in range(args.steps):
        started = time.perf_counter()
        out = generate_ids(model, tokenizer, rollout_prompts, max_new_tokens=args.rollout_tokens, temperature=0.7,
                           num_samples=args.G, seed=step, batch_size=args.B * args.G)
        rollout_s += time.perf_counter() - started
        rollout_tokens += sum(c.completion_tokens for row in out for c in row)
    return {"eval_tokens": eval_tokens, "eval_s": eval_s, "rollout_tokens": rollout_tokens, "rollout_s": rollout_s,
            "greedy_ids": [list(c.token_ids) for (c,) in greedy]}


def vllm_side(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    started = time.perf_counter()
    llm = LLM(spec["model"], dtype="float32", enforce_eager=True, enable_lora=True, max_lora_rank=16, max_loras=1,
              max_model_len=512, seed=0)
    startup_s = time.perf_counter() - started
    inputs = [{"prompt_token_ids": ids} for ids in spec["prompts"]]
    started = time.perf_counter()
    greedy = llm.generate(inputs, SamplingParams(temperature=0.0, max_tokens=spec["eval_tokens"]), use_tqdm=False)
    eval_s = time.perf_counter() - started
    eval_ids = [list(o.outputs[0].token_ids) for o in greedy]
    rollout_tokens, rollout_s = 0, 0.0
    for step in range(spec["steps"]):
        started = time.perf_counter()
        lora = LoRARequest(f"step{step}", step + 1, spec["adapter"])  # a new id: loaded from disk, as a sync
        params = SamplingParams(temperature=0.7, n=spec["G"], max_tokens=spec["rollout_tokens"], seed=step)
        out = llm.generate(inputs[: spec["B"]], params, lora_request=lora, use_tqdm=False)
        rollout_s += time.perf_counter() - started
        rollout_tokens += sum(len(c.token_ids) for o in out for c in o.outputs)
    spec_path.with_suffix(".out.json").write_text(json.dumps({"startup_s": startup_s, "eval_tokens": sum(len(x) for x in eval_ids), "eval_s": eval_s,
                      "rollout_tokens": rollout_tokens, "rollout_s": rollout_s, "greedy_ids": eval_ids}))  # vLLM logs to stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--eval-tokens", type=int, default=64)
    parser.add_argument("--B", type=int, default=4)
    parser.add_argument("--G", type=int, default=4)
    parser.add_argument("--rollout-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    parser.add_argument("--vllm-side", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vllm_side is not None:
        vllm_side(args.vllm_side)
        return

    from random import Random

    from transformers import AutoTokenizer

    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.evaluation.math_task import MATH_PROMPT_SUFFIX, gsm_generators, gsm_problem
    from rlexp.models.base_models import converted_dir, fetch_published

    model_dir = converted_dir(fetch_published("smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generators = gsm_generators()
    templates = sorted(generators)
    problems = [gsm_problem(generators, templates[i % len(templates)], Random(i)) for i in range(args.problems)]
    prompts = [encode_prompt(tokenizer, render_prompt(tokenizer, p.prompt, MATH_PROMPT_SUFFIX)) for p in problems]
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / "adapter"
        hf = transformers_side(args, model_dir, prompts, adapter)
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"model": str(model_dir), "prompts": prompts, "eval_tokens": args.eval_tokens,
                                    "B": args.B, "G": args.G, "rollout_tokens": args.rollout_tokens,
                                    "steps": args.steps, "adapter": str(adapter)}))
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
        proc = subprocess.run([str(args.vllm_python), __file__, "--vllm-side", str(spec)], capture_output=True,
                              text=True, env=env, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"the vLLM side failed:\n{proc.stderr[-3000:]}")
        vl = json.loads(spec.with_suffix(".out.json").read_text())
    same = sum(a == b for a, b in zip(hf["greedy_ids"], vl["greedy_ids"], strict=True))
    rate = {side: {kind: d[f"{kind}_tokens"] / d[f"{kind}_s"] for kind in ("eval", "rollout")}
            for side, d in (("transformers", hf), ("vllm", vl))}
    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised float32), {args.threads} thread(s); "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"eval: {args.problems} prompts greedy, <= {args.eval_tokens} new tokens")
    for side, d in (("transformers", hf), ("vllm", vl)):
        print(f"  {side:<12} {d['eval_tokens']:6d} tokens in {d['eval_s']:7.1f} s = {rate[side]['eval']:7.1f} tok/s")
    print(f"  vllm / transformers: {rate['vllm']['eval'] / rate['transformers']['eval']:.2f}x; "
          f"token-identical outputs {same}/{args.problems}")
    print(f"rollout: {args.steps} steps of {args.B} prompts x {args.G} samples, T 0.7, <= {args.rollout_tokens} "
          f"tokens, LoRA r16 on all projections (vLLM: the adapter loaded from disk every step)")
    for side, d in (("transformers", hf), ("vllm", vl)):
        print(f"  {side:<12} {d['rollout_tokens']:6d} tokens in {d['rollout_s']:7.1f} s = "
              f"{rate[side]['rollout']:7.1f} tok/s")
    print(f"  vllm / transformers: {rate['vllm']['rollout'] / rate['transformers']['rollout']:.2f}x")
    print(f"vLLM start-up (LLM(...), once per trainer): {vl['startup_s']:.1f} s")


if __name__ == "__main__":
    main()
