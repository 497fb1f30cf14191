"""A judge-rewarded episode eval against an OpenAI-compatible stub on loopback: every call cached
(a rerun makes zero calls), a failing server counted as judge_error (never a 0), refused by decide
and retried by the next eval."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("torch")

from test_rewards import StubJudge  # noqa: E402

from rlexp.errors import InputError  # noqa: E402
from rlexp.experiment.records import read_records  # noqa: E402

ENV = ("environment: {{name: calculator, config: {{max_calls: 1}}, max_turns: 2, max_tokens_per_turn: 6, "
       "max_total_tokens: 12, primary_metric: mean_reward, success_threshold: 0.5,\n"
       "  reward: {{env: 0.25, judge: 0.75}}, judge: {{base_url: '{url}', model: stub-judge, retries: 0}}}}\n")


@pytest.fixture
def judged_attempt(eval_experiment):
    def build(url):
        att = eval_experiment(sizes={"pool": 4, "ood_primary": 6, "id": 3, "sanity": 2})
        spec = att / "attempt.yaml"
        spec.write_text(spec.read_text() + ENV.format(url=url))
        return att

    return build


def _all_records(att):
    from rlexp.experiment.layout import AttemptDir

    return {(c, s): read_records(p) for c, s, p in AttemptDir(att).evals.record_files()}


def test_judge_rewarded_eval_caches_every_call(judged_attempt):
    from rlexp.experiment.datasets import read_dataset
    from rlexp.stages.evaluate import evaluate

    with StubJudge() as stub:
        att = judged_attempt(stub.url)
        evaluate(att, show_progress=False)
        files = _all_records(att)
        assert len(files) == 9  # (S0 + 2 checkpoints) x 3 sets
        prompts = {}
        for role in ("ood_primary", "id", "sanity"):
            prompts.update({p["problem_hash"]: p for p in read_dataset(att.parent / "data" / f"{role}.jsonl")})
        asked = set()
        for records in files.values():
            for r in records:
                p = prompts[r["problem_hash"]]
                asked.add((p["prompt"], r["output"], p["answer"]))
                judge = 1.0 if "42" in r["output"] else 0.0  # what the stub answers
                assert r["reward_parts"] == {"env": r["trajectory"]["return"], "judge": judge}
                assert r["reward"] == pytest.approx(0.25 * r["trajectory"]["return"] + 0.75 * judge)
                assert r["correct"] == int(r["reward"] >= 0.5) and "reward_error" not in r
        # one call per distinct (prompt, answer, reference): repeats across checkpoints hit the cache
        assert len(stub.requests) == len(asked)
        assert all(body["model"] == "stub-judge" for _, body in stub.requests)
        before = len(stub.requests)
        evaluate(att, show_progress=False)  # everything done: nothing played, nothing judged
        assert len(stub.requests) == before
        shutil.rmtree(att / "eval" / "global_step4")  # played again: every answer judged before
        evaluate(att, show_progress=False)
        assert len(stub.requests) == before
        def graded(fs):  # the environment's step latencies differ between plays
            return {k: [(r["problem_hash"], r["output"], r["reward"], r["reward_parts"], r["correct"]) for r in v]
                    for k, v in fs.items()}

        assert graded(_all_records(att)) == graded(files)


def test_a_failing_judge_is_counted_refused_by_decide_and_retried(judged_attempt):
    from rlexp.experiment.files import iter_jsonl
    from rlexp.stages.decide import decide
    from rlexp.stages.evaluate import evaluate

    with StubJudge(mode="fail") as stub:
        att = judged_attempt(stub.url)
        evaluate(att, sets=["ood_primary"], show_progress=False)
        files = _all_records(att)
        n = sum(len(v) for v in files.values())
        assert n == 18
        for records in files.values():
            for r in records:
                assert r["reward"] is None and r["reward_error"]["kind"] == "judge_error"
                assert r["reward_parts"]["judge"]["error"] == "judge_error"
        log = [row for _, row in iter_jsonl(att / "eval" / "judge_calls.jsonl")]
        assert log and not any(row["ok"] for row in log)
        assert not (att / "eval" / "judge_cache.jsonl").exists()  # failures are never cached
        with pytest.raises(InputError) as info:
            decide(att)
        assert "judge_error" in info.value.one_line() and "of 6 episodes" in info.value.one_line()
        assert not (att / "decision.json").exists()
        from rlexp.reporting.episodes import episode_section

        assert "judge_error" in episode_section(att) and "failed" in episode_section(att)
        stub.mode = "ok"  # the server recovers: the next eval plays and judges the failed episodes again
        evaluate(att, sets=["ood_primary"], show_progress=False)
        again = _all_records(att)
        assert sum(len(v) for v in again.values()) == 18
        assert not any(r.get("reward_error") for v in again.values() for r in v)
        assert all(isinstance(r["reward"], float) for v in again.values() for r in v)


def test_judge_weight_needs_a_server_in_the_spec(eval_experiment):
    from rlexp.spec import load_attempt

    att = eval_experiment(sizes={"pool": 4, "ood_primary": 6, "id": 3, "sanity": 2})
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text() + "environment: {name: calculator, reward: {judge: 1.0}}\n")
    with pytest.raises(InputError) as info:
        load_attempt(att)
    assert "environment.judge.base_url" in info.value.one_line()
    spec.write_text(spec.read_text().replace("reward: {judge: 1.0}", "reward: {judge: 1.0, exact: 1}"))
    with pytest.raises(InputError) as info:
        load_attempt(att)
    assert "environment.reward.exact" in info.value.one_line()


def test_weights_that_overshoot_are_refused_at_plan_before_any_eval(eval_experiment, capsys):
    from rlexp.cli import main

    att = eval_experiment(sizes={"pool": 4, "ood_primary": 6, "id": 3, "sanity": 2})
    spec = att / "attempt.yaml"
    spec.write_text(spec.read_text() + "environment: {name: calculator, reward: {env: 1, ndcg: 1}}\n")
    before = sorted(p.relative_to(att) for p in att.rglob("*"))
    capsys.readouterr()  # the fixture's own output
    assert main(["plan", str(att)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "environment.reward" in err and "sum to 2" in err
    assert sorted(p.relative_to(att) for p in att.rglob("*")) == before  # nothing written
    spec.write_text(spec.read_text().replace("{env: 1, ndcg: 1}", "{env: 0.5, ndcg: 0.5}"))
    assert main(["plan", str(att)]) in (0, 1)
