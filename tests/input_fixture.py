"""A small but complete experiment for the input-gate tests: every file kind rlexp reads.

Built from files written here plus `rlexp plan`/`rlexp guard g2`/`rlexp decide` on the tiny model,
so each verb the fuzz test runs (plan, status, compare, decide, report, guard g0, guard g2) has
real inputs: datasets with true problem hashes, two attempts (root and child), plan.json,
metrics.jsonl, launch/{state,provenance,argv}.json, eval records with metadata, selection.json,
guard verdicts, the ledger and the SOTA pin.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path


def _jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_experiment(root: Path, tiny_base_model: Path) -> Path:
    """``root/exp`` with attempts a1 (root) and a2 (child); returns the experiment directory."""
    exp = root / "exp"
    shutil.copytree(tiny_base_model, exp / "models" / "tiny-base")
    sizes = {"pool": 8, "ood_monitor": 4, "ood_primary": 10, "id": 6, "sanity": 3}
    offset = 0
    for role, n in sizes.items():
        rows = []
        for i in range(n):
            a, b = offset + i, 2 * (offset + i) + 1
            prompt = f"{a}+{b}="
            rows.append({"problem_hash": hashlib.sha256(prompt.encode()).hexdigest(), "prompt": prompt,
                         "answer": str(a + b), "bucket": "small" if i % 2 else "large"})
        offset += n
        _jsonl(exp / "data" / f"{role}.jsonl", rows)
    datasets = "".join(f"  {r}: {{path: data/{r}.jsonl}}\n" for r in sizes)
    (exp / "a1").mkdir()
    (exp / "a1" / "attempt.yaml").write_text(
        "id: a1\ntrainer: {name: local, version: \"0.11.0\"}\n"
        "recipe: {pretrain: models/tiny-base, advantage_estimator: dr_grpo, eps_clip: 0.2, n_samples_per_prompt: 2,\n"
        "         rollout_batch_size: 4, train_batch_size: 8, micro_train_batch_size: 8, num_episodes: 1,\n"
        "         actor_learning_rate: 1.0e-3, eval_steps: 1, save_steps: 1, seed: 42, generate_max_len: 4}\n"
        f"datasets:\n{datasets}"
        "eval: {engine: local, max_tokens: 4, batch_size: 16}\n"
        "checkpoints: {mid: 1}\n")
    a2 = exp / "a2"
    a2.mkdir()
    (a2 / "attempt.yaml").write_text("id: a2\nparent: a1\nchange: {eps_clip: 0.1}\nrecipe: {eps_clip: 0.1}\n")
    rows = [{"global_step": s, "policy_loss": 0.01, "actor_lr": 1e-3, "reward": 0.1 * s, "grad_norm": 1.0,
             "ratio_max": 1.2, "log_ratio_abs_p99": 0.1, "step_time_s": 0.5, "monitor_acc": 0.25 * s}
            for s in (1, 2)]
    _jsonl(a2 / "metrics.jsonl", rows)
    launch = a2 / "launch"
    launch.mkdir()
    (launch / "state.json").write_text(json.dumps(
        {"state": "finished", "pid": None, "exit_code": 0, "reason": None, "metrics_source": "jsonl"}))
    (launch / "provenance.json").write_text(json.dumps(
        {"git": {"sha": "0" * 40, "dirty": False}, "datasets": {}, "versions": {"python": "3"}, "host": "h"}))
    (launch / "argv.json").write_text(json.dumps(
        {"argv": ["python", "-m", "rlexp.backends.local_trainer", "a2"], "backend": "local", "cwd": ".",
         "metrics_source": "jsonl"}))
    _jsonl(launch / "launches.jsonl", [{"at": "2026-01-01T00:00:00Z", "resume": False}])
    (a2 / "eval").mkdir()
    (a2 / "eval" / "selection.json").write_text(json.dumps(
        {"final": 2, "mid": 1, "best_by_monitor": 2, "checkpoints": ["global_step2", "global_step1"], "notes": []}))
    problems = [json.loads(line) for line in (exp / "data" / "ood_primary.jsonl").read_text().splitlines()]
    id_problems = [json.loads(line) for line in (exp / "data" / "id.jsonl").read_text().splitlines()]
    for name, right in (("baseline_s0", range(3)), ("global_step1", range(4)), ("global_step2", range(6))):
        for role, probs in (("ood_primary", problems), ("id", id_problems)):
            if (name, role) == ("baseline_s0", "ood_primary"):
                continue  # written by `rlexp guard g2` below, with its metadata
            _jsonl(a2 / "eval" / name / f"{role}.jsonl",
                   [{"problem_hash": p["problem_hash"], "gold": p["answer"], "output": f"\\boxed{{{i}}}",
                     "answer": str(i), "parse_method": "boxed", "correct": int(i in right),
                     "finish_reason": "stop", "bucket": p["bucket"]} for i, p in enumerate(probs)])
    (a2 / "guards").mkdir()
    (a2 / "guards" / "parser_audit.json").write_text(json.dumps(
        {"name": "parser_audit", "passed": True, "rule": "mis-parse rate <= 5%", "notes": [], "details": [],
         "numbers": {"reviewed": 50, "mis_parse_rate": 0.0}}))
    from rlexp.cli import main

    for argv in (["plan", str(a2)], ["guard", "g2", str(a2)], ["decide", str(a2)]):
        if main(argv) not in (0, 1):
            raise RuntimeError(f"building the input-gate experiment: rlexp {' '.join(argv)} failed")
        if argv[:2] == ["guard", "g2"]:  # the checkpoints' records get metadata like the baseline's (decide reads it)
            meta = json.loads((a2 / "eval" / "baseline_s0" / "ood_primary.meta.json").read_text())
            for name in ("global_step1", "global_step2"):
                (a2 / "eval" / name / "ood_primary.meta.json").write_text(json.dumps({**meta, "checkpoint": name}))
    return exp
