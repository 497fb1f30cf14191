"""The report's section on an environment task: episode metrics, the primary metric's paired
statistics, and discordant trajectories side by side.

Read from what ``rlexp eval`` and the trainer wrote: the episode records of the K=3 checkpoints
and Baseline-S0 on the primary set (their ``trajectory``, ``reward`` and ``correct`` = success), and
``metrics.jsonl`` (the per-step episode metrics, first and last step). The primary metric is the
spec's ``environment.primary_metric``: ``success`` (0/1 per episode: McNemar, rlexp.stats) or
``mean_reward`` (the return per episode: the paired mean-score statistics of
rlexp.stats.mean_score_comparison), on which ``rlexp decide`` takes the SOP gates too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.experiment.layout import AttemptDir
    from rlexp.spec.model import Attempt, EnvironmentSettings

TRAINING_KEYS = ("episode_return", "turns_per_episode", "tool_calls_per_episode", "env_errors",
                 "env_error_episodes_masked", "reward_error_episodes_masked", "agent_token_fraction", "env_latency_s")


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """A one-line text plot of ``values`` (at most ``width`` characters: longer series are averaged
    in ``width`` consecutive bins), each scaled within the series' own min..max; a flat series is
    drawn at mid height."""
    values = [float(v) for v in values]
    if not values:
        return ""
    if len(values) > width:
        edges = [round(i * len(values) / width) for i in range(width + 1)]
        values = [sum(values[a:b]) / (b - a) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    low, high = min(values), max(values)
    if high == low:
        return SPARK[3] * len(values)
    return "".join(SPARK[min(7, int((v - low) / (high - low) * 8))] for v in values)


def episode_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Success rate, mean reward, turns and tool calls per episode, finish reasons of eval records."""
    n = len(records)
    if n == 0:
        return {"n": 0}
    turns = [r["trajectory"]["turns"] for r in records]
    rewards = [float(r["reward"]) for r in records if r.get("reward") is not None]
    out: dict[str, float] = {
        "n": n,
        "success": sum(int(r["correct"]) for r in records) / n,
        # a reward that failed (judge_error) is unknown, not 0: left out of the mean and counted
        "mean_reward": sum(rewards) / len(rewards) if rewards else float("nan"),
        "reward_errors": sum(1 for r in records if r.get("reward_error")),
        "turns_per_episode": sum(len(t) for t in turns) / n,
        "tool_calls_per_episode": sum(1 for t in turns for turn in t if turn.get("tool_call")) / n,
    }
    retrieval = [r for r in records if r.get("gold_docs")]
    if retrieval:  # a retrieval task: NDCG of the documents fetched against the gold ones
        from rlexp.environments.episode_rewards import retrieved_documents
        from rlexp.environments.rewards import ndcg

        out["retrieval_episodes"] = len(retrieval)
        out["retrieval_ndcg"] = sum(ndcg(retrieved_documents(r), r["gold_docs"]) for r in retrieval) / len(retrieval)
        out["retrieval_success"] = sum(int(r["correct"]) for r in retrieval) / len(retrieval)
    for r in records:
        key = f"finish_{r['trajectory']['finish_reason']}"
        out[key] = out.get(key, 0.0) + 1.0 / n
    return out


