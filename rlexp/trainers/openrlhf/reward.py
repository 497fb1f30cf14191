"""OpenRLHF's reward file, handed to it as ``--remote_rm_url path.py``.

OpenRLHF imports that file on its Ray workers and calls ``reward_func(queries, prompts, labels)``
(``openrlhf/utils/agent.py`` at v0.9.3), expecting ``{"rewards", "scores", "extra_logs"}``. The
workers may not have rlexp installed, so the file embeds the *source* of :mod:`rlexp.evaluation.answers`
verbatim, with its SHA-256 (rlexp.backends.reward_template): training rewards and ``rlexp eval`` grade
with byte-identical code. The function after the parser is the source of
:mod:`rlexp.trainers.openrlhf.reward_function` (a module of its own, linted and tested).

Reward = 1.0 when the extracted answer equals the gold (exact mode), else 0.0 — the SOP's pure
exact-match reward. ``extra_logs`` carries the parse method so "has_boxed" is logged per step.
"""

from __future__ import annotations

from pathlib import Path

from rlexp.backends.reward_template import answers_source, appended_source
from rlexp.experiment.files import atomic_write_text, sha256_text


def render_reward_file(mode: str = "exact") -> str:
    """The text of the reward file: rlexp.evaluation.answers verbatim, then ``reward_func``."""
    from rlexp.trainers.openrlhf import reward_function

    source = answers_source()
    return source.rstrip("\n") + "\n" + appended_source(reward_function, "OpenRLHF", sha256_text(source), mode)


def write_reward_file(path: str | Path, mode: str = "exact") -> Path:
    return atomic_write_text(path, render_reward_file(mode))
