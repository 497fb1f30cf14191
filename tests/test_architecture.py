"""The package's layering, checked on the code itself (docs/ARCHITECTURE.md describes it).

The tree is cut by concept (spec, protocol, stats, experiment, training, trainers/<name>, environments,
evaluation, tracking, reporting, models, backends, stages, commands); the layers cut across it. Layers,
lowest first; a module may import its own layer and the layers below it, never above:

    foundation  rlexp, rlexp.errors, rlexp.numbers, rlexp.experiment.files, rlexp.experiment.layout
                (errors, strict readers, the directory's paths)
    core        rlexp.spec.*, rlexp.protocol.*, rlexp.stats.*, and CORE_MODULES: the pure modules of the
                concept packages below (the rules, pure: no I/O, no processes)
    storage     rlexp.experiment.* (the experiment directory on disk) but its EDGE_MODULES
    adapters    the other modules of rlexp.training, rlexp.environments, rlexp.evaluation, rlexp.tracking,
                rlexp.reporting, rlexp.models, rlexp.backends (MLflow, models, backends, engines)
    (trainers)  rlexp.trainers and each package rlexp.trainers.<name> are core, and so are the
                package's TRAINER_CORE_MODULES and its own PACKAGE_CORE_MODULES; its other modules
                and rlexp.trainers.launch are adapters
    stages      rlexp.stages.*  (the package root `rlexp` re-exports them lazily and counts as foundation)
    commands    rlexp.commands.*                                          (CLI options and rendering)
    cli         rlexp.cli, rlexp.console, rlexp.cli_runtime,             (the entry point: the console
                rlexp._cli_help                                           script, its stored help, the app,
                                                                          errors as exit codes)

Imports inside functions count: a lazy import is still a dependency; a relative import (``from .evaluate
import x``) counts as the absolute one it is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlexp"
LAYERS = ["foundation", "core", "storage", "adapters", "stages", "commands", "cli"]
# the package root holds __version__ and re-exports the stages lazily (PEP 562 __getattr__, no import
# at module level), so importing it pulls in nothing above the foundation
FOUNDATION = {"rlexp", "rlexp.errors", "rlexp.experiment.files", "rlexp.experiment.layout", "rlexp.numbers"}
# concept packages whose every module is a rule (pure)
CORE_PACKAGES = {"spec", "protocol", "stats"}
# the pure modules of the other concept packages: the step math, the launch-script reader and the
# metric-log readers of training; an environment's interface and the rewards; answer grading, the
# tasks and the table of eval engines
CORE_MODULES = {"rlexp.training.schedule", "rlexp.training.launch_script", "rlexp.training.metric_logs",
                "rlexp.environments.episode_loop",
                "rlexp.training.metric_names", "rlexp.environments.interface", "rlexp.environments.rewards",
                "rlexp.evaluation.answers", "rlexp.evaluation.math_task", "rlexp.evaluation.arithmetic_task",
                "rlexp.evaluation.engine_table"}
# the experiment directory's modules that reach outside it: provenance (git, pip, the trainers'
# wheels) and Git LFS pointers
EDGE_MODULES = {"rlexp.experiment.provenance", "rlexp.experiment.lfs"}
ADAPTER_PACKAGES = {"training", "environments", "evaluation", "tracking", "reporting", "models", "backends"}
CLI = {"rlexp.cli", "rlexp.console", "rlexp.cli_runtime", "rlexp._cli_help", "rlexp.__main__"}
# the pure modules of a trainer's package (rlexp.trainers.<name>.<module>): its step math and LR
# (steps), its preflight checks (checks), its config keys or fields as data (keys, fields), its typed
# recipe (recipe), its metric names and log readers (metrics); each is core, imports nothing above it
# and writes nothing
TRAINER_CORE_MODULES = {"steps", "checks", "keys", "fields", "recipe", "metrics"}
# a package's own pure modules besides those (trainer name -> module names): the local trainer's
# configuration and its loss (pure functions of tensors); each is core as the modules above are
PACKAGE_CORE_MODULES = {"local": {"config", "loss"},
                        "verl": {"engine_keys", "megatron_schedule", "veomni_schedule", "fully_async", "fully_async_keys"}}


def is_trainer_core_module(parts: list[str]) -> bool:
    """Whether ``rlexp.trainers.<name>.<module>`` (split on dots) is one of its package's pure modules."""
    return parts[3] in TRAINER_CORE_MODULES | PACKAGE_CORE_MODULES.get(parts[2], set())


