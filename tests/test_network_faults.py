"""Fault injection on every network call: the judge and the ``openai`` eval engine against servers on
127.0.0.1 that hang, trickle, send too much, send what is not JSON, not UTF-8 or not HTTP, cut or
reset the connection, or answer 429/500 before they answer well (tests/fault_servers.py).

Every fault must end within the stated deadline (plus a fixed slack for thread scheduling) in the one
counted error its caller has — ``judge_error`` for the judge (never cached, asked again next time),
one line (:class:`ServerError`) for the engine — never a traceback, never a hang; the flaky server is
answered well after the retries.
"""

from __future__ import annotations

import time

import pytest
from fault_servers import FaultServer

from rlexp.environments.rewards import JUDGE_ERROR, RewardError
from rlexp.evaluation.engines.base import Decoding, Request
from rlexp.evaluation.engines.http import HttpFailure, HttpLimits, post_json
from rlexp.evaluation.engines.openai import OpenAIEngine, ServerError

DEADLINE_S = 1.5  # the stated whole-call deadline of these tests
SLACK_S = 1.5  # scheduling on a busy 2-core CI machine; a hang would take MAX_HANG_S (60 s)
FAILING = ("hang", "trickle", "huge", "huge_declared", "non_json", "non_utf8", "cut", "reset", "non_http")


