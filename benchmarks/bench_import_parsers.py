"""The two maintained bash parsers on the launch-script corpus (tests/data/launch_scripts), for the
choice docs/import.md states: how many scripts each parses, and its import and parse time.

    .venv/bin/python benchmarks/bench_import_parsers.py [--runs 20] [--bashlex-path DIR]

tree-sitter-bash is a dependency of rlexp; bashlex is not (``pip install --target DIR bashlex==0.18``
and pass ``--bashlex-path DIR`` to compare). Each parser's module import is timed in a fresh
interpreter (what ``rlexp import`` pays once); the parse time is the median over ``--runs`` rounds
of the whole corpus, the parsers alternating round by round; the ratio is bashlex / tree-sitter
measured in the same run. A script "parses" when the parser returns a tree without an error.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "launch_scripts"


def import_time(statement: str, path: str | None) -> float:
    prefix = f"sys.path.insert(0, {path!r})" if path else ""
    code = f"import sys, time\n{prefix}\nt = time.perf_counter()\n{statement}\nprint(time.perf_counter() - t)\n"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--bashlex-path", default=None)
    args = parser.parse_args()
    if args.bashlex_path:
        sys.path.insert(0, args.bashlex_path)
    import tree_sitter
    import tree_sitter_bash

    ts = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    try:
        import bashlex
    except ImportError:
        bashlex = None
    scripts = sorted(CORPUS.glob("*/*.sh"))
    texts = [p.read_text() for p in scripts]

    def ts_parse(text: str) -> bool:
        return not ts.parse(text.encode()).root_node.has_error

    def bl_parse(text: str) -> bool:
        try:
            bashlex.parse(text)
        except Exception:  # noqa: BLE001  (bashlex raises its own errors and NotImplementedError)
            return False
        return True

    parsers = {"tree-sitter-bash": ts_parse}
    if bashlex is not None:
        parsers["bashlex"] = bl_parse
    times: dict[str, list[float]] = {name: [] for name in parsers}
    for _ in range(args.runs):
        for name, parse in parsers.items():
            start = time.perf_counter()
            for text in texts:
                parse(text)
            times[name].append(time.perf_counter() - start)
    imports = {"tree-sitter-bash": "import tree_sitter, tree_sitter_bash; "
                                   "tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))",
               "bashlex": "import bashlex"}
    print(f"{len(texts)} scripts")
    for name, parse in parsers.items():
        ok = sum(parse(t) for t in texts)
        failed = [str(p.relative_to(CORPUS)) for p, t in zip(scripts, texts, strict=True) if not parse(t)]
        print(f"{name}: parses {ok}/{len(texts)}; import {import_time(imports[name], args.bashlex_path) * 1000:.0f} ms; "
              f"corpus parse median {statistics.median(times[name]) * 1000:.1f} ms; fails on {failed}")
    if bashlex is not None:
        print(f"parse time ratio bashlex / tree-sitter: "
              f"{statistics.median(times['bashlex']) / statistics.median(times['tree-sitter-bash']):.1f}")


if __name__ == "__main__":
    main()
