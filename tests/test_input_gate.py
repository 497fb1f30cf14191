"""The input gate: every class of unusable input is one line naming file and field, exit 2, and
nothing written (issue: "every input class refused in one line").

Each case here gave a traceback, a MemoryError, minutes of work or a silent acceptance before the
gate: the comment on each says what the old code did.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from input_fixture import build_experiment

from rlexp.cli import main


@pytest.fixture(scope="module")
def base_experiment(tmp_path_factory, tiny_base_model):
    """The experiment of tests/input_fixture.py, built once (plan, guard g2 and decide run on it)."""
    return build_experiment(tmp_path_factory.mktemp("gate"), tiny_base_model)


@pytest.fixture
def exp(base_experiment, tmp_path):
    """A private copy of the experiment for one test (mutations never leak into another)."""
    copy = tmp_path / "exp"
    shutil.copytree(base_experiment, copy, symlinks=True)
    return copy


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below ``root`` with its SHA-256 (directories by their file lists); the model-hash
    cache and eval lock included: a refusal writes neither."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def refused(argv: list[str], capsys, root: Path, *expected: str) -> str:
    """Run ``rlexp argv``: exit 2, one line on stderr containing ``expected``, nothing written."""
    before = tree_digest(root)
    capsys.readouterr()
    code = main(argv)
    # transformers draws a progress bar on stderr while it loads the model (guard g2)
    err = "".join(line.rsplit("\r", 1)[-1] for line in capsys.readouterr().err.splitlines(keepends=True)
                  if "Loading weights" not in line.rsplit("\r", 1)[-1])
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rlexp: "), err
    for text in expected:
        assert text in err, err
    assert tree_digest(root) == before
    return err


def report_argv(exp: Path) -> list[str]:
    return ["report", str(exp / "a2"), "--reports-dir", str(exp.parent / "reports"),
            "--tracking-uri", f"sqlite:///{exp.parent / 'mlflow.db'}"]


SPEC_HEAD = "id: a2\nparent: a1\n"


# --------------------------------------------------------------------------- encoding

@pytest.mark.parametrize(("rel", "verb"), [
    ("a2/attempt.yaml", "plan"),                           # old: UnicodeDecodeError traceback
    ("a2/eval/global_step2/ood_primary.jsonl", "decide"),  # old: UnicodeDecodeError traceback
    ("a2/metrics.jsonl", "decide"),                        # old: UnicodeDecodeError traceback
    ("a2/launch/state.json", "status"),                    # old: the codec's message, no line
])
def test_non_utf8_bytes_name_the_file_and_line(exp, capsys, rel, verb):
    path = exp / rel
    path.write_bytes(path.read_bytes().replace(b"a", b"\xff", 1) if path.suffix != ".yaml"
                     else SPEC_HEAD.encode() + b"description: caf\xe9\n")
    target = str(exp) if verb == "status" else str(exp / "a2")
    refused([verb, target], capsys, exp, rel.rsplit("/", 1)[-1], "not UTF-8")


def test_non_utf8_record_file_in_compare(exp, capsys):
    base = exp / "a2/eval/baseline_s0/ood_primary.jsonl"
    new = exp / "a2/eval/global_step2/ood_primary.jsonl"
    new.write_bytes(b"\xfe" + new.read_bytes())  # old: UnicodeDecodeError traceback
    refused(["compare", str(base), str(new)], capsys, exp, "ood_primary.jsonl: line 1", "not UTF-8")


# --------------------------------------------------------------------------- types

@pytest.mark.parametrize(("rel", "text", "verb", "field"), [
    ("a2/launch/state.json", "[1]", "report", "expected a JSON object"),        # old: AttributeError
    ("a2/launch/state.json", '"x"', "report", "expected a JSON object"),        # old: AttributeError
    ("a2/launch/provenance.json", "[1]", "report", "expected a JSON object"),   # old: AttributeError
    ("a2/launch/argv.json", "[1]", "report", "expected a JSON object"),
    ("a2/eval/selection.json", "[1]", "decide", "expected a JSON object"),
    ("a2/launch/state.json", '{"state": 5}', "status", "state: must be a string"),    # old: accepted
    ("a2/launch/state.json", '{"state": "running", "pid": "12"}', "status", "pid: must be an integer"),
    ("a2/eval/selection.json", '{"final": "2"}', "decide", "final: must be an integer"),
    ("a2/launch/provenance.json", '{"datasets": [1]}', "report", "datasets: must be an object"),
])
def test_wrong_json_types_are_refused_by_the_readers(exp, capsys, rel, text, verb, field):
    (exp / rel).write_text(text)
    argv = report_argv(exp) if verb == "report" else [verb, str(exp if verb == "status" else exp / "a2")]
    refused(argv, capsys, exp, rel.rsplit("/", 1)[-1], field)


def test_non_string_keys_in_a_spec(exp, capsys):
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "change: {1: 2}\n")  # old: TypeError traceback
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml: change.1: keys must be strings")
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "recipe: {1: 2}\n")
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml: recipe.1: keys must be strings")


# --------------------------------------------------------------------------- NUL bytes, directories

def test_nul_byte_in_a_path(exp, capsys):
    # old: click's multi-line usage error (argument) / ValueError traceback (spec path)
    refused(["plan", str(exp / "a2") + "\0x"], capsys, exp, "argument 2: a NUL byte")
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + 'datasets: {pool: {path: "data/po\\0ol.jsonl"}}\n')
    refused(["plan", str(exp / "a2")], capsys, exp, "datasets.pool.path: a NUL byte in the path")


@pytest.mark.parametrize(("rel", "verb"), [
    ("a2/eval/global_step2/ood_primary.jsonl", "decide"),  # old: IsADirectoryError traceback
    ("a2/launch/state.json", "status"),                    # old: IsADirectoryError traceback
    ("a2/metrics.jsonl", "report"),                        # old: IsADirectoryError traceback
    ("ledger.jsonl", "decide"),                            # old: IsADirectoryError traceback
    ("a2/eval/baseline_s0/ood_primary.jsonl", "g2"),       # found by the fuzz test: IsADirectoryError
])
def test_a_directory_where_a_file_should_be(exp, capsys, rel, verb):
    os.unlink(exp / rel)
    (exp / rel).mkdir()
    argv = report_argv(exp) if verb == "report" else ["guard", "g2", str(exp / "a2")] if verb == "g2" else \
        [verb, str(exp if verb == "status" else exp / "a2")]
    refused(argv, capsys, exp, rel.rsplit("/", 1)[-1], "is a directory, expected a file")


# --------------------------------------------------------------------------- nesting, size

def test_deep_nesting_is_refused_without_recursion_error(exp, capsys):
    depth = 5000  # old: RecursionError traceback for each
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "intent: " + "[" * depth + "]" * depth + "\n")
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml", "nested deeper than the limit of 64")
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "change: {eps_clip: 0.1}\nrecipe: {eps_clip: 0.1}\n")
    (exp / "a2/metrics.jsonl").write_text('{"global_step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused(["decide", str(exp / "a2")], capsys, exp, "metrics.jsonl: line 1", "nested deeper than the limit of 64")
    (exp / "a2/metrics.jsonl").write_text('{"global_step": 1}\n')
    (exp / "a2/launch/state.json").write_text('{"state": "finished", "x": ' + "{\"a\": " * 70 + "1" + "}" * 70 + "}")
    refused(["status", str(exp)], capsys, exp, "state.json", "nested deeper than the limit of 64")


def test_a_file_over_the_size_limit(exp, capsys, monkeypatch):
    import rlexp.experiment.files as files

    monkeypatch.setattr(files, "MAX_DOCUMENT_BYTES", 1000)  # the real limit is 64 MiB; the rule is the same
    (exp / "a2/launch/state.json").write_text(json.dumps({"state": "finished", "reason": "x" * 2000}))
    refused(["status", str(exp)], capsys, exp, "state.json", "larger than the limit of 1000 bytes")


# --------------------------------------------------------------------------- YAML aliases, duplicates

BILLION_LAUGHS = (SPEC_HEAD + 'description: &a ["x","x","x","x","x","x","x","x","x"]\n'
                  + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)))


def test_billion_laughs_is_refused_fast(exp, capsys):
    assert len(BILLION_LAUGHS.encode()) < 600
    (exp / "a2/attempt.yaml").write_text(BILLION_LAUGHS)
    start = time.perf_counter()  # old: ran past 120 s, then MemoryError
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml: line 4", "aliases (*a) are not allowed")
    assert time.perf_counter() - start < 5


def test_duplicate_yaml_keys_are_refused(exp, capsys):
    # old: accepted silently, the last value won (eps_clip 0.3)
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "recipe: {eps_clip: 0.1}\nrecipe: {eps_clip: 0.3}\n")
    refused(["plan", str(exp / "a2")], capsys, exp, "attempt.yaml: line 4", "duplicate key 'recipe'")
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + "recipe: {eps_clip: 0.1, eps_clip: 0.3}\n")
    refused(["plan", str(exp / "a2")], capsys, exp, "duplicate key 'eps_clip'")


# --------------------------------------------------------------------------- numbers and their bounds

def test_non_finite_and_huge_metrics_steps(exp, capsys):
    (exp / "a2/metrics.jsonl").write_text('{"global_step": 1e999, "reward": 1}\n')
    # old: decide accepted it; status died with OverflowError
    refused(["decide", str(exp / "a2")], capsys, exp, "metrics.jsonl: line 1: global_step",
            "1e999 is not a finite number")
    capsys.readouterr()
    assert main(["status", str(exp)]) == 0  # status reads a live file leniently: the line is skipped
    (exp / "a2/metrics.jsonl").write_text('{"global_step": 100000000000, "reward": 1}\n')
    refused(["decide", str(exp / "a2")], capsys, exp, "global_step", "from 0 to 10000000")


@pytest.mark.parametrize(("stated", "field", "message"), [
    ("recipe: {num_episodes: 1000000000000}", "recipe.num_episodes", "at most 1000000000"),  # old: MemoryError
    ("recipe: {num_episodes: 100000000}", "recipe.num_episodes", "over the limit of 1000000"),
    ("datasets: {pool: {path: data/other.jsonl, size: 1000000000000000}}", "datasets.pool.size",
     "at most 1000000000"),                                                    # old: plan ran for minutes
    ("recipe: {actor_learning_rate: 1.0e+30}", "recipe.actor_learning_rate", "at most 1e+12"),
])
def test_spec_numbers_are_bounded_with_the_bound_named(exp, capsys, stated, field, message):
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + stated + "\n")
    start = time.perf_counter()
    refused(["plan", str(exp / "a2")], capsys, exp, f"attempt.yaml: {field}", message)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(("stated", "field", "message"), [
    # each was accepted without a word: numpy refuses a negative seed only when the trainer starts
    ("recipe: {seed: -1}", "recipe.seed", "must be >= 0"),
    ("eval: {seed: -3}", "eval.seed", "must be >= 0"),
    # an empty target_modules reached peft as "no module" (or as a regex matching nothing)
    ("recipe: {target_modules: ''}", "recipe.target_modules", "must not be empty"),
    ("recipe: {target_modules: []}", "recipe.target_modules", "at least one module"),
    ("recipe: {target_modules: [q_proj, '']}", "recipe.target_modules", "an empty module name"),
    ("recipe: {target_modules: [q_proj, v_proj, q_proj]}", "recipe.target_modules", "q_proj more than once"),
    # a repeated extra checkpoint was evaluated twice under one name
    ("checkpoints: {extra: [2, 2]}", "checkpoints.extra", "2 given more than once"),
])
def test_spec_values_the_trainer_would_refuse_later(exp, capsys, stated, field, message):
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + stated + "\n")
    refused(["plan", str(exp / "a2")], capsys, exp, f"attempt.yaml: {field}", message)


def test_a_sqlite_store_in_a_missing_directory_is_refused(exp, capsys):
    # old: the directories were made and a new, empty store started beside the real one
    missing = exp.parent / "no-such-dir" / "mlflow.db"
    refused(["report", str(exp / "a2"), "--tracking-uri", f"sqlite:///{missing}"], capsys, exp,
            "--tracking-uri", "no such directory")
    assert not missing.parent.exists()


def test_option_bounds(exp, capsys):
    base = str(exp / "a2/eval/baseline_s0/ood_primary.jsonl")
    new = str(exp / "a2/eval/global_step2/ood_primary.jsonl")
    # old: a 14.9 GiB allocation
    refused(["compare", base, new, "--resamples", "2000000000"], capsys, exp, "--resamples", "1000000")
    refused(["sop", "calibrate", "--sims", "2000000000"], capsys, exp, "--sims", "1000000")
    refused(["sop", "calibrate", "--sims", "100000", "--n", "100000"], capsys, exp, "--sims",
            "over the limit of 1000000000")


# --------------------------------------------------------------------------- dataset paths

@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_dataset_paths_are_confined_to_the_experiment(exp, capsys, how):
    outside = exp.parent / "elsewhere" / "pool.jsonl"
    outside.parent.mkdir()
    shutil.copy(exp / "data/pool.jsonl", outside)
    path = str(outside) if how == "absolute" else "../elsewhere/pool.jsonl"
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + f"datasets: {{pool: {{path: {path}}}}}\n")
    # old: accepted silently
    refused(["plan", str(exp / "a2")], capsys, exp, "datasets.pool.path", "outside the experiment directory",
            "datasets.pool.allow_outside: true")
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + f"datasets: {{pool: {{path: {path}, allow_outside: true}}}}\n")
    capsys.readouterr()
    assert main(["plan", str(exp / "a2")]) in (0, 1), capsys.readouterr().err


def test_a_false_problem_hash_in_the_pool_is_caught_by_plan(exp, capsys):
    eval_problem = json.loads((exp / "data/ood_primary.jsonl").read_text().splitlines()[0])
    with open(exp / "data/pool.jsonl", "a") as fh:  # an eval problem under a made-up hash
        fh.write(json.dumps({**eval_problem, "problem_hash": "0" * 64}) + "\n")
    # old: plan passed (exit 0); only the trainer and G0 noticed later
    refused(["plan", str(exp / "a2")], capsys, exp, "pool.jsonl: line 9: problem_hash",
            "is not sha256(prompt.strip())")


# --------------------------------------------------------------------------- secrets

@pytest.mark.parametrize("stated", [
    "recipe: {use_wandb: 0123456789abcdef0123456789abcdef01234567}",  # old: reached plan.json and the report
    "change: {use_wandb: 0123456789abcdef}\nrecipe: {use_wandb: 0123456789abcdef}",
])
def test_a_credential_in_a_spec_is_refused(exp, capsys, stated):
    (exp / "a2/attempt.yaml").write_text(SPEC_HEAD + stated + "\n")
    err = refused(["plan", str(exp / "a2")], capsys, exp, "use_wandb", "environment variable")
    assert "0123456789abcdef" not in err


def test_credential_keys_are_whole_words():
    from rlexp.spec import is_credential_key

    for key in ("use_wandb", "wandb_key", "hf_token", "wandb_api_key", "api_key", "openai_apikey", "db_password",
                "client_secret", "logger.wandb.key"):
        assert is_credential_key(key), key
    for key in ("rollout_max_tokens_per_gpu", "disable_fast_tokenizer", "input_key", "label_key", "max_tokens"):
        assert not is_credential_key(key), key


def test_the_valid_experiment_still_runs(exp, capsys):
    """The gate refuses only bad input: every verb the fuzz test runs succeeds on the fixture."""
    a2 = str(exp / "a2")
    for argv in (["plan", a2], ["status", str(exp)], ["decide", a2], report_argv(exp),
                 ["compare", f"{a2}/eval/baseline_s0/ood_primary.jsonl", f"{a2}/eval/global_step2/ood_primary.jsonl"]):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
