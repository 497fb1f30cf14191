"""Answer extraction on degenerate outputs: rlexp.evaluation.answers (parser version 2, one pass with a stack
of open boxes) vs the brace matcher of parser version 1, measured in the same run.

The input is the worst case of version 1: ``\\boxed{`` repeated and never closed (a degenerate
rollout). Version 1 rescanned the rest of the text for every opener, so its time grows with the
square of the length; it is measured at 20,000 characters, where it still finishes, and the
current parser at the same size, then at 1 MB (and at 100 kB, to show the time per character
stays flat).
Run: .venv/bin/python benchmarks/bench_extract.py
"""

from __future__ import annotations

import re
import time

from rlexp.evaluation.answers import extract_answer

UNIT = r"\boxed{"
BASELINE_CHARS, LARGE_CHARS, REPEATS = 20_000, 1_000_000, 5

_V1_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def v1_last_boxed(text: str) -> str | None:
    """Parser version 1's box finder, verbatim in its logic: brace-match from every opener."""
    best: tuple[int, str] | None = None
    for match in _V1_BOX_OPEN.finditer(text):
        depth, start = 1, match.end()
        i = start
        while i < len(text) and depth:
            ch = text[i]
            if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        if depth == 0:
            content = text[start : i - 1]
            if content.strip():
                best = (match.start(), content)
    return None if best is None else best[1]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def degenerate(chars: int) -> str:
    return UNIT * (chars // len(UNIT))


def main() -> None:
    small, medium, large = degenerate(BASELINE_CHARS), degenerate(100_000), degenerate(LARGE_CHARS)
    assert extract_answer(small) == (None, "unparsed") and v1_last_boxed(small) is None
    t_v1 = best_of(lambda: v1_last_boxed(small), 1)
    t_small = best_of(lambda: extract_answer(small), REPEATS)
    t_medium = best_of(lambda: extract_answer(medium), REPEATS)
    t_large = best_of(lambda: extract_answer(large), REPEATS)
    print(f"answer extraction on repeated unclosed {UNIT} (best of {REPEATS}; version 1 run once)")
    print(f"  {len(small):>9,} chars  version 1 box finder: {t_v1:9.3f} s")
    print(f"  {len(small):>9,} chars  rlexp.extract_answer: {t_small:9.4f} s   speed-up {t_v1 / t_small:,.0f}x")
    print(f"  {len(medium):>9,} chars  rlexp.extract_answer: {t_medium:9.4f} s   "
          f"{1e9 * t_medium / len(medium):6.1f} ns/char")
    print(f"  {len(large):>9,} chars  rlexp.extract_answer: {t_large:9.4f} s   "
          f"{1e9 * t_large / len(large):6.1f} ns/char")
    print(f"  version 1 at 1 MB, extrapolated from its quadratic growth: "
          f"{t_v1 * (len(large) / len(small)) ** 2 / 3600:,.1f} h")


if __name__ == "__main__":
    main()
