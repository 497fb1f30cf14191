"""verl's reward file: :mod:`rlexp.evaluation.answers` verbatim (as OpenRLHF's, rlexp.backends.reward_template),
then the ``compute_score`` function verl calls."""

from __future__ import annotations

from pathlib import Path

from rlexp.backends.reward_template import answers_source, appended_source
from rlexp.experiment.files import atomic_write_text, sha256_text

# verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)`` once per
# response with the decoded response only (verl/experimental/reward_loop/reward_manager/naive.py in
# 0.9.1); a float return is the score and is also logged as ``acc`` (its validation metric
# ``val-core/<data_source>/acc/mean@1``). The function is rlexp.trainers.verl.reward_function's.
VERL_REWARD_FUNCTION = "compute_score"


def render_verl_reward_file(mode: str = "exact") -> str:
    """The text of verl's reward file: rlexp.evaluation.answers verbatim, then ``compute_score``."""
    from rlexp.trainers.verl import reward_function

    source = answers_source()
    return source.rstrip("\n") + "\n" + appended_source(reward_function, "verl", sha256_text(source), mode)


def write_verl_reward_file(path: str | Path, mode: str = "exact") -> Path:
    return atomic_write_text(path, render_verl_reward_file(mode))
