"""A deterministic scripted "model" for the harness fixture runs: it reads the two-operand sum in
the prompt and answers it right or wrong by a hash of (model seed, prompt), so two models with
different seeds and skills disagree on some items exactly as two real checkpoints would, with no
weights and no network. Used by the lm-eval and lighteval drivers (the harnesses themselves are real).
"""

from __future__ import annotations

import hashlib
import re

PROBLEM = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")


def unit(seed: int, text: str, salt: str = "") -> float:
    """A uniform number in [0, 1) fixed by (seed, text, salt)."""
    digest = hashlib.sha256(f"{seed}|{salt}|{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def true_sum(prompt: str) -> int:
    matches = PROBLEM.findall(prompt)
    if not matches:
        raise ValueError(f"no problem in prompt {prompt[-80:]!r}")
    a, b = matches[-1]  # the last one: few-shot examples come first
    return int(a) + int(b)


def answer(prompt: str, seed: int, skill: float) -> str:
    """A completion: right with probability ``skill``; the strict '#### N' format three times in
    four, else a sentence that only a flexible extractor reads."""
    value = true_sum(prompt)
    if unit(seed, prompt, "right") >= skill:
        value += 1 + int(unit(seed, prompt, "off") * 3)
    if unit(seed, prompt, "format") < 0.75:
        return f" {value}\n#### {value}"
    return f" I think the result is {value}."


def loglikelihood(context: str, continuation: str, seed: int, skill: float) -> float:
    """Higher for the true answer with probability ``skill`` (multiple-choice scoring)."""
    right = continuation.strip() == str(true_sum(context))
    knows = unit(seed, context, "mc") < skill
    noise = unit(seed, context + continuation, "ll")
    return -(noise + (0.0 if right == knows else 2.0))


def write_dataset(path: str, n: int) -> None:
    """The addition problems every fixture run uses: a, b, the answer, four choices and the gold index."""
    import json

    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            a, b = 7 + 13 * i % 50, 3 + 29 * i % 40
            right = a + b
            choices = [str(right + k) for k in (-2, -1, 0, 1)]
            gold = int(unit(0, str(i), "gold") * 4)
            choices[2], choices[gold] = choices[gold], choices[2]
            fh.write(json.dumps({"a": a, "b": b, "answer": str(right), "choices": choices, "gold": gold}) + "\n")


if __name__ == "__main__":
    import sys

    write_dataset(sys.argv[1], int(sys.argv[2]))
