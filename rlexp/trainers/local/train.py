"""A GRPO trainer for the CPU, readable top to bottom (cleanrl style), with OpenRLHF's semantics.

    python -m rlexp.backends.local_trainer ATTEMPT_DIR [--resume]

It reads ``ATTEMPT_DIR/attempt.yaml`` (rlexp.spec.load_attempt) and produces what an OpenRLHF run
produces, so every downstream command treats a laptop run and a cluster run alike:

- ``metrics.jsonl`` — one line per global step, OpenRLHF's names (``policy_loss``, ``actor_lr``,
  ``reward``, ``response_length``, ``kl``, ``ppo_clip_ratio``, ``group_reward_std``) plus the
  the diagnostics rlexp adds (``grad_norm`` *before* clipping, ``ratio_max``, ``log_ratio_abs_p99``,
  ``entropy``, ``has_boxed``, ``truncated``) and ``monitor_acc`` on eval steps;
- ``checkpoints/global_step{N}_hf`` — the LoRA adapter (peft format) every ``save_steps``;
- ``checkpoints/state/global_step{N}`` — what ``--resume`` needs to continue exactly.

Semantics followed (OpenRLHF v0.11, read from its source):

- one *global step* = roll out ``rollout_batch_size`` prompts × ``n_samples_per_prompt`` samples,
  then train on them for ``max_epochs`` passes in micro-batches of ``micro_train_batch_size``
  with one optimizer step per ``train_batch_size`` samples (gradient accumulation in between);
- the LR follows ``transformers.get_scheduler("cosine_with_min_lr")`` with warm-up
  ``ceil(max_steps * lr_warmup_ratio)`` and ``min_lr = min_lr_ratio × lr`` (default 0.1), stepped
  once per optimizer step, ``max_steps`` counting optimizer steps — every count (``max_steps``,
  warm-up, global steps per episode, micro-batches per optimizer step) comes from
  :func:`rlexp.training.schedule.compute_steps`, the function ``rlexp plan`` predicts with;
- ``global_step % eval_steps == 0`` evaluates, ``global_step % save_steps == 0`` saves; neither
  fires at the final step unless it is a multiple (a resumable state is still written there).

The loss is pure functions of tensors in :mod:`rlexp.trainers.local.loss` (:func:`group_advantages`,
:func:`policy_loss`, :func:`k3_kl`, :func:`grpo_loss`), which the correctness gates in tests/test_grpo.py
hit directly; the configuration is :mod:`rlexp.trainers.local.config`. This module does the work with
the model, processes and files: rollouts, the update, checkpoints, the loop, the command line.

Randomness: every global step's rollout is sampled with the seed ``(seed, global_step)`` and each
episode's prompt order with ``(seed, episode)``, so a resumed run draws exactly what an
uninterrupted one would; RNG states are saved anyway.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import InputError
from rlexp.experiment.files import append_jsonl, iter_jsonl, make_temp_dir, repair_torn_tail, replace_dir
from rlexp.experiment.layout import STEP_TIME_KEY, AttemptDir, Checkpoint
from rlexp.numbers import json_row
from rlexp.trainers.local import RULES
from rlexp.trainers.local.config import TrainerConfig, config_from_attempt
from rlexp.trainers.local.loss import group_advantages, grpo_loss, masked_mean
from rlexp.training.schedule import fires

if TYPE_CHECKING:
    import torch

    from rlexp.training.schedule import Steps


# =============================================================================== the policy's log-probabilities


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """Log-probability of each token given the ones before it, and the policy entropy there.

    Returns ``(logp, entropy)`` of shape ``[N, T-1]``: position ``t`` scores ``input_ids[:, t+1]``.
    Position ids count real tokens only (as ``generate`` does for left-padded rows), so the
    scored distribution is the one the samples were drawn from.
    """
    import torch

    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    # half-precision logits are scored in float32; float32 and float64 models keep their own precision
    # (a float64 model cast down here would round its gradient to float32's 1e-7)
    logits = out.logits[:, :-1, :]
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    log_softmax = torch.log_softmax(logits, dim=-1)
    logp = log_softmax.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return logp, entropy


# =============================================================================== rollouts


@dataclass
class Rollout:
    """B × G samples of one global step, flattened row-major (prompt-major)."""

    input_ids: Any  # [N, T] prompt (left-padded) + response (right-padded)
    attention_mask: Any  # [N, T]
    action_mask: Any  # [N, T-1]: 1 where position t predicts a response token
    rewards: Any  # [B, G]
    advantages: Any  # [N, T-1] per token
    old_logp: Any  # [N, T-1]
    ref_logp: Any  # [N, T-1]
    stats: dict[str, float] = field(default_factory=dict)


def reward_of(text: str, gold: str) -> float:
    """Exact-match reward through the shared extractor (the same one eval uses)."""
    from rlexp.evaluation.answers import extract_answer, is_correct

    answer, _ = extract_answer(text)
    return 1.0 if answer is not None and is_correct(answer, gold) else 0.0


def collect_rollout(
    model, tokenizer, problems: list[dict], cfg: TrainerConfig, *, seed: int, reference=None, server=None
) -> Rollout:
    """Decode all B × G samples together (KV cache, temperature), score them, and precompute the
    old-policy and reference log-probabilities the update needs. ``server`` (a
    :class:`rlexp.evaluation.engines.vllm_server.VllmRolloutServer` holding this step's adapter) decodes instead
    of ``model.generate``; the log-probabilities are this model's either way."""
    import torch

    from rlexp.evaluation.generation import encode_prompt, generate, render_prompt

    G = cfg.n_samples_per_prompt
    rendered = [render_prompt(tokenizer, p["prompt"], cfg.prompt_suffix) for p in problems]
    if server is not None:
        completions = server.generate_ids(
            [encode_prompt(tokenizer, text) for text in rendered],
            max_new_tokens=cfg.generate_max_len,
            temperature=cfg.temperature,
            num_samples=G,
            seed=seed,
            tokenizer=tokenizer,
        )
    else:
        completions = generate(
            model,
            tokenizer,
            rendered,
            max_new_tokens=cfg.generate_max_len,
            temperature=cfg.temperature,
            num_samples=G,
            seed=seed,
            batch_size=len(problems) * G,  # every sample of the step in one batch
        )
    rows, rewards, has_boxed, truncated, lengths = [], [], [], [], []
    for problem, text, samples in zip(problems, rendered, completions, strict=True):
        prompt_ids = encode_prompt(tokenizer, text)
        group = []
        for c in samples:
            rows.append((prompt_ids, list(c.token_ids)))
            group.append(reward_of(c.text, str(problem["answer"])))
            has_boxed.append(1.0 if "\\boxed{" in c.text else 0.0)
            truncated.append(1.0 if c.finish_reason == "length" else 0.0)
            lengths.append(float(c.completion_tokens))
        rewards.append(group)

    device = next(model.parameters()).device  # the CPU here; CUDA under scripts/gpu-check
    input_ids, attention_mask, action_mask = (t.to(device) for t in pack_rows(rows, tokenizer.pad_token_id))
    reward_tensor = torch.tensor(rewards, dtype=torch.float32, device=device)
    seq_adv = group_advantages(reward_tensor, cfg.advantage_estimator).reshape(-1, 1)
    advantages = seq_adv.expand_as(action_mask) * action_mask

    with torch.no_grad():
        old_logp, entropy = _logprobs_in_chunks(model, input_ids, attention_mask, cfg.micro_train_batch_size)
        ref_logp = reference_logprobs(model, input_ids, attention_mask, cfg.micro_train_batch_size, reference)
    stats = {
        "reward": reward_tensor.mean().item(),
        "group_reward_std": reward_tensor.std(dim=-1).nan_to_num(0.0).mean().item() if G > 1 else 0.0,
        "response_length": sum(lengths) / len(lengths),
        "has_boxed": sum(has_boxed) / len(has_boxed),
        "truncated": sum(truncated) / len(truncated),
        "entropy": masked_mean(entropy, action_mask).item(),
    }
    return Rollout(
        input_ids, attention_mask, action_mask, reward_tensor, advantages, old_logp, ref_logp, stats
    )


def pack_rows(rows: list[tuple[list[int], list[int]]], pad: int):
    """``(prompt_ids, response_ids)`` pairs → ``(input_ids, attention_mask, action_mask)``.

    Prompts are left-padded to a common width and responses right-padded after them, so every
    response starts at the same column; ``action_mask[i, t]`` is 1 where position ``t`` predicts
    a response token (``t + 1`` in ``input_ids``).
    """
    import torch

    prompt_width = max(len(p) for p, _ in rows)
    response_width = max(1, max(len(r) for _, r in rows))
    ids, attn, action = [], [], []
    for prompt_ids, response_ids in rows:
        left = prompt_width - len(prompt_ids)
        right = response_width - len(response_ids)
        ids.append([pad] * left + list(prompt_ids) + list(response_ids) + [pad] * right)
        attn.append([0] * left + [1] * (len(prompt_ids) + len(response_ids)) + [0] * right)
        action.append([0] * (prompt_width - 1) + [1] * len(response_ids) + [0] * right)
    return torch.tensor(ids), torch.tensor(attn), torch.tensor(action, dtype=torch.float32)


def _logprobs_in_chunks(model, input_ids, attention_mask, chunk: int):
    import torch

    parts = [
        token_logprobs(model, input_ids[i : i + chunk], attention_mask[i : i + chunk])
        for i in range(0, input_ids.shape[0], chunk)
    ]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def reference_logprobs(model, input_ids, attention_mask, chunk: int, reference=None):
    """Log-probs under the reference: the base model, i.e. the policy with its LoRA adapter off
    (or the frozen copy ``reference`` of a full fine-tune)."""
    if reference is not None:
        return _logprobs_in_chunks(reference, input_ids, attention_mask, chunk)[0]
    with model.disable_adapter():
        return _logprobs_in_chunks(model, input_ids, attention_mask, chunk)[0]


# =============================================================================== checkpoints


def adapter_dir(attempt_dir: Path, global_step: int) -> Path:
    return AttemptDir(attempt_dir).checkpoint_files.adapter(global_step)


def state_dir(attempt_dir: Path, global_step: int) -> Path:
    return AttemptDir(attempt_dir).checkpoint_files.resume_state(global_step, RULES)


def save_adapter(model, tokenizer, attempt_dir: Path, global_step: int) -> Path:
    """``checkpoints/global_step{N}_hf``: the LoRA adapter (or the full model when lora_rank is 0)
    and the tokenizer, written to a temporary directory and renamed into place."""

    final = adapter_dir(attempt_dir, global_step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final)  # also removes what a killed run left here
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp, save_jinja_files=False)
    sort_target_modules(tmp / "adapter_config.json")
    replace_dir(tmp, final)
    return final