def layer_of(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    if module.split(".")[1:2] == ["trainers"]:
        # a trainer's package is layered as the whole is: the package and its pure modules
        # (TRAINER_CORE_MODULES) are its rules (core); its other modules, and the registry of their
        # launch side, do its work with processes and files (adapters)
        parts = module.split(".")
        if module == "rlexp.trainers.launch" or (len(parts) >= 4 and not is_trainer_core_module(parts)):
            return "adapters"
        return "core"
    package = module.split(".")[1] if "." in module else ""
    if package in CORE_PACKAGES or module in CORE_MODULES:
        return "core"
    if package == "experiment":
        return "adapters" if module in EDGE_MODULES else "storage"
    if package in ADAPTER_PACKAGES:
        return "adapters"
    if module.startswith("rlexp.stages"):
        return "stages"
    if module.startswith("rlexp.commands"):
        return "commands"
    if module in CLI:
        return "cli"
    raise AssertionError(f"{module} belongs to no layer: add it to docs/ARCHITECTURE.md and this test")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def absolute_module(node: ast.ImportFrom, importer: str, *, is_package: bool) -> str | None:
    """The module an ``ImportFrom`` names, relative ones (``from .evaluate import x``, ``from .. import
    y``) resolved against the importing module ``importer`` (``is_package``: an ``__init__.py``, whose
    own package is the anchor of a relative import); None where the dots climb above ``rlexp``."""
    if node.level == 0:
        return node.module
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    if node.level - 1 >= len(package):
        return None
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def imports_of(path: Path, *, by_name: bool = True, module: str | None = None,
               known: dict[str, Path] | None = None) -> set[str]:
    """Every rlexp module a file imports, at module level or inside functions, relative imports
    included; ``by_name``: with the modules it names as strings (a registry's table, loaded by
    importlib). ``module`` and ``known``: the file's module name and the modules there are (rlexp's
    own unless given: a test hands in a package of its own)."""
    found: set[str] = set()
    known = modules() if known is None else known
    importer = module_name(path) if module is None else module
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    # `[python, "-m", "rlexp.cli", ...]` starts a process: a module named there is not imported
    run_as_process = {id(b) for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple))
                      for a, b in zip(node.elts, node.elts[1:], strict=False) if isinstance(a, ast.Constant) and a.value == "-m"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (base := absolute_module(node, importer, is_package=is_package)):
            # "from rlexp.protocol import gates" (or, inside rlexp.protocol, "from . import gates")
            # imports rlexp.protocol.gates; "from .evaluate import Target" inside rlexp.stages imports rlexp.stages.evaluate
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (by_name and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known
              and id(node) not in run_as_process):
            # a module named as a string is imported by name (importlib, a registry such as the CLI's
            # command table): the edge counts like an import statement
            names = [node.value]
        else:
            continue
        found.update(n for n in names if n == "rlexp" or n.startswith("rlexp."))
    return found


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def registry_edges() -> dict[str, set[str]]:
    """The modules a registry loads by name (importlib), as import edges of the registry: the
    trainer packages (rlexp.trainers.TRAINERS), their launch modules and their launch-script readers."""
    from rlexp.trainers import TRAINERS

    known = modules()
    return {"rlexp.trainers": set(TRAINERS.values()),
            "rlexp.trainers.launch": {f"{package}.launch" for package in TRAINERS.values()}
            | {f"{package}.script_args" for package in TRAINERS.values() if f"{package}.script_args" in known}}


IMPORTS_BY_NAME = {"rlexp", "rlexp.backends.fanout", "rlexp.environments.interface", "rlexp.trainers",
                   "rlexp.trainers.launch", "rlexp.cli", "rlexp.stats"}


def test_imports_by_name_only_in_known_registries():
    """importlib.import_module hides an edge from the layer test: only the registries above use it
    (the stage re-exports of the root, fanout's steps, the environments' entry points, the trainers,
    the CLI's command table, the stats namespace's private modules)."""
    found = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "import_module":
                found.add(name)
    assert found <= IMPORTS_BY_NAME, found - IMPORTS_BY_NAME


def test_every_registered_trainer_is_a_package_with_a_launch_module():
    for registry, targets in registry_edges().items():
        for target in targets:
            assert target in modules(), f"{registry} names {target}, which does not exist"


