"""What TRL's generated tools module runs (``launch/trl_tools.py``, an environment task whose
actions are tool calls): :class:`ToolRollout`, built by the module from the attempt's values and
its ``ENVIRONMENT_FACTORY``.

The module (:mod:`rlexp.trainers.trl.tools_template`; the contract in
:mod:`rlexp.trainers.trl.agent_tools`) keeps what TRL reads from code: one class per environment
whose tools are methods with type hints and docstrings (TRL describes each tool by them). The rest
— ``train_rows``, ``REWARD_FUNCS`` and ``monitor_score`` — are the bound methods of one
:class:`ToolRollout`. TRL plays the tool calls itself; each call is one turn of
:class:`rlexp.trainers.trl.agent_tools.ToolEpisode`. Nothing heavy is imported before a method runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class ToolRollout:
    """One attempt's tool-calling rollout on TRL: its environment settings and factory (environment
    name -> the generated ToolEpisode class), and the model's end tokens (read once)."""

    def __init__(self, config: Mapping[str, Any], factory: Mapping[str, Any]) -> None:
        from rlexp.environments.interface import environment_tools, resolve
        from rlexp.spec import EnvironmentSettings

        for name, cls in factory.items():
            assert resolve(name) is cls.ENVIRONMENT, f"environment {name} resolves to another class than the one imported"
            assert set(environment_tools(cls.ENVIRONMENT)) == set(cls.TOOLS.values()), f"{name}: its tools changed"
        self.config = dict(config)
        self.factory = dict(factory)
        self.settings = EnvironmentSettings(**config["environment"])
        self._ends: list[int] = []

    def train_rows(self, records: Iterable[Mapping[str, Any]], suffix: str, where: str) -> list[dict[str, Any]]:
        """Dataset records -> TRL rows: an empty user message that reset() fills with the observation,
        the row as JSON (reset's argument) and the environment that plays it."""
        from rlexp.environments.interface import rows_for_task
        from rlexp.trainers.trl import agent as trl_agent

        rows = rows_for_task(list(records), self.settings, prompt_suffix=suffix, where=where)
        return [{"prompt": [{"role": "user", "content": ""}], "row": trl_agent.encode_row(row), "environment": row.env}
                for row in rows]

    def episode_return(self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
                       environments: list[Any], trainer_state: Any = None, log_metric: Any = None,
                       **kwargs: Any) -> list[float]:  # fmt: skip
        """The reward TRL normalises per group: each episode's return, its final message played as the
        last step. Logs the episode metrics under the local trainer's names and keeps every episode."""
        from accelerate import PartialState

        from rlexp.experiment.files import append_jsonl
        from rlexp.trainers.trl import agent_tools

        ends = self.end_tokens()
        records = []
        for messages, ids, episode in zip(completions, completion_ids, environments, strict=False):
            truncated = not ids or ids[-1] not in ends  # as TRL counts a clipped completion
            records.append(episode._finish(messages, truncated, self.settings.max_turns))
        if log_metric is not None:
            for name, value in sorted(agent_tools.tool_episode_metrics(records).items()):
                log_metric(name, float(value))
        step = int(trainer_state.global_step) + 1 if trainer_state is not None else 0
        if PartialState().is_main_process:  # one writer (on several processes: process 0's episodes)
            for prompt, record, messages, ids in zip(prompts, records, completions, completion_ids, strict=False):
                append_jsonl(self.config["episodes_path"], {"global_step": step, "prompt": prompt,
                                                            "completion_ids": list(ids), "messages": messages,
                                                            **record})
        return [record["return"] for record in records]

    def end_tokens(self) -> list[int]:
        """The model's end-of-sequence and pad ids (its tokenizer, read once)."""
        if not self._ends:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.config["model_name_or_path"])
            self._ends.extend({tokenizer.eos_token_id, tokenizer.pad_token_id} - {None})
        return self._ends

    def monitor_score(self, model: Any, tokenizer: Any, rows: list[Mapping[str, Any]]) -> float:
        """Greedy tool episodes on the monitor rows: the share whose return reaches the success threshold."""
        from rlexp.trainers.trl import agent_tools

        hits = 0
        for row in rows:
            episode = self.factory[row["environment"]]()
            record = agent_tools.greedy_tool_episode(model, tokenizer, episode, row["row"],
                                                     max_turns=self.settings.max_turns,
                                                     max_total_tokens=self.settings.max_total_tokens)
            hits += record["return"] >= self.settings.success_threshold
        return hits / len(rows) if rows else 0.0
