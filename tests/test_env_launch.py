"""Environment tasks in the protocol: the spec's ``environment:`` section, and ``rlexp launch
--backend local`` training one through the local trainer (episodes, the agent mask, GRPO/GSPO),
its episode metrics reaching metrics.jsonl and MLflow."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_tracking import migrated_db, sqlite_uri  # noqa: F401 (fixtures)

from rlexp.errors import InputError
from rlexp.spec import EnvironmentSettings, load_attempt

REPO = Path(__file__).resolve().parents[1]

SPEC = """\
id: {id}
trainer: {{name: local}}
recipe:
  pretrain: models/tiny-base
  advantage_estimator: group_norm
  n_samples_per_prompt: 4
  rollout_batch_size: 4
  train_batch_size: 8
  micro_train_batch_size: 8
  actor_learning_rate: 1.0e-3
  lora_rank: 4
  lora_alpha: 8
  target_modules: [q_proj, v_proj]
  temperature: 1.0
  generate_max_len: 8
  eval_steps: 2
  save_steps: 2
  seed: 7
intent: {{global_steps: 2}}
datasets:
  pool: {{path: data/pool_16.jsonl, size: 16}}
  ood_monitor: {{path: data/ood_monitor_8.jsonl, size: 8}}
  ood_primary: {{path: data/ood_primary_12.jsonl, size: 12}}
  id: {{path: data/id_8.jsonl, size: 8}}
  sanity: {{path: data/sanity_18.jsonl, size: 18}}
eval: {{engine: local, max_tokens: 8}}
{environment}"""

ENVIRONMENT = """\
environment:
  name: calculator
  config: {max_calls: 1}
  max_turns: 2
  max_tokens_per_turn: 8
  max_total_tokens: 16
  loss: gspo
  gspo_eps_low: 0.001
  gspo_eps_high: 0.002
  primary_metric: success
