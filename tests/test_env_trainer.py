"""The local trainer on environment tasks: the agent mask, advantages, and GSPO.

References are written independently from the formulas with Python loops (GSPO: Zheng et al. 2025,
"Group Sequence Policy Optimization": s_i = exp(mean_t log(π/π_old)), loss −min(s_i·A_i,
clip(s_i)·A_i), averaged over sequences).
"""

from __future__ import annotations

import copy
import statistics
import types

import pytest

torch = pytest.importorskip("torch")

from rlexp.environments.interface import Budgets, ExactMatchEnv, TrajectoryBuilder  # noqa: E402
from rlexp.trainers.local.config import EnvTrainingOptions  # noqa: E402
from rlexp.trainers.local.env_train import pack_trajectories  # noqa: E402
from rlexp.trainers.local.loss import (  # noqa: E402
    grpo_loss,
    gspo_loss,
    gspo_policy_loss,
    policy_loss,
    trajectory_advantages,
)
from rlexp.trainers.local.train import token_logprobs  # noqa: E402

# ----------------------------------------------------------------------------- references (loops)


def reference_gspo(logp, old_logp, adv_per_seq, mask, eps_low, eps_high):
    """Sequence by sequence: s = exp(Σ_t m·(logπ − logπ_old) / Σ_t m); −min(s·A, clip(s)·A);
    mean over the sequences with at least one agent token."""
    total = logp.new_zeros(())
    sequences = 0
    for i in range(logp.shape[0]):
        acc = logp.new_zeros(())
        count = 0
        for t in range(logp.shape[1]):
            if mask[i, t] != 0:
                acc = acc + (logp[i, t] - old_logp[i, t])
                count += 1
        if count == 0:
            continue
        s = torch.exp(acc / count)
        a = adv_per_seq[i]
        total = total - torch.minimum(s * a, torch.clamp(s, 1 - eps_low, 1 + eps_high) * a)
        sequences += 1
    return total / sequences


def random_batch(seed=0, n=6, t=9):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g) * 3).requires_grad_(True)
    old = (logp.detach() + torch.randn(n, t, generator=g) * 0.05).clamp(max=0)
    mask = (torch.rand(n, t, generator=g) > 0.4).float()
    mask[:, 0] = 1.0
    mask[-1] = 0.0  # a sequence with no agent token: left out of the mean
    adv = torch.randn(n, generator=g)
    return logp, old, mask, adv


