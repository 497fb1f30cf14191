"""OpenRLHF's metric names -> rlexp's canonical names (rlexp.training.metric_names), and its
console log read (``rlexp ingest``'s ``openrlhf-console``, pure: the caller reads the file).

``openrlhf-console``: ``✨ Global step N: {python dict repr}`` (OpenRLHF 0.9.3-0.11.2
``ppo_trainer.py``), with its in-run eval line ``✨ Evaluation completed in T, global_step N,
eval_metrics: {...}``; a dict wrapped over several lines is re-joined, an abridged one (``…``,
``...``) read pair by pair. Where a log has no "Global step" line at all, the tqdm postfix of the
actor's ``Train epoch [e/E]`` bar (``act_loss=…, reward=…, gen_len=…, kl=…, act_lr=…``) is read, one
step per completed last epoch (the postfix carries no step number: steps are counted from 1).
"""

from __future__ import annotations

import re

from rlexp.training.metric_logs import (
    MAX_BAR_CHARS,
    MAX_JOIN,
    MAX_LINE_CHARS,
    MAX_RECORD_CHARS,
    LogRead,
    StepRows,
    brace_balance,
    dict_pairs,
    metrics_of,
    physical_lines,
)
from rlexp.training.metric_names import COMMON, Ratio, Vocabulary

# OpenRLHF 0.9.3-0.11.2: the "Global step" dict (experience info + actor status), 0.11's
# rollout/* stats (ppo_trainer.py), timing/step_total (0.10+), and the tqdm postfix of the actor's
# "Train epoch" bar (ray/ppo_actor.py short_status: act_loss, gen_len, act_lr, ent_loss, ...)
NAMES: dict[str, tuple[str, ...]] = {
    **COMMON,
    "policy_loss": ("policy_loss", "act_loss"),
    "actor_lr": ("actor_lr", "act_lr"),
    "reward": ("reward", "rollout/reward_mean"),
    "response_length": ("response_length", "rollout/response_length_mean", "gen_len"),
    "truncated": ("truncated", "rollout/truncated_rate"),
    "kl": ("kl",),
    "ppo_kl": ("ppo_kl",),
    "entropy": ("entropy", "entropy_loss", "ent_loss"),
    "step_time_s": ("step_time_s", "timing/step_total", "step_time", "time/step"),
    # training-inference mismatch (rlexp.protocol.run_health), logged when the vLLM importance-sampling
    # correction is on: models/loss.py returns vllm_kl = masked_mean(rollout_log_probs - old_log_probs)
    # (every release 0.9.3-0.11.2) and, from 0.11, the filtered share (is_filter_ratio); ppo_actor.py
    # puts both into experience.info, averaged into the "Global step" dict
    "rollout_kl": ("vllm_kl",),
    "rollout_is_filtered": ("is_filter_ratio",),
}

# Agentic runs: rlexp's agent file (rlexp.trainers.openrlhf.agent) returns the local trainer's
# per-episode values as extra_logs; OpenRLHF averages each over the batch's samples into the
# "Global step" dict under its own key (samples_generator/experience_maker
# _process_response_into_experience -> experience.info; ray/ppo_actor.py ppo_train), so
# turns_per_episode, tool_calls_per_episode, env_errors, episode_return and finish_* arrive under
# the local trainer's names. Its two ratios of sums arrive as the means of their parts.
RATIOS = {
    "agent_token_fraction": Ratio("agent_tokens_per_episode", "generated_tokens_per_episode"),
    "env_latency_s": Ratio("env_latency_s_per_episode", "turns_per_episode"),
}

VOCABULARY = Vocabulary(NAMES, ratios=RATIOS)


# --- its console log ----------------------------------------------------------------------------

GLOBAL_STEP = re.compile(r"Global step (\d+)\s*:\s*(.*)$")
class _EvalLine:
    """OpenRLHF's in-run eval line, ``Evaluation completed in T, global_step N, eval_metrics: {...}``,
    found in one pass: the pattern ``Evaluation completed.*?global_step ...`` would retry its lazy
    gap from every "Evaluation completed" of a line (quadratic on a hostile one)."""

    _TAIL = re.compile(r"global_step (\d+), eval_metrics:\s*(.*)$")

    def search(self, line: str) -> re.Match[str] | None:
        at = line.find("Evaluation completed")
        return None if at < 0 else self._TAIL.search(line, at + len("Evaluation completed"))


EVAL_LINE = _EvalLine()
# the OpenRLHF logging prefix its NewLineFormatter repeats on continuation lines
_PREFIX = re.compile(r"^\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d \S+:\d+\]\s?")
_TRAIN_BAR_HEAD = re.compile(r"Train epoch \[(\d+)/(\d+)\]:\s*100%")
_POSTFIX = re.compile(r",\s*([A-Za-z_]\w*=.*)$")


def _train_bar(segment: str) -> tuple[str, str, str] | None:
    """A completed Train-epoch bar -> (epoch, epochs, its postfix ``k=v, ...``), in one pass:
    ``Train epoch [e/E]: 100%|…| n/n [elapsed<left, rate, k=v, k=v]`` (the postfix is inside the
    bar's last brackets, after the rate)."""
    head = _TRAIN_BAR_HEAD.search(segment)
    text = segment.rstrip()
    if head is None or not text.endswith("]"):
        return None
    opening = text.rfind("[", head.end())
    if opening < 0:
        return None
    postfix = _POSTFIX.search(text, opening + 1, len(text) - 1)
    return (head.group(1), head.group(2), postfix.group(1)) if postfix else None




