"""The local trainer's loss aggregation: exact, and independent of ``micro_train_batch_size``.

References are written here from the papers' definitions, with Python loops over sequences and
tokens (|o_i| the agent tokens of sequence i, N the sequences that hold any, ℓ_it a token's loss):
DAPO's token-level mean Σ_i Σ_t ℓ_it / Σ_i |o_i|; DeepSeekMath's GRPO (and GSPO) 1/N Σ_i 1/|o_i| Σ_t ℓ_it;
the sequence mean of token sums 1/N Σ_i Σ_t ℓ_it; Dr. GRPO 1/(N·L) Σ_i Σ_t ℓ_it with L a constant.

The trainers' own aggregation is run on the same tensors: verl 0.9.1's ``agg_loss`` (taken from the
wheel's ``core_algos.py`` by AST, as tests/test_group_of_one.py takes its estimators) for all four
modes, and TRL 1.16's ``GRPOTrainer._compute_loss`` itself (in .venv-trl, on a stand-in ``self``
that hands it the log-probs) for the loss types rlexp maps a mode to (``dapo``, ``grpo``, ``dr_grpo``).
"""

from __future__ import annotations

import ast
import copy
import json
import math
import os
import subprocess
import types
import zipfile

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


# ----------------------------------------------------------------------------- the whole local loss


