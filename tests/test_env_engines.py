"""Episodes on every engine: the token-in/token-out contract (``generate_tokens``) of the local,
vllm and openai engines; ``rlexp eval`` on an environment task through the openai engine against a
loopback OpenAI-compatible server backed by the real tiny model (token ids as the prompt,
``return_token_ids``, as `vllm serve` answers); G0/G1 per turn (``episode_integrity``), G1 on
episode records, G2 on episodes' final answers, the parser audit drawing trajectories.

The real vLLM on episodes is tests/test_vllm_episodes.py (the vLLM CI stage)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from loopback_json import LoopbackJsonServer

from rlexp.environments.interface import BaseEnvironment, StepResult, register
from rlexp.errors import InputError
from rlexp.evaluation.engines.base import Decoding
from rlexp.experiment.records import read_records, record_path

pytest.importorskip("torch")

from test_engines import FakeLLM, fake_vllm  # noqa: E402, F401 (the fake vllm module fixture)
from test_openai_eval import _let_eos_win_over  # noqa: E402


@register("test_three_turns")
class ThreeTurnsEnv(BaseEnvironment):
    """Every episode lasts three model turns whatever the model says (so an untrained model plays
    multi-turn episodes): feedback ``step k: <action>``, the reward 1 on the last turn when the
    model said a digit 1 anywhere in the episode."""

    def reset(self, task):
        self.k, self.seen_one = 0, False
        return str(task["prompt"])

    def step(self, action_text):
        self.k += 1
        self.seen_one = self.seen_one or "1" in action_text
        done = self.k >= 3
        return StepResult(f"step {self.k}: {action_text[:8]}", float(done and self.seen_one), done,
                          {"tool_call": not done})


ENV = ("environment: {name: test_three_turns, max_turns: 3, max_tokens_per_turn: 8, max_total_tokens: 80, "
       "primary_metric: success}\n")


@pytest.fixture
def env_attempt(eval_experiment):
    att = eval_experiment(sizes={"pool": 4, "ood_primary": 8, "id": 4, "sanity": 2})
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text() + ENV)
    # the untrained tiny model never ends a turn (every turn cut, every episode one turn long): let it
    # end where it would say "L", so some turns end by EOS and their episodes go on
    _let_eos_win_over(att.parent / "models" / "tiny-base", "L")
    return att


class TokenServer:
    """A minimal OpenAI-compatible ``/v1/completions`` server speaking token ids, as `vllm serve
    --enable-lora --lora-modules name=path` does: ``prompt`` a list of token ids, the generated ids
    in ``choices[0].token_ids`` when ``return_token_ids`` is set (the EOS id included on a stop).
    The base model under ``served_name``, each LoRA adapter under its name (peft); greedy decoding
    with :func:`rlexp.evaluation.generation.generate_ids`, one request at a time. ``token_ids=False``
    answers text only, as a server without vLLM's extension would."""

    def __init__(self, base_dir: Path, adapters: dict[str, Path], served_name: str, *, token_ids: bool = True):
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
        names = list(adapters)
        self.model = PeftModel.from_pretrained(base, adapters[names[0]], adapter_name=names[0]) if names else base
        for name in names[1:]:
            self.model.load_adapter(adapters[name], adapter_name=name)
        self.model.eval()
        self.served_name, self.adapter_names, self.token_ids = served_name, set(names), token_ids
        self.bodies: list[dict] = []
        self.server = LoopbackJsonServer(self.answer, prefix="/v1")
        self.url = self.server.url

    def answer(self, path: str, body: dict, headers):
        self.bodies.append(body)
        if body.get("model") not in self.adapter_names | {self.served_name}:
            return 404, {"error": {"message": "no model"}}
        return 200, self.complete(body)

    def complete(self, body: dict) -> dict:
        from rlexp.evaluation.generation import generate_ids

        prompt = body["prompt"]
        assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt), "token ids expected"
        assert body["n"] == 1 and body["temperature"] == 0.0
        if body["model"] == self.served_name:
            with self.model.disable_adapter() if self.adapter_names else contextlib.nullcontext():
                ((c,),) = generate_ids(self.model, self.tokenizer, [prompt], max_new_tokens=int(body["max_tokens"]))
        else:
            self.model.set_adapter(body["model"])
            ((c,),) = generate_ids(self.model, self.tokenizer, [prompt], max_new_tokens=int(body["max_tokens"]))
        choice = {"index": 0, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
        if self.token_ids and body.get("return_token_ids"):
            choice["token_ids"] = list(c.token_ids)
        return {"object": "text_completion", "model": body["model"], "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(c.token_ids)}}

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)
        self.server.thread.join(timeout=10)


def _turns(record: dict) -> list[tuple[str, str]]:
    return [(t["action"], t["feedback"]) for t in record["trajectory"]["turns"]]


def test_eval_of_episodes_through_the_openai_engine_equals_the_local_engine(env_attempt):
    """`rlexp eval` of an environment task with engine openai: the server is given the ids each
    episode holds (turn k+1's prompt = turn k's prompt + the ids the server returned + the feedback
    tokenised once), and every record equals the local engine's turn by turn."""
    from rlexp.environments.episodes import render_user_turn
    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard_integrity import pipeline_integrity

    local = evaluate(env_attempt, show_progress=False)
    names = sorted({f.checkpoint for f in local.files})
    assert names == ["baseline_s0", "global_step2", "global_step4"]

    other = env_attempt.parent / "a1o"
    shutil.copytree(env_attempt, other, ignore=shutil.ignore_patterns("eval", "guards"))
    base = env_attempt.parent / "models" / "tiny-base"
    adapters = {n: env_attempt / "checkpoints" / f"{n}_hf" for n in names if n != "baseline_s0"}
    with TokenServer(base, adapters, "tiny-base") as server:
        spec = other / "attempt.yaml"
        text = spec.read_text().replace("id: a1\n", "id: a1o\n")
        spec.write_text(text.replace("engine: local,", f"engine: openai, base_url: '{server.url}', model: tiny-base,"))
        served = evaluate(other, show_progress=False)
    assert {(f.checkpoint, f.set_role) for f in served.files} == {(f.checkpoint, f.set_role) for f in local.files}

    compared = multi_turn = total_turns = 0
    for f in local.files:
        a, b = read_records(f.path), read_records(record_path(other, f.checkpoint, f.set_role))
        verdict = pipeline_integrity(a, b)
        assert verdict.passed and verdict.numbers["output_differences"] == 0, (f.checkpoint, f.set_role)
        by_hash = {r["problem_hash"]: r for r in b}
        for r in a:
            assert _turns(r) == _turns(by_hash[r["problem_hash"]])
            compared += 1
            multi_turn += len(_turns(r)) > 1
            total_turns += len(_turns(r))
    assert compared == 3 * (8 + 4 + 2) and multi_turn >= 5, multi_turn

    # what the server saw: token ids, return_token_ids, the turn budget; and per episode, each
    # prompt continues the previous one with the ids it returned and the feedback rendered once
    tok = server.tokenizer
    assert all(b["return_token_ids"] is True and b["max_tokens"] == 8 for b in server.bodies)
    assert len(server.bodies) == total_turns  # one request per model turn of every episode
    base_bodies = [b for b in server.bodies if b["model"] == "tiny-base"]
    chains = 0
    for role in ("ood_primary", "id", "sanity"):
        s0 = {r["problem_hash"]: r for r in read_records(record_path(other, "baseline_s0", role))}
        for line in (env_attempt.parent / "data" / f"{role}.jsonl").read_text().splitlines():
            p = json.loads(line)
            first = encode_prompt(tok, render_prompt(tok, p["prompt"], ""))
            chain = [b["prompt"] for b in base_bodies if b["prompt"][:len(first)] == first]
            turns = _turns(s0[p["problem_hash"]])
            assert len(chain) == len(turns) and chain[0] == first
            for k in range(1, len(chain)):
                feedback = encode_prompt(tok, render_user_turn(tok, turns[k - 1][1]))
                assert chain[k][-len(feedback):] == feedback and chain[k][:len(chain[k - 1])] == chain[k - 1]
                chains += 1
    assert chains >= 2  # later turns were checked, not only first prompts


def test_openai_generate_tokens_refuses_a_server_without_token_ids(tiny_base_model):
    """Text alone is never turned back into ids (text → ids is not the inverse of ids → text)."""
    from rlexp.evaluation.engines.openai import OpenAIEngine, ServerError

    with TokenServer(tiny_base_model, {}, "m", token_ids=False) as server:
        engine = OpenAIEngine(server.url, "m", retries=0)
        with pytest.raises(ServerError, match="without token_ids"):
            engine.generate_tokens([[1, 2, 3]], Decoding.greedy(3))
        with pytest.raises(InputError, match="adapter"):
            engine.generate_tokens([[1, 2, 3]], Decoding.greedy(3), adapter="x")
    assert server.bodies[0]["prompt"] == [1, 2, 3] and server.bodies[0]["return_token_ids"] is True


def test_episode_integrity_by_hand():
    """G0/G1 per turn on hand-made episodes: prompt [1,2], turns are runs of agent tokens."""
    from rlexp.stages.guard_integrity import episode_integrity, turn_segments

    mask = [0, 0, 1, 1, 0, 1]
    assert turn_segments([1, 2, 7, 8, 3, 9], mask) == [([1, 2], [7, 8]), ([1, 2, 7, 8, 3], [9])]

    def ep(h, ids, m=mask):
        return {"problem_hash": h, "token_ids": ids, "agent_mask": m}

    same = [ep("a", [1, 2, 7, 8, 3, 9]), ep("b", [1, 2, 5, 5, 3, 9])]
    v = episode_integrity(same, list(reversed(same)), min_identical=0.99)
    assert v.passed and v.numbers["identical_rate"] == 1.0 and v.numbers["turns_compared"] == 4

    # the first turn differs on one episode of two: not a per-turn failure, but 50% < 99% identical
    v = episode_integrity(same, [same[0], ep("b", [1, 2, 6, 5, 3, 9])], min_identical=0.99)
    assert not v.passed and v.numbers["first_turn_agrees"] == 1 and v.numbers["later_turn_differences"] == 0
    assert episode_integrity(same, [same[0], ep("b", [1, 2, 6, 5, 3, 9])], min_identical=0.5).passed

    # the first turn agrees, the second does not: a G1 failure whatever the rate
    v = episode_integrity(same, [same[0], ep("b", [1, 2, 5, 5, 3, 4])], min_identical=0.5)
    assert not v.passed and v.numbers["later_turn_differences"] == 1
    assert v.details[0]["first_differing_turn"] == 1

    # the feedback tokenised differently: the second turn's input differs (G0 per turn)
    v = episode_integrity(same, [same[0], ep("b", [1, 2, 5, 5, 4, 9])], min_identical=0.5)
    assert not v.passed and v.numbers["turn_input_differences"] == 1

    with pytest.raises(InputError, match="same episodes"):
        episode_integrity(same, same[:1])


def test_g1_compares_every_turn_of_episode_records():
    from rlexp.stages.guard_integrity import pipeline_integrity

    def rec(first_action):
        return {"problem_hash": "h", "output": "\\boxed{5}", "correct": 1,
                "trajectory": {"turns": [{"action": first_action, "feedback": "5"},
                                         {"action": "\\boxed{5}", "feedback": ""}]}}

    assert pipeline_integrity([rec("calc 2+3")], [rec("calc 2+3")]).numbers["output_differences"] == 0
    v = pipeline_integrity([rec("calc 2+3")], [rec("calc 3+2")])  # same final answer, another first turn
    assert not v.passed and v.numbers["output_differences"] == 1
    # single-turn records compare as before
    plain = {"problem_hash": "h", "output": "x", "correct": 0}
    assert pipeline_integrity([plain], [dict(plain)]).passed


def test_audit_draw_carries_the_trajectory():
    from rlexp.stages.guard_audit import audit_draw

    trajectory = {"finish_reason": "stop", "turns": [{"action": "calc 2*3", "feedback": "6"}]}
    records = [{"problem_hash": "a", "correct": 0, "output": "6", "trajectory": trajectory},
               {"problem_hash": "b", "correct": 0, "output": "7"}]
    drawn = {d["problem_hash"]: d for d in audit_draw(records, n=5)}
    assert drawn["a"]["trajectory"] == trajectory and "trajectory" not in drawn["b"]


def test_g2_on_an_environment_task_grades_the_final_answers_of_s0_episodes(env_attempt):
    from rlexp.evaluation.answers import extract_answer
    from rlexp.stages.evaluate import evaluate
    from rlexp.stages.guard_baseline import run_g2

    verdict = run_g2(env_attempt, problems=6)
    records = read_records(record_path(env_attempt, "baseline_s0", "ood_primary"))
    assert len(records) == 6 and all(r["trajectory"]["turns"] for r in records)
    # the final answer is the last turn's action, parsed by the shared extractor
    methods = [extract_answer(r["trajectory"]["turns"][-1]["action"])[1] for r in records]
    assert verdict.numbers["problems"] == 6
    assert verdict.numbers["boxed_rate"] == methods.count("boxed") / 6
    assert verdict.numbers["fail_rate"] == (methods.count("none") + methods.count("unparsed")) / 6
    assert not verdict.passed  # the untrained tiny model boxes nothing
    # the eval resumes from these records: only the two episodes G2 did not play are new
    outcome = evaluate(env_attempt, sets=["ood_primary"], checkpoints=["baseline_s0"], show_progress=False)
    assert [f.new_records for f in outcome.files] == [2]


# --------------------------------------------------------------------------- engines, one by one


def test_local_engine_generate_tokens_is_generate_ids(tiny_base_model):
    """The local engine's token path is the trainer's decoding path, ids as given."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlexp.evaluation.engines.local import LocalEngine
    from rlexp.evaluation.generation import encode_prompt, generate_ids, render_prompt

    tok = AutoTokenizer.from_pretrained(tiny_base_model)
    prompts = [encode_prompt(tok, render_prompt(tok, f"{i}+{i}=", "")) for i in range(3)]
    prompts[1] = prompts[1] + [tok.eos_token_id] + prompts[2]  # an episode-like prompt: ids no text gives back
    model = AutoModelForCausalLM.from_pretrained(tiny_base_model, dtype=torch.float32).eval()
    expected = [c for (c,) in generate_ids(model, tok, prompts, max_new_tokens=4)]
    with LocalEngine(tiny_base_model) as engine:
        got = engine.generate_tokens(prompts, Decoding.greedy(4))
        with pytest.raises(ValueError, match="n must be 1"):
            engine.generate_tokens(prompts, Decoding.nondet_proxy(2, 4))
        with pytest.raises(InputError, match="adapter"):
            engine.generate_tokens(prompts, Decoding.greedy(4), adapter="nope")
    assert [g.token_ids for g in got] == [e.token_ids for e in expected]
    assert [g.finish_reason for g in got] == [e.finish_reason for e in expected]


@pytest.mark.usefixtures("fake_vllm")
def test_vllm_generate_tokens_sends_the_ids_and_one_adapter(tmp_path):
    from rlexp.evaluation.engines.vllm import VllmEngine

    adapter = tmp_path / "a"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    engine = VllmEngine("/models/base", {"global_step2": adapter})
    llm = FakeLLM.instances[-1]
    prompts = [[5, 6, 7], [5, 9]]
    out = engine.generate_tokens(prompts, Decoding.greedy(12), adapter="global_step2")
    call = llm.calls[-1]
    assert [p["prompt_token_ids"] for p in call["prompts"]] == prompts
    assert [r.lora_name for r in call["lora_request"]] == ["global_step2", "global_step2"]
    assert call["params"].max_tokens == 12 and call["params"].temperature == 0.0 and call["params"].n == 1
    assert [s.token_ids for s in out] == [(0, 1, 2), (0, 1, 2)]  # the fake's ids, kept as returned
    assert [s.prompt_tokens for s in out] == [3, 2] and out[0].finish_reason == "stop"
    engine.generate_tokens(prompts, Decoding.greedy(3))
    assert llm.calls[-1]["lora_request"] is None  # the base: no LoRA request
    with pytest.raises(InputError, match="adapter"):
        engine.generate_tokens(prompts, Decoding.greedy(3), adapter="nope")
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate_tokens([[]], Decoding.greedy(3))
