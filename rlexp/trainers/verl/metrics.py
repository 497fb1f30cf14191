"""verl's metric names -> rlexp's canonical names (rlexp.core.trainers.metric_names), and the
readers of its two log formats for ``rlexp ingest`` (rlexp.core.trainers.metric_logs):

- ``verl-console``: ``step:N - key:value - key:value`` (verl's console logger,
  ``concat_dict_to_str``); a record pasted over several lines (continuations starting ``- key:``)
  is re-joined.
- ``verl-file``: verl's ``file`` logger, ``{"step": N, "data": {...}}`` per line (orjson writes a
  NaN as ``null``: read back as NaN).
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlexp.core.trainers.metric_logs import (
    MAX_JOIN,
    LogRead,
    StepRows,
    json_lines,
    metrics_of,
    physical_lines,
    step_of,
)
from rlexp.core.trainers.metric_names import COMMON, Ratio, Vocabulary

# verl 0.9.1 (metric_utils.py, core_algos.py, workers) and older verl as users paste it
# (actor/lr(1e-4) scaled by 1e4, actor/entropy_loss, timing/*). kl: the KL loss to the reference
# when use_kl_loss, else the in-reward KL penalty.
NAMES: dict[str, tuple[str, ...]] = {
    **COMMON,
    "reward": ("critic/score/mean",),
    "actor_lr": ("actor/lr",),  # actor/lr(1e-4) arrives here unscaled, see SCALED_NAME
    "grad_norm": ("actor/grad_norm",),
    "policy_loss": ("actor/pg_loss",),
    "ppo_clip_ratio": ("actor/pg_clipfrac",),
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "ppo_kl": ("actor/ppo_kl",),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "response_length": ("response_length/mean",),
    "truncated": ("response_length/clip_ratio",),
    "step_time_s": ("timing_s/step", "timing/step"),
    "monitor_acc": ("val-core/rlexp_ood_monitor/acc/mean@1",),
    # agentic runs (rlexp's agent loop, rlexp.trainers.verl.agent), what verl logs of an episode
    # (metric_utils.py compute_data_metrics) besides its return (reward above: the mean over the
    # batch's samples that have a response; a reset failure has none): tool_call_counts, an extra
    # field, logged only by the legacy trainer (trainer.use_v1=false), whose batch keeps them
    "tool_calls_per_episode": ("tool_call_counts/mean",),
    # training-inference mismatch (rlexp.core.run_health): rollout_corr_helper.py's off-policy metrics
    # (kl = masked_mean(rollout_log_prob - old_log_prob), logged whenever rollout log-probs are kept) and
    # its IS weights; utils/debug/metrics.py's |Δ log p| (training/rollout_probs_diff_*)
    "rollout_kl": ("rollout_corr/kl",),
    "rollout_logp_diff_mean": ("training/rollout_probs_diff_mean",),
    "rollout_logp_diff_max": ("training/rollout_probs_diff_max",),
    "rollout_is_mean": ("rollout_corr/rollout_is_mean",),
    "rollout_is_min": ("rollout_corr/rollout_is_min",),
    "rollout_is_max": ("rollout_corr/rollout_is_max",),
    "rollout_is_filtered": ("rollout_corr/rollout_rs_masked_fraction",),
    # off-policy staleness (trainer/ppo/v1/trainer_base.py): versions a trajectory lags the policy
    "policy_lag_mean": ("training/off_policy/trajectory_staleness/mean",),
    "policy_lag_max": ("training/off_policy/trajectory_staleness/max",),
}
# num_turns/mean counts chat messages: 2 per model turn of rlexp's loop (the prompt, each turn and
# each feedback but the last), so a model turn is half of it (a single-turn loop's 2 reads as 1)
RATIOS = {"turns_per_episode": Ratio("num_turns/mean", 2)}
# the monitor's metric is also kept under its own name; without timing/step, the phase timings
# add up to step_time_s
VOCABULARY = Vocabulary(NAMES, keep_source=("val-core/rlexp_ood_monitor/acc/mean@1",),
                        step_time_parts=("timing_s/", "timing/"), ratios=RATIOS)


# --- its console ------------------------------------------------------------------------------

VERL_RECORD = re.compile(r"(?:^|[\s)\]>])step:(\d+)\s+-\s+(.*)$")
VERL_CONTINUATION = re.compile(r"^\s*-\s+[^\s:]+:")
_VERL_ITEM = re.compile(r"^([^\s:][^:]*?):\s*(.+)$")


def read_verl_console(text: str, trainer: str = "verl") -> LogRead:
    """verl's console logger, ``step:N - key:value - ...`` (see the module doc)."""
    read = LogRead("verl-console", trainer)
    lines = physical_lines(text)
    read.lines = len(lines) - (1 if lines and lines[-1] == "" else 0)
    steps = StepRows(read)
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r")
        match = VERL_RECORD.search(line)
        if not match:
            i += 1
            continue
        body = match.group(2)
        j = i + 1
        while j < len(lines) and j - i < MAX_JOIN and VERL_CONTINUATION.match(lines[j]):
            body = body.rstrip() + " " + lines[j].strip()
            j += 1
        if j > i + 1:
            read.rejoined.append(i + 1)
        raw: dict[str, Any] = {}
        cut = False
        for item in re.split(r"\s+-\s+", body.strip()):
            m = _VERL_ITEM.match(item.strip())
            if m:
                raw[m.group(1).strip()] = m.group(2).strip()
            else:  # "…", "...", or an item cut in two
                cut = True
        step = int(match.group(1))
        if not raw:
            read.not_understood.append(i + 1)
            i = j
            continue
        if cut:
            read.abridged.append(i + 1)
        steps.add(step, metrics_of(raw, trainer, read, step), i + 1, repeat_restarts=False)
        i = j
    return read


# --- its file logger --------------------------------------------------------------------------

def read_verl_file(text: str, trainer: str = "verl") -> LogRead:
    """verl's ``file`` logger: ``{"step": N, "data": {...}}`` per line; ``null`` (orjson's NaN) is NaN."""
    read = LogRead("verl-file", trainer)
    steps = StepRows(read)
    for number_, raw in json_lines(text, read):
        step = step_of(raw.get("step")) if isinstance(raw, dict) else None
        if step is None or not isinstance(raw.get("data"), dict):
            read.not_understood.append(number_)
            continue
        data = {k: (math.nan if v is None else v) for k, v in raw["data"].items() if k != "training/global_step"}
        steps.add(step, metrics_of(data, trainer, read, step), number_, repeat_restarts=False)
    return read


LOG_READERS = {"verl-console": read_verl_console, "verl-file": read_verl_file}