def test_imports_flow_one_way():
    wrong = []
    edges = registry_edges()
    for name, path in modules().items():
        mine = LAYERS.index(layer_of(name))
        for target in imports_of(path) | edges.get(name, set()):
            if target not in modules():
                continue
            if LAYERS.index(layer_of(target)) > mine:
                wrong.append(f"{name} ({layer_of(name)}) imports {target} ({layer_of(target)})")
    assert not wrong, "\n".join(wrong)


# modules of the commands package that are no verb: the bounds several verbs' options share, and
# plan's output (which the console script also runs without typer); verbs may import them
COMMAND_HELPERS = {"rlexp.commands.options", "rlexp.commands.plan_view"}


def test_nothing_imports_the_cli_or_the_commands_but_the_entry_point():
    wrong = []
    for name, path in modules().items():
        if name in CLI:
            continue
        for target in imports_of(path):
            if target == "rlexp.cli" or (target.startswith("rlexp.commands") and target != name
                                         and not name.startswith("rlexp.commands.")):
                wrong.append(f"{name} imports {target}")
            if (name.startswith("rlexp.commands.") and target.startswith("rlexp.commands.")
                    and target not in COMMAND_HELPERS):
                wrong.append(f"command {name} imports command {target}")
    assert not wrong, "\n".join(wrong)


def test_the_cli_registers_every_command_module_by_name():
    """The CLI imports its commands by name (it builds only the command a run needs); the names are
    edges of the import graph above, and every command module is one of them."""
    from rlexp.cli import COMMANDS, GROUPS

    registered = {module for module, _ in COMMANDS.values()} | {module for module, _ in GROUPS.values()}
    commands = {name for name in modules() if name.startswith("rlexp.commands.")}
    assert commands >= COMMAND_HELPERS and not COMMAND_HELPERS & registered
    assert registered == commands - COMMAND_HELPERS
    assert registered <= imports_of(modules()["rlexp.cli"])


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """``module -> the modules of known it imports`` (statements only, relative ones included)."""
    return {name: {t for t in imports_of(path, by_name=False, module=name, known=known) if t in known and t != name}
            for name, path in known.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle a depth-first walk of ``graph`` closes (``[a, b, a]``), in sorted order."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return cycles


def test_no_import_cycle():
    # a registry's by-name loads are plugin dispatch (the core asks the registry; the trainer packages
    # import the core): edges of the layer test, not of this one
    graph = import_graph(modules())
    # "rlexp" (the root) only re-exports the stages lazily through __getattr__: not an import edge
    graph["rlexp"] = set()
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_relative_imports(tmp_path):
    """Two modules of a package importing each other through relative imports, inside functions (as
    rlexp.stages.evaluate and evaluate_env once did, unseen while the check skipped relative imports),
    and a package reaching its parent with ``from .. import``: the graph holds each edge, the check
    the cycle."""
    stages = tmp_path / "rlexp" / "stages"
    stages.mkdir(parents=True)
    (tmp_path / "rlexp" / "__init__.py").write_text("")
    (tmp_path / "rlexp" / "errors.py").write_text("")
    (stages / "__init__.py").write_text("from .. import errors\n")
    (stages / "evaluate.py").write_text("def run():\n    from .evaluate_env import episodes\n    return episodes\n")
    (stages / "evaluate_env.py").write_text("def episodes():\n    from .evaluate import Target\n    return Target\n")
    known = {"rlexp": tmp_path / "rlexp" / "__init__.py", "rlexp.errors": tmp_path / "rlexp" / "errors.py",
             "rlexp.stages": stages / "__init__.py", "rlexp.stages.evaluate": stages / "evaluate.py",
             "rlexp.stages.evaluate_env": stages / "evaluate_env.py"}
    graph = import_graph(known)
    assert graph["rlexp.stages"] == {"rlexp.errors"}
    assert graph["rlexp.stages.evaluate"] == {"rlexp.stages.evaluate_env"}
    assert graph["rlexp.stages.evaluate_env"] == {"rlexp.stages.evaluate"}
    assert import_cycles(graph) == [["rlexp.stages.evaluate", "rlexp.stages.evaluate_env", "rlexp.stages.evaluate"]]
    (stages / "evaluate_env.py").write_text("def episodes():\n    return None\n")  # the edge back removed
    assert import_cycles(import_graph(known)) == []


def test_the_fanout_layer_runs_stages_only_as_cli_processes():
    """rlexp.backends.fanout (adapters) runs each job as `python -m rlexp.cli ...` processes, so it
    imports no stage; rlexp.stages.fanout (stages) builds the jobs and decides afterwards."""
    assert layer_of("rlexp.backends.fanout") == "adapters" and layer_of("rlexp.stages.fanout") == "stages"
    above = {t for t in imports_of(modules()["rlexp.backends.fanout"]) if t in modules()
             and LAYERS.index(layer_of(t)) > LAYERS.index("adapters")}
    assert not above, above


FILE_IO = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "read_json", "read_jsonl", "iter_jsonl",
           "load_yaml", "atomic_write_json", "atomic_write_text", "atomic_write_bytes", "append_jsonl",
           "append_jsonl_many", "mkdir", "unlink", "rename", "replace", "rmtree", "touch"}


