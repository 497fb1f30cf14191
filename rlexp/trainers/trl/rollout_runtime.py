"""What TRL's generated rollout module runs (``launch/trl_rollout.py``, an environment task whose
actions are text): :class:`Rollout`, built by the module from the attempt's values and the
environment classes it imports.

The module (:mod:`rlexp.trainers.trl.rollout_template`; the contract in
:mod:`rlexp.trainers.trl.agent`) hands the training script ``train_rows``, ``rollout_func``,
``REWARD_FUNCS`` and ``monitor_score``: here, the bound methods of one :class:`Rollout`. Episodes
are played by rlexp's own rollout (:func:`rlexp.environments.episodes.run_episodes`), the loop the
local trainer trains with. Nothing heavy is imported before a method runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Rollout:
    """One attempt's rollout on TRL: its environment settings and budgets, one environment instance
    per (environment, config, slot) reset between episodes, and the calls made at each step (a
    step's second call gets other seeds)."""

    def __init__(self, config: Mapping[str, Any], environments: Mapping[str, Any]) -> None:
        from rlexp.environments.episodes import SlotCache
        from rlexp.environments.interface import Budgets, resolve
        from rlexp.spec import EnvironmentSettings

        for name, cls in environments.items():
            assert resolve(name) is cls, f"environment {name} resolves to another class than the one imported"
        self.config = dict(config)
        self.environments = dict(environments)
        self.settings = EnvironmentSettings(**config["environment"])
        self.budgets = Budgets(self.settings.max_turns, self.settings.max_tokens_per_turn,
                               self.settings.max_total_tokens)
        self.cache = SlotCache("trl rollout")
        self.calls = {"step": -1, "n": 0}

    def train_rows(self, records: Iterable[Mapping[str, Any]], suffix: str, where: str) -> list[dict[str, Any]]:
        """Dataset records -> TRL rows: the ``prompt`` column is the environment row as JSON."""
        from rlexp.environments.interface import rows_for_task
        from rlexp.trainers.trl import agent as trl_agent

        rows = rows_for_task(list(records), self.settings, prompt_suffix=suffix, where=where)
        return [{"prompt": trl_agent.encode_row(row)} for row in rows]

    def rollout_func(self, prompts: Iterable[str], trainer: Any) -> dict[str, Any]:
        """One episode per entry of ``prompts`` (TRL repeats each prompt num_generations times)."""
        from rlexp.environments.episodes import run_episodes
        from rlexp.experiment.files import append_jsonl
        from rlexp.trainers.trl import agent as trl_agent

        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        step = int(trainer.state.global_step)
        self.calls.update(n=self.calls["n"] + 1 if self.calls["step"] == step else 0, step=step)
        seed = int(trainer.args.seed) * 1_000_003 + step * 1_009 + self.calls["n"]
        rows = trl_agent.decode_rows(list(prompts), "trl rollout prompts")
        played = run_episodes(model, tokenizer, rows, budgets=self.budgets, cache=self.cache, num_samples=1,
                              temperature=float(trainer.temperature), seed=seed)
        trajectories = [t for (t,) in played]
        pad = tokenizer.pad_token_id
        logprobs = trl_agent.sampling_logprobs(model, trajectories, float(trainer.temperature), pad)
        output = trl_agent.rollout_output(trajectories, pad_id=pad, logprobs=logprobs)
        if trainer.accelerator.is_main_process:  # one writer (on several processes: process 0's episodes)
            for i, t in enumerate(trajectories):
                append_jsonl(self.config["episodes_path"], trl_agent.episode_record(t, output, i, step + 1))
        return output

    def episode_return(self, prompts: Any, completions: Any, episode_return: list[float | None],
                       episode_metrics: list[Mapping[str, float]] | None = None, log_metric: Any = None,
                       **kwargs: Any) -> list[float | None]:  # fmt: skip
        """The reward TRL normalises per group: the environment's return of each episode; None for an
        episode that ended in an environment error (TRL leaves it out of the baseline, advantage 0).
        Logs the episode metrics under the local trainer's names."""
        if log_metric is not None and episode_metrics:
            for name, value in sorted(episode_metrics[0].items()):
                log_metric(name, float(value))
        return [None if r is None else float(r) for r in episode_return]

    def monitor_score(self, model: Any, tokenizer: Any, rows: list[Mapping[str, Any]]) -> float:
        """Greedy episodes on the monitor rows: the share whose return reaches the success threshold."""
        from rlexp.environments.episodes import run_episodes
        from rlexp.trainers.trl import agent as trl_agent

        played = run_episodes(model, tokenizer, trl_agent.decode_rows([r["prompt"] for r in rows], "monitor"),
                              budgets=self.budgets, cache=self.cache, temperature=0.0)
        hits = sum(1 for (t,) in played if t.episode_return >= self.settings.success_threshold)
        return hits / len(rows) if rows else 0.0
