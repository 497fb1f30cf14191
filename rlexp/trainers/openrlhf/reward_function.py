"""OpenRLHF's reward function (``--remote_rm_url path.py``): the code of the reward file rlexp writes.

The reward file is :mod:`rlexp.evaluation.answers` verbatim followed by this module's source from the
marker line below (:mod:`rlexp.backends.reward_template` explains why the parser is copied, not
imported: the rollout workers may not have rlexp). Above the marker, this module imports from
rlexp what the file has defined above it, so the same functions run, and are tested, here.
"""

from rlexp.evaluation.answers import extract_answer, is_correct

_GRADE_MODE = "exact"  # the reward file states the attempt's

# ---- appended to rlexp.evaluation.answers in the reward file ----


def _response(query, prompt):
    """OpenRLHF passes the whole decoded sequence; grade only what follows the prompt."""
    if isinstance(query, str) and isinstance(prompt, str) and prompt and query.startswith(prompt):
        return query[len(prompt):]
    return query


def _as_output(values):
    try:
        import torch  # present on every OpenRLHF worker; lists elsewhere (tests, CPU tools)

        return torch.tensor(values, dtype=torch.float32)
    except ImportError:  # pragma: no cover - depends on the host
        return list(values)


def reward_func(queries, prompts, labels, **kwargs):
    rewards, boxed = [], []
    for query, prompt, label in zip(queries, prompts, labels):  # noqa: B905 - OpenRLHF's lists, as it passes them
        answer, method = extract_answer(_response(query, prompt))
        rewards.append(1.0 if answer is not None and is_correct(answer, label, mode=_GRADE_MODE) else 0.0)
        boxed.append(1.0 if method == "boxed" else 0.0)
    return {
        "rewards": _as_output(rewards),
        "scores": _as_output(rewards),
        "extra_logs": {"has_boxed": _as_output(boxed)},
    }
