"""verl's metric names -> rlexp's canonical names (rlexp.training.metric_names), and the
readers of its two log formats for ``rlexp ingest`` (rlexp.training.metric_logs):

- ``verl-console``: ``step:N - key:value - key:value`` (verl's console logger,
  ``concat_dict_to_str``); a record wrapped over several lines (a terminal's hard wrap inside a key
  or a number, or continuations starting ``- key:``) is re-joined; one whose last item stays cut
  is flagged with its lines, that item left out.
- ``verl-file``: verl's ``file`` logger, ``{"step": N, "data": {...}}`` per line (orjson writes a
  NaN as ``null``: read back as NaN).
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlexp.training.metric_logs import (
    MAX_JOIN,
    MAX_LINE_CHARS,
    MAX_RECORD_CHARS,
    LogRead,
    StepRows,
    join_wrapped,
    json_lines,
    looks_cut,
    metrics_of,
    physical_lines,
    step_of,
)
from rlexp.training.metric_names import COMMON, Ratio, Vocabulary

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
    # the share of samples with no response: under rlexp's loop an episode that ended in an
    # environment error (it returns no response, so none of its tokens is trained), or a request
    # verl itself aborted (counted with them: the SOP's env_errors stop errs on the side of stopping)
    "env_errors": ("response/aborted_ratio",),
    # training-inference mismatch (rlexp.protocol.run_health): rollout_corr_helper.py's off-policy metrics
    # (kl = masked_mean(rollout_log_prob - old_log_prob), logged whenever rollout log-probs are kept) and
    # its IS weights (utils/debug/metrics.py's training/rollout_probs_diff_* is |Δp| in probability, not
    # |Δ log p|: it keeps its own name)
    "rollout_kl": ("rollout_corr/kl",),
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
# a record's head cut by a wrap before its first item ("step:3" then "4 - global_seqlen/min:...")
_VERL_HEAD_CUT = re.compile(r"(?:^|[\s)\]>])(?:s|st|ste|step|step:\d*(?:\s+-?)?)\s*$")
# a wrapped record's next physical line: items joined by " - " and no other space (verl prints
# keys and numbers without spaces); the first may be the tail of a key or a number cut in two
_VERL_WRAPPED = re.compile(r"(?:-\s+)?[\w./@()\[\]+\-:'\",=<>%*]+(?:\s+-\s+[^\s]+)*(?:\s+-)?")
_VERL_ITEM = re.compile(r"^([^\s:][^:]*?):\s*(.+)$")
SEPARATOR = " - "


_ITEM_TAIL = 1 << 12  # an item is far shorter: the end of a record is judged on its last 4 KiB


def _incomplete(body: str) -> bool:
    """The record so far ends inside an item: after a separator, in a key, or in a number."""
    body = body[-_ITEM_TAIL:].rstrip()
    if body.endswith(" -"):
        return True
    last = body.rsplit(SEPARATOR, 1)[-1].strip()
    m = _VERL_ITEM.match(last)
    return m is None or looks_cut(m.group(2))


_NUMBER_TAIL = re.compile(r"[-+.eE]*\d[\d.eE+-]*")


def _continues(line: str, body: str) -> bool:
    """``line`` is the rest of a wrapped record: shaped like items, and not a record of its own.
    When the record so far ends inside an item, any such line continues it ("training/global_" then
    "step:34 - ..."); after a whole item, only a line with items or a number's tail does (a
    "=====" or a lone word after a record is not part of it)."""
    text = line.strip()
    if not text or not _VERL_WRAPPED.fullmatch(text):
        return False
    record = VERL_RECORD.search(line)
    if _incomplete(body):
        # a line that is a record of its own continues only a key cut just before "step"
        # ("training/global_" + "step:34 - ..."); after "prompt_length/m" it is the next record
        return not record or body.rstrip().endswith(("_", "/"))
    if record:
        return False
    core = text.removesuffix(" -")  # the wrap fell just after a separator
    return (text == "-" or " - " in core or text.startswith("- ") or ":" in core
            or bool(_NUMBER_TAIL.fullmatch(core)))


def read_verl_console(text: str, trainer: str = "verl") -> LogRead:
    """verl's console logger, ``step:N - key:value - ...`` (see the module doc). A record wrapped
    over several lines (by a terminal, a paste, a ``- key:`` continuation) is re-joined; one whose
    last item stays cut (the next line does not continue it) is flagged in ``read.cut`` with its
    lines, and that item is left out: never read as a shorter key or number."""
    read = LogRead("verl-console", trainer)
    lines = physical_lines(text)
    read.lines = len(lines) - (1 if lines and lines[-1] == "" else 0)
    steps = StepRows(read)
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r")
        if len(line) > MAX_LINE_CHARS:  # no pattern runs over it
            if "step:" in line:
                read.not_understood.append(i + 1)
            i += 1
            continue
        match = VERL_RECORD.search(line)
        j = i + 1
        if (not match and _VERL_HEAD_CUT.search(line[-64:]) and j < len(lines)
                and len(lines[j]) <= MAX_LINE_CHARS and _continues(lines[j], "step:")):
            line = join_wrapped(line, lines[j], SEPARATOR)
            match = VERL_RECORD.search(line)
            j += 1
        if not match:
            i += 1
            continue
        body = match.group(2)
        pieces, size = [body.rstrip()], len(body)
        window = pieces[0][-_ITEM_TAIL:]  # the record's end: what the next line may continue
        while (j < len(lines) and j - i < MAX_JOIN and len(lines[j]) <= MAX_LINE_CHARS
               and size + len(lines[j]) <= MAX_RECORD_CHARS and _continues(lines[j].rstrip("\r"), window)):
            joined = join_wrapped(window, lines[j].rstrip("\r"), SEPARATOR)
            pieces.append(joined[len(window):])
            window = joined[-_ITEM_TAIL:]
            size += len(lines[j])
            j += 1
        if len(pieces) > 1:
            body = "".join(pieces)
        if j > i + 1:
            read.rejoined.append(i + 1)
        raw: dict[str, Any] = {}
        abridged = False
        ends_at_separator = body.rstrip().endswith(" -")  # cut after its last whole item
        items = re.split(r"\s+-\s+", body.strip().removesuffix(" -"))
        cut = _incomplete(body)
        # more lines or characters than a record may span, and the next line still continues it
        overlong = (j < len(lines) and (j - i >= MAX_JOIN or size + len(lines[j]) > MAX_RECORD_CHARS)
                    and _continues(lines[j].rstrip("\r")[:MAX_LINE_CHARS], body))
        ends_at_separator = ends_at_separator or (overlong and not cut)
        cut = cut or overlong
        for index, item in enumerate(items):
            m = _VERL_ITEM.match(item.strip())
            if index == len(items) - 1 and cut and not ends_at_separator:
                break  # the last item was cut and nothing continued it: flagged below, left out
            if m:
                raw[m.group(1).strip()] = m.group(2).strip()
            else:  # "…", "...", or an item cut in two
                abridged = True
        first = i + 1
        step = int(match.group(1))
        i = j
        if not raw:  # nothing readable (a cut item alone included): the record's line is not understood
            read.not_understood.append(first)
            continue
        if cut:
            read.cut.append((first, j))
        if abridged:
            read.abridged.append(first)
        steps.add(step, metrics_of(raw, trainer, read, step), first, repeat_restarts=False)
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
