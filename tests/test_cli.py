"""The CLI's error contract: bad input and failing services are one line on stderr, exit 2."""

import pytest

from rlexp.cli import main


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    assert "plan" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error(capsys):
    assert main(["plan", "--no-such-option"]) == 2


def test_a_failing_eval_server_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    import rlexp.stages.evaluate
    from rlexp.evaluation.engines.openai import ServerError

    def failing(*args, **kwargs):
        raise ServerError("http://127.0.0.1:9/v1/completions: HTTP 401:\n unauthorized")

    monkeypatch.setattr(rlexp.stages.evaluate, "evaluate", failing)
    assert main(["eval", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 401" in err and err.startswith("rlexp: ")


@pytest.mark.parametrize("argv", [["plan", "/no/such/attempt"], ["decide", "/no/such/attempt"],
                                  ["compare", "/no/a.jsonl", "/no/b.jsonl"]])
def test_missing_files_are_one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/no/" in err


def test_a_missing_file_of_the_layout_names_the_command_that_writes_it(tmp_path, capsys):
    from rlexp.experiment.layout import producer_of

    attempt = tmp_path / "exp" / "a1"
    assert producer_of(attempt / "plan.json") == "rlexp plan"
    assert producer_of(attempt / "eval" / "selection.json") == "rlexp eval"
    assert producer_of(attempt / "eval" / "baseline_s0" / "ood_primary.jsonl") == "rlexp eval"
    assert producer_of(attempt / "guards" / "g2.json") == "rlexp guard g2"
    assert producer_of(attempt / "decision.json") == "rlexp decide"
    assert producer_of(tmp_path / "somewhere" / "notes.txt") is None
    # through the CLI: the audit draw needs the K=3 selection that `rlexp eval` writes
    attempt.mkdir(parents=True)
    (attempt / "attempt.yaml").write_text("id: a1\ntrainer: {name: local, version: '0.11.0', gpus: 0}\n")
    assert main(["guard", "audit", str(attempt), "--draw"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "selection.json" in err and "(run `rlexp eval` first)" in err