def test_commands_do_no_file_io():
    """rlexp/commands/ chooses options and renders results; the stages read and write."""
    wrong = []
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
                if name in FILE_IO:
                    wrong.append(f"{path.name}:{node.lineno}: {name}()")
    assert not wrong, "\n".join(wrong)


WRITERS = {"atomic_write_json", "atomic_write_text", "atomic_write_bytes", "append_jsonl", "append_jsonl_many",
           "replace_dir", "write_text", "write_bytes", "mkdir", "unlink", "rmtree"}


def test_the_core_writes_nothing():
    wrong = []
    trainer_core = [path for name, path in modules().items()
                    if name.startswith("rlexp.trainers.") and layer_of(name) == "core"]
    core = [path for name, path in modules().items() if (layer_of(name) == "core" or name == "rlexp.numbers")
            and not name.startswith("rlexp.trainers.")]
    for path in core + trainer_core:
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in WRITERS:
                wrong.append(f"{path.name}:{node.lineno}: {name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                mode = node.args[1] if len(node.args) > 1 else None
                if isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+"):
                    wrong.append(f"{path.name}:{node.lineno}: open(..., {mode.value!r})")
    assert not wrong, "\n".join(wrong)


LAYOUT_FILES = {"attempt.yaml", "plan.json", "metrics.jsonl", "decision.json", "ledger.jsonl", "sota.json",
                "argv.json", "launch.sh", "provenance.json", "reward_func.py", "launches.jsonl", "spikes.jsonl",
                "stdout.log", "state.json", "selection.json", ".hash_cache.json",
                "parser_audit_review.jsonl", "g4_samples.jsonl", "sweep.yaml", "ranking.json", "ladder.yaml", "optuna.db"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def test_only_the_layout_spells_a_file_name_of_the_experiment_directory():
    wrong = []
    for name, path in modules().items():
        if name == "rlexp.experiment.layout":
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
                continue
            value = node.value
            if value in LAYOUT_FILES or value == "global_step{N}_hf" or any(value.endswith("/" + f) for f in LAYOUT_FILES):
                wrong.append(f"{name}:{node.lineno}: {value!r}")
    assert not wrong, "\n".join(wrong)


_STEP_NAME = re.compile(r"global_step_?(?:\(|\\d|\[)")  # a pattern that matches checkpoint names
_NAME_PARSERS = {"removeprefix", "removesuffix", "startswith", "endswith", "replace", "split", "partition"}


def checkpoint_names_built_or_parsed(tree: ast.AST) -> list[tuple[int, str]]:
    """``global_step{N}`` checkpoint names built (an f-string) or parsed (a prefix strip, a regex)
    in one module: the layout module owns that name (``checkpoint_name``, ``checkpoint_step``).
    The metric key ``global_step`` of metrics.jsonl rows is another thing and is not counted."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for part, after in zip(node.values, node.values[1:], strict=False):
                if (isinstance(part, ast.Constant) and isinstance(after, ast.FormattedValue)
                        and str(part.value).endswith(("global_step", "global_step_"))):
                    found.append((node.lineno, "builds a name: f\"...global_step{...}\""))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _NAME_PARSERS:
            if any(isinstance(a, ast.Constant) and "global_step" in str(a.value) for a in node.args[:1]):
                found.append((node.lineno, f"parses a name: .{node.func.attr}(\"global_step...\")"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _STEP_NAME.search(node.value):
            found.append((node.lineno, f"a pattern of names: {node.value!r:.50}"))
    return found


# the report is being split into gather/markdown/plots/html on another branch: its uses go to the
# layout's helpers there; counted here so that none is added meanwhile
_PENDING_CHECKPOINT_NAMES: dict[str, int] = {}
# storage.files cannot import the layout (the layout reads through it): its pattern of the temporary
# folders an earlier version left beside checkpoints stays there; verl's package names its own
# checkpoint folders (global_step_{N}, its trainer.default_local_dir), which are not rlexp's
_OWN_CHECKPOINT_NAMES = {"rlexp.experiment.files": 1, "rlexp.trainers.verl": 1}


def test_only_the_layout_builds_or_parses_checkpoint_names():
    wrong = []
    for name, path in modules().items():
        if name == "rlexp.experiment.layout":
            continue
        found = checkpoint_names_built_or_parsed(ast.parse(path.read_text()))
        if found and len(found) != (_PENDING_CHECKPOINT_NAMES | _OWN_CHECKPOINT_NAMES).get(name):
            wrong += [f"{name}:{line}: {what}" for line, what in found]
    assert not wrong, "\n".join(wrong)


def test_the_checkpoint_name_check_finds_what_it_should():
    """The check above on code that builds and parses names, and on code that only reads the metric key."""
    bad = ast.parse('''
name = f"global_step{step}"
verl = f"global_step_{step}"
step = int(name.removeprefix("global_step"))
ok = name.startswith("global_step")
pattern = re.compile(r"global_step(\\d+)_hf")
''')
    assert sorted(line for line, _ in checkpoint_names_built_or_parsed(bad)) == [2, 3, 4, 5, 6]
    good = ast.parse('''
step = row["global_step"]
text = f"training global step {row.get('global_step')}"
name = checkpoint_name(step)
''')
    assert checkpoint_names_built_or_parsed(good) == []


def test_stage_functions_are_the_package_attributes():
    """`rlexp.report` is the function even after every submodule has been imported."""
    import importlib

    import rlexp

    for name in modules():
        if name.startswith("rlexp.") and not name.startswith("rlexp.trainers.openrlhf.flags"):
            try:
                importlib.import_module(name)
            except ImportError:  # an optional engine (vllm) is not installed here
                continue
    for stage in ("plan", "launch", "evaluate", "guard", "decide", "report", "status", "demo"):
        assert callable(getattr(rlexp, stage)), stage
        assert getattr(rlexp, stage).__module__ == f"rlexp.stages.{stage}"


# ---------------------------------------------------------------------------- the trainer seam

# names of trainers, backends, eval engines and metrics sources: a module compares a value with one
# of them only inside that thing's own package or in a registry (docs/ARCHITECTURE.md, "The trainer seam")
SEAM_NAMES = {"openrlhf", "verl", "trl", "local", "process", "ray", "vllm", "openai", "stdout", "tensorboard"}
REGISTRIES = {"rlexp.trainers", "rlexp.trainers.launch", "rlexp.backends.registry", "rlexp.evaluation.engines.registry",
              "rlexp.evaluation.engine_table"}
# a thing's own modules outside rlexp.trainers: the Ray backend's (a trainer's own readers, scripts and
# argv live in its package; the metrics readers pick a follower or format from tables)
OWN_MODULES = {"rlexp.backends.ray_jobs"}


def _seam_comparisons(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            if any(isinstance(v, ast.Constant) and v.value in SEAM_NAMES for v in values):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
                break
    return out


def _inside_the_seam(name: str) -> bool:
    return name.startswith("rlexp.trainers.") or name in REGISTRIES or name in OWN_MODULES


def test_no_branch_on_a_trainer_backend_engine_or_source_name_outside_the_seam():
    wrong = [f"{name}:{hit}" for name, path in modules().items() if not _inside_the_seam(name)
             for hit in _seam_comparisons(path)]
    assert not wrong, "\n".join(wrong)


def test_the_seam_counter_sees_a_branch():
    """The counter itself: each shape of comparison it must catch."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.py"
        path.write_text('if att.trainer.name == "verl":\n    pass\nok = backend in ("local", "ray")\n'
                        'x = "vllm" != engine\ny = name == "other"\n')
        assert [h.split(":")[0] for h in _seam_comparisons(path)] == ["1", "3", "4"]


def test_a_trainer_package_is_layered_as_the_whole():
    """The local trainer's configuration and loss are its pure rules (core); its trainer, launch and
    the entry modules every launch records are adapters."""
    assert {layer_of(f"rlexp.trainers.local.{m}") for m in ("config", "loss", "steps")} == {"core"}
    assert {layer_of(f"rlexp.trainers.local.{m}") for m in ("train", "env_train", "launch")} == {"adapters"}
    assert layer_of("rlexp.trainers.verl.loss") == "adapters"  # another package's own list is its own
    assert layer_of("rlexp.backends.local_trainer") == "adapters"
