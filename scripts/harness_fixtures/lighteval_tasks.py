"""A local lighteval task (``--custom-tasks lighteval_tasks.py``): the addition problems of
scripted_model.write_dataset, read from the folder named by $RLEXP_FIXTURE_DATA (test.jsonl),
scored two ways: loglikelihood_acc over the four choices and exact_match of a generated answer."""

from __future__ import annotations

import os

from lighteval.metrics.metrics import Metrics
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc


def addition_prompt(line: dict, task_name: str) -> Doc:
    return Doc(task_name=task_name, query=f"Question: What is {line['a']} + {line['b']}?\nAnswer:",
               choices=[f" {c}" for c in line["choices"]], gold_index=line["gold"])


TASKS_TABLE = [
    LightevalTaskConfig(
        name="addition_lv",
        prompt_function=addition_prompt,
        hf_repo=os.environ.get("RLEXP_FIXTURE_DATA", "."),
        hf_subset="default",
        hf_avail_splits=["test"],
        evaluation_splits=["test"],
        metrics=[Metrics.loglikelihood_acc, Metrics.exact_match],
        generation_size=16,
        stop_sequence=["\n"],
    )
]
