"""The local eval engine's torch thread count: 1 thread vs 2 on this machine, wall and CPU time, in one run.

Each arm is a fresh process (torch's thread pool is fixed once it has run) that builds the tiny model,
then decodes N problems greedily through ``rlexp.evaluation.generation.generate`` in the engine's batches
(``RLEXP_TORCH_THREADS`` set as the engine reads it). The arms alternate (1, 2, 1, 2, …) so a load that
comes and goes on the machine falls on both; the median of each arm is reported, with the ratio. Run it on
an idle machine to choose the default, and on a loaded one to see what a busy machine costs.

    .venv/bin/python benchmarks/bench_eval_threads.py [--problems 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ARM = r"""
import json, os, resource, sys, tempfile, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from rlexp.evaluation.generation import generate, render_prompt
from rlexp.models.tiny import build_tiny_model
from rlexp.evaluation.generation import pin_torch_threads

threads = pin_torch_threads()
with tempfile.TemporaryDirectory() as tmp:
    model_dir = build_tiny_model(Path(tmp) / "tiny", seed=0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
n = int(sys.argv[1])
prompts = [render_prompt(tok, f"{i % 97}+{(i * 7) % 89}=", " Answer in \\boxed{}.") for i in range(n)]
generate(model, tok, prompts[:4], max_new_tokens=2)
cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
generate(model, tok, prompts, max_new_tokens=16, batch_size=64)
wall, cpu1 = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"threads": threads, "torch_threads": torch.get_num_threads(), "wall": wall,
                  "cpu": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)}))
"""


def run_arm(threads: int, problems: int) -> dict:
    env = {**os.environ, "RLEXP_TORCH_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run([sys.executable, "-c", ARM, str(problems)], capture_output=True, text=True, env=env,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for threads in (1, 2):
            runs[threads].append(run_arm(threads, args.problems))
    print(f"{args.problems} problems, 16 new tokens, batches of 64; {os.cpu_count()} CPUs, load average "
          f"{load:.2f} before, {os.getloadavg()[0]:.2f} after ({time.strftime('%H:%M:%S')})")
    medians = {}
    for threads, rows in runs.items():
        assert all(r["torch_threads"] == threads for r in rows), rows
        wall, cpu = statistics.median(r["wall"] for r in rows), statistics.median(r["cpu"] for r in rows)
        medians[threads] = (wall, cpu)
        print(f"  {threads} thread(s): wall {wall:6.2f} s, CPU {cpu:6.2f} s (runs: "
              + ", ".join(f"{r['wall']:.2f}" for r in rows) + ")")
    print(f"  2 threads / 1 thread: wall {medians[2][0] / medians[1][0]:.2f}x, CPU {medians[2][1] / medians[1][1]:.2f}x")


if __name__ == "__main__":
    main()