def _step_tensors(lengths=LENGTHS, seed=3):
    """Log-probs, old and reference log-probs, per-token advantages and the agent mask of one
    optimizer step (float64; ratios away from 1 so that the clip bites on some tokens)."""
    g = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros(n, T, dtype=torch.float64)
    for i, k in enumerate(lengths):
        mask[i, T - k:] = 1.0
    logp = -torch.rand(n, T, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(n, T, generator=g, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(n, T, generator=g, dtype=torch.float64)
    adv = torch.randn(n, 1, generator=g, dtype=torch.float64).expand(n, T).clone()
    return logp, old, ref, adv, mask


def _token_losses(logp, old, ref, adv, eps, kl_coef):
    """ℓ_it from the formulas, token by token: PPO's −min(r·A, clip(r, 1−ε, 1+ε)·A) plus kl_coef
    × Schulman's k3 e^x − 1 − x with x = log π_ref − log π."""
    out = []
    for i in range(logp.shape[0]):
        row = []
        for t in range(T):
            r = math.exp(float(logp[i, t] - old[i, t]))
            a = float(adv[i, t])
            x = float(ref[i, t] - logp[i, t])
            row.append(-min(r * a, min(max(r, 1 - eps), 1 + eps) * a) + kl_coef * (math.exp(x) - 1 - x))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_the_local_loss_is_the_papers_for_micro_batch_1_2_and_whole(mode):
    """``grpo_loss`` with ``agg`` (what the trainer calls when the recipe states loss_agg_mode):
    the micro-batches' losses sum to the formula's aggregation of the whole step's per-token
    losses, the KL term aggregated by the same mode (as verl aggregates its KL loss)."""
    from rlexp.trainers.local.loss import grpo_loss

    logp, old, ref, adv, mask = _step_tensors()
    expected = reference(_token_losses(logp, old, ref, adv, 0.2, 0.1), mask, mode)
    for micro in (1, 2, len(LENGTHS)):
        total = sum(float(grpo_loss(logp[s:s + micro], old[s:s + micro], ref[s:s + micro], adv[s:s + micro],
                                    mask[s:s + micro], eps_clip=0.2, kl_coef=0.1, step_mask=mask, agg=mode,
                                    max_tokens=BUDGET).loss)
                    for s in range(0, len(LENGTHS), micro))  # fmt: skip
        assert total == pytest.approx(expected, rel=1e-12), micro


def test_unstated_the_local_loss_is_as_before():
    """No ``agg``: the policy loss and the KL term token-mean (GRPO), GSPO's policy loss by sequence
    and its KL term token-mean — what the trainer did before the key existed; GSPO with another
    mode is refused (``rlexp plan`` refuses it first)."""
    from rlexp.trainers.local.loss import grpo_loss, gspo_loss

    logp, old, ref, adv, mask = _step_tensors()
    stated = grpo_loss(logp, old, ref, adv, mask, eps_clip=0.2, kl_coef=0.1, agg="token-mean")
    unstated = grpo_loss(logp, old, ref, adv, mask, eps_clip=0.2, kl_coef=0.1)
    assert float(unstated.loss) == float(stated.loss)
    kl = reference(_token_losses(logp, logp, ref, adv, 0.2, 1.0) - _token_losses(logp, logp, logp, adv, 0.2, 0.0),
                   mask, "token-mean")  # the k3 term alone (ratio 1, the same advantages cancel)
    gspo = gspo_loss(logp, old, ref, adv, mask, eps_low=3e-4, eps_high=4e-4, kl_coef=1.0)
    assert float(gspo.kl) == pytest.approx(kl, rel=1e-12)
    with pytest.raises(ValueError, match="GSPO aggregates seq-mean-token-mean"):
        gspo_loss(logp, old, ref, adv, mask, eps_low=3e-4, eps_high=4e-4, kl_coef=0.1, agg="token-mean")


# ----------------------------------------------------------------------------- verl 0.9.1's agg_loss

VERL_FILES = {"verl/trainer/ppo/core_algos.py": "agg_loss", "verl/utils/torch_functional.py": "masked_sum"}


@pytest.fixture(scope="module")
def verl_agg_loss():
    """``agg_loss`` and the ``masked_sum`` it calls (as ``verl_F.masked_sum``), from the 0.9.1 wheel."""
    from rlexp.trainers.verl import releases as verl_releases

    try:
        wheel = verl_releases.wheel_for("0.9.1")
    except verl_releases.ReleaseError as exc:
        if os.environ.get("CI"):
            wheel = verl_releases.fetch(verl_releases.listed_releases()[0])
        else:
            pytest.skip(str(exc))
    namespace: dict = {"torch": torch, "Optional": __import__("typing").Optional}
    with zipfile.ZipFile(wheel) as archive:
        for path, name in VERL_FILES.items():
            (node,) = [n for n in ast.parse(archive.read(path).decode()).body
                       if isinstance(n, ast.FunctionDef) and n.name == name]
            node.decorator_list, node.returns = [], None
            for arg in [*node.args.args, *node.args.kwonlyargs]:
                arg.annotation = None
            exec(compile(ast.Module(body=[node], type_ignores=[]), f"verl-0.9.1/{path}", "exec"), namespace)  # noqa: S102
    namespace["verl_F"] = types.SimpleNamespace(masked_sum=namespace["masked_sum"])
    return namespace["agg_loss"]


@pytest.mark.parametrize("mode", AGG_MODES)
def test_verl_agg_loss_equals_rlexp_for_every_mode(verl_agg_loss, mode):
    """verl's actor passes each micro-batch the mini-batch's token and sequence counts
    (``global_batch_info``) and, for Dr. GRPO, ``loss_scale_factor`` (rlexp writes the token budget
    there): its micro-batch losses sum to rlexp's for micro-batch 1, 2 and the whole batch."""
    per_token, mask = _batch(2)
    tokens, sequences = mask.sum(), (mask.sum(-1) > 0).sum()
    for micro in (1, 2, len(LENGTHS)):
        theirs = ours = 0.0
        for s in range(0, len(LENGTHS), micro):
            rows = slice(s, s + micro)
            theirs += float(verl_agg_loss(per_token[rows], mask[rows], mode, dp_size=1, batch_num_tokens=tokens,
                                          global_batch_size=sequences, loss_scale_factor=BUDGET))  # fmt: skip
            ours += float(aggregate(per_token[rows], mask[rows], mode, step_mask=mask, max_tokens=BUDGET))
        # verl's seq-mean-token-mean divides each sequence by (count + 1e-8): up to 1e-8 of a one-token
        # sequence's loss apart (2e-8 of the total measured here); the others to rounding
        rel = 1e-7 if mode == "seq-mean-token-mean" else 1e-12
        assert ours == pytest.approx(theirs, rel=rel), micro
        assert ours == pytest.approx(reference(per_token, mask, mode), rel=1e-12)


def test_verl_without_loss_scale_factor_divides_by_the_padded_length(verl_agg_loss):
    """Why rlexp writes ``loss_scale_factor``: unset, verl's Dr. GRPO constant is the micro-batch's
    padded response length, which is no constant when batches are padded differently."""
    per_token, mask = _batch(2)
    padded = torch.nn.functional.pad(per_token, (4, 0)), torch.nn.functional.pad(mask, (4, 0))
    short = float(verl_agg_loss(per_token, mask, "seq-mean-token-sum-norm"))
    longer = float(verl_agg_loss(*padded, "seq-mean-token-sum-norm"))
    assert short == pytest.approx(reference(per_token, mask, "seq-mean-token-sum") / T, rel=1e-12)
    assert longer != pytest.approx(short, rel=1e-3)


# ----------------------------------------------------------------------------- TRL 1.16's _compute_loss

# GRPOTrainer._compute_loss itself, on a stand-in ``self`` holding what it reads: the log-probs come
# from the stand-in's _get_per_token_logps_and_entropies, the rest of the loss is TRL's own code
_TRL_CHILD = """
import json, sys, types
from collections import defaultdict
import torch
from trl import GRPOTrainer

results = []
for request in json.load(sys.stdin):
  t = {k: torch.tensor(v, dtype=torch.float64) for k, v in request["tensors"].items()}
  out = {}
  results.append(out)
  for loss_type in request["loss_types"]:
      for micro in request["micro"]:
          rows, total = t["mask"].shape[0], 0.0
          accumulation = rows // micro
          for start in range(0, rows, micro):
              sl = slice(start, start + micro)
              me = types.SimpleNamespace(
                  loss_type=loss_type, beta=request["beta"], epsilon_low=request["eps"], epsilon_high=request["eps"],
                  importance_sampling_level="token", top_entropy_quantile=1.0, off_policy_mask_threshold=None,
                  use_vllm=False, aux_loss_enabled=False, _entropy_bonus_enabled=False,
                  max_completion_length=request["max_completion_length"],
                  current_gradient_accumulation_steps=accumulation, model=types.SimpleNamespace(training=True),
                  args=types.SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=accumulation),
                  accelerator=types.SimpleNamespace(num_processes=1, sync_gradients=True, gather=lambda x: x,
                                                    gather_for_metrics=lambda x: x, reduce=lambda x, reduction: x),
                  _metrics=defaultdict(lambda: defaultdict(list)),
                  _get_per_token_logps_and_entropies=lambda *a, sl=sl, **k: (t["logp"][sl], torch.zeros_like(t["logp"][sl]), None),
              )
              ids = torch.zeros_like(t["mask"][sl], dtype=torch.long)
              inputs = {"prompt_ids": ids[:, :1], "prompt_mask": torch.ones_like(ids[:, :1]), "completion_ids": ids,
                        "completion_mask": t["mask"][sl], "advantages": t["adv"][sl], "old_per_token_logps": t["old"][sl],
                        "ref_per_token_logps": t["ref"][sl],
                        "num_items_in_batch": t["mask"].sum()}  # the generation batch's tokens (one optimizer step)
              total += float(GRPOTrainer._compute_loss(me, None, inputs))
          out[f"{loss_type}/{micro}"] = total
print(json.dumps(results))
"""


def _trl_losses(python, jobs, eps=0.2, beta=0.1):
    """TRL's loss for each job ``(tensors, loss types, micro-batch sizes)``, in one child process."""
    request = [{"tensors": {k: v.tolist() for k, v in tensors.items()}, "loss_types": loss_types, "micro": micro,
                "beta": beta, "eps": eps, "max_completion_length": BUDGET} for tensors, loss_types, micro in jobs]
    done = subprocess.run([str(python), "-c", _TRL_CHILD], input=json.dumps(request), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_trl_compute_loss_equals_rlexp_for_each_mapped_mode():
    """For each loss type rlexp writes for a mode (rlexp.trainers.trl.launch.TRL_LOSS_TYPES), TRL's
    loss over the micro-batches of one optimizer step (gradient accumulation as GRPOTrainer runs it,
    steps_per_generation = gradient_accumulation_steps, KL coefficient 0.1) equals rlexp's local
    loss with that mode, for micro-batch 1, 2 and the whole batch; every completion holds a token.
    And with a completion whose tokens are all masked, TRL's grpo counts it among the sequences
    (why rlexp refuses a sequence mode with mask_truncated_completions)."""
    from trl_venv import trl_python_or_skip

    from rlexp.trainers.local.loss import grpo_loss
    from rlexp.trainers.trl.launch import TRL_LOSS_TYPES

    python = trl_python_or_skip()
    acting = [3, 7, 1, 5, 2, 8]
    logp, old, ref, adv, mask = _step_tensors(acting)
    tensors = {"logp": logp, "old": old, "ref": ref, "adv": adv[:, 0], "mask": mask}
    with_empty = [3, 7, 0, 5]
    e_logp, e_old, e_ref, e_adv, e_mask = _step_tensors(with_empty)
    theirs, empty = _trl_losses(python, [
        (tensors, [*sorted(TRL_LOSS_TYPES.values()), "bnpo"], [1, 2, len(acting)]),
        ({"logp": e_logp, "old": e_old, "ref": e_ref, "adv": e_adv[:, 0], "mask": e_mask}, ["grpo"], [len(with_empty)]),
    ])
    assert set(TRL_LOSS_TYPES) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"}
    for mode, loss_type in TRL_LOSS_TYPES.items():
        ours = float(grpo_loss(logp, old, ref, adv, mask, eps_clip=0.2, kl_coef=0.1, agg=mode,
                               max_tokens=BUDGET).loss)  # fmt: skip
        assert ours == pytest.approx(reference(_token_losses(logp, old, ref, adv, 0.2, 0.1), mask, mode), rel=1e-12)
        for micro in (1, 2, len(acting)):
            assert theirs[f"{loss_type}/{micro}"] == pytest.approx(ours, rel=1e-12), (mode, micro)
    ours_empty = float(grpo_loss(e_logp, e_old, e_ref, e_adv, e_mask, eps_clip=0.2, kl_coef=0.1,
                                 agg="seq-mean-token-mean").loss)  # fmt: skip
    assert empty[f"grpo/{len(with_empty)}"] == pytest.approx(ours_empty * 3 / 4, rel=1e-12)  # 4 rows, not 3
    # bnpo, each micro-batch's token mean ÷ the accumulation steps, is no mode: it moves with the micro-batch
    assert theirs["bnpo/1"] != pytest.approx(theirs[f"bnpo/{len(acting)}"], rel=1e-3)


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


def _reference_loss(logp, r, mode, eps=0.2, kl_coef=0.1, stated=None):
    """The loss of the whole step from the formulas: PPO's clipped token terms (GRPO) or GSPO's
    sequence ratio, aggregated as the papers do, plus kl_coef × the token-mean k3 KL; with a
    ``stated`` mode (GRPO), the policy and KL terms both aggregated by it (Dr. GRPO's L = T)."""
    if stated is not None:
        lengths = [int(r.action_mask[i].sum()) for i in range(logp.shape[0])]
        seqs, n, tokens = [], 0, sum(lengths)
        for i in range(logp.shape[0]):
            idx = [t for t in range(T) if r.action_mask[i, t] > 0]
            if not idx:
                continue
            n += 1
            a = r.advantages[i, idx[0]]
            terms = []
            for t in idx:
                ratio = torch.exp(logp[i, t] - r.old_logp[i, t])
                x = r.ref_logp[i, t] - logp[i, t]
                terms.append(-torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a) + kl_coef * (torch.exp(x) - 1 - x))
            seqs.append(terms)
        if stated == "token-mean":
            return sum(sum(s) for s in seqs) / tokens
        if stated == "seq-mean-token-mean":
            return sum(sum(s) / len(s) for s in seqs) / n
        return sum(sum(s) for s in seqs) / (n * (T if stated == "seq-mean-token-sum-norm" else 1))
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


@pytest.mark.parametrize(("loss_type", "mode", "stated"), [
    ("grpo", "token-mean", None), ("gspo", "seq-mean-token-mean", None),
    ("grpo", None, "seq-mean-token-sum-norm"),  # recipe.loss_agg_mode, read by train_on_rollout from cfg
])  # fmt: skip
def test_one_optimizer_step_is_the_same_for_micro_batch_1_2_and_whole(tiny_base_model, loss_type, mode, stated):
    """``train_on_rollout`` with SGD (lr 1, no clipping): the parameter change is minus the gradient of
    the step's loss, which must equal the gradient of the formula's loss over the whole batch at
    micro-batch sizes 1, 2 and 6 (the old per-micro-batch token mean ÷ accumulation did not)."""
    from transformers import AutoModelForCausalLM

    from rlexp.environments.interface import Budgets
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
    _reference_loss(logp, rollout, mode, stated=stated).backward()
    expected = {name: p.grad.clone() for name, p in ref_model.named_parameters() if p.grad is not None}
    loss = loss_for(EnvTrainingOptions(budgets=Budgets(4, 16, 96), loss_type=loss_type))
    changes = {}
    for micro in (1, 2, len(LENGTHS)):
        model = copy.deepcopy(base)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        cfg = types.SimpleNamespace(micro_train_batch_size=micro, max_epochs=1, eps_clip=0.2, init_kl_coef=0.1,
                                    max_norm=math.inf, loss_agg_mode=stated, loss_token_budget=T)  # fmt: skip
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
