"""The SOP file: its numbers are the ones sop/README.md states, it is validated strictly, decisions can cite it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import yaml

from rlexp.cli import main
from rlexp.errors import InputError
from rlexp.spec.sop import DEFAULT_SOP, load_sop


def test_default_sop_has_the_documented_numbers():
    sop = load_sop()
    assert sop.version == "v2.1-final"
    assert sop.sha256 == hashlib.sha256(DEFAULT_SOP.read_bytes()).hexdigest()
    # sop/README.md, "The rules": Gate-1a, Gate-1b, Gate-2 and the ID guardrail, STOP-3a and the gray zone,
    # early stop in the run, K=3 checkpoint selection, parser audit
    assert (sop.gate_1a.min_delta_pp, sop.gate_1a.max_mcnemar_p, sop.gate_1a.min_ci_low_pp) == (2.0, 0.10, -0.5)
    assert (sop.gate_1b.min_delta_pp, sop.gate_1b.max_mcnemar_p, sop.gate_1b.min_ci_low_pp) == (3.0, 0.05, 0.0)
    assert (sop.gate_2.min_mean_delta_pp, sop.gate_2.gold_mean_delta_pp, sop.gate_2.min_seeds) == (3.0, 4.0, 2)
    assert (sop.id_guardrail.min_delta_pp, sop.id_guardrail.relaxed_min_delta_pp,
            sop.id_guardrail.relaxed_when_mean_ood_delta_pp) == (-3.0, -5.0, 6.0)
    assert (sop.stop_3.max_delta_pp, sop.stop_3.gray_zone_low_pp, sop.stop_3.gray_zone_high_pp) == (1.0, 1.0, 3.0)
    assert (sop.early_stop.smoothing_window, sop.early_stop.patience_evals,
            sop.early_stop.min_improvement_pp) == (3, 5, 1.0)
    assert sop.checkpoints.k == 3 and sop.parser_audit.max_misparse_rate == 0.05


def test_default_sop_has_the_documented_guardrail_numbers():
    g = load_sop().guardrails
    # sop/README.md, "Guardrails": the table
    assert g.g0.samples == 5 and g.g1.max_discordant == 0
    assert (g.g2.problems, g.g2.min_boxed, g.g2.max_fail, g.g2.max_truncation) == (200, 0.98, 0.0, 0.05)
    assert (g.g4.k, g.g4.temperature, g.g4.min_pass_at_k) == (8, 0.6, 0.15)
    # G3 smoke over steps 1..10, G5 at step 10
    assert g.g3.smoke_steps == 10 and g.g5.at_step == 10
    # the spike log fires on grad norm > 50
    assert g.spikes.grad_norm == 50.0
    # our readings of "stable step time", "LR ~ 100% target", "reward neither ~0 nor ~1"
    assert g.g3.step_time_max_ratio == 2.0 and g.g5.lr_rel_tolerance == 0.10
    assert (g.g5.reward_stuck_low, g.g5.reward_stuck_high) == (0.02, 0.98)
    # sop/README.md, "Parser audit": 50 incorrect cases, > 5% mis-parsed blocks
    assert load_sop().parser_audit.sample_size == 50


def test_power_default_threshold_is_the_sops_gate_1b_bar():
    from rlexp.stats import WIN_THRESHOLD_PP

    assert load_sop().gate_1b.min_delta_pp == WIN_THRESHOLD_PP


def test_guardrail_modules_import_without_pydantic():
    code = ("import sys, rlexp.training.monitor, rlexp.stages.guard; from rlexp.stats import paired_test, power_report; "
            "print(sorted(m for m in ('pydantic', 'rlexp.spec.sop') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def edited(tmp_path, change) -> str:
    data = yaml.safe_load(DEFAULT_SOP.read_text())
    change(data)
    path = tmp_path / "sop.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["gate_1a"].update(min_delta_pp="2.0"), "gate_1a.min_delta_pp"),
    (lambda d: d["gate_1b"].update(typo=1), "gate_1b.typo"),
    (lambda d: d.update(extra_section={}), "extra_section"),
    (lambda d: d["gate_2"].pop("min_mean_delta_pp"), "gate_2.min_mean_delta_pp"),
    (lambda d: d["early_stop"].update(patience_evals=5.5), "early_stop.patience_evals"),
    (lambda d: d["gate_1b"].update(min_delta_pp=float("nan")), "gate_1b.min_delta_pp"),
    (lambda d: d["checkpoints"].update(decide_on="max"), "checkpoints.decide_on"),
    (lambda d: d["stop_3"].update(gray_zone_low_pp=4.0), "stop_3.gray_zone_low_pp"),
    (lambda d: d["gate_1a"].update(max_mcnemar_p=1.5), "gate_1a.max_mcnemar_p"),
    (lambda d: d.update(sha256="abc"), "sha256"),
    (lambda d: d["guardrails"]["g2"].update(min_boxed="0.98"), "guardrails.g2.min_boxed"),
    (lambda d: d["guardrails"]["g4"].update(typo=1), "guardrails.g4.typo"),
    (lambda d: d["guardrails"].update(g6={}), "guardrails.g6"),
    (lambda d: d["guardrails"].pop("g3"), "guardrails.g3"),
    (lambda d: d["guardrails"]["g4"].update(temperature=float("nan")), "guardrails.g4.temperature"),
    (lambda d: d["guardrails"]["spikes"].update(grad_norm=float("inf")), "guardrails.spikes.grad_norm"),
    (lambda d: d["guardrails"]["g4"].update(k=True), "guardrails.g4.k"),
    (lambda d: d["guardrails"]["g3"].update(smoke_steps=10.0), "guardrails.g3.smoke_steps"),
    (lambda d: d["guardrails"]["g2"].update(min_boxed=98.0), "guardrails.g2.min_boxed"),
    (lambda d: d["guardrails"]["g4"].update(temperature=0.0), "guardrails.g4.temperature"),
    (lambda d: d["guardrails"]["g5"].update(reward_stuck_low=0.99), "guardrails.g5.reward_stuck_low"),
    (lambda d: d["guardrails"]["g0"].update(samples=0), "guardrails.g0.samples"),
    (lambda d: d["parser_audit"].update(sample_size=0), "parser_audit.sample_size"),
    (lambda d: d.pop("guardrails"), "guardrails"),
])
def test_bad_sop_files_name_file_and_field(tmp_path, change, field):
    path = edited(tmp_path, change)
    with pytest.raises(InputError) as err:
        load_sop(path)
    assert err.value.file == path
    assert err.value.field == field
    assert "\n" not in err.value.one_line()


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [unclosed\n")
    with pytest.raises(InputError, match="malformed YAML"):
        load_sop(bad)
    with pytest.raises(InputError, match="not found"):
        load_sop(tmp_path / "none.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    with pytest.raises(InputError, match="mapping"):
        load_sop(listed)


def test_a_new_version_has_a_new_hash(tmp_path):
    path = edited(tmp_path, lambda d: d.update(version="v2.2") or d["gate_1b"].update(min_delta_pp=2.5))
    sop = load_sop(path)
    assert sop.version == "v2.2" and sop.gate_1b.min_delta_pp == 2.5
    assert sop.sha256 != load_sop().sha256


def test_cli_sop_show(capsys, tmp_path):
    assert main(["sop", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == "v2.1-final" and shown["gate_1b"]["min_delta_pp"] == 3.0
    assert shown["guardrails"]["g2"]["min_boxed"] == 0.98
    assert main(["sop", "show"]) == 0
    out = capsys.readouterr().out
    assert "v2.1-final" in out and "g2.min_boxed" in out
    bad = edited(tmp_path, lambda d: d["gate_1a"].update(oops=1))
    assert main(["sop", "show", "--sop", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gate_1a.oops" in err


def test_sop_show_renders_each_rule_as_its_sentence(capsys):
    from rlexp.cli import main

    assert main(["sop", "show"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    # SOP v2.1-final's thresholds, joined by the rules' AND/OR
    assert "Gate-1a: OOD delta >= +2.0pp AND (McNemar exact p < 0.1 OR bootstrap CI low > -0.5pp)" in out
    assert "Gate-1b: OOD delta >= +3.0pp AND McNemar exact p < 0.05 AND" in out
    assert "mis-parse rate <= 5% of 50 drawn cases, else DEBUG" in out
