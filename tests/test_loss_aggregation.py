"""The local trainer's loss aggregation: exact, and independent of ``micro_train_batch_size``.

References are written here from the papers' definitions, with Python loops over sequences and
tokens (|o_i| the agent tokens of sequence i, N the sequences that hold any, ℓ_it a token's loss):
DAPO's token-level mean Σ_i Σ_t ℓ_it / Σ_i |o_i|; DeepSeekMath's GRPO (and GSPO) 1/N Σ_i 1/|o_i| Σ_t ℓ_it;
the sequence mean of token sums 1/N Σ_i Σ_t ℓ_it; Dr. GRPO 1/(N·L) Σ_i Σ_t ℓ_it with L a constant.
"""

from __future__ import annotations

import copy
import math
import types

import pytest

torch = pytest.importorskip("torch")

from rlexp.trainers.local.loss import AGG_MODES, aggregate  # noqa: E402

# agent tokens per row: unequal lengths, and one row with none (an episode that never acted)
LENGTHS = [3, 7, 1, 0, 5, 2]
T = 8
BUDGET = 16  # Dr. GRPO's constant


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    per_token = torch.randn(len(LENGTHS), T, generator=g, dtype=torch.float64)
    mask = torch.zeros(len(LENGTHS), T, dtype=torch.float64)
    for i, n in enumerate(LENGTHS):
        mask[i, T - n:] = 1.0  # the response at the end, as the trainer's rows have it
    return per_token, mask


def reference(per_token, mask, mode):
    values = per_token.tolist()
    rows = [[v for v, m in zip(row, mrow, strict=True) if m] for row, mrow in zip(values, mask.tolist(), strict=True)]
    acting = [r for r in rows if r]
    n = len(acting)
    if mode == "token-mean":
        return sum(sum(r) for r in acting) / sum(len(r) for r in acting)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in acting) / n
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in acting) / n
    if mode == "seq-mean-token-sum-norm":
        return sum(sum(r) for r in acting) / (n * BUDGET)
    raise AssertionError(mode)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("micro", [1, 2, 3, len(LENGTHS)])
def test_micro_batches_sum_to_the_papers_formula(mode, micro):
    per_token, mask = _batch()
    total = sum(aggregate(per_token[s:s + micro], mask[s:s + micro], mode, step_mask=mask, max_tokens=BUDGET)
                for s in range(0, len(LENGTHS), micro))
    assert float(total) == pytest.approx(reference(per_token, mask, mode), rel=1e-12)


def test_the_modes_differ_and_bad_input_is_refused():
    per_token, mask = _batch(1)
    values = {mode: reference(per_token, mask, mode) for mode in AGG_MODES}
    assert len({round(v, 9) for v in values.values()}) == len(AGG_MODES)  # each mode is its own number
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(per_token, mask, "sum")
    with pytest.raises(ValueError, match="token budget"):
        aggregate(per_token, mask, "seq-mean-token-sum-norm")


# ----------------------------------------------------------------------------- the training loop


def _rollout(model, seed=0):
    from rlexp.trainers.local.train import Rollout, token_logprobs

    g = torch.Generator().manual_seed(seed)
    n, length = len(LENGTHS), T + 1
    input_ids = torch.randint(3, model.config.vocab_size, (n, length), generator=g)
    attention = torch.ones(n, length, dtype=torch.long)
    mask = torch.zeros(n, T)
    for i, k in enumerate(LENGTHS):
        mask[i, T - k:] = 1.0
    with torch.no_grad():
        logp, _ = token_logprobs(model, input_ids, attention)
    old = (logp + 0.05 * torch.randn(logp.shape, generator=g)) * mask  # ratios away from 1
    advantages = torch.tensor([1.0, -0.5, 2.0, 0.7, -1.5, 0.3]).unsqueeze(-1) * mask
    return Rollout(input_ids=input_ids, attention_mask=attention, action_mask=mask, rewards=torch.zeros(1, n),
                   advantages=advantages, old_logp=old, ref_logp=old.clone())


