"""A short local training on the calculator-tool environment: the agent mask in use, end to end.

The tiny model cannot multiply a 3-digit by a 2-digit number, but it can learn to delegate:
``calc A*B`` → the tool answers → ``\\boxed{result}``. Two phases on the CPU:

1. a brief supervised start on tool-using episodes (loss on agent tokens only: the tool's answer is
   never a target), stopped early so the policy uses the tool only sometimes (headroom);
2. GRPO on the calculator environment through the episode runner and the agent-masked loss
   (rlexp.backends.env_trainer), printing per step the return, tool calls per episode, the
   fraction of agent tokens and the gradient mass on environment positions (exactly 0).

    .venv/bin/python benchmarks/bench_env_calculator.py [--sft-steps 150] [--grpo-steps 8] [--loss grpo|gspo]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def problems(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(100, 999), rng.randint(10, 99)
        out.append({"prompt": f"{a}*{b}=", "answer": str(a * b), "a": a, "b": b})
    return out


def sft_trajectory(tok, p):
    from rlexp.environments.episodes import render_user_turn
    from rlexp.environments.interface import TrajectoryBuilder
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    b = TrajectoryBuilder(encode_prompt(tok, render_prompt(tok, p["prompt"], "")))
    b.add_agent(encode_prompt(tok, f"calc {p['a']}*{p['b']}") + [tok.eos_token_id])
    b.add_env(encode_prompt(tok, render_user_turn(tok, p["answer"])))
    b.add_agent(encode_prompt(tok, f"\\boxed{{{p['answer']}}}") + [tok.eos_token_id])
    return b.finish("stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.add_argument("--loss", choices=("grpo", "gspo"), default="grpo")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.episodes import SlotCache, run_episodes
    from rlexp.environments.interface import Budgets, parse_rows
    from rlexp.models.tiny import build_tiny_model
    from rlexp.trainers.local.config import EnvTrainingOptions
    from rlexp.trainers.local.env_train import collect_env_rollout, pack_trajectories
    from rlexp.trainers.local.loss import loss_for, masked_mean
    from rlexp.trainers.local.train import token_logprobs, train_on_rollout

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "tiny", seed=0)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    train, dev = problems(512, 1), problems(32, 2)
    budgets = Budgets(max_turns=3, max_tokens_per_turn=14, max_total_tokens=48)
    rows_of = lambda ps: parse_rows([{"env": "calculator", "task": {k: p[k] for k in ("prompt", "answer")}} for p in ps])  # noqa: E731

    def greedy_eval(tag):
        played = run_episodes(model, tok, rows_of(dev), budgets=budgets)
        flat = [t for g in played for t in g]
        success = sum(t.episode_return for t in flat) / len(flat)
        calls = sum(t.tool_calls for t in flat) / len(flat)
        print(f"[{tag}] greedy success={success:.3f} tool_calls/episode={calls:.2f}", flush=True)
        return success

    # ---- 1. supervised start on agent tokens only
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sft_started = time.perf_counter()
    for step in range(1, args.sft_steps + 1):
        batch = [sft_trajectory(tok, p) for p in random.Random(step).sample(train, 32)]
        ids, attn, mask, _ = pack_trajectories(batch, tok.pad_token_id)
        model.train()
        logp, _ = token_logprobs(model, ids, attn)
        loss = -masked_mean(logp, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"sft step {step}: nll/agent token={loss.item():.3f}", flush=True)
    sft_s = time.perf_counter() - sft_started
    base_success = greedy_eval("after sft")

    # ---- 2. GRPO with the agent mask (full fine-tune; the reference is the supervised start)
    import copy

    reference = copy.deepcopy(model).eval().requires_grad_(False)
    options = EnvTrainingOptions(budgets=budgets, loss_type=args.loss)
    cfg = types.SimpleNamespace(n_samples_per_prompt=8, temperature=args.temperature, advantage_estimator="group_norm",
                                micro_train_batch_size=16, max_epochs=1, eps_clip=0.2, init_kl_coef=0.01,
                                max_norm=1.0)  # fmt: skip
    steps = types.SimpleNamespace(micro_batches_per_optimizer_step=4)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cache = SlotCache()
    grpo_started = time.perf_counter()
    for step in range(1, args.grpo_steps + 1):
        batch = random.Random(1000 + step).sample(train, 8)
        rollout, _ = collect_env_rollout(model, tok, rows_of(batch), cfg, options, seed=step, cache=cache,
                                         reference=reference)  # fmt: skip
        # the gradient on environment positions of this step's loss, measured on one micro-batch
        logp, _ = token_logprobs(model, rollout.input_ids[:16], rollout.attention_mask[:16])
        logp.retain_grad()
        parts = loss_for(options)(logp, rollout.old_logp[:16], rollout.ref_logp[:16], rollout.advantages[:16],
                                  rollout.action_mask[:16], eps_clip=0.2, kl_coef=0.01)  # fmt: skip
        parts.loss.backward()
        after_prompt = rollout.attention_mask[:16, 1:].float()
        env_positions = (after_prompt - rollout.action_mask[:16]).clamp(min=0)
        env_grad = (logp.grad.abs() * env_positions).sum().item()
        model.zero_grad(set_to_none=True)
        row = train_on_rollout(model, opt, sched, rollout, cfg, steps, loss=loss_for(options))
        s = rollout.stats
        print(f"grpo step {step}: return={s['reward']:.3f} tool_calls/ep={s['tool_calls_per_episode']:.2f} "
              f"turns/ep={s['turns_per_episode']:.2f} agent_frac={s['agent_token_fraction']:.3f} "
              f"env_latency={s['env_latency_s'] * 1e6:.0f}us |grad| on env positions={env_grad} "
              f"kl={row['kl']:.4f}", flush=True)  # fmt: skip
    grpo_s = time.perf_counter() - grpo_started
    final = greedy_eval("after grpo")
    print(f"success {base_success:.3f} -> {final:.3f}; time: sft {sft_s:.1f}s, grpo {grpo_s:.1f}s, "
          f"total {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
