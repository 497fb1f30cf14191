"""MLflow ingestion: ``log_batch`` (what rlexp.tracking.metric_rows does) vs one ``log_metric`` call per value.

    .venv/bin/python benchmarks/bench_mlflow_logging.py [--steps 200] [--metrics 20]

Both paths write the same values into a fresh SQLite store (created and migrated before timing),
each into its own run; the script checks the two runs hold identical histories, then prints the
times and the ratio. The baseline is measured in the same run, on the same machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--metrics", type=int, default=20)
    args = parser.parse_args()

    from mlflow.tracking import MlflowClient

    from rlexp.tracking.metric_rows import log_metric_rows
    from rlexp.tracking.store import ensure_store

    rows = [{"global_step": s, **{f"metric_{i:02d}": (s * 31 + i * 7) % 101 / 100 for i in range(args.metrics)}}
            for s in range(1, args.steps + 1)]
    values = args.steps * args.metrics
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        ensure_store(uri)  # schema migration is not what we measure
        client = MlflowClient(uri)
        exp = client.create_experiment("bench")
        batch_run = client.create_run(exp).info.run_id
        single_run = client.create_run(exp).info.run_id

        start = time.perf_counter()
        log_metric_rows(client, batch_run, rows)
        t_batch = time.perf_counter() - start

        start = time.perf_counter()
        base_ms = int(time.time() * 1000)
        for row in rows:
            step = row["global_step"]
            for key, value in row.items():
                if key != "global_step":
                    client.log_metric(single_run, key, value, timestamp=base_ms + step, step=step)
        t_single = time.perf_counter() - start

        for key in ("metric_00", f"metric_{args.metrics - 1:02d}"):
            a = [(m.step, m.value) for m in client.get_metric_history(batch_run, key)]
            b = [(m.step, m.value) for m in client.get_metric_history(single_run, key)]
            assert sorted(a) == sorted(b) and len(a) == args.steps, "the two runs differ"

    print(f"{values} values ({args.steps} steps x {args.metrics} metrics), SQLite store")
    print(f"  log_batch (<=1000 per call): {t_batch:8.3f} s")
    print(f"  log_metric per value:        {t_single:8.3f} s")
    print(f"  ratio (per-value / batch):   {t_single / t_batch:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