HEAD_LINES = 4  # lines a record's head ("✨ Global step N: {") may be wrapped over
_HEAD_WORDS = ("Global step", "Evaluation completed")


def _head_across(lines: list[str], i: int) -> tuple[re.Match[str], bool, str, int] | None:
    """A record head a wrap cut ("✨ Glob" then "al step 3: {..."): (match, is_eval, joined line,
    next line index) when it starts on line ``i``, else None. A paste may have trimmed the space
    the wrap fell on: both joins are tried."""
    line = lines[i].rstrip("\r")
    tail = line.rstrip()
    if not ("Global step" in tail[-40:] or "Evaluation completed" in tail
            or any(tail.endswith(word[:k]) for word in _HEAD_WORDS for k in range(1, len(word) + 1))):
        return None
    tight = spaced = line
    for j in range(i + 1, min(len(lines), i + 1 + HEAD_LINES)):
        nxt = lines[j].rstrip("\r")
        if len(nxt) > MAX_LINE_CHARS or not nxt.strip() or GLOBAL_STEP.search(nxt) or EVAL_LINE.search(nxt):
            return None
        tight, spaced = tight + nxt.strip(), spaced.rstrip() + " " + nxt.strip()
        for joined in (tight, spaced):
            for pattern, is_eval in ((GLOBAL_STEP, False), (EVAL_LINE, True)):
                m = pattern.search(joined)
                if m and m.start() < len(line):
                    return m, is_eval, joined, j + 1
    return None


def read_openrlhf_console(text: str, trainer: str, reference_time=None) -> LogRead:
    """OpenRLHF's console (see the module doc). ``reference_time``: a function (prefix -> time or
    None) for the logging prefix's time; left out, rows carry no time."""
    read = LogRead("openrlhf-console", trainer)
    lines = physical_lines(text)
    read.lines = len(lines) - (1 if lines and lines[-1] == "" else 0)
    steps = StepRows(read)
    i = 0
    seen_global = False
    while i < len(lines):
        line = lines[i].rstrip("\r")
        number_ = i + 1
        if len(line) > MAX_LINE_CHARS:
            if "Global step" in line or "Evaluation completed" in line:
                read.not_understood.append(number_)
            i += 1
            continue
        match = GLOBAL_STEP.search(line)
        is_eval = False
        if not match:
            match = EVAL_LINE.search(line)
            is_eval = match is not None
        j = i + 1
        if not match and (head := _head_across(lines, i)) is not None:
            match, is_eval, line, j = head
        if not match:
            i += 1
            continue
        payload = match.group(2)
        # a dict still open, or not begun yet ("Global step 1:" then the dict on the next line)
        pieces, size, balance = [payload], len(payload), brace_balance(payload)
        while (balance > 0 or not "".join(pieces).strip()) and j < len(lines) and j - i < MAX_JOIN:
            nxt = lines[j].rstrip("\r")
            if len(nxt) > MAX_LINE_CHARS or GLOBAL_STEP.search(nxt) or EVAL_LINE.search(nxt) or not nxt.strip():
                break
            piece = _PREFIX.sub("", nxt).strip()
            if size + len(piece) > MAX_RECORD_CHARS:
                break
            pieces.append(piece)
            size += len(piece)
            balance += brace_balance(piece)
            j += 1
        payload = "".join(pieces)
        if j > i + 1:
            read.rejoined.append(number_)
        raw, whole, cut = dict_pairs(payload)
        last = j  # the record's last line (1-based)
        i = j
        if raw is None:
            read.not_understood.append(number_)
            continue
        if cut:
            read.cut.append((number_, last))
        if not whole:
            read.abridged.append(number_)
        step = int(match.group(1))
        metrics = metrics_of(raw, trainer, read, step)
        if reference_time is not None and (stamp := reference_time(line[: match.start()])) is not None:
            metrics["time"] = stamp
        if is_eval:
            steps.join(step, metrics, number_)
        else:
            seen_global = True
            steps.add(step, metrics, number_, repeat_restarts=True)
    if not seen_global and not read.runs:
        _read_tqdm_postfixes(lines, read)
    return read


def _read_tqdm_postfixes(lines: list[str], read: LogRead) -> None:
    """Logs without a "Global step" line: the actor's Train epoch bar, one step per last epoch."""
    steps = StepRows(read)
    step = 0
    for i, line in enumerate(lines):
        if "Train epoch [" not in line:
            continue
        segments = [s for s in line.split("\r") if "Train epoch [" in s]
        final = next((s for s in reversed(segments) if "100%" in s), None)
        if final is None:
            continue
        if len(final) > MAX_BAR_CHARS:  # no bar is this long: not one (and no pattern runs over it)
            read.not_understood.append(i + 1)
            continue
        bar = _train_bar(final)
        if bar is None:
            read.not_understood.append(i + 1)
            continue
        epoch, epochs, postfix = bar
        if epoch != epochs:
            continue  # not the step's last epoch
        pairs = {}
        for item in postfix.split(", "):
            key, eq, value = item.partition("=")
            if eq:
                pairs[key.strip()] = value.strip()
        if not pairs:
            read.not_understood.append(i + 1)
            continue
        step += 1
        steps.add(step, metrics_of(pairs, read.trainer, read, step), i + 1, repeat_restarts=True)
        read.steps_counted = True


# ``rlexp ingest``'s formats of its own (its rules' log_readers): its console log, ``Global step N: {...}``
LOG_READERS = {"openrlhf-console": read_openrlhf_console}