@pytest.mark.parametrize(("eps_low", "eps_high"), [(3e-4, 4e-4), (0.2, 0.2), (1e9, 1e9)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_matches_loop_reference(eps_low, eps_high, seed):
    logp, old, mask, adv = random_batch(seed)
    loss, _ = gspo_policy_loss(logp, old, adv.unsqueeze(-1) * mask, mask, eps_low, eps_high)
    (grad,) = torch.autograd.grad(loss, logp)
    ref = reference_gspo(logp, old, adv, mask, eps_low, eps_high)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    # different summation orders and exp of a mean vs a mean inside exp: float32 rounding only,
    # a few ulps of values of order 1 (|A| ≲ 3, s ≈ 1)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-6)
    assert torch.all(grad[mask == 0] == 0)  # off the mask: exactly zero, by the multiplication by 0
    record_max_diff(float((grad - ref_grad).abs().max()), float((loss - ref).detach().abs()))


GSPO_DIFFS: list[tuple[float, float]] = []


def record_max_diff(grad_diff, loss_diff):
    GSPO_DIFFS.append((grad_diff, loss_diff))


def test_gspo_with_one_agent_token_per_sequence_is_the_token_level_loss():
    g = torch.Generator().manual_seed(3)
    n, t = 8, 5
    logp = (-torch.rand(n, t, generator=g) * 2).requires_grad_(True)
    old = logp.detach() + torch.randn(n, t, generator=g) * 0.3
    mask = torch.zeros(n, t)
    mask[torch.arange(n), torch.randint(0, t, (n,), generator=g)] = 1.0
    adv = torch.randn(n, 1, generator=g).expand(n, t) * mask
    a, clip_a = gspo_policy_loss(logp, old, adv, mask, 0.2, 0.2)
    b, clip_b = policy_loss(logp, old, adv, mask, 0.2)
    (ga,) = torch.autograd.grad(a, logp)
    (gb,) = torch.autograd.grad(b, logp)
    # the per-token terms are bit-equal (log-ratio of one token = the sequence's); only the order of
    # the final sum differs (row sums then rows vs all at once): float32 rounding of an O(1) sum
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ga, gb, rtol=1e-6, atol=1e-7)
    assert clip_a == clip_b and 0 < clip_a < 1


def test_gspo_clip_range_is_its_own():
    """With the same per-token moves, GSPO's small range clips whole sequences; token PPO's 0.2
    clips none."""
    logp, old, mask, adv = random_batch(0)
    a = adv.unsqueeze(-1) * mask
    _, gspo_clip = gspo_policy_loss(logp, old, a, mask, 3e-4, 4e-4)
    _, ppo_clip = policy_loss(logp, old, a, mask, 0.2)
    assert gspo_clip > 0.3 and ppo_clip < gspo_clip


# ----------------------------------------------------------------------------- advantages and packing


def test_advantages_return_broadcast_and_token_rewards():
    returns = torch.tensor([[1.0, 0.0, 3.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[0, 1, 1, 0]] * 6, dtype=torch.float32)
    token_rewards = torch.zeros(6, 4)
    token_rewards[:, 2] = torch.arange(6, dtype=torch.float32)
    adv = trajectory_advantages(returns, mask, token_rewards, estimator="group_norm", mode="return")
    expected = []
    for group in returns.tolist():  # by hand from the definition: (r − mean) / (stdev + 1e-9)
        mean, std = sum(group) / len(group), statistics.stdev(group)
        expected += [(r - mean) / (std + 1e-9) for r in group]
    for i, a in enumerate(expected):
        assert adv[i].tolist() == pytest.approx([0.0, a, a, 0.0], abs=1e-6)  # float32 of O(1) values
    # rewarded only at its end, an episode's token advantages are its return advantage
    final = torch.zeros(6, 4)
    final[:, 2] = returns.reshape(-1)
    dense = trajectory_advantages(returns, mask, final, estimator="group_norm", mode="token_rewards")
    assert torch.allclose(dense, adv, atol=1e-6)
    with pytest.raises(ValueError):
        EnvTrainingOptions(budgets=Budgets(4, 16, 96), loss_type="ppo")


# One group of three two-turn episodes, worked by hand. Positions are the packed ones (entry t
# predicts token t+1); a turn's reward sits on its last agent position.
#   A: agent at 1,2 (turn 1, reward 1.0 at 2) and 4,5 (turn 2, reward 2.0 at 5): return 3.0
#   B: agent at 1,2,3 (one turn, reward 0.5 at 3):                             return 0.5
#   C: agent at 1 (turn 1, reward 0 at 1) and 4 (turn 2, reward 1.0 at 4):      return 1.0
HAND_MASK = [[0, 1, 1, 0, 1, 1], [0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 1, 0]]
HAND_REWARDS = [[0, 0, 1.0, 0, 0, 2.0], [0, 0, 0, 0.5, 0, 0], [0, 0, 0, 0, 1.0, 0]]
HAND_RETURNS = [[3.0, 0.5, 1.0]]


def _flat(rows):
    return [v for row in rows for v in row]


def _hand(mode, estimator, valid=None):
    mask, rewards = torch.tensor(HAND_MASK, dtype=torch.float32), torch.tensor(HAND_REWARDS)
    return trajectory_advantages(torch.tensor(HAND_RETURNS), mask, rewards, estimator=estimator, mode=mode,
                                 valid=None if valid is None else torch.tensor([valid])).flatten().tolist()


def test_token_rewards_are_return_to_go_minus_the_group_mean_on_a_hand_worked_episode():
    # group mean return (3 + 0.5 + 1) / 3 = 1.5; return-to-go: A 3,3 then 2,2; B 0.5 x3; C 1 then 1
    by_hand = [[0, 3 - 1.5, 3 - 1.5, 0, 2 - 1.5, 2 - 1.5],
               [0, 0.5 - 1.5, 0.5 - 1.5, 0.5 - 1.5, 0, 0],
               [0, 1 - 1.5, 0, 0, 1 - 1.5, 0]]
    assert _hand("token_rewards", "dr_grpo") == pytest.approx(_flat(by_hand), abs=1e-6)
    # group_norm divides by the unbiased std: squares of (1.5, -1, -0.5) sum to 3.5, / 2 = 1.75
    std = 1.75 ** 0.5
    scaled = [[v / (std + 1e-9) for v in row] for row in by_hand]
    assert _hand("token_rewards", "group_norm") == pytest.approx(_flat(scaled), abs=1e-6)


def test_an_env_error_episode_is_out_of_the_baseline_and_gets_no_advantage():
    # B failed: the baseline is A and C alone, mean (3 + 1) / 2 = 2, unbiased std sqrt(2)
    ret = _hand("return", "dr_grpo", valid=[True, False, True])
    assert ret == pytest.approx(_flat([[0, 1, 1, 0, 1, 1], [0] * 6, [0, -1, 0, 0, -1, 0]]), abs=1e-6)
    norm = _hand("return", "group_norm", valid=[True, False, True])
    a = 1 / (2 ** 0.5 + 1e-9)
    assert norm == pytest.approx(_flat([[0, a, a, 0, a, a], [0] * 6, [0, -a, 0, 0, -a, 0]]), abs=1e-6)
    dense = _hand("token_rewards", "dr_grpo", valid=[True, False, True])
    assert dense == pytest.approx(_flat([[0, 1, 1, 0, 0, 0], [0] * 6, [0, -1, 0, 0, -1, 0]]), abs=1e-6)
    # one valid episode left: no baseline under group_norm, so no advantage at all
    alone = _hand("token_rewards", "group_norm", valid=[True, False, False])
    assert alone == [0.0] * 18


def test_pack_shifts_mask_and_rewards_onto_predicting_positions():
    b = TrajectoryBuilder([5, 6])
    b.add_agent([7, 8])
    b.set_turn_reward(1.0)
    b.add_env([9])
    b.add_agent([10])
    b.set_turn_reward(0.5)
    t1 = b.finish("stop")
    t2 = TrajectoryBuilder([5]).finish("env_error")
    ids, attn, action, rewards = pack_trajectories([t1, t2], pad=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9, 10], [5, 0, 0, 0, 0, 0]]
    assert attn.tolist() == [[1] * 6, [1, 0, 0, 0, 0, 0]]
    assert action.tolist() == [[0, 1, 1, 0, 1], [0] * 5]  # position t predicts token t+1
    assert rewards.tolist() == [[0, 0, 1.0, 0, 0.5], [0] * 5]


# ----------------------------------------------------------------------------- the mask, on the model


def _leaky_trajectory(tok):
    """A turn asking the tool, the tool's feedback holding the answer, then the answer."""
    from rlexp.environments.episodes import render_user_turn
    from rlexp.evaluation.generation import encode_prompt, render_prompt

    enc = lambda s: encode_prompt(tok, s)  # noqa: E731
    b = TrajectoryBuilder(enc(render_prompt(tok, "7*6?", "")))
    b.add_agent(enc("CALC 7*6") + [tok.eos_token_id])
    b.add_env(enc(render_user_turn(tok, "answer is 42")))
    b.add_agent(enc("\\boxed{42}") + [tok.eos_token_id])
    b.set_turn_reward(1.0)
    return b.finish("stop")


def _env_positions(traj):
    """Positions (in the shifted [T-1] layout) predicting an environment token."""
    return [t - 1 for t in range(traj.prompt_len, len(traj.token_ids)) if traj.agent_mask[t] == 0]


def test_environment_positions_get_exactly_zero_gradient(tiny_base_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    traj = _leaky_trajectory(tok)
    ids, attn, action, _ = pack_trajectories([traj, traj], tok.pad_token_id)
    logp, _ = token_logprobs(model, ids, attn)
    logp.retain_grad()
    old = logp.detach() + 0.01 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(0))
    ref = logp.detach() - 0.02
    adv = torch.tensor([[1.0], [-0.5]]).expand_as(action) * action
    env = _env_positions(traj)
    assert len(env) == len(encode_len(tok, traj))
    for name, parts in [
        ("grpo", grpo_loss(logp, old, ref, adv, action, eps_clip=0.2, kl_coef=0.1)),
        ("gspo", gspo_loss(logp, old, ref, adv, action, eps_low=3e-4, eps_high=4e-4, kl_coef=0.1)),
    ]:
        logp.grad = None
        parts.loss.backward(retain_graph=True)
        assert torch.all(logp.grad[:, env] == 0), name  # exactly zero at every environment position
        agent = action.bool()
        assert (logp.grad[agent] != 0).sum() > 0, name  # and not vacuous: agent positions do get one


def encode_len(tok, traj):
    return [i for i in range(traj.prompt_len, len(traj.token_ids)) if traj.agent_mask[i] == 0]


def _train(model, ids, attn, mask, steps=40):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        logp, _ = token_logprobs(model, ids, attn)
        old = logp.detach()
        adv = torch.ones_like(mask) * mask
        parts = grpo_loss(logp, old, old, adv, mask, eps_clip=10.0, kl_coef=0.0)
        opt.zero_grad()
        parts.loss.backward()
        opt.step()


def test_without_the_mask_the_policy_learns_the_environment_tokens(tiny_base_model):
    """Reinforcing a trajectory whose feedback holds the answer: with every token after the prompt
    in the loss, the policy learns to write the tool's output itself; through the agent mask it does
    not (its log-prob of the environment tokens moves far less)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    base = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    traj = _leaky_trajectory(tok)
    ids, attn, action, _ = pack_trajectories([traj], tok.pad_token_id)
    env = _env_positions(traj)
    after_prompt = torch.zeros_like(action)
    after_prompt[:, traj.prompt_len - 1 :] = 1.0

    def env_logp(model):
        with torch.no_grad():
            return token_logprobs(model, ids, attn)[0][0, env].mean().item()

    start = env_logp(base)
    torch.manual_seed(0)
    masked, unmasked = copy.deepcopy(base), copy.deepcopy(base)
    _train(masked, ids, attn, action)
    _train(unmasked, ids, attn, after_prompt)
    gain_masked, gain_unmasked = env_logp(masked) - start, env_logp(unmasked) - start
    MASK_GAINS.update(start=start, masked=gain_masked, unmasked=gain_unmasked)
    assert gain_unmasked > 2.0  # nats per environment token: the policy now predicts the tool output
    assert gain_masked < gain_unmasked / 3


MASK_GAINS: dict[str, float] = {}


# ----------------------------------------------------------------------------- one training step


class BrokenOnReset:
    """An environment that fails before the model plays: env_error whatever the model does."""

    def __init__(self, config):
        pass

    def reset(self, task):
        raise OSError("corpus missing")

    def step(self, action_text):  # pragma: no cover - never reached
        raise AssertionError


def test_env_rollout_and_a_training_step_on_two_environments(tiny_base_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.episodes import SlotCache
    from rlexp.environments.interface import Budgets, parse_rows
    from rlexp.trainers.local.env_train import collect_env_rollout
    from rlexp.trainers.local.loss import loss_for
    from rlexp.trainers.local.train import train_on_rollout

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    rows = parse_rows(
        [{"env": "exact_match", "task": {"prompt": "1+2=", "answer": "3"}},
         {"env": "test_env_trainer:BrokenOnReset", "task": {}},
         {"env": "exact_match", "task": {"prompt": "2+2=", "answer": "4"}}]
    )  # fmt: skip
    cfg = types.SimpleNamespace(n_samples_per_prompt=2, temperature=1.0, advantage_estimator="group_norm",
                                micro_train_batch_size=3, max_epochs=1, eps_clip=0.2, init_kl_coef=0.01,
                                max_norm=1.0)  # fmt: skip
    steps = types.SimpleNamespace(micro_batches_per_optimizer_step=2)
    cache = SlotCache()
    for loss_type in ("grpo", "gspo"):
        options = EnvTrainingOptions(budgets=Budgets(2, 6, 20), loss_type=loss_type)
        rollout, played = collect_env_rollout(model, tok, rows, cfg, options, seed=1, cache=cache, reference=reference)
        assert rollout.input_ids.shape[0] == 6
        assert [t.finish_reason for t in played[1]] == ["env_error", "env_error"]
        assert rollout.stats["env_errors"] == pytest.approx(1 / 3)
        assert 0 < rollout.stats["agent_token_fraction"] <= 1
        assert torch.all(rollout.advantages[rollout.action_mask == 0] == 0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        row = train_on_rollout(model, opt, sched, rollout, cfg, steps, loss=loss_for(options))
        assert all(map(lambda v: v == v, row.values()))  # no NaN
        # exact_match: 2 rows × 2 samples = 4 concurrent episodes; BrokenOnReset: 2; the second step
        # reuses every instance the first built
        assert cache.builds == 6


# ----------------------------------------------------------------------------- the single-turn task


def test_one_step_environment_reproduces_the_single_turn_rollout(tiny_base_model, monkeypatch):
    """The single-turn trainer keeps its own code (its outputs stay byte-identical); the exact-match
    task played as the one-step environment gives the same samples, rewards and advantages exactly,
    and the same log-probs and loss up to float32 rounding (the two pack the rows differently:
    prompts left-padded there, whole trajectories right-padded here, so the matrix shapes differ)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.interface import Budgets, parse_rows
    from rlexp.evaluation import answers
    from rlexp.trainers.local.env_train import collect_env_rollout
    from rlexp.trainers.local.train import collect_rollout, train_on_rollout

    # the untrained model never writes a right answer; so that rewards (and advantages) vary, both
    # paths grade through the shared extractor patched here: "correct" = an even-length completion
    monkeypatch.setattr(answers, "extract_answer", lambda text: (text, "patched"))
    monkeypatch.setattr(answers, "is_correct", lambda answer, gold, mode="exact": len(answer) % 2 == 0)
    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    base = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    reference = copy.deepcopy(base).eval().requires_grad_(False)
    problems = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(1, 2), (13, 4), (7, 70), (5, 5)]]
    cfg = types.SimpleNamespace(n_samples_per_prompt=4, temperature=1.0, advantage_estimator="group_norm",
                                micro_train_batch_size=8, max_epochs=1, eps_clip=0.2, init_kl_coef=0.01,
                                max_norm=1.0, prompt_suffix=" =", generate_max_len=8)  # fmt: skip
    rows = parse_rows([{"env": "exact_match", "config": {"suffix": " ="}, "task": p} for p in problems])
    options = EnvTrainingOptions(budgets=Budgets(1, 8, 8))
    old_model, new_model = copy.deepcopy(base), copy.deepcopy(base)
    old = collect_rollout(old_model, tok, problems, cfg, seed=11, reference=reference)
    new, played = collect_env_rollout(new_model, tok, rows, cfg, options, seed=11, reference=reference)

    n = old.input_ids.shape[0]
    for i in range(n):
        o, w = old.action_mask[i].bool(), new.action_mask[i].bool()
        assert torch.equal(old.input_ids[i, 1:][o], new.input_ids[i, 1:][w])  # the same sampled ids
        assert torch.equal(old.advantages[i][o], new.advantages[i][w])
        # float32 rounding across batch shapes: a few ulps of |log p| <= ~10
        torch.testing.assert_close(old.old_logp[i][o], new.old_logp[i][w], rtol=0, atol=1e-5)
        torch.testing.assert_close(old.ref_logp[i][o], new.ref_logp[i][w], rtol=0, atol=1e-5)
    assert torch.equal(old.rewards, new.rewards)
    assert 0 < old.rewards.mean() < 1 and old.advantages.abs().sum() > 0  # not vacuous
    assert {t.finish_reason for g in played for t in g} <= {"stop", "length"}
    steps = types.SimpleNamespace(micro_batches_per_optimizer_step=2)
    rows_out = []
    for model, rollout in ((old_model, old), (new_model, new)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        rows_out.append(train_on_rollout(model, opt, sched, rollout, cfg, steps))
    for key in ("policy_loss", "kl", "ppo_clip_ratio"):
        # means of O(1) float32 terms computed on differently padded batches
        assert rows_out[0][key] == pytest.approx(rows_out[1][key], abs=1e-5), key


# ----------------------------------------------------------------------------- GSPO on the trainers


def test_gspo_settings_for_every_listed_openrlhf_release_and_the_other_trainers():
    from rlexp.trainers.launch import gspo_trainer_settings
    from rlexp.trainers.openrlhf.argv import known_versions, load_flag_table
    from rlexp.trainers.openrlhf.parser import version_key

    for version in known_versions():
        settings = gspo_trainer_settings("openrlhf", version)
        table = load_flag_table(version)
        dotted = version_key(version) >= version_key("0.10.2")
        loss_flag = "--actor.policy_loss_type" if dotted else "--policy_loss_type"
        assert settings[loss_flag] == "gspo" and "gspo" in table.flags[loss_flag].choices
        clip_flag = "--actor.eps_clip_low_high" if dotted else "--eps_clip_low_high"
        assert settings[clip_flag] == [3e-4, 4e-4] and table.flags[clip_flag].nargs == "2"
        assert all(f in table for f in settings), version
        if "--actor.loss_agg_mode" in table:
            assert settings["--actor.loss_agg_mode"] == "seq-mean-token-mean"
    verl = gspo_trainer_settings("verl")
    assert verl["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    assert verl["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    trl = gspo_trainer_settings("trl")
    assert trl["importance_sampling_level"] == "sequence" and trl["loss_type"] == "grpo"
    with pytest.raises(ValueError):
        gspo_trainer_settings("openrlhf")
    for other in ("local", "no-such-trainer"):
        with pytest.raises(ValueError):
            gspo_trainer_settings(other)


class FlakyStep(ExactMatchEnv):
    """The exact-match task behind a backend that times out on every fifth step (20% of steps)."""

    steps = 0

    def step(self, action_text):
        FlakyStep.steps += 1
        if FlakyStep.steps % 5 == 0:
            raise TimeoutError("search backend timed out")
        return super().step(action_text)


def test_episodes_of_a_failing_environment_are_out_of_the_gradient(tiny_base_model):
    """An environment failing 20% of its steps: those episodes get exactly zero gradient (autograd,
    through the loss the trainer uses, KL term included), the others do; both are counted."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.environments.interface import Budgets, parse_rows
    from rlexp.trainers.local.env_train import collect_env_rollout

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    rows = parse_rows([{"env": "test_env_trainer:FlakyStep", "task": {"prompt": f"{a}+1=", "answer": str(a + 1)}}
                       for a in range(5)])
    cfg = types.SimpleNamespace(n_samples_per_prompt=2, temperature=1.0, advantage_estimator="dr_grpo",
                                micro_train_batch_size=10)
    for mode in ("return", "token_rewards"):
        FlakyStep.steps = 0
        options = EnvTrainingOptions(budgets=Budgets(1, 6, 6), advantage_mode=mode)
        rollout, played = collect_env_rollout(model, tok, rows, cfg, options, seed=3, reference=reference)
        flat = [t for group in played for t in group]
        failed = [i for i, t in enumerate(flat) if t.finish_reason == "env_error"]
        assert FlakyStep.steps == 10 and len(failed) == 2  # 2 of 10 steps failed
        assert rollout.stats["env_errors"] == pytest.approx(0.2)
        assert rollout.stats["env_error_episodes_masked"] == 2.0
        logp, _ = token_logprobs(model, rollout.input_ids, rollout.attention_mask)
        logp.retain_grad()
        parts = grpo_loss(logp, rollout.old_logp, rollout.ref_logp - 0.05, rollout.advantages, rollout.action_mask,
                          eps_clip=0.2, kl_coef=0.1)
        parts.loss.backward()
        for i in range(len(flat)):
            if i in failed:
                assert torch.all(logp.grad[i] == 0), (mode, i)
            else:
                assert torch.any(logp.grad[i] != 0), (mode, i)  # the KL term alone gives every kept episode one