def _reference_loss(logp, r, mode, eps=0.2, kl_coef=0.1):
    """The loss of the whole step from the formulas: PPO's clipped token terms (GRPO) or GSPO's
    sequence ratio, aggregated as the papers do, plus kl_coef × the token-mean k3 KL."""
    total_pg, terms_kl, tokens = [], 0.0, 0
    for i in range(logp.shape[0]):
        idx = [t for t in range(T) if r.action_mask[i, t] > 0]
        if not idx:
            continue
        a = r.advantages[i, idx[0]]
        if mode == "seq-mean-token-mean":  # GSPO: s_i = exp(mean_t log π/π_old), -min(s·A, clip(s)·A)
            s = torch.exp(sum(logp[i, t] - r.old_logp[i, t] for t in idx) / len(idx))
            total_pg.append(-torch.min(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a))
        else:
            for t in idx:
                ratio = torch.exp(logp[i, t] - r.old_logp[i, t])
                total_pg.append(-torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a))
        for t in idx:
            x = r.ref_logp[i, t] - logp[i, t]
            terms_kl = terms_kl + torch.exp(x) - 1 - x
            tokens += 1
    pg = sum(total_pg) / len(total_pg)  # token-mean over tokens, or the mean over sequences for GSPO
    return pg + kl_coef * terms_kl / tokens


@pytest.mark.parametrize(("loss_type", "mode"), [("grpo", "token-mean"), ("gspo", "seq-mean-token-mean")])
def test_one_optimizer_step_is_the_same_for_micro_batch_1_2_and_whole(tiny_base_model, loss_type, mode):
    """``train_on_rollout`` with SGD (lr 1, no clipping): the parameter change is minus the gradient of
    the step's loss, which must equal the gradient of the formula's loss over the whole batch at
    micro-batch sizes 1, 2 and 6 (the old per-micro-batch token mean ÷ accumulation did not)."""
    from transformers import AutoModelForCausalLM

    from rlexp.trainers.local.config import EnvTrainingOptions
    from rlexp.trainers.local.loss import loss_for
    from rlexp.trainers.local.train import token_logprobs, train_on_rollout

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_base_model).to(torch.float64)
    base.config.use_cache = False
    rollout = _rollout(base)
    # the reference gradient: the formula's loss over the whole batch, one backward
    ref_model = copy.deepcopy(base)
    logp, _ = token_logprobs(ref_model, rollout.input_ids, rollout.attention_mask)
    _reference_loss(logp, rollout, mode).backward()
    expected = {name: p.grad.clone() for name, p in ref_model.named_parameters() if p.grad is not None}
    loss = loss_for(EnvTrainingOptions(loss_type=loss_type))
    changes = {}
    for micro in (1, 2, len(LENGTHS)):
        model = copy.deepcopy(base)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        cfg = types.SimpleNamespace(micro_train_batch_size=micro, max_epochs=1, eps_clip=0.2, init_kl_coef=0.1,
                                    max_norm=math.inf)  # fmt: skip
        steps = types.SimpleNamespace(micro_batches_per_optimizer_step=len(LENGTHS) // micro)
        train_on_rollout(model, opt, sched, rollout, cfg, steps, loss=loss)
        changes[micro] = {name: before[name] - p.detach() for name, p in model.named_parameters() if name in expected}
    # the micro-batch size does not matter (float64: rounding only) ...
    for micro in (1, 2):
        for name, change in changes[micro].items():
            torch.testing.assert_close(change, changes[len(LENGTHS)][name], rtol=1e-12, atol=1e-15)
    # ... and the step is the formula's, to float64 rounding, for GRPO and for GSPO's per-token form (the
    # sequence ratio's value at every token, rlexp.trainers.local.loss): the log-probabilities keep the
    # model's float64 (scored in float32 they agreed only to ~2e-7: the sequence ratio's float32 rounding)
    rtol = 1e-9
    for name, change in changes[len(LENGTHS)].items():
        scale = float(expected[name].abs().max())
        torch.testing.assert_close(change, expected[name], rtol=rtol, atol=rtol * scale)


def test_the_old_per_micro_batch_mean_depended_on_the_micro_batch_size():
    """What the trainer did before (a token mean within each micro-batch ÷ the accumulation count)
    gives another number for micro-batch 1 than for the whole batch on the same tokens: the test
    above would fail on it."""
    per_token, mask = _batch()
    old_micro_1 = sum(float((per_token[i] * mask[i]).sum() / mask[i].sum().clamp(min=1)) / len(LENGTHS)
                      for i in range(len(LENGTHS)))
    assert old_micro_1 != pytest.approx(reference(per_token, mask, "token-mean"), rel=1e-3)
