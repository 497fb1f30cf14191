"""Two seeds of one rung (the demo's d1 and d1s2): as two concurrent Ray jobs vs one after another locally.

    .venv/bin/python benchmarks/bench_fanout.py --ray-address http://127.0.0.1:8265 [--from experiments/demo]

Each arm runs ``rlexp.stages.fanout.run_attempts`` — per attempt ``plan → launch (local trainer)
→ eval`` as one job, then ``decide`` for d1 and d1s2 in order — on its own fresh copy of the same
experiment inputs (datasets and base model) with its own MLflow SQLite store: the baseline
(``ray_address=None``: the jobs one after another, here) and the fan-out (two Ray jobs at once on
the head at ``--ray-address``), in the same run, on the same machine. It checks that the two arms
reach the same decisions with the same numbers, and prints both wall times, their ratio and how
long the two Ray jobs overlapped.

Inputs: ``--from EXPERIMENT`` copies ``data/``, ``models/`` and the ``d1``/``d1s2`` specs of an
experiment that ``rlexp demo`` built (the full demo: 64 global steps per seed, 1,000-problem OOD
set); without it, the fast demo's recipe (4 global steps) on small sets and an untrained tiny base
model, as in ``tests/test_fanout.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAIR = ("d1", "d1s2")


def small_pair(exp: Path) -> None:
    import dataclasses

    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model
    from rlexp.stages.demo import DemoConfig, attempt_specs

    config = dataclasses.replace(DemoConfig.fast(), monitor_size=10, primary_size=24, id_size=12, sanity_size=4)
    datasets = build_task_datasets(exp / "data", seed=0, pool_size=config.pool_size, monitor_size=config.monitor_size,
                                   primary_size=config.primary_size, id_size=config.id_size,
                                   sanity_size=config.sanity_size)
    build_tiny_model(exp / "models" / "tiny-base", seed=0)
    for attempt_id, text in attempt_specs(config, datasets).items():
        if attempt_id in PAIR:
            (exp / attempt_id).mkdir(parents=True)
            (exp / attempt_id / "attempt.yaml").write_text(text)


def copy_pair(source: Path, exp: Path) -> None:
    shutil.copytree(source / "data", exp / "data")
    shutil.copytree(source / "models", exp / "models")
    for attempt_id in PAIR:
        (exp / attempt_id).mkdir(parents=True)
        shutil.copy2(source / attempt_id / "attempt.yaml", exp / attempt_id / "attempt.yaml")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-address", required=True, help="a Ray head's dashboard (scripts/start-ray prints it)")
    parser.add_argument("--from", dest="source", type=Path, help="an experiment built by `rlexp demo`")
    parser.add_argument("--dir", type=Path, help="keep the two arms' directories here (default: a temporary one)")
    args = parser.parse_args()

    import os

    # the jobs (children here, Ray jobs there) import this tree's rlexp, as this script does
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                             os.environ.get("PYTHONPATH")]))
    from rlexp.stages.fanout import run_attempts

    with tempfile.TemporaryDirectory() as tmp:
        root = (args.dir or Path(tmp)).resolve()
        arms = {}
        for arm, address in (("sequential", None), ("ray", args.ray_address)):
            exp = root / arm / "experiments" / "demo"
            if exp.exists():
                raise SystemExit(f"{exp} exists: give an empty --dir")
            if args.source:
                copy_pair(args.source.resolve(), exp)
            else:
                small_pair(exp)
            start = time.perf_counter()
            result = run_attempts([exp / a for a in PAIR], ray_address=address,
                                  tracking_uri=f"sqlite:///{root / arm / 'mlflow.db'}", poll_s=0.5)
            wall = time.perf_counter() - start
            assert result.ok, [r.log_tail[-800:] for r in result.fanout.results]
            decided = {a: json.loads((exp / a / "decision.json").read_text()) for a in PAIR}
            arms[arm] = {"wall_s": wall, "overlap_s": result.fanout.overlap_s(),
                         "decisions": {a: d["decision"] for a, d in decided.items()},
                         "numbers": {a: (d["primary_checkpoint"], d["checkpoints"][d["primary_checkpoint"]]["delta_pp"],
                                         d["gates"]["gate_2"]["numbers"]["seed_deltas_pp"]) for a, d in decided.items()},
                         "jobs": {r.name: round(r.ended_at - r.started_at, 1) for r in result.fanout.results}}
    seq, ray = arms["sequential"], arms["ray"]
    assert seq["numbers"] == ray["numbers"], ("the two arms decided on different numbers", seq, ray)
    print(f"inputs: {'--from ' + str(args.source) if args.source else 'fast demo recipe, small sets, untrained base'}")
    for arm, info in arms.items():
        print(f"{arm:>10}: {info['wall_s']:7.1f} s wall; per job {info['jobs']}; overlap {info['overlap_s']:.1f} s; "
              f"decisions {info['decisions']}")
    print(f"numbers identical in both arms: {seq['numbers']}")
    print(f"concurrent / sequential wall time: {ray['wall_s'] / seq['wall_s']:.2f} "
          f"(speed-up {seq['wall_s'] / ray['wall_s']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
