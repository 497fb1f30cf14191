"""How a command launching one of TRL's own example scripts is read (rlexp.trainers.trl.examples): the
trainer its TrlParser builds, or a one-line refusal naming the example; a script of one's own that is
not among them is still read as a GRPO script. (The corpus test imports TRL's real usage commands.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.trainers.trl.script_args import check_module


@pytest.mark.parametrize(("module", "implied"), [
    ("examples/scripts/rloo_vlm.py", {"advantage_estimator": "rloo"}),
    ("/home/u/trl/examples/scripts/rloo_vlm.py", {"advantage_estimator": "rloo"}),
    ("examples/scripts/grpo_vlm.py", {}),
    ("train.py", {}),  # one's own script: GRPO
    ("my/examples/scripts/my_grpo.py", {}),  # not one of TRL's examples
])
def test_trl_examples_that_parse_their_config_plan_with_its_trainer(module, implied):
    assert check_module(Path("s.sh"), "line 3", module) == implied


@pytest.mark.parametrize(("module", "words"), [
    ("examples/scripts/ppo/ppo.py", "runs TRL's PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship"),
    ("examples/scripts/async_grpo.py", "builds its AsyncGRPOConfig in its own code"),
    ("examples/scripts/openenv/opencode.py", "imports has_tool_call from trl.experimental.async_grpo.openenv_harness, "
                                             "which TRL 1.16.0 does not have"),
    ("examples/scripts/openenv/wordle.py", "builds its GRPOConfig in its own code"),
    ("examples/scripts/rloo.py", "builds its RLOOConfig in its own code"),
    ("examples/scripts/sft.py", "runs TRL's SFTTrainer"),
])
def test_trl_examples_rlexp_does_not_plan_are_refused_in_one_line(module, words):
    with pytest.raises(InputError) as caught:
        check_module(Path("s.sh"), "line 3", module)
    text = str(caught.value)
    assert words in text and "line 3" in text and "\n" not in text


# the names trl.experimental.async_grpo.openenv_harness of the TRL venv defines or imports at its top level (read, not
# imported: it imports openenv, which the venv does not have)
HARNESS_NAMES = (
    "import ast, importlib.util as u; tree = ast.parse(open(u.find_spec('trl.experimental.async_grpo').submodule_search"
    "_locations[0] + '/openenv_harness.py').read()); names = sorted({a.asname or a.name for n in tree.body if isinstance"
    "(n, (ast.Import, ast.ImportFrom)) for a in n.names} | {n.name for n in tree.body if hasattr(n, 'name')})")


def test_trl_1_16_ships_async_grpo_and_not_ppo():
    """What the refusals say of TRL 1.16.0, the release whose config rlexp reads: its wheel ships
    AsyncGRPOTrainer (its examples that state max_steps are planned) and no trl.experimental.ppo (TRL's PPO
    examples, at the main commit the corpus copies, cannot run on it); its openenv_harness has
    HarnessRolloutWorker but no has_tool_call, which opencode.py at that commit imports from it (so it
    stops at its imports on the release)."""
    import subprocess

    from trl_venv import trl_python_or_skip

    python = trl_python_or_skip()
    probe = (f"{HARNESS_NAMES}; import json, trl; print(json.dumps([trl.__version__, "
             "u.find_spec('trl.experimental.async_grpo') is not None, u.find_spec('trl.experimental.ppo') is not None, "
             "'HarnessRolloutWorker' in names, 'has_tool_call' in names]))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1000:]
    import json

    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["1.16.0", True, False, True, False]
    source = (Path(__file__).parent / "data/launch_scripts/trl/src/examples/scripts/openenv/opencode.py").read_text()
    block = source[source.index("from trl.experimental.async_grpo.openenv_harness import ("):]
    assert "    has_tool_call,\n)" in block[:block.index(")") + 1]
