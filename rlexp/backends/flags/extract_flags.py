"""Regenerate the flag tables in this folder from OpenRLHF's source (run by hand, not at runtime).

OpenRLHF builds its parser under ``if __name__ == "__main__"``, so it cannot be imported; we read
``openrlhf/cli/train_ppo_ray.py`` at each tag with :mod:`ast` and keep only the flag names and
their kind (``value``, ``store_true``, ``nargs=N``). No OpenRLHF code is copied.

    git -C OpenRLHF show v0.11.0:openrlhf/cli/train_ppo_ray.py > /tmp/t.py
    python rlexp/backends/flags/extract_flags.py /tmp/t.py v0.11.0 <commit> > rlexp/backends/flags/v0.11.0.txt
"""

from __future__ import annotations

import ast
import sys


def _string(node: ast.expr, env: dict[str, str]) -> str | None:
    """A literal or an f-string over loop variables we know (``f"--{prefix}.adam.lr"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                out += str(part.value)
            elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in env:
                out += env[part.value.id]
            else:
                return None
        return out
    return None


def extract(source: str) -> list[tuple[str, str]]:
    rows: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, env: dict[str, str]) -> None:
        # `for prefix in ("actor", "critic"): parser.add_argument(f"--{prefix}...")` (v0.10.2+)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Tuple):
            for elt in node.iter.elts:
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                    for child in node.body:
                        visit(child, {**env, node.target.id: elt.value})
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            kind = "value"
            for kw in node.keywords:
                if kw.arg == "action" and isinstance(kw.value, ast.Constant):
                    kind = str(kw.value.value)
                elif kw.arg == "nargs" and isinstance(kw.value, ast.Constant) and kind == "value":
                    kind = f"nargs={kw.value.value}"
            for arg in node.args:
                name = _string(arg, env)
                if name and name.startswith("--"):
                    rows.append((node.lineno, name, kind))
        for child in ast.iter_child_nodes(node):
            visit(child, env)

    visit(ast.parse(source), {})
    seen: set[str] = set()
    out = []
    for _, name, kind in sorted(rows):
        if name not in seen:
            seen.add(name)
            out.append((name, kind))
    return out


def main(argv: list[str]) -> int:
    path, tag, commit = argv
    with open(path, encoding="utf-8") as fh:
        flags = extract(fh.read())
    print(f"# OpenRLHF {tag} ({commit}) openrlhf/cli/train_ppo_ray.py: flag<TAB>kind, in parser order")
    for name, kind in flags:
        print(f"{name}\t{kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
