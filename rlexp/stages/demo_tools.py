"""`rlexp demo --task tools`: the protocol on an environment task with two environment classes in
one dataset — products the tiny model cannot compute but can delegate to the calculator tool
(``calc A*B``, then ``\\boxed{N}``), and lookups in a generated corpus it cannot know but can search
(``look kNNN``, then ``\\boxed{VV}``; answer graded by exact match, retrieval by NDCG).

1. datasets: five roles disjoint by hash, ordinary dataset files; a row is a product of a 3-digit
   and a 2-digit number (played by the spec's ``environment.name: calculator``) or, for
   ``search_share`` of them, a lookup row naming ``env: search`` and its corpus ``config`` with
   its ``gold_docs``: the rows group by (environment, config), each group's environment (the
   corpus) built once;
2. a supervised base (Baseline-S0): the untrained tiny model supervised on agent tokens only, on
   episodes that call the tool (``tool_share`` of them) or answer at once (a guess: the model
   cannot multiply nor know the corpus), so it uses the tools sometimes and RL has headroom;
3. one attempt ``t1`` with an ``environment:`` section: plan → launch (the local trainer on
   episodes, the agent mask) → eval (K=3 + S0, greedy episodes) → decide → report.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPERIMENT = "demo-tools"
ROLES = ("pool", "ood_monitor", "ood_primary", "id", "sanity")


@dataclass(frozen=True)
class ToolsDemoConfig:
    seed: int = 0
    sizes: tuple[int, int, int, int, int] = (256, 32, 96, 32, 16)  # in ROLES order
    sft_steps: int = 300
    sft_batch: int = 32
    sft_lr: float = 3e-3
    tool_share: float = 0.5  # share of supervised episodes that call the tool
    search_share: float = 0.5  # share of rows that are corpus lookups (the search environment)
    corpus_size: int = 400  # documents of the generated corpus (keys k100..k999)
    global_steps: int = 8
    mid_step: int = 4

    @classmethod
    def fast(cls) -> ToolsDemoConfig:
        """Plumbing only (tests): small sets, a short supervision, 2 global steps."""
        return cls(sizes=(16, 4, 8, 4, 4), sft_steps=8, sft_batch=16, global_steps=2, mid_step=1)


def search_config(config: ToolsDemoConfig) -> dict[str, Any]:
    """The search environment's config on the demo's lookup rows (its corpus)."""
    return {"corpus_seed": config.seed, "corpus_size": config.corpus_size, "max_calls": 2}


def build_datasets(data_dir: Path, config: ToolsDemoConfig) -> dict[str, Path]:
    """Five disjoint sets of products ``A*B=`` (A 3 digits, B 2 digits) and corpus lookups ``kNNN?``."""
    from rlexp.environments.interface import search_corpus
    from rlexp.evaluation.arithmetic_task import problem_hash

    rng = random.Random(config.seed)
    corpus = search_corpus(config.seed, config.corpus_size)
    keys = sorted(corpus)
    rng.shuffle(keys)
    seen: set[str] = set()
    data_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for role, size in zip(ROLES, config.sizes, strict=True):
        lines = []
        while len(lines) < size:
            if keys and rng.random() < config.search_share:
                key = keys.pop()
                prompt = f"{key}?"
                seen.add(prompt)
                lines.append(json.dumps({"prompt": prompt, "answer": corpus[key], "problem_hash": problem_hash(prompt),
                                         "env": "search", "config": search_config(config), "gold_docs": [key]}))
                continue
            a, b = rng.randint(100, 999), rng.randint(10, 99)
            prompt = f"{a}*{b}="
            if prompt in seen:
                continue
            seen.add(prompt)
            lines.append(json.dumps({"prompt": prompt, "answer": str(a * b), "problem_hash": problem_hash(prompt)}))
        path = data_dir / f"{role}_{size}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        out[role] = path
    return out


def build_base(models_dir: Path, pool: Path, config: ToolsDemoConfig, *, actions: str = "text") -> Path:
    """Supervise the untrained tiny model on the pool's episodes (agent tokens only). ``actions:
    tool_calls`` (TRL's environment_factory): the calls are the tool-calling chat template's
    (``@calc expression=123*45``), saved with that template and its response template, in
    ``tools-base-calls``; the text episodes' base (``tools-base``) is unchanged."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.episodes import render_user_turn
    from rlexp.environments.interface import SearchEnv, TrajectoryBuilder
    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.experiment.datasets import read_dataset
    from rlexp.models.tiny import build_tiny_model
    from rlexp.trainers.local.env_train import pack_trajectories
    from rlexp.trainers.local.loss import masked_mean
    from rlexp.trainers.local.train import token_logprobs

    out = models_dir / ("tools-base" if actions == "text" else "tools-base-calls")
    if (out / "config.json").exists():
        return out
    untrained = build_tiny_model(models_dir / "tiny-untrained", seed=config.seed)
    tok = AutoTokenizer.from_pretrained(untrained)
    if actions == "tool_calls":
        from rlexp.models.tiny import with_tool_template

        with_tool_template(tok)
    torch.manual_seed(config.seed)
    model = AutoModelForCausalLM.from_pretrained(untrained, dtype=torch.float32)
    problems = read_dataset(pool)
    rng = random.Random(config.seed)
    search = SearchEnv(search_config(config))

    def episode(p: dict[str, Any]):
        b = TrajectoryBuilder(encode_prompt(tok, render_prompt(tok, p["prompt"], "")))
        if rng.random() < config.tool_share:
            if p.get("env") == "search":  # the search tool's own answer to the right query
                key = p["prompt"].rstrip("?")
                call, feedback = f"look {key}", " ".join(f"{k}={search.corpus[k]}" for k in search.search(key))
                tool, arguments = "look", {"key": key}
            else:
                call, feedback = "calc " + p["prompt"].rstrip("="), p["answer"]
                tool, arguments = "calc", {"expression": p["prompt"].rstrip("=")}
            if actions == "tool_calls":
                call = tool_call_text(tok, tool, arguments)
            b.add_agent(encode_prompt(tok, call) + [tok.eos_token_id])
            b.add_env(encode_prompt(tok, render_user_turn(tok, feedback)))
        b.add_agent(encode_prompt(tok, f"\\boxed{{{p['answer']}}}") + [tok.eos_token_id])
        return b.finish("stop")

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.sft_lr)
    # linear decay to a tenth: two tasks share the tiny model, and a constant rate keeps it noisy
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - 0.9 * i / max(1, config.sft_steps))
    model.train()
    for _ in range(config.sft_steps):
        batch = [episode(p) for p in rng.sample(problems, min(config.sft_batch, len(problems)))]
        ids, attn, mask, _ = pack_trajectories(batch, tok.pad_token_id)
        logp, _ = token_logprobs(model, ids, attn)
        loss = -masked_mean(logp, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tool_call_text(tok: Any, name: str, arguments: dict[str, str]) -> str:
    """The text of one tool call as the chat template renders an assistant message that makes it
    (what the model writes after the generation prompt, before EOS)."""
    head = [{"role": "user", "content": "x"}]
    base = tok.apply_chat_template(head, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([*head, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": name, "arguments": arguments}}]}], tokenize=False)
    if not (full.startswith(base) and full.endswith(tok.eos_token)):
        raise ValueError("the chat template does not render a tool call as generation prompt + call + EOS")
    return full[len(base):-len(tok.eos_token)]


def attempt_spec(config: ToolsDemoConfig, datasets: dict[str, Path]) -> str:
    import yaml

    spec = {
        "id": "t1",
        "description": "Demo environment task: GRPO with the agent mask on calculator and search episodes.",
        "intent": {"global_steps": config.global_steps},
        "trainer": {"name": "local", "version": "0.11.0", "gpus": 0},
        "recipe": {"pretrain": "models/tools-base", "advantage_estimator": "group_norm", "n_samples_per_prompt": 8,
                   "rollout_batch_size": 8, "train_batch_size": 32, "micro_train_batch_size": 16,
                   "actor_learning_rate": 2e-4, "lora_rank": 0, "init_kl_coef": 0.01, "eps_clip": 0.2,
                   "temperature": 0.6, "generate_max_len": 14, "eval_steps": 1, "save_steps": config.mid_step,
                   "num_episodes": 1, "max_samples": config.global_steps * 8, "seed": config.seed},
        "datasets": {role: {"path": f"data/{p.name}", "size": config.sizes[i], "prompt_suffix": ""}
                     for i, (role, p) in enumerate(datasets.items())},
        "eval": {"engine": "local", "prompt_suffix": "", "max_tokens": 14},
        "checkpoints": {"mid": config.mid_step},
        "environment": {"name": "calculator", "config": {"max_calls": 2}, "max_turns": 3,
                        "max_tokens_per_turn": 14, "max_total_tokens": 48, "loss": "grpo",
                        "primary_metric": "success"},
    }
    return "# Written by `rlexp demo --task tools`.\n" + yaml.safe_dump(spec, sort_keys=False)


def run_tools_demo(root: Path, *, fast: bool = False, seed: int = 0, tracking_uri: str | None = None,
                   log=print) -> dict[str, Any]:
    """Build, train, evaluate, decide and report ``t1`` under ``root``; a summary with timings."""
    import dataclasses
    import time

    from rlexp.errors import CheckFailed
    from rlexp.experiment.files import atomic_write_text
    from rlexp.experiment.layout import AttemptDir
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.launch import launch
    from rlexp.stages.plan import plan
    from rlexp.stages.report import report

    config = dataclasses.replace(ToolsDemoConfig.fast() if fast else ToolsDemoConfig(), seed=seed)
    root = Path(root).resolve()
    experiment = root / "experiments" / EXPERIMENT
    tracking_uri = tracking_uri or f"sqlite:///{root / 'mlflow.db'}"
    timings: dict[str, float] = {}
    started = time.perf_counter()

    def timed(name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        log(f"demo tools: {name}")
        result = fn(*args, **kwargs)
        timings[name] = round(time.perf_counter() - t0, 1)
        return result

    datasets = timed("datasets", build_datasets, experiment / "data", config)
    timed("base_model", build_base, experiment / "models", datasets["pool"], config)
    attempt = experiment / "t1"
    attempt.mkdir(parents=True, exist_ok=True)
    atomic_write_text(AttemptDir(attempt).spec, attempt_spec(config, datasets))
    planned = timed("plan", plan, attempt)
    if not planned.ok:
        first = planned.errors[0]
        raise CheckFailed(f"demo tools: plan of t1 has error checks, first {first['name']}: {first['rule']}")
    run = timed("launch", launch, attempt, backend="local", tracking_uri=tracking_uri, poll_s=0.5,
                resume=AttemptDir(attempt).metrics.exists())
    # "stopped" by the SOP's early-stop rule is a run that ended as the SOP says: its checkpoints are evaluated
    if run.run and run.run.get("state") not in ("finished", "stopped"):
        raise CheckFailed(f"demo tools: the training run of t1 ended {run.run.get('state')}: {run.run.get('reason')}")
    evaluated = timed("eval", evaluate, attempt, show_progress=False)
    decided = timed("decide", decide, attempt)
    written = timed("report", report, attempt, tracking_uri=tracking_uri)
    timings["total"] = round(time.perf_counter() - started, 1)
    success = {f"{f.checkpoint}/{f.set_role}": round(f.summary.accuracy, 4) for f in evaluated.files}
    return {"experiment": str(experiment), "attempt": str(attempt), "decision": decided.decision,
            "reason": decided.reason, "report": str(written.report), "success": success, "timings": timings}
