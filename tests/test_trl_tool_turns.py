"""Why TRL gets ``max_tool_calling_iterations = environment.max_turns - 1``, checked on TRL's own code.

GRPOTrainer (the pinned 1.16 in ``.venv-trl``) generates an episode's first model turn in
``_generate`` and only then enters ``_tool_call_loop``, whose every iteration runs the calls and
generates one turn more. The test reads the first fact from ``_generate``'s source and runs the real
``_tool_call_loop`` (on a stand-in trainer whose model calls a tool every turn, so only the
iteration cap ends the loop) for the value rlexp sets: 1 + the loop's generations must be max_turns.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from trl_venv import trl_python_or_skip

from rlexp.trainers.trl.agent_tools import tool_calling_iterations

PYTHON = trl_python_or_skip()

# runs in .venv-trl: argv[1] is a JSON list of max_tool_calling_iterations values; prints, for each,
# the generations _tool_call_loop made, and what _generate does before calling the loop
PROBE = r'''
import ast, inspect, json, sys, textwrap
from types import SimpleNamespace

import trl
from trl.trainer import grpo_trainer
from trl.trainer.grpo_trainer import GRPOTrainer

TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "calc", "arguments": {}}}]}
# every generated turn parses as one more tool call: only the iteration cap stops the loop
grpo_trainer.parse_response = lambda tokenizer, ids, prefix=None, tools=None: dict(TOOL_CALL)


class Trainer:
    use_vllm, vllm_mode, _is_vlm, environment_factories, _tokenizer = False, None, False, None, None
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=10**9))
    max_completion_length = 10**9
    tools = ["calc"]

    def __init__(self, iterations):
        self.max_tool_calling_iterations = iterations
        self._sync_tool_dicts = [{"calc": lambda: "1"}]
        self._async_tool_dicts = [{}]
        self.generations = 0

    def _get_tool_suffix_ids(self, tool_messages):
        return [7]

    def _generate_single_turn(self, ids, images, multimodal_fields, num_generations, has_tool_images=False):
        self.generations += 1
        return [[5] for _ in ids], None


loop = {}
for iterations in json.loads(sys.argv[1]):
    me = Trainer(iterations)
    GRPOTrainer._tool_call_loop(me, [[{"role": "user", "content": "q"}]], [[1, 2]], [[5]], [[dict(TOOL_CALL)]],
                                None, None, {})
    loop[iterations] = me.generations

# _generate: the calls of self._generate_single_turn / self._tool_call_loop, in source order
tree = ast.parse(textwrap.dedent(inspect.getsource(GRPOTrainer._generate)))
calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
         and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"
         and n.func.attr in ("_generate_single_turn", "_tool_call_loop")]
order = [n.func.attr for n in sorted(calls, key=lambda n: (n.lineno, n.col_offset))]
print(json.dumps({"trl": trl.__version__, "loop": loop, "generate": order}))
'''


@pytest.fixture(scope="module")
def trl_counts() -> dict:
    turns = [1, 2, 3, 4]
    iterations = [tool_calling_iterations(t) for t in turns]
    done = subprocess.run([str(PYTHON), "-c", PROBE, json.dumps(iterations)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["turns"] = dict(zip(turns, iterations, strict=True))
    return out


def test_trl_generates_the_first_turn_before_its_tool_loop(trl_counts):
    assert trl_counts["trl"] == "1.16.0"
    # one generation of the prompts, then the loop: the turn the loop's first iteration answers
    assert trl_counts["generate"] == ["_generate_single_turn", "_tool_call_loop"]


def test_max_turns_minus_one_iterations_are_max_turns_model_turns(trl_counts):
    for max_turns, iterations in trl_counts["turns"].items():
        assert iterations == max_turns - 1
        # the loop ran its cap (the model always calls a tool): one turn before it, one per iteration
        assert 1 + trl_counts["loop"][str(iterations)] == max_turns


def test_rlexp_would_be_off_by_one_with_max_turns_itself(trl_counts):
    """The reference the value is checked against: TRL's loop really stops at its cap (so the
    iterations are max_turns - 1 and not max_turns, which would play one turn more)."""
    assert trl_counts["loop"]["0"] == 0 and trl_counts["loop"]["3"] == 3
