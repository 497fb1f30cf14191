"""Write real Inspect AI logs with Inspect's mock model (``mockllm/model``) and custom outputs.

Usage: python inspect_run.py OUT_DIR

Every log is written by ``inspect_ai.eval`` itself; only the model's replies are scripted (a
callable given to mockllm as ``custom_outputs``, answering from scripted_model.py). Each reply
carries token usage: without it Inspect counts tokens with a tokenizer it would download.
Writes OUT_DIR/<name>.eval or .json, OUT_DIR/harness-results.json (the metrics Inspect computed,
log.results) and OUT_DIR/sample-scores.json (each sample's id, epoch, score values and error, taken
from the EvalLog that ``eval`` returned): the tests compare what rlexp reads with both.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scripted_model  # noqa: E402
from inspect_ai import Task, eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.scorer import Score, Target, includes, match, mean, scorer, stderr  # noqa: E402
from inspect_ai.solver import TaskState, generate  # noqa: E402

N = 20


def dataset() -> list[Sample]:
    samples = []
    for i in range(N):
        a, b = 7 + 13 * i % 50, 3 + 29 * i % 40
        samples.append(Sample(input=f"What is {a} + {b}? Reply with the number.", target=str(a + b),
                              id=f"q{i:02d}", metadata={"group": f"g{i // 4}"}))
    return samples


@scorer(metrics=[mean(), stderr()])
def closeness():
    """Partial credit: 1 for the exact sum, 0.5 when off by one, else 0."""

    async def score(state: TaskState, target: Target) -> Score:
        try:
            got = int(state.output.completion.strip().split()[-1].strip("."))
        except (ValueError, IndexError):
            return Score(value=0.0, answer=state.output.completion)
        off = abs(got - int(target.text))
        return Score(value=1.0 if off == 0 else 0.5 if off == 1 else 0.0, answer=str(got))

    return score


def scripted(seed: int, skill: float, fail_on: str | None = None):
    calls: dict[str, int] = {}

    def reply(input, tools, tool_choice, config) -> ModelOutput:
        prompt = input[-1].text
        if fail_on is not None and fail_on in prompt:
            raise RuntimeError("scripted failure for this sample")
        calls[prompt] = calls.get(prompt, 0) + 1  # a new draw per epoch
        text = scripted_model.answer(f"{prompt} #{calls[prompt]}", seed, skill).split("\n")[0].strip()
        output = ModelOutput.from_content(model="mockllm/model", content=text)
        output.usage = ModelUsage(input_tokens=12, output_tokens=4, total_tokens=16)
        return output

    return get_model("mockllm/model", custom_outputs=reply)


def run(out: Path, name: str, task: Task, model, fmt: str, **kwargs) -> dict:
    tmp = out / f".{name}-{fmt}"  # one directory per log, so the glob below finds just it
    log = eval(task, model=model, log_dir=str(tmp), log_format=fmt, display="none", max_samples=1, **kwargs)[0]
    samples = [{"id": x.id, "epoch": x.epoch, "error": x.error is not None, "group": x.metadata.get("group"),
                "scores": {k: v.value for k, v in (x.scores or {}).items()}} for x in (log.samples or [])]
    # the samples above are read from the log file lazily: move it only now
    (written,) = list(tmp.glob(f"*.{fmt}"))
    shutil.move(written, out / f"{name}.{fmt}")
    tmp.rmdir()
    return {
        "samples": samples,
        "status": log.status,
        "inspect_ai_version": log.eval.packages.get("inspect_ai"),
        "scores": {s.name: {m: v.value for m, v in s.metrics.items()} for s in (log.results.scores if log.results else [])},
    }


LOCAL_DIRS = re.compile(r"(?:/(?:root|tmp|work|home|usr|opt)(?:/[\w.+\-]+)*)/(?=[\w.+\-]+)")


def scrub_local_paths(path: Path) -> None:
    """Tracebacks in errored logs name this machine's directories: keep only the file names."""
    from inspect_ai.log import EvalLog, read_eval_log, write_eval_log

    text = read_eval_log(str(path)).model_dump_json()
    write_eval_log(EvalLog.model_validate_json(LOCAL_DIRS.sub("<dir>/", text)), str(path))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    two_scorers = Task(dataset=dataset(), solver=generate(), scorer=[match(location="begin"), includes()],
                       name="addition")
    # model_a in both formats (the same run read two ways must give the same items), model_b as .eval
    for name, seed, skill, fmts in (("model_a", 1, 0.55, ("eval", "json")), ("model_b", 2, 0.8, ("eval",))):
        for fmt in fmts:
            results[f"{name}.{fmt}"] = run(out, name, two_scorers, scripted(seed, skill), fmt)
    epochs = Task(dataset=dataset(), solver=generate(), scorer=closeness(), name="addition_epochs", epochs=4)
    for name, seed, skill in (("epochs_a", 1, 0.55), ("epochs_b", 2, 0.8)):
        results[f"{name}.eval"] = run(out, name, epochs, scripted(seed, skill), "eval")
    one_scorer = Task(dataset=dataset(), solver=generate(), scorer=match(), name="addition")
    # one sample's model call raises: logged as an errored sample, or (fail_on_error) the run stops: partial log
    results["errored.eval"] = run(out, "errored", one_scorer, scripted(3, 0.7, fail_on="What is 20 +"), "eval",
                                  fail_on_error=False)
    results["partial.eval"] = run(out, "partial", one_scorer, scripted(3, 0.7, fail_on="What is 20 +"), "eval",
                                  fail_on_error=True)
    for name in results:
        scrub_local_paths(out / name)
    samples = {name: r.pop("samples") for name, r in results.items()}
    (out / "harness-results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "sample-scores.json").write_text(json.dumps(samples) + "\n")


if __name__ == "__main__":
    main()