def primary_comparison(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], metric: str,
                       *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The paired comparison of two record lists on ``metric`` (joined by problem hash)."""
    by_hash = {r["problem_hash"]: r for r in new}
    pairs = [(b, by_hash[b["problem_hash"]]) for b in base if b["problem_hash"] in by_hash]
    if metric == "mean_reward":
        pairs = [(b, n) for b, n in pairs if b.get("reward") is not None and n.get("reward") is not None]
        from rlexp.stats import mean_score_comparison

        return mean_score_comparison([float(b["reward"]) for b, _ in pairs], [float(n["reward"]) for _, n in pairs],
                                     resamples=resamples, seed=seed)
    from rlexp.stats import paired_comparison

    cmp = paired_comparison([int(b["correct"]) for b, _ in pairs], [int(n["correct"]) for _, n in pairs],
                            resamples=resamples, seed=seed)
    return {"mode": "0/1", "test": "McNemar", "n": len(pairs), "delta_pp": cmp.delta_pp, "b": cmp.b, "c": cmp.c,
            "p_value": cmp.mcnemar_p, "ci_pp": list(cmp.ci_pp)}


def discordant_pairs(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]):
    """``(baseline right / new wrong, baseline wrong / new right)``: the first such pair of records
    each (by success; by reward where no success differs), or None."""
    by_hash = {r["problem_hash"]: r for r in new}
    pairs = [(b, by_hash[b["problem_hash"]]) for b in base if b["problem_hash"] in by_hash
             and b.get("reward") is not None and by_hash[b["problem_hash"]].get("reward") is not None]

    def first(test):
        return next(((b, n) for b, n in pairs if test(b, n)), None)

    lost = first(lambda b, n: b["correct"] > n["correct"]) or first(lambda b, n: b["reward"] > n["reward"])
    won = first(lambda b, n: b["correct"] < n["correct"]) or first(lambda b, n: b["reward"] < n["reward"])
    return lost, won


def _cell(text: Any) -> str:
    flat = str(text).replace("\r", "\\r").replace("\n", "\\n")  # one table row per turn
    return "`" + flat.replace("|", "\\|").replace("`", "'") + "`"


def _reward_text(record: Mapping[str, Any]) -> str:
    if record.get("reward") is None:
        return str((record.get("reward_error") or {}).get("kind") or "no reward")
    return f"{float(record['reward']):g}"


def judge_calls_line(log_path: Path) -> str | None:
    """One line on the judge calls of an eval (``eval/judge_calls.jsonl``), or None without any."""
    from rlexp.experiment.files import iter_jsonl

    if not log_path.exists():
        return None
    calls = [row for _, row in iter_jsonl(log_path)]
    if not calls:
        return None
    failed = sum(1 for c in calls if not c.get("ok"))
    latency = sorted(float(c.get("latency_s") or 0.0) for c in calls)
    return (f"LLM judge: {len(calls)} calls reached the server ({failed} failed: judge_error, counted and "
            f"retried by the next `rlexp eval`, never scored 0); median latency {latency[len(latency) // 2]:.3f} s; "
            "answers already judged come from the cache and make no call.")


def trajectory_table(base_name: str, new_name: str, b: Mapping[str, Any], n: Mapping[str, Any]) -> list[str]:
    """Two trajectories side by side, turn by turn (action → feedback), then reward and finish."""
    lines = [f"| turn | {base_name} | {new_name} |", "|---|---|---|"]
    tb, tn = b["trajectory"]["turns"], n["trajectory"]["turns"]
    for i in range(max(len(tb), len(tn))):
        cells = []
        for turns in (tb, tn):
            if i < len(turns):
                turn = turns[i]
                tool = " (tool)" if turn.get("tool_call") else ""
                cells.append(f"{_cell(turn['action'])}{tool} → {_cell(turn['feedback'])}")
            else:
                cells.append("")
        lines.append(f"| {i + 1} | {cells[0]} | {cells[1]} |")
    lines.append(f"| reward / finish | {_reward_text(b)} / {b['trajectory']['finish_reason']} | "
                 f"{_reward_text(n)} / {n['trajectory']['finish_reason']} |")
    return lines


def _environment_of_rows(att: Attempt, role: str) -> dict[str, str]:
    """problem hash → the environment its row plays, for one set (empty when the set cannot be read)."""
    from rlexp.environments.interface import rows_from_dataset
    from rlexp.errors import InputError
    from rlexp.experiment.datasets import read_dataset

    ref = att.datasets.get(role)
    if ref is None or ref.path is None or not Path(ref.path).is_file():
        return {}
    try:
        rows = rows_from_dataset(read_dataset(ref.path), default_env=att.environment.name)
    except InputError:
        return {}
    return {str(row.task.get("problem_hash")): row.env for row in rows}


def by_environment(records: Sequence[Mapping[str, Any]], env_of: Mapping[str, str],
                   default: str) -> dict[str, dict[str, Any]]:
    """Per environment class (``env_of``: problem hash → environment; ``default`` for a hash it
    lacks): episodes, success rate and the count of each finish reason, environments in name order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(env_of.get(str(r["problem_hash"]), default), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for env in sorted(groups):
        recs = groups[env]
        finishes: dict[str, int] = {}
        for r in recs:
            reason = str(r["trajectory"]["finish_reason"])
            finishes[reason] = finishes.get(reason, 0) + 1
        out[env] = {"n": len(recs), "success": sum(int(r["correct"]) for r in recs) / len(recs),
                    "finish_reasons": dict(sorted(finishes.items()))}
    return out


def episode_section(attempt_dir: str | Path, primary_role: str = "ood_primary",
                    plots: Mapping[str, Path] | None = None) -> str:
    """The markdown section (empty for an attempt without an environment task); ``plots``: the
    report's PNGs by name (its ``episodes`` plot is shown under the training table)."""
    from rlexp.experiment.layout import AttemptDir
    from rlexp.experiment.records import BASELINE_S0, read_records
    from rlexp.spec import load_attempt

    att = load_attempt(attempt_dir)
    settings = att.environment
    if settings is None:
        return ""
    ad = AttemptDir(att.attempt_dir)
    env_of = _environment_of_rows(att, primary_role)
    out = [*_task_lines(settings), *_environment_mix_lines(env_of, primary_role), *_training_lines(ad, plots)]
    names = [n for n in _selected_checkpoints(ad) if ad.evals.records(n, primary_role).exists()]
    if not ad.evals.records(BASELINE_S0, primary_role).exists():
        out += [f"No episode records of {BASELINE_S0} on {primary_role} yet (run `rlexp eval`).", ""]
        return "\n".join(out) + "\n"
    base = read_records(ad.evals.records(BASELINE_S0, primary_role))
    news = {name: read_records(ad.evals.records(name, primary_role)) for name in names}
    out += _eval_table_lines(base, news, primary_role, settings.primary_metric)
    out += _by_environment_lines(base, news, env_of, settings.name)
    out += _retrieval_and_error_lines(ad, base, news)
    out += _discordant_lines(ad, base, news, names)
    return "\n".join(out) + "\n"


def _task_lines(settings: EnvironmentSettings) -> list[str]:
    """The environment task's settings and how its primary metric is scored."""
    metric = settings.primary_metric
    return ["", "## Environment task: episodes", "",
            f"Environment `{settings.name}` (config `{json.dumps(settings.config, sort_keys=True)}`), budgets "
            f"{settings.max_turns} turns × {settings.max_tokens_per_turn} tokens, {settings.max_total_tokens} in all; "
            f"loss `{settings.loss}`, advantages `{settings.advantage_mode}`. Primary metric: **{metric}** "
            f"(success = reward ≥ {settings.success_threshold:g}; the reward is "
            + (f"the weighted mean {json.dumps(settings.reward, sort_keys=True)} over the parts that apply to a row" if settings.reward else
               "the episode's return") + "); the decision's gates are taken on it. "
            "The table gives both.", ""]


def _environment_mix_lines(env_of: Mapping[Any, str], primary_role: str) -> list[str]:
    """How many rows of the primary set each environment class plays (when there are several)."""
    out: list[str] = []
    played: dict[str, int] = {}
    for env in env_of.values():
        played[env] = played.get(env, 0) + 1
    if len(played) > 1:  # several environment classes in one dataset
        out += [f"Rows of {primary_role} by environment: " + ", ".join(f"`{k}` {v}" for k, v in played.items())
                + " (grouped by environment and config, each group's environment built once).", ""]
    return out


def _training_lines(ad: AttemptDir, plots: Mapping[str, Path] | None) -> list[str]:
    """The episode metrics over training (first, last, range, a sparkline)."""
    from rlexp.experiment.files import iter_jsonl

    out: list[str] = []
    if ad.metrics.exists():
        rows = [row for _, row in iter_jsonl(ad.metrics)]
        rows = [r for r in rows if any(k in r for k in TRAINING_KEYS)]
        if rows:
            out += ["Training (first → last step; the curve over every step, low ▁ to high █ within its own "
                    "range; MLflow charts the same metrics by step):", "",
                    "| metric | first | last | min | max | over training |", "|---|---|---|---|---|---|"]
            for key in TRAINING_KEYS:
                if key in rows[0] and key in rows[-1]:
                    series = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
                    out.append(f"| {key} | {rows[0][key]:.3f} | {rows[-1][key]:.3f} | {min(series):.3f} | "
                               f"{max(series):.3f} | `{sparkline(series)}` |")
            if any(float(r.get("env_errors") or 0) > 0 for r in rows):
                out += ["", "Episodes that ended in an environment error (`env_errors`: their share of a step's "
                        "episodes) were left out of the loss and of their group's baseline; the SOP stops a run "
                        "whose share passes its `guardrails.env_errors` rate."]
            out.append("")
            if plots and "episodes" in plots:
                out += [f"![tool calls and turns per episode over training]({plots['episodes'].name})", ""]
    return out


def _selected_checkpoints(ad: AttemptDir) -> list[str]:
    """The checkpoints of ``eval/selection.json`` (roles first, then the listed ones), once each."""
    from rlexp.experiment.files import read_json

    if not ad.evals.selection.exists():
        return []
    from rlexp.experiment.layout import checkpoint_name
    from rlexp.protocol.decision import ROLE_ORDER

    selection = read_json(ad.evals.selection)
    steps = [selection.get(role) for role in ROLE_ORDER]
    listed = [checkpoint_name(s) for s in steps if isinstance(s, int) and not isinstance(s, bool)]
    listed += [c for c in selection.get("checkpoints") or [] if isinstance(c, str)]
    return list(dict.fromkeys(listed))


def _eval_table_lines(base: list, news: Mapping[str, list], primary_role: str, metric: str) -> list[str]:
    """The eval episodes of S0 and each checkpoint, with the primary metric's paired comparison."""
    from rlexp.experiment.records import BASELINE_S0

    out: list[str] = []
    out += [f"Eval episodes on {primary_role} (greedy):", "",
            "| model | n | success | mean reward | turns/episode | tool calls/episode | "
            f"Δ {metric} vs S0 | test | p | CI |", "|---|---|---|---|---|---|---|---|---|---|"]
    s = episode_summary(base)
    out.append(f"| {BASELINE_S0} | {s['n']} | {s['success']:.3f} | {s['mean_reward']:.3f} | "
               f"{s['turns_per_episode']:.2f} | {s['tool_calls_per_episode']:.2f} | | | | |")
    for name in news:
        s = episode_summary(news[name])
        try:
            c = primary_comparison(base, news[name], metric)
        except ValueError as exc:  # too few episodes with a known reward on both sides
            out.append(f"| {name} | {s['n']} | {s['success']:.3f} | {s['mean_reward']:.3f} | "
                       f"{s['turns_per_episode']:.2f} | {s['tool_calls_per_episode']:.2f} | n/a ({exc}) | | | |")
            continue
        delta = c["delta_pp"] if c.get("delta_pp") is not None else c["delta"]
        unit = " pp" if c.get("delta_pp") is not None else ""
        ci = c.get("ci_pp") or c.get("ci")
        out.append(f"| {name} | {s['n']} | {s['success']:.3f} | {s['mean_reward']:.3f} | "
                   f"{s['turns_per_episode']:.2f} | {s['tool_calls_per_episode']:.2f} | {delta:+.2f}{unit} | "
                   f"{c['test']} | {c['p_value']:.3g} | [{ci[0]:+.2f}, {ci[1]:+.2f}] |")
    out.append("")
    return out


def _by_environment_lines(base: list, news: Mapping[str, list], env_of: Mapping[Any, str], default_env: str) -> list[str]:
    """Success and finish reasons of each model by environment class."""
    from rlexp.experiment.records import BASELINE_S0

    out: list[str] = []
    out += ["Success and finish reasons by environment class:", "",
            "| model | environment | n | success | finish reasons |", "|---|---|---|---|---|"]
    for name, recs in [(BASELINE_S0, base), *news.items()]:
        for env, v in by_environment(recs, env_of, default_env).items():
            reasons = ", ".join(f"{k} {c}" for k, c in v["finish_reasons"].items())
            out.append(f"| {name} | `{env}` | {v['n']} | {v['success']:.3f} | {reasons} |")
    out.append("")
    return out


def _retrieval_and_error_lines(ad: AttemptDir, base: list, news: Mapping[str, list]) -> list[str]:
    """Retrieval quality where tasks name gold documents, failed rewards, and the judge's calls."""
    from rlexp.experiment.records import BASELINE_S0

    out: list[str] = []
    summaries = {BASELINE_S0: episode_summary(base), **{name: episode_summary(recs) for name, recs in news.items()}}
    if any("retrieval_ndcg" in v for v in summaries.values()):
        out += ["Retrieval (episodes whose task names gold documents; NDCG of the documents the search tool "
                "returned, in rank order):", "", "| model | episodes | NDCG | success |", "|---|---|---|---|"]
        out += [f"| {name} | {v['retrieval_episodes']} | {v['retrieval_ndcg']:.3f} | {v['retrieval_success']:.3f} |"
                for name, v in summaries.items() if "retrieval_ndcg" in v]
        out.append("")
    errors = {name: sum(1 for r in recs if r.get("reward_error")) for name, recs in [(BASELINE_S0, base), *news.items()]}
    if any(errors.values()):
        listed = ", ".join(f"{name} {k}" for name, k in errors.items() if k)
        out += [f"Episodes whose reward failed (judge_error; reward unknown, not 0): {listed}.", ""]
    line = judge_calls_line(ad.evals.judge_log)
    if line:
        out += [line, ""]
    return out


def _discordant_lines(ad: AttemptDir, base: list, news: Mapping[str, list], names: list[str]) -> list[str]:
    """One discordant trajectory each way, S0 against the decision's checkpoint (else the last)."""
    from rlexp.experiment.files import read_json
    from rlexp.experiment.records import BASELINE_S0

    out: list[str] = []
    decision = read_json(ad.decision) if ad.decision.exists() else {}
    shown = decision.get("primary_checkpoint") if decision.get("primary_checkpoint") in news else (
        names[-1] if names else None)
    if shown is not None:
        lost, won = discordant_pairs(base, news[shown])
        out += [f"Discordant trajectories, {BASELINE_S0} vs {shown}:", ""]
        for title, pair in (("baseline right, new wrong", lost), ("baseline wrong, new right", won)):
            if pair is None:
                out += [f"*{title}*: none.", ""]
                continue
            b, n = pair
            out += [f"*{title}* — problem `{b['problem_hash'][:12]}`, gold {_cell(b.get('gold'))}:", ""]
            out += trajectory_table(BASELINE_S0, shown, b, n) + [""]
    return out
