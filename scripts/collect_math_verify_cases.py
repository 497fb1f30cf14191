"""Regenerate tests/data/math_verify_integer_cases.json from Math-Verify's source distribution.

    pip download --no-deps --no-binary :all: math-verify==0.9.0 -d /tmp/mv && tar xzf /tmp/mv/*.tar.gz -C /tmp/mv
    .venv/bin/python scripts/collect_math_verify_cases.py /tmp/mv/math_verify-0.9.0 tests/data/math_verify_integer_cases.json

Takes every ``pytest.mark.parametrize`` case with ``gold`` and ``pred`` arguments where either side,
without surrounding ``$`` and whitespace, is a plain integer (sign and comma thousands allowed).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

PLAIN_INTEGER = re.compile(r"^[+-]?(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)$")


def plain_integer(value: object) -> bool:
    return isinstance(value, str) and bool(PLAIN_INTEGER.match(value.strip().strip("$").strip()))


def collect(sdist: Path) -> list[dict]:
    cases = []
    for path in sorted((sdist / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = ast.literal_eval(dec.args[0])
                names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names)]
                if "gold" not in names or "pred" not in names:
                    continue
                for index, element in enumerate(dec.args[1].elts):
                    try:
                        values = dict(zip(names, ast.literal_eval(element), strict=True))
                    except ValueError:
                        continue  # an f-string case: not a literal
                    gold, pred = values["gold"], values["pred"]
                    if not (plain_integer(gold) or plain_integer(pred)):
                        continue
                    cases.append({
                        "source": f"tests/{path.name}", "test": node.name, "case": index, "line": element.lineno,
                        "gold": gold, "pred": pred, "expected": bool(values.get("expected", values.get("result"))),
                        "integer_side": "gold" if plain_integer(gold) else "pred",
                    })
    return cases


def main() -> None:
    sdist, out = Path(sys.argv[1]), Path(sys.argv[2])
    version = sdist.name.rsplit("-", 1)[-1]
    doc = {
        "source": f"math-verify {version} source distribution on PyPI "
                  f"(pip download --no-deps --no-binary :all: math-verify=={version})",
        "selection": "every pytest.mark.parametrize case with gold and pred arguments where gold or pred, without "
                     "surrounding $ and whitespace, is a plain integer: optional sign, digits or comma-separated "
                     "thousands groups (a first group without a leading zero). 'expected' is Math-Verify's own "
                     "verdict in that test; 'case' is the index in the parametrize list, 'line' its line in the file.",
        "license": "Math-Verify is MIT-licensed (Copyright (c) 2024 The HuggingFace Team); these strings are its "
                   "test inputs.",
        "cases": collect(sdist),
    }
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(doc['cases'])} cases -> {out}")


if __name__ == "__main__":
    main()
