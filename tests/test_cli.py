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
    from rlexp.engines.openai import ServerError

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
