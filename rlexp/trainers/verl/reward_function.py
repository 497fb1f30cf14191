"""verl's reward function (``custom_reward_function``): the code of the reward file rlexp writes.

The reward file is :mod:`rlexp.evaluation.answers` verbatim followed by this module's source from the
marker line below, as OpenRLHF's (:mod:`rlexp.trainers.openrlhf.reward_function`). Above the
marker, this module imports from rlexp what the file has defined above it.
"""

from rlexp.evaluation.answers import extract_answer, is_correct

_GRADE_MODE = "exact"  # the reward file states the attempt's

# ---- appended to rlexp.evaluation.answers in the reward file ----


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    answer, _method = extract_answer(solution_str)
    return 1.0 if answer is not None and is_correct(answer, str(ground_truth), mode=_GRADE_MODE) else 0.0