def sort_target_modules(path: Path) -> None:
    """peft writes ``target_modules`` in the iteration order of a set, which follows Python's hash
    seed: sorted, ``adapter_config.json`` (and so ``adapter_sha256``) is a function of the recipe.
    Nothing that loads an adapter reads the list's order."""
    import json

    if not path.exists():  # a full fine-tune (lora_rank 0) writes a model, not an adapter
        return
    config = json.loads(path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        path.write_text(json.dumps(config, indent=2, sort_keys=True))


def save_state(
    model, optimizer, scheduler, attempt_dir: Path, global_step: int, extra: dict[str, Any]
) -> Path:
    """Everything ``--resume`` needs: trainable weights, optimizer, scheduler, RNG states, position."""
    import random

    import torch

    final = state_dir(attempt_dir, global_step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(final)  # also removes what a killed run left here
    trainable = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
    torch.save(
        {
            "global_step": global_step,
            "trainable": trainable,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            **extra,
        },
        tmp / "trainer_state.pt",
    )
    replace_dir(tmp, final)
    return final


def latest_state(attempt_dir: Path) -> Checkpoint | None:
    """The newest complete resumable state (its ``trainer_state.pt`` written, in the checkpoint's
    ``path``), or None."""
    return AttemptDir(attempt_dir).checkpoint_files.latest_resume_state(RULES, complete="trainer_state.pt")


def drop_stop_checkpoint(attempt_dir: Path, step: int, save_steps: int, total: int) -> None:
    """A run stopped by SIGTERM saves its adapter at the step it stopped on, which may be off the
    save schedule; resumed, that step is no longer the end of the run, so its adapter goes: the
    resumed run's checkpoints are the uninterrupted run's, none more."""
    import shutil

    if 0 < step < total and not fires(step, save_steps):
        shutil.rmtree(adapter_dir(attempt_dir, step), ignore_errors=True)


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep metric rows up to ``last_step``: a resumed run re-does later steps, never duplicates."""
    from rlexp.experiment.files import atomic_write_text

    if not path.exists():
        return
    repair_torn_tail(path)
    import json

    kept = [r for _, r in iter_jsonl(path) if int(r.get("global_step", 0)) <= last_step]
    atomic_write_text(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))


# =============================================================================== evaluation


def monitor_accuracy(model, tokenizer, problems: list[dict], cfg: TrainerConfig) -> float:
    """Greedy exact-match accuracy on the in-run OOD monitor set (one batched decode)."""
    from rlexp.evaluation.generation import generate, render_prompt

    rendered = [render_prompt(tokenizer, p["prompt"], cfg.monitor_suffix) for p in problems]
    outputs = generate(
        model, tokenizer, rendered, max_new_tokens=cfg.eval_max_len, temperature=0.0, batch_size=256
    )
    hits = sum(
        reward_of(samples[0].text, str(p["answer"])) for p, samples in zip(problems, outputs, strict=True)
    )
    return hits / len(problems) if problems else 0.0


# =============================================================================== the training loop


class _StopFlag:
    """SIGTERM asks for a graceful stop: finish the global step, save, exit 0."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:  # signal handler signature
        self.requested = True


def train(cfg: TrainerConfig, attempt_dir: Path, *, resume: bool = False, log=print, env_task=None,
          rollout_server=None) -> int:
    """Run (or resume) the GRPO training described by ``cfg``; returns the last global step done.
    ``env_task`` (rlexp.trainers.local.env_train.EnvTask, which ``python -m rlexp.backends.env_trainer``
    passes) plays an environment task's episodes instead of the single-turn rollout.

    The rollout engine is ``RLEXP_ROLLOUT_ENGINE`` (:func:`rollout_engine`): ``transformers`` (the
    default) decodes with the policy itself; ``vllm`` starts one ``vllm serve`` for the run
    (:func:`start_rollout_server`) and loads each global step's adapter into it before that step's
    rollout. ``rollout_server``: a server already started (a test shares one); the caller closes it."""
    import random

    import torch

    from rlexp.experiment.datasets import read_dataset

    attempt_dir = Path(attempt_dir)
    metrics_path = AttemptDir(attempt_dir).metrics
    model_dir, engine = _check_start(cfg, attempt_dir, resume, env_task, rollout_server)
    stop = _StopFlag()
    previous_handler = signal.signal(signal.SIGTERM, stop)

    # ---- seed everything; data and models
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    pool = read_dataset(cfg.pool_path)[: cfg.max_samples]  # OpenRLHF: --max_samples caps the prompts used
    monitor = read_dataset(cfg.monitor_path) if cfg.monitor_path is not None else []
    tokenizer, model, reference = _load_policy(cfg, model_dir)

    # ---- optimizer and the LR schedule (OpenRLHF: cosine_with_min_lr, stepped per optimizer step),
    # built with the counts rlexp plan predicts (rlexp.training.schedule owns the step math)
    steps = cfg.steps(len(pool))
    global_steps_total = steps.global_steps_total
    if cfg.max_global_steps is not None:
        global_steps_total = min(global_steps_total, cfg.max_global_steps)
    if cfg.environment is not None and env_task is None:
        raise InputError(AttemptDir(attempt_dir).spec, "environment",
                         "an environment task trains through python -m rlexp.backends.env_trainer")
    optimizer, scheduler = _optimizer_and_schedule(model, cfg, steps)

    # ---- resume: weights, optimizer, scheduler, RNG; drop metric rows after the checkpoint
    start_step = _resume_state(attempt_dir, model, optimizer, scheduler, log) if resume else 0
    if resume:
        truncate_metrics(metrics_path, start_step)
        drop_stop_checkpoint(attempt_dir, start_step, cfg.save_steps, global_steps_total)

    # ---- the loop: one global step = rollout B×G, then train in micro-batches
    steps_per_episode = steps.global_steps_per_episode
    global_step = start_step
    server, own_server = rollout_server, False
    adapters = Path(tempfile.mkdtemp(prefix="rlexp-rollout-adapters-")) if engine == "vllm" else None
    try:
        if engine == "vllm" and server is None:
            server, own_server = start_rollout_server(model_dir, cfg, attempt_dir), True
        while global_step < global_steps_total:
            global_step += 1
            started = time.perf_counter()
            episode, batch_index = divmod(global_step - 1, steps_per_episode)
            problems = _prompt_batch(pool, cfg, episode, batch_index)

            model.eval()
            if server is not None:  # the policy as it is now, to the server (as OpenRLHF syncs LoRA to vLLM)
                sync_adapter(server, model, adapters, global_step)
            seed = cfg.seed * 1_000_003 + global_step
            if env_task is None:
                rollout = collect_rollout(model, tokenizer, problems, cfg, seed=seed, reference=reference,
                                          server=server)
                row = train_on_rollout(model, optimizer, scheduler, rollout, cfg, steps)
            else:
                rollout = env_task.rollout(model, tokenizer, problems, seed=seed, reference=reference)
                row = train_on_rollout(model, optimizer, scheduler, rollout, cfg, steps, loss=env_task.loss)
            row.update(rollout.stats)

            if fires(global_step, cfg.eval_steps) and monitor:
                row["monitor_acc"] = (monitor_accuracy(model, tokenizer, monitor, cfg) if env_task is None
                                      else env_task.monitor_success(model, tokenizer, monitor))
            row["step_time_s"] = round(time.perf_counter() - started, 4)
            row[STEP_TIME_KEY] = round(time.time(), 3)  # the step's own time: MLflow's timestamp of its metrics
            # a NaN/inf loss is data: strict JSON's "NaN"/"Infinity" (rlexp.numbers.json_row)
            append_jsonl(metrics_path, json_row({"global_step": global_step, **row}))
            log(_progress_line(global_step, global_steps_total, row))

            _save_checkpoints(model, tokenizer, optimizer, scheduler, attempt_dir, cfg, global_step, episode,
                              last=global_step == global_steps_total, stop=stop)
            if stop.requested:
                log(f"SIGTERM: stopped after global step {global_step}")
                break
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if own_server:
            server.close()
        if adapters is not None:
            import shutil

            shutil.rmtree(adapters, ignore_errors=True)
    return global_step


def _prompt_batch(pool: list[dict], cfg: TrainerConfig, episode: int, batch_index: int) -> list[dict]:
    """The prompts of one global step: the ``batch_index``-th slice of the pool shuffled by the
    episode's own seed, so a resumed run draws the same batches."""
    import random

    order = list(range(len(pool)))
    random.Random(f"{cfg.seed}:episode:{episode}").shuffle(order)
    chosen = order[batch_index * cfg.rollout_batch_size : (batch_index + 1) * cfg.rollout_batch_size]
    return [pool[i] for i in chosen]


def _save_checkpoints(model: Any, tokenizer: Any, optimizer: Any, scheduler: Any, attempt_dir: Path,
                      cfg: TrainerConfig, global_step: int, episode: int, *, last: bool, stop: _StopFlag) -> None:
    """The adapter every ``save_steps`` and on SIGTERM; the resume state then, and after the last step
    (``stop`` is read at each test: a SIGTERM that lands while the adapter is written still saves the state)."""
    if fires(global_step, cfg.save_steps) or stop.requested:
        save_adapter(model, tokenizer, attempt_dir, global_step)
    if fires(global_step, cfg.save_steps) or stop.requested or last:
        save_state(model, optimizer, scheduler, attempt_dir, global_step, {"episode": episode})


def _check_start(cfg: TrainerConfig, attempt_dir: Path, resume: bool, env_task: Any,
                 rollout_server: Any) -> tuple[Path, str]:
    """Refuse a run that cannot start (its config, a fresh run over existing metrics, a base model that is
    not a local model directory, an engine that cannot train this recipe) before anything is loaded;
    return the model's directory and the rollout engine."""
    from rlexp.models.base_models import loadable

    cfg.validate(AttemptDir(attempt_dir).spec)
    metrics_path = AttemptDir(attempt_dir).metrics
    if not resume and metrics_path.exists() and metrics_path.stat().st_size > 0:
        raise InputError(metrics_path, None, "exists: pass --resume to continue this attempt")
    model_dir = loadable(cfg.pretrain, AttemptDir(attempt_dir).spec)  # a .gguf: its converted directory
    if not (Path(model_dir) / "config.json").exists():
        raise InputError(
            AttemptDir(attempt_dir).spec, "recipe.pretrain", f"{cfg.pretrain} is not a local model directory"
        )
    engine = rollout_engine() if rollout_server is None else "vllm"
    if engine == "vllm" and (env_task is not None or cfg.lora_rank < 1):
        raise InputError("RLEXP_ROLLOUT_ENGINE", None, "the rollout engine 'vllm' takes single-turn LoRA "
                         "training only (an environment task or a full fine-tune: use 'transformers')")
    return Path(model_dir), engine


def _load_policy(cfg: TrainerConfig, model_dir: Path) -> tuple[Any, Any, Any]:
    """The tokenizer, the policy (a LoRA adapter over the base, or the base itself for a full
    fine-tune) and the reference: None where it is the policy with its adapter disabled, else a frozen
    copy of the base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.generation import torch_device

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(torch_device())
    if cfg.base_name is not None:
        # peft names the base in every adapter it saves (adapter_config.json, the model card): the
        # recipe's name for it, not the directory of this machine it was loaded from
        base.config.name_or_path = base.name_or_path = cfg.base_name
    modules = cfg.target_modules
    lora = LoraConfig(
        r=max(1, cfg.lora_rank),
        lora_alpha=cfg.lora_alpha,
        target_modules=modules[0] if modules == ("all-linear",) else list(modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    if cfg.lora_rank >= 1:
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            return tokenizer, get_peft_model(base, lora), None  # reference = this model, adapter disabled
    import copy  # full fine-tune: the reference is a frozen copy of the base

    return tokenizer, base, copy.deepcopy(base).eval().requires_grad_(False)


def _optimizer_and_schedule(model: Any, cfg: TrainerConfig, steps: Steps) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and transformers' ``cosine_with_min_lr`` as OpenRLHF builds
    it, with the warm-up and the optimizer-step total of rlexp's step math."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.actor_learning_rate,
        betas=cfg.adam_betas,
        weight_decay=cfg.l2,
    )
    scheduler = get_scheduler(
        "cosine_with_min_lr",
        optimizer,
        num_warmup_steps=steps.warmup_steps,
        num_training_steps=steps.optimizer_steps_total,
        scheduler_specific_kwargs={"min_lr_rate": steps.min_lr_rate},  # v0.11 passes the rate itself
    )
    return optimizer, scheduler


def _resume_state(attempt_dir: Path, model: Any, optimizer: Any, scheduler: Any, log) -> int:
    """Load the latest saved state (trainable weights, optimizer, scheduler, both RNGs) into the run;
    return its global step (0 where there is none)."""
    import random

    import torch

    latest = latest_state(attempt_dir)
    if latest is None:
        return 0
    state = torch.load(latest.path / "trainer_state.pt", weights_only=False)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state["trainable"].items():
            params[name].copy_(value)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    log(f"resumed from {latest.name}")
    return int(state["global_step"])


ROLLOUT_ENGINES = ("transformers", "vllm")


def rollout_engine() -> str:
    """``RLEXP_ROLLOUT_ENGINE``: who decodes the local trainer's rollouts (default ``transformers``).
    ``vllm`` is a speed choice, like ``RLEXP_DEVICE``: under greedy decoding its samples equal
    transformers' token for token (tests/test_vllm_rollouts.py); sampled ones come from vLLM's
    random stream, so a run is repeatable per engine, not across them."""
    import os

    engine = os.environ.get("RLEXP_ROLLOUT_ENGINE", "transformers")
    if engine not in ROLLOUT_ENGINES:
        raise InputError("RLEXP_ROLLOUT_ENGINE", None, f"one of {', '.join(ROLLOUT_ENGINES)}, got {engine!r}")
    return engine


def start_rollout_server(model_dir: Path, cfg: TrainerConfig, attempt_dir: Path):
    """One ``vllm serve`` of the base model from ``RLEXP_VLLM_PYTHON`` (default: this checkout's
    ``.venv-vllm``, which scripts/setup-vllm makes), its log in ``ATTEMPT_DIR/logs/vllm-rollouts.log``."""
    import json
    import os

    from rlexp.evaluation.engines.vllm_server import VllmRolloutServer

    python = os.environ.get("RLEXP_VLLM_PYTHON") or str(Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin"
                                                        / "python")
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    logs = Path(attempt_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return VllmRolloutServer(model_dir, python, max_lora_rank=max(1, cfg.lora_rank),
                             max_model_len=int(config.get("max_position_embeddings") or 2048), seed=cfg.seed,
                             log_path=logs / "vllm-rollouts.log",
                             threads=int(os.environ.get("RLEXP_TORCH_THREADS", "1") or 1))


def sync_adapter(server, model, adapters: Path, global_step: int) -> None:
    """Save the policy's LoRA adapter and load it into ``server`` under a name of its own
    (``policy-step{N}``); the previous step's copy on disk goes once the server holds the new one."""
    import shutil

    path = adapters / f"step{global_step}"
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path)
    server.load_adapter(f"policy-step{global_step}", path)
    for old in adapters.iterdir():
        if old.name != path.name:
            shutil.rmtree(old, ignore_errors=True)


def train_on_rollout(
    model, optimizer, scheduler, rollout: Rollout, cfg: TrainerConfig, steps: Steps, *, loss=None
) -> dict[str, float]:
    """``max_epochs`` passes over the rollout in micro-batches; an optimizer step every
    ``train_batch_size`` samples. Returns the step's metrics (policy loss and KL: means over
    optimizer steps; the clip fraction: over micro-batches). ``loss`` replaces :func:`grpo_loss`
    (same signature; environment tasks pass GSPO's).

    Each micro-batch's loss is its share of the optimizer step's: normalised by the whole step's
    counts (``step_mask``, rlexp.trainers.local.loss.aggregate), so the accumulated gradient is the
    step's loss's, whatever ``micro_train_batch_size`` is (a token mean per micro-batch divided by
    the accumulation count would weigh the tokens of short micro-batches more)."""
    import torch

    loss_fn = grpo_loss if loss is None else loss
    if getattr(cfg, "loss_agg_mode", None) is not None:  # recipe.loss_agg_mode; unstated: the loss's own
        from functools import partial

        loss_fn = partial(loss_fn, agg=cfg.loss_agg_mode, max_tokens=cfg.loss_token_budget)
    model.train()
    n = rollout.input_ids.shape[0]
    micro = cfg.micro_train_batch_size
    accumulation = int(steps.micro_batches_per_optimizer_step)  # validate() made it whole
    sums: dict[str, float] = {"policy_loss": 0.0, "kl": 0.0, "ppo_clip_ratio": 0.0}
    ratio_max, abs_log_ratios = 0.0, []
    grad_norms, micro_batches, step_groups = [], 0, 0
    optimizer.zero_grad(set_to_none=True)  # a partial accumulation of the previous step never leaks in
    for _epoch in range(cfg.max_epochs):
        for k, start in enumerate(range(0, n, micro)):
            sl = slice(start, start + micro)
            if k % accumulation == 0:  # the optimizer step this micro-batch belongs to: its rows' mask
                step_mask = rollout.action_mask[start:start + micro * accumulation]
                step_groups += 1
            logp, _ = token_logprobs(model, rollout.input_ids[sl], rollout.attention_mask[sl])
            mask = rollout.action_mask[sl]
            parts = loss_fn(
                logp,
                rollout.old_logp[sl],
                rollout.ref_logp[sl],
                rollout.advantages[sl],
                mask,
                eps_clip=cfg.eps_clip,
                kl_coef=cfg.init_kl_coef,
                step_mask=step_mask,
            )
            parts.loss.backward()  # this micro-batch's share of the step's loss (normalised by the whole step)
            micro_batches += 1
            sums["policy_loss"] += parts.policy_loss.item()
            sums["kl"] += parts.kl.item()
            sums["ppo_clip_ratio"] += parts.clip_fraction.item()
            with torch.no_grad():
                log_ratio = (logp - rollout.old_logp[sl])[mask.bool()]
                if log_ratio.numel():
                    ratio_max = max(ratio_max, log_ratio.exp().max().item())
                    abs_log_ratios.append(log_ratio.abs())
            if (k + 1) % accumulation == 0:
                # clip_grad_norm_ returns the total norm *before* clipping: the number to watch
                norm = torch.nn.utils.clip_grad_norm_(
                    [p for p in model.parameters() if p.requires_grad], cfg.max_norm
                )
                grad_norms.append(float(norm))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
    all_abs = torch.cat(abs_log_ratios) if abs_log_ratios else torch.zeros(1)
    return {
        "policy_loss": sums["policy_loss"] / step_groups,  # the shares of a step sum to its loss
        # OpenRLHF >= 0.9.8 logs get_last_lr() after the step's last micro-batch: the LR the
        # *next* optimizer step will apply (rlexp.training.schedule.logged_actor_lr predicts the same number)
        "actor_lr": scheduler.get_last_lr()[0],
        "kl": sums["kl"] / step_groups,
        "ppo_clip_ratio": sums["ppo_clip_ratio"] / micro_batches,
        "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
        "ratio_max": ratio_max,
        "log_ratio_abs_p99": torch.quantile(all_abs.float(), 0.99).item(),
    }


def _progress_line(step: int, total: int, row: dict[str, Any]) -> str:
    monitor = f" monitor_acc={row['monitor_acc']:.3f}" if "monitor_acc" in row else ""
    return (
        f"Global step {step}/{total}: reward={row['reward']:.3f} kl={row['kl']:.4f} "
        f"actor_lr={row['actor_lr']:.3e} grad_norm={row['grad_norm']:.3f} "
        f"time={row['step_time_s']:.2f}s{monitor}"
    )


# =============================================================================== entry point


def main(argv: list[str] | None = None) -> int:
    """``python -m rlexp.backends.local_trainer ATTEMPT_DIR [--resume]`` (that module's name is the
    one every launch records; it calls this)."""
    from rlexp.trainers.local.launch import LOCAL_TRAINER_MODULE

    return run_trainer(f"python -m {LOCAL_TRAINER_MODULE}", __doc__.split("\n")[0], argv)


def run_trainer(prog: str, description: str, argv: list[str] | None, task_of=None) -> int:
    """The trainer processes' command line (``ATTEMPT_DIR [--resume]``): thread count, attempt,
    configuration, :func:`train`; bad input is one line, exit 2. ``task_of(att, cfg)`` returns the
    environment task of an environment trainer (:mod:`rlexp.trainers.local.env_train`), None for this one."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("attempt_dir", type=Path)
    parser.add_argument("--resume", action="store_true", help="continue from the latest saved state")
    args = parser.parse_args(argv)
    try:
        from rlexp.evaluation.generation import pin_torch_threads
        from rlexp.spec import load_attempt

        pin_torch_threads()
        att = load_attempt(args.attempt_dir)
        cfg = config_from_attempt(att)
        extra = {} if task_of is None else {"env_task": task_of(att, cfg)}
        train(cfg, Path(att.attempt_dir), resume=args.resume, log=lambda s: print(s, flush=True), **extra)
    except InputError as exc:
        print(f"rlexp: {exc.one_line()}", file=sys.stderr)
        return 2
    return 0


