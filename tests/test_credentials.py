"""Credentials only by reference: a key written into any URL or free-form part of a spec is refused
when the spec is loaded (`rlexp plan` and every command after it) in one line naming the field and
the ``*_env`` alternative; a key given by ``*_env`` reaches the server and no file — the experiment
directory, ``mlflow.db`` and the reports are grepped for it after eval, decide and report."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlexp.errors import InputError
from rlexp.spec import load_attempt

KEY = "sk-proj-T3stK3y0nlyF0rTh1sTest9"
BASE = ('id: a1\ntrainer: {name: local, version: "0.11.0"}\nrecipe: {pretrain: models/tiny-base}\n'
        "datasets:\n  ood_primary: {path: data/ood_primary.jsonl}\n")
ENV = "environment: {name: calculator, reward: {env: 0.5, judge: 0.5}, judge: {base_url: 'http://127.0.0.1:9/v1', model: j}"


def _spec(tmp_path: Path, text: str) -> Path:
    att = tmp_path / "exp" / "a1"
    att.mkdir(parents=True, exist_ok=True)
    base = BASE.replace("recipe: {pretrain: models/tiny-base}", text) if text.startswith("recipe:") else BASE + text
    (att / "attempt.yaml").write_text(base)
    return att


REFUSED = {
    "eval URL userinfo": (f'eval: {{engine: openai, base_url: "https://user:{KEY}@host/v1", model: m}}\n',
                          "eval.base_url", "eval.api_key_env"),
    "eval URL user only": ('eval: {engine: openai, base_url: "https://tok3n@host/v1", model: m}\n',
                           "eval.base_url", "eval.api_key_env"),
    "key as eval model": (f"eval: {{engine: openai, base_url: 'http://h/v1', model: '{KEY}'}}\n",
                          "eval.model", "eval.api_key_env"),
    "judge URL userinfo": (ENV.replace("http://127.0.0.1:9", f"http://u:{KEY}@127.0.0.1:9") + "}\n",
                           "environment.judge.base_url", "environment.judge.api_key_env"),
    "env config token": (ENV + ", config: {api_token: abc123secret}}\n", "environment.config.api_token", "_env"),
    "env config nested key": (ENV + f", config: {{tools: [{{headers: {{Authorization: 'Bearer {KEY}'}}}}]}}}}\n",
                              "environment.config.tools[0].headers.Authorization", "_env"),
    "env config hf token value": (ENV + ", config: {hub: hf_abcdefghijklmnopqrstuvwxyz}}\n",
                                  "environment.config.hub", "_env"),
    "env config URL": (ENV + ", config: {search_url: 'https://me:pw@search.example/q'}}\n",
                       "environment.config.search_url", "_env"),
    "recipe value": ("recipe: {pretrain: models/tiny-base, wandb_org: 'ghp_abcdefghijklmnopqrstuvwxyz0123'}",
                     "recipe.wandb_org", "environment variable"),
    "intent text": (f"intent: {{note: 'call with Bearer {KEY}'}}\n", "intent.note", "environment variable"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_key_in_a_spec_is_refused_naming_the_field_and_the_env_alternative(case, tmp_path):
    text, field, alternative = REFUSED[case]
    att = _spec(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_attempt(att)
    line = info.value.one_line()
    assert info.value.field == field and alternative in line and "\n" not in line, line
    assert not any(p.name != "attempt.yaml" for p in att.iterdir())  # nothing written


@pytest.mark.parametrize("text", [
    "eval: {engine: openai, base_url: 'http://127.0.0.1:8000/v1', model: m, api_key_env: MY_KEY}\n",
    ENV + ", config: {max_calls: 2, stop_token: '</s>', api_token_env: MY_TOKEN, max_tokens: 5}}\n",
    "intent: {note: 'sk-learn style tokens; a mail user@example.com'}\n",
])
def test_references_and_ordinary_values_are_not_credentials(text, tmp_path):
    att = _spec(tmp_path, text)
    try:
        load_attempt(att)
    except InputError as exc:  # the spec may fail later checks, never as a credential
        assert "credential" not in exc.one_line(), exc.one_line()


def test_the_cli_refuses_at_plan_in_one_line(tmp_path, capsys):
    from rlexp.cli import main

    att = _spec(tmp_path, REFUSED["eval URL userinfo"][0])
    assert main(["plan", str(att)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "eval.base_url" in err and "api_key_env" in err and KEY not in err
    assert not (att / "plan.json").exists()


@pytest.mark.slow
def test_a_key_given_by_env_reaches_the_judge_and_no_file(eval_experiment, monkeypatch, tmp_path):
    """eval (judge-rewarded episodes) → decide → report with MLflow on: the key is in every request's
    Authorization header and nowhere under the experiment, in mlflow.db or in the reports."""
    pytest.importorskip("torch")
    from loopback_json import LoopbackJsonServer

    from rlexp.cli import main

    monkeypatch.setenv("RLEXP_TEST_JUDGE_KEY", KEY)
    seen = []

    def answer(path, body, headers):
        seen.append(headers.get("Authorization"))
        return 200, {"choices": [{"message": {"role": "assistant", "content": "yes"}}]}

    with LoopbackJsonServer(answer) as server:
        att = eval_experiment(sizes={"pool": 4, "ood_primary": 6, "id": 3, "sanity": 2})
        spec = att / "attempt.yaml"
        spec.write_text(spec.read_text() + (
            "environment: {name: calculator, config: {max_calls: 1}, max_turns: 2, max_tokens_per_turn: 6, "
            "max_total_tokens: 12, primary_metric: mean_reward, success_threshold: 0.5,\n"
            f"  reward: {{env: 0.5, judge: 0.5}}, judge: {{base_url: '{server.url}', model: j, "
            "api_key_env: RLEXP_TEST_JUDGE_KEY, retries: 0}}\n"))
        exp = att.parent
        reports = tmp_path / "reports"
        store = tmp_path / "mlflow.db"
        assert main(["plan", str(att)]) in (0, 1)
        assert main(["eval", str(att)]) == 0
        main(["decide", str(att)])  # the verdict does not matter here, only what is written
        assert main(["report", str(att), "--reports-dir", str(reports), "--tracking-uri", f"sqlite:///{store}"]) == 0
    assert seen and all(h == f"Bearer {KEY}" for h in seen)
    assert store.exists() and any(reports.rglob("*.md"))
    leaks = [str(p) for root in (exp, reports, store) for p in ([root] if root.is_file() else root.rglob("*"))
             if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaks == []
    assert os.environ["RLEXP_TEST_JUDGE_KEY"] == KEY


def test_a_key_in_a_dataset_rows_config_is_refused():
    from rlexp.environments.interface import parse_rows

    rows = [{"env": "calculator", "config": {"max_calls": 1}, "task": {"prompt": "1+1="}},
            {"env": "calculator", "config": {"auth": {"api_key": "abc123"}}, "task": {"prompt": "2+2="}}]
    with pytest.raises(InputError) as info:
        parse_rows(rows, "data/pool.jsonl")
    assert info.value.field == "row 1: config.auth.api_key" and "_env" in info.value.one_line()
    assert len(parse_rows(rows[:1], "data/pool.jsonl")) == 1