def _completion(path, body):
    return {"choices": [{"text": "ok 42", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def _chat(path, body):
    return {"choices": [{"message": {"role": "assistant", "content": "Yes."}}]}


def _limits(**kw):
    return HttpLimits(**{"connect_timeout_s": 1.0, "read_timeout_s": 0.5, "timeout_s": DEADLINE_S,
                         "max_response_bytes": 1 << 20, "retries": 2, "backoff_s": 0.05, **kw})


@pytest.mark.parametrize("fault", FAILING)
def test_every_fault_is_one_error_within_the_deadline(fault):
    with FaultServer(fault) as server:
        started = time.monotonic()
        with pytest.raises(HttpFailure) as info:
            post_json(server.url + "/v1/completions", {"prompt": "x"}, _limits())
        took = time.monotonic() - started
    assert took < DEADLINE_S + SLACK_S, f"{fault}: {took:.1f} s past the deadline of {DEADLINE_S} s"
    message = str(info.value)
    assert "\n" not in message and server.url in message and "Traceback" not in message


def test_what_each_fault_is_called():
    """The message names the fault (what a user reads to fix the server), not a generic failure."""
    expected = {"hang": "read timeout", "trickle": "deadline", "huge": "over the limit", "huge_declared": "over the limit",
                "non_json": "not JSON", "non_utf8": "not UTF-8", "cut": "cut mid-answer",
                "reset": "reset", "non_http": "not an HTTP answer"}
    seen = {}
    for fault, words in expected.items():
        with FaultServer(fault) as server, pytest.raises(HttpFailure) as info:
            post_json(server.url + "/x", {}, _limits(retries=0))
        seen[fault] = str(info.value)
        assert words in seen[fault], (fault, seen[fault])


def test_a_body_over_the_limit_is_not_retried_and_read_no_further():
    with FaultServer("huge") as server, pytest.raises(HttpFailure):
        post_json(server.url + "/x", {}, _limits(retries=3, max_response_bytes=1000))
    assert server.connections == 1


def test_flaky_429_then_500_is_answered_after_the_retries():
    with FaultServer("flaky", good=_completion) as server:
        data = post_json(server.url + "/v1/completions", {"prompt": "x"}, _limits(retries=2, timeout_s=10))
    assert data["choices"][0]["text"] == "ok 42" and server.connections == 3


def test_retries_stop_at_the_deadline_not_at_the_count():
    with FaultServer("flaky", good=_completion) as server:
        started = time.monotonic()
        with pytest.raises(HttpFailure) as info:  # 429/500 forever within 0.5 s: the deadline ends it
            post_json(server.url + "/x", {}, _limits(retries=10, backoff_s=0.4, timeout_s=0.5))
    assert time.monotonic() - started < 0.5 + SLACK_S and "deadline" in str(info.value)


def test_credentials_in_the_url_are_refused_before_any_connection():
    with FaultServer("hang") as server:
        url = server.url.replace("http://", "http://user:sk-live-123456789@")
        with pytest.raises(HttpFailure) as info:
            post_json(url, {}, _limits())
    assert server.connections == 0 and "sk-live" not in str(info.value) and "api_key_env" in str(info.value)


# ----------------------------------------------------------------------------- the openai engine


@pytest.mark.parametrize("fault", FAILING)
def test_openai_engine_fault_is_one_line_within_the_deadline(fault):
    with FaultServer(fault) as server:
        engine = OpenAIEngine(server.url, "m", retries=2, backoff_s=0.05, timeout_s=DEADLINE_S,
                              connect_timeout_s=1.0, read_timeout_s=0.5, max_response_bytes=1 << 20, concurrency=4)
        started = time.monotonic()
        with pytest.raises(ServerError) as info:
            engine.generate([Request(f"q{i}") for i in range(12)], Decoding("greedy_pass@1", 0.0, 1, 4))
        took = time.monotonic() - started
    # 12 requests, 4 at a time: once one fails the rest are not sent, so one deadline bounds the whole
    # call (the 4 running together), not 3 rounds of it
    assert took < DEADLINE_S + SLACK_S, f"{fault}: {took:.1f} s"
    assert server.connections <= 4 * 3  # the first 4 requests and their retries, no more
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


def test_openai_engine_answers_through_a_flaky_server():
    with FaultServer("flaky", good=_completion) as server:
        engine = OpenAIEngine(server.url, "m", retries=2, backoff_s=0.01, timeout_s=10, concurrency=1)
        results = engine.generate([Request("q1"), Request("q2")], Decoding("greedy_pass@1", 0.0, 1, 4))
    assert [r.samples[0].text for r in results] == ["ok 42", "ok 42"] and server.connections == 6


def test_the_spec_sets_the_engine_limits():
    from rlexp.evaluation.engines.registry import OPENERS  # noqa: F401  (the opener passes these through)
    from rlexp.spec.model import EvalSettings

    settings = EvalSettings(engine="openai", base_url="http://127.0.0.1:1", timeout_s=7.0, connect_timeout_s=2.0,
                            read_timeout_s=3.0, retries=1, max_response_bytes=1000)
    engine = OpenAIEngine(settings.base_url, "m", timeout_s=settings.timeout_s, retries=settings.retries,
                          connect_timeout_s=settings.connect_timeout_s, read_timeout_s=settings.read_timeout_s,
                          max_response_bytes=settings.max_response_bytes)
    assert engine.limits == HttpLimits(2.0, 3.0, 7.0, 1000, 1, 0.5)


# ----------------------------------------------------------------------------- the judge


@pytest.mark.parametrize("fault", FAILING)
def test_judge_fault_is_a_counted_judge_error_never_cached(fault, tmp_path):
    from rlexp.environments.judge import Judge

    with FaultServer(fault) as server:
        judge = Judge(server.url, "judge", cache_path=tmp_path / "cache.jsonl", log_path=tmp_path / "calls.jsonl",
                      retries=1, backoff_s=0.05, timeout_s=DEADLINE_S, connect_timeout_s=1.0, read_timeout_s=0.5,
                      max_response_bytes=1 << 20)
        started = time.monotonic()
        out = judge.score("What is 6*7?", "42")
        took = time.monotonic() - started
    assert took < DEADLINE_S + SLACK_S
    assert isinstance(out, RewardError) and out.kind == JUDGE_ERROR and "\n" not in out.reason
    assert judge.errors == 1 and judge.cache == {} and not (tmp_path / "cache.jsonl").exists()
    assert '"ok": false' in (tmp_path / "calls.jsonl").read_text()


def test_judge_through_a_flaky_server_scores_and_caches(tmp_path):
    from rlexp.environments.judge import Judge

    with FaultServer("flaky", good=_chat) as server:
        judge = Judge(server.url, "judge", cache_path=tmp_path / "cache.jsonl", retries=2, backoff_s=0.01)
        assert judge.score("What is 6*7?", "42") == 1.0
    assert judge.errors == 0 and len(judge.cache) == 1


@pytest.mark.parametrize("reply", ["Step 1: the answer is wrong. No.", "Yes, but no.", "0.5 or 0.7", "2", "",
                                   "The answer is correct", '{"score": 1}'])
def test_a_judge_reply_that_is_not_exactly_a_score_is_an_error_and_not_cached(reply, tmp_path):
    from loopback_json import LoopbackJsonServer

    from rlexp.environments.judge import Judge

    def answer(path, body, headers):
        return 200, {"choices": [{"message": {"role": "assistant", "content": reply}}]}

    with LoopbackJsonServer(answer) as server:
        judge = Judge(server.url, "judge", cache_path=tmp_path / "cache.jsonl", retries=0)
        out = judge.score("q", "a")
    assert isinstance(out, RewardError) and out.kind == JUDGE_ERROR
    assert judge.cache == {} and not (tmp_path / "cache.jsonl").exists()


# ----------------------------------------------------------------------------- `rlexp eval` end to end


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["trickle", "non_http"])
def test_rlexp_eval_on_a_faulty_server_is_one_line_and_the_rerun_completes(fault, eval_experiment, capsys):
    """`rlexp eval` with engine openai: a server that trickles or is not HTTP ends the command within
    eval.timeout_s in one line (exit 2, nothing torn); the rerun, once the server answers (after
    429/500), evaluates every problem."""
    pytest.importorskip("torch")
    from rlexp.cli import main

    att = eval_experiment(sizes={"pool": 4, "ood_primary": 6, "id": 3, "sanity": 2}, steps=(2,), mid=2)
    spec = att / "attempt.yaml"
    original = spec.read_text()

    def point_at(url):
        line = (f'eval: {{engine: openai, base_url: "{url}", model: m, max_tokens: 4, prompt_suffix: "", '
                "timeout_s: 2, connect_timeout_s: 1, read_timeout_s: 1, retries: 2}")
        spec.write_text("\n".join(line if x.startswith("eval:") else x for x in original.splitlines()) + "\n")

    with FaultServer(fault) as server:
        point_at(server.url)
        started = time.monotonic()
        code = main(["eval", str(att)])
        took = time.monotonic() - started
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("rlexp")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and server.url in lines[0], err
    assert took < 30, took  # model and tokenizer loading included; a hang would be 60 s per request
    for path in (att / "eval").rglob("*.jsonl"):
        assert path.read_bytes() == b"" or path.read_bytes().endswith(b"\n")
    with FaultServer("flaky", good=_completion) as server:
        point_at(server.url)
        assert main(["eval", str(att)]) == 0
    from rlexp.experiment.records import read_records

    files = [p for p in (att / "eval").glob("*/*.jsonl") if p.parent.name != "paired"]
    assert files and all(read_records(p) for p in files)
    assert sorted(len(read_records(p)) for p in files) == sorted([6, 3, 2] * 2)


def test_the_proxy_variables_are_honoured(monkeypatch):
    """http_proxy routes a plain-HTTP call through the proxy (the whole URL as the request target), and
    no_proxy exempts a host, as urllib does."""
    from loopback_json import LoopbackJsonServer

    seen = []

    def proxy(path, body, headers):
        seen.append(path)
        return 200, {"via": "proxy"}

    with LoopbackJsonServer(proxy) as server:
        monkeypatch.setenv("http_proxy", server.url)
        monkeypatch.setenv("no_proxy", "")
        assert post_json("http://model-server.invalid:8000/v1/completions", {}, _limits()) == {"via": "proxy"}
        assert seen == ["http://model-server.invalid:8000/v1/completions"]
        monkeypatch.setenv("no_proxy", "model-server.invalid")
        with pytest.raises(HttpFailure):  # exempt: a direct connection to a host that does not exist
            post_json("http://model-server.invalid:8000/v1/completions", {}, _limits(retries=0))
    assert len(seen) == 1


@pytest.mark.slow
def test_rlexp_eval_with_a_judge_that_is_not_http_counts_judge_errors_and_the_rerun_judges(eval_experiment, capsys):
    """A judge-rewarded episode eval whose judge answers something that is not HTTP: `rlexp eval`
    completes with every judged episode a counted judge_error (no traceback, nothing cached),
    `rlexp decide` refuses to score them, and the rerun against a judge that answers (after 429/500)
    judges every episode."""
    pytest.importorskip("torch")
    from rlexp.cli import main
    from rlexp.experiment.layout import AttemptDir
    from rlexp.experiment.records import read_records

    att = eval_experiment(sizes={"pool": 2, "ood_primary": 3, "id": 2, "sanity": 1}, steps=(2,), mid=2)
    spec = att / "attempt.yaml"
    base = spec.read_text()

    def judge_at(url):
        spec.write_text(base + (
            "environment: {name: calculator, config: {max_calls: 1}, max_turns: 2, max_tokens_per_turn: 6, "
            "max_total_tokens: 12, primary_metric: mean_reward, success_threshold: 0.5,\n"
            f"  reward: {{env: 0.5, judge: 0.5}}, judge: {{base_url: '{url}', model: j, retries: 2, timeout_s: 5}}}}\n"))

    def records():
        return [r for _, _, p in AttemptDir(att).evals.record_files() for r in read_records(p)]

    with FaultServer("non_http") as server:
        judge_at(server.url)
        assert main(["eval", str(att)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert records() and all(r["reward_error"]["kind"] == JUDGE_ERROR for r in records())
    assert not (att / "eval" / "judge_cache.jsonl").exists()
    assert main(["decide", str(att)]) == 2 and "judge_error" in capsys.readouterr().err
    with FaultServer("flaky", good=_chat) as server:
        judge_at(server.url)
        assert main(["eval", str(att)]) == 0
    assert records() and not any(r.get("reward_error") for r in records())
    assert all(r["reward_parts"]["judge"] == 1.0 for r in records())


def test_a_redirect_or_a_client_error_is_final_not_retried():
    from loopback_json import LoopbackJsonServer

    for status, words in ((307, "redirected"), (401, "HTTP 401")):
        calls = []

        def answer(path, body, headers, status=status, calls=calls):
            calls.append(path)
            return status, {"error": "no"}

        with LoopbackJsonServer(answer) as server, pytest.raises(HttpFailure) as info:
            post_json(server.url + "/x", {}, _limits(retries=3))
        assert words in str(info.value) and len(calls) == 1