"""

EPISODE_METRICS = ("turns_per_episode", "tool_calls_per_episode", "env_errors", "agent_token_fraction",
                   "env_latency_s")


def write_attempt(root: Path, attempt_id: str, environment: str = ENVIRONMENT) -> Path:
    d = root / attempt_id
    d.mkdir()
    (d / "attempt.yaml").write_text(SPEC.format(id=attempt_id, environment=environment))
    return d


# ----------------------------------------------------------------------------------- the spec


def test_spec_without_environment_has_none(tmp_path):
    att = load_attempt(write_attempt(tmp_path, "a1", environment=""))
    assert att.environment is None


def test_spec_environment_section_resolves_with_defaults(tmp_path):
    att = load_attempt(write_attempt(tmp_path, "a1", environment="environment: {name: calculator}\n"))
    assert att.environment == EnvironmentSettings(name="calculator")
    assert (att.environment.max_turns, att.environment.loss, att.environment.primary_metric) == (4, "grpo", "success")
    full = load_attempt(write_attempt(tmp_path, "a2"))
    assert full.environment.config == {"max_calls": 1} and full.environment.loss == "gspo"
    assert (full.environment.gspo_eps_low, full.environment.gspo_eps_high) == (0.001, 0.002)


def test_child_inherits_and_overrides_the_environment(tmp_path):
    write_attempt(tmp_path, "a1")
    child = tmp_path / "a2"
    child.mkdir()
    (child / "attempt.yaml").write_text("parent: a1\nchange: {seed: 8}\nrecipe: {seed: 8}\n"
                                        "environment: {loss: grpo, primary_metric: mean_reward}\n")
    att = load_attempt(child)
    assert (att.environment.name, att.environment.loss, att.environment.primary_metric) == \
        ("calculator", "grpo", "mean_reward")
    assert att.environment.max_turns == 2


@pytest.mark.parametrize(("section", "field"), [
    ("environment: {loss: ppo}", "environment.loss"),
    ("environment: {max_turns: 0}", "environment.max_turns"),
    ("environment: {primary_metric: accuracy}", "environment.primary_metric"),
    ("environment: {advantage_mode: dense}", "environment.advantage_mode"),
    ("environment: {gspo_eps_low: -1}", "environment.gspo_eps_low"),
    ("environment: {config: 3}", "environment.config"),
    ("environment: {max_turn: 3}", "environment.max_turn"),
    ("environment: {max_tokens_per_turn: 64, max_total_tokens: 32}", "environment.max_tokens_per_turn"),
])
def test_bad_environment_is_one_line_naming_file_and_field(tmp_path, section, field):
    d = write_attempt(tmp_path, "a1", environment=section + "\n")
    with pytest.raises(InputError) as info:
        load_attempt(d)
    line = info.value.one_line()
    assert "\n" not in line and str(d / "attempt.yaml") in line and f": {field}: " in line


def test_cli_plan_exits_2_on_a_bad_environment(tmp_path, capsys):
    from rlexp.cli import main

    d = write_attempt(tmp_path, "a1", environment="environment: {loss: ppo}\n")
    assert main(["plan", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "environment.loss" in err[0]


# ----------------------------------------------------------------------------------- launch


def test_a_row_naming_another_environment_is_refused_by_the_generated_adapters(tmp_path):
    """The agent adapters OpenRLHF and verl are given play the attempt's one environment: a pool row
    naming another one (or another config) is refused naming file and line, never played wrongly."""
    from rlexp.trainers.launch import check_one_environment

    d = write_attempt(tmp_path, "a1")
    (tmp_path / "data").mkdir()
    rows = [{"prompt": "1+1", "answer": "2", "env": "calculator", "config": {"max_calls": 1}},
            {"prompt": "2+2", "answer": "4", "env": "calculator", "config": {"max_calls": 3}}]
    pool = tmp_path / "data" / "pool_16.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    att = load_attempt(d)
    with pytest.raises(InputError) as err:
        check_one_environment(att)
    assert (err.value.file, err.value.field) == (str(pool), "line 2: env")
    assert "on local every row plays the attempt's environment.name 'calculator'" in err.value.message
    pool.write_text(json.dumps(rows[0]) + "\n")
    check_one_environment(att)  # the attempt's own environment and config: played


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    pytest.importorskip("torch")
    from rlexp.experiment.datasets import build_task_datasets
    from rlexp.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("envexp")
    build_task_datasets(root / "data", seed=0, pool_size=16, monitor_size=8, primary_size=12, id_size=8)
    # two environment classes in one file: every other pool row plays the one-step exact-match task
    pool = root / "data" / "pool_16.jsonl"
    rows = [json.loads(line) for line in pool.read_text().splitlines()]
    for i, row in enumerate(rows):
        if i % 2:
            row["env"] = "exact_match"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_tiny_model(root / "models" / "tiny-base", seed=0)
    return root


def test_launch_local_trains_an_environment_task(experiment, monkeypatch, capsys, sqlite_uri):  # noqa: F811
    from rlexp.cli import main
    from rlexp.training.metrics_file import read_metrics

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("RLEXP_TORCH_THREADS", "1")
    att = write_attempt(experiment, "env1")
    code = main(["launch", str(att), "--backend", "local", "--tracking-uri", sqlite_uri, "--json",
                 "--poll-s", "0.1", "--force", "--reason", "tiny test run"])
    out = capsys.readouterr()
    assert code == 0, out.err + (att / "launch" / "stdout.log").read_text()
    assert json.loads(out.out)["state"] == "finished"
    rows = read_metrics(att / "metrics.jsonl")
    assert [r["global_step"] for r in rows] == [1, 2]
    for row in rows:
        for name in EPISODE_METRICS:
            assert name in row, name
        assert 1.0 <= row["turns_per_episode"] <= 2.0  # max_turns 2
        assert 0.0 < row["agent_token_fraction"] <= 1.0
        assert row["env_errors"] == 0.0
    assert "monitor_acc" in rows[1]  # eval_steps 2: greedy episodes on the monitor set
    assert (att / "checkpoints" / "global_step2_hf").is_dir()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(sqlite_uri)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment.name).experiment_id])
    for name in EPISODE_METRICS:
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [1, 2], name


def test_unknown_environment_name_stops_the_trainer_with_one_line(experiment, tmp_path):
    import subprocess
    import sys

    att = write_attempt(experiment, "env_bad", environment="environment: {name: no_such_env}\n")
    proc = subprocess.run([sys.executable, "-m", "rlexp.backends.env_trainer", str(att)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO), "RLEXP_TORCH_THREADS": "1"},
                          timeout=120)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "environment.name" in line and "no_such_env" in line


def test_dry_run_picks_the_entry_point_by_environment(experiment, capsys):
    import sys

    from rlexp.cli import main

    for attempt_id, environment, module in [("dry_env", ENVIRONMENT, "rlexp.backends.env_trainer"),
                                            ("dry_plain", "", "rlexp.backends.local_trainer")]:
        att = write_attempt(experiment, attempt_id, environment=environment)
        assert main(["launch", str(att), "--dry-run", "--json", "--force", "--reason", "test"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["argv"] == [sys.executable, "-m", module, str(att)]
