"""Count the structural figures the redesign is judged by, from the source alone (nothing is imported).

    python scripts/architecture_counts.py [ROOT] [--json]

ROOT is a checkout (default: this one). Figures, all over ``ROOT/rlexp``:

- ``trainer_mentions``: for each trainer, the modules outside ``rlexp/trainers/<name>/`` whose code
  (names and string literals; not comments, not docstrings) holds the trainer's name as a word, and
  ``trainer_mentions_with_comments`` the same over the whole text;
- ``any_typed_attempt``: function parameters named ``att`` or ``attempt`` annotated ``Any``;
- ``getattr_environment``: ``getattr(<x>, "environment", ...)`` calls;
- ``template_python_lines``: lines of string literals (not docstrings) of three lines or more that
  parse as Python after dedenting: code carried in strings, which no linter reads;
- ``import_cycles``: strongly connected groups of modules in the import graph (absolute and
  relative imports, wherever they stand in the file);
- ``functions_over_100_lines`` and ``imports_inside_functions`` (share of import statements).
"""

from __future__ import annotations

import ast
import io
import json
import re
import sys
import textwrap
import tokenize
from pathlib import Path

TRAINERS = ("openrlhf", "verl", "trl")


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((root / "rlexp").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids


def _code_text(source: str, tree: ast.AST) -> str:
    """Names and string literals of the module, without comments and docstrings."""
    docs = _docstring_ids(tree)
    doc_lines = set()
    for node in ast.walk(tree):
        if id(node) in docs:
            doc_lines.update(range(node.lineno, node.end_lineno + 1))
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    return " ".join(tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                    if tok.type in kinds and tok.start[0] not in doc_lines)


def _parse_template(text: str) -> ast.Module | None:
    """The string as Python, also when it is a ``str.format`` template (``{name!r}``, ``{{``) or an
    indented fragment of one."""
    escaped = text.replace("{{", "\x00").replace("}}", "\x01")
    field = r"\{[A-Za-z_][\w.]*(?:![rsa])?(?::[^{}]*)?\}"
    candidates = [text]
    for filler in ("x", ""):
        filled = re.sub(field, filler, escaped).replace("\x00", "{").replace("\x01", "}")
        candidates += [filled, "if 1:\n" + textwrap.indent(textwrap.dedent(filled), "    ")]
    for candidate in candidates:
        try:
            return ast.parse(textwrap.dedent(candidate))
        except SyntaxError:
            continue
    return None


def _template_lines(tree: ast.AST) -> int:
    docs = _docstring_ids(tree)
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if text.count("\n") < 2:
                continue
            parsed = _parse_template(text)
            if parsed is None:
                continue
            # A prose paragraph can parse as one bare name; count only real statements.
            if any(not isinstance(s, ast.Expr) or not isinstance(s.value, (ast.Name, ast.Constant))
                   for s in parsed.body):
                total += sum(1 for line in text.splitlines() if line.strip())
        elif isinstance(node, ast.JoinedStr) and node.end_lineno - node.lineno >= 2:
            pieces = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
            try:
                ast.parse(textwrap.dedent(pieces))
            except SyntaxError:
                continue
            total += sum(1 for line in pieces.splitlines() if line.strip())
    return total


def _imports(name: str, path: Path, tree: ast.AST) -> tuple[set[str], int, int]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found, inside, all_ = set(), 0, 0
    fn_ranges = [(n.lineno, n.end_lineno) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        all_ += 1
        inside += any(a <= node.lineno <= b for a, b in fn_ranges)
        found.update(t for t in targets if t.startswith("rlexp"))
    return found, inside, all_


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def counts(root: Path) -> dict:
    modules = _modules(root)
    mentions = {t: [] for t in TRAINERS}
    mentions_text = {t: 0 for t in TRAINERS}
    any_att = getattr_env = template = long_functions = 0
    inside_total = import_total = 0
    graph: dict[str, set[str]] = {}
    long_names = []
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source)
        code = _code_text(source, tree).lower()
        for trainer in TRAINERS:
            if name.startswith(f"rlexp.trainers.{trainer}"):
                continue
            word = rf"(?<![a-z0-9]){trainer}(?![a-z0-9])"
            if re.search(word, code):
                mentions[trainer].append(name)
            mentions_text[trainer] += bool(re.search(word, source.lower()))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                any_att += sum(1 for a in args if a.arg in ("att", "attempt")
                               and isinstance(a.annotation, ast.Name) and a.annotation.id == "Any")
                if node.end_lineno - node.lineno + 1 > 100:
                    long_functions += 1
                    long_names.append(f"{name}.{node.name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value == "environment":
                getattr_env += 1
        template += _template_lines(tree)
        targets, inside, all_ = _imports(name, path, tree)
        inside_total += inside
        import_total += all_
        graph[name] = {t for t in targets if t in modules and t != name}
    return {
        "modules": len(modules),
        "trainer_mentions": {t: len(v) for t, v in mentions.items()},
        "trainer_mention_modules": mentions,
        "trainer_mentions_with_comments": mentions_text,
        "any_typed_attempt": any_att,
        "getattr_environment": getattr_env,
        "template_python_lines": template,
        "import_cycles": _cycles(graph),
        "functions_over_100_lines": long_functions,
        "long_functions": sorted(long_names),
        "imports_inside_functions": round(inside_total / max(import_total, 1), 3),
    }


def main(argv: list[str]) -> int:
    root = Path(next((a for a in argv if not a.startswith("--")), Path(__file__).resolve().parent.parent))
    result = counts(root)
    if "--json" in argv:
        print(json.dumps(result, indent=1))
        return 0
    for key, value in result.items():
        if key in ("trainer_mention_modules", "long_functions"):
            continue
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
