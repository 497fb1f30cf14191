"""Run lm-evaluation-harness's own CLI, with a scripted model registered (see scripted_model.py).

Usage: python lm_eval_run.py OUT_DIR NAME -- <lm_eval CLI arguments> [--- NAME -- <arguments> ...]

Each run is lm-eval's real command line (``lm_eval run ...``) in this process, so the samples
files, the results file and the printed table are exactly what the harness writes; the table
lm-eval printed is kept as OUT_DIR/NAME/printed.txt, the files under OUT_DIR/NAME/. The model
takes ``--model_args seed=S,skill=P``.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scripted_model  # noqa: E402
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402


@register_model("scripted")
class ScriptedLM(LM):
    def __init__(self, seed: int = 0, skill: float = 0.5, **kwargs) -> None:  # batch_size, device: unused
        super().__init__()
        self.seed, self.skill = int(seed), float(skill)

    def generate_until(self, requests, disable_tqdm: bool = False):
        return [scripted_model.answer(r.arguments[0], self.seed, self.skill) for r in requests]

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        return [(scripted_model.loglikelihood(r.arguments[0], r.arguments[1], self.seed, self.skill), False)
                for r in requests]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    out = Path(sys.argv[1])
    rest = sys.argv[2:]
    runs = []
    while rest:
        end = rest.index("---") if "---" in rest else len(rest)
        name, sep, *argv = rest[:end]
        assert sep == "--", "expected NAME -- ARGS"
        runs.append((name, argv))
        rest = rest[end + 1:]
    for name, argv in runs:
        target = out / name
        raw = out / f".raw-{name}"
        sys.argv = ["lm_eval", *argv, "--output_path", str(raw), "--log_samples"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            cli_evaluate()
        target.mkdir(parents=True, exist_ok=True)
        for produced in raw.rglob("*.json*"):  # <raw>/<model name>/{results,samples}_*.json[l]
            shutil.move(produced, target / produced.name)
        shutil.rmtree(raw)
        (target / "printed.txt").write_text(printed.getvalue())
        print(printed.getvalue())


if __name__ == "__main__":
    main()
