"""Start-up cost of the CLI: `rlexp --help` and `rlexp plan`, each against a baseline in the same run.

    .venv/bin/python benchmarks/bench_cli_startup.py [--runs 10]

Each command runs as a fresh subprocess (what a user waits for), the cases in round robin after one
warm-up round; the median (and min) wall time of N runs is reported. Baselines, measured in the same
run: for ``--help``, typer rendering it (``rlexp.cli.main``, what the console script did before it
printed the stored text); for both, the same command in a process that first does ``import mlflow``
(what the CLI would cost if a command module imported it at module level); for ``plan``, the
command through typer (what the console script did before it ran ``plan`` itself) and the app with
every command built (what the CLI did before it built only the command it runs); and the
interpreter's own start. Budgets: 0.10 s for ``--help``, 0.15 s for ``plan`` on the A30 example.

The package's bytecode is compiled first, as ``pip install`` does: with ``PYTHONDONTWRITEBYTECODE``
set (as on some CI machines) an editable checkout would otherwise recompile every module on every
run, which is not what an installed rlexp costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "experiments" / "seed-a30"
BUDGETS_S = {"rlexp --help": 0.10, "rlexp plan a30 --json": 0.15}


def run_once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # plan exits 1 when a check is an error; both are real runs
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def python_c(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "rlexp")], check=True,
                   stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        # plan writes plan.json next to the spec: work on a copy, keep the repository clean
        exp = Path(tmp) / "seed-a30"
        shutil.copytree(EXAMPLE, exp, ignore=shutil.ignore_patterns("plan.json"))
        plan_args = repr(["plan", str(exp / "a30"), "--json"])
        script = Path(sys.executable).parent / "rlexp"
        cases = [
            ("rlexp --help", [str(script), "--help"]),
            ("rlexp --help, rendered by typer",
             python_c("import sys; sys.argv[0] = 'rlexp'; from rlexp.cli import main; sys.exit(main(['--help']))")),
            ("rlexp --help, eager mlflow",
             python_c("import mlflow, sys; from rlexp.console import main; sys.exit(main(['--help']))")),
            ("rlexp plan a30 --json", [str(script), "plan", str(exp / "a30"), "--json"]),
            ("rlexp plan a30 (tables, rich)", [str(script), "plan", str(exp / "a30")]),
            ("rlexp plan a30 --json, through typer",
             python_c(f"import sys; sys.argv[0] = 'rlexp'; from rlexp.cli import main; sys.exit(main({plan_args}))")),
            ("rlexp plan a30 --json, every command built",
             python_c("import sys; sys.argv[0] = 'rlexp'; from rlexp.cli import build_app; "
                      f"sys.exit(build_app()(args={plan_args}, standalone_mode=False) or 0)")),
            ("rlexp plan a30 --json, eager mlflow",
             python_c(f"import mlflow, sys; from rlexp.console import main; sys.exit(main({plan_args}))")),
            ("python -c pass (interpreter floor)", python_c("pass")),
        ]  # fmt: skip
        cases = [(name, argv) for name, argv in cases if argv is not None]
        times: dict[str, list[float]] = {name: [] for name, _ in cases}
        for _name, argv in cases:  # warm-up: the file cache and the .pyc files, not counted
            run_once(argv)
        for _ in range(args.runs):  # round robin: a burst of other work hits every case alike
            for name, argv in cases:
                times[name].append(run_once(argv))
        results = {name: (statistics.median(t), min(t)) for name, t in times.items()}

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"wall time of {args.runs} fresh processes: median (min); load average {load} on {os.cpu_count()} "
          f"CPUs — other work inflates every row alike")
    for name, (median, best) in results.items():
        budget = BUDGETS_S.get(name)
        flag = "" if budget is None else ("  OK" if median <= budget else "  OVER BUDGET") + f" (budget {budget:.2f} s)"
        print(f"  {name:<42} {median:6.3f} s ({best:.3f} s){flag}")
    stored, typer = results["rlexp --help"][0], results["rlexp --help, rendered by typer"][0]
    print(f"  rlexp --help: rendered by typer / stored = {typer / stored:.1f}x")
    for verb in ("rlexp --help", "rlexp plan a30 --json"):
        lazy, eager = results[verb][0], results[f"{verb}, eager mlflow"][0]
        print(f"  {verb}: eager mlflow / lazy = {eager / lazy:.1f}x ({eager - lazy:+.2f} s, medians)")
    one = results["rlexp plan a30 --json"][0]
    typer_app, whole = (results[f"rlexp plan a30 --json, {how}"][0] for how in ("through typer", "every command built"))
    print(f"  rlexp plan: through typer / without = {typer_app / one:.2f}x ({typer_app - one:+.3f} s, medians)")
    print(f"  rlexp plan: every command built / the one it runs (both through typer) = {whole / typer_app:.2f}x")


if __name__ == "__main__":
    main()
