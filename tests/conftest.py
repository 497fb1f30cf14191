"""Shared test setup: keep torch to one thread (the machine has 2 cores, tests run beside other work)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


# --- eval engineer (issue 4): a tiny experiment for eval/guard tests --------------------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_base_model(tmp_path_factory):
    """The untrained tiny model of rlexp.models.tiny (seconds to build), shared by the session."""
    from rlexp.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-base", seed=0)


@pytest.fixture
def eval_experiment(tmp_path, tiny_base_model):
    """Factory: an experiment dir with datasets, a local-engine attempt, random LoRA checkpoints
    and a metrics.jsonl with monitor points. Returns the attempt directory."""
    import hashlib
    import json
    import shutil

    def build(*, sizes=None, steps=(2, 4), mid=2, batch_size=8, max_tokens=6, suffix="", extra_eval=""):
        exp = tmp_path / "exp"
        shutil.copytree(tiny_base_model, exp / "models" / "tiny-base")
        sizes = sizes or {"pool": 8, "ood_primary": 12, "id": 6, "sanity": 3}
        offset = 0
        for role, n in sizes.items():
            lines = []
            for i in range(n):
                a, b = offset + i, 2 * (offset + i) + 1
                prompt = f"{a}+{b}=" if role != "ood_primary" else f"{a}-{b}="
                answer = str(a + b) if role != "ood_primary" else str(a - b)
                digest = hashlib.sha256(prompt.strip().encode()).hexdigest()
                lines.append(json.dumps({"problem_hash": digest, "prompt": prompt, "answer": answer,
                                         "bucket": "small" if i % 2 else "large"}))
            offset += n
            (exp / "data").mkdir(parents=True, exist_ok=True)
            (exp / "data" / f"{role}.jsonl").write_text("\n".join(lines) + "\n")
        att = exp / "a1"
        att.mkdir()
        datasets = "\n".join(f"  {r}: {{path: data/{r}.jsonl}}" for r in sizes)
        (att / "attempt.yaml").write_text(
            "id: a1\ntrainer: {name: local, version: \"0.11.0\"}\nrecipe: {pretrain: models/tiny-base}\n"
            f"datasets:\n{datasets}\n"
            f"eval: {{engine: local, max_tokens: {max_tokens}, batch_size: {batch_size}, "
            f"prompt_suffix: {json.dumps(suffix)}{extra_eval}}}\n"
            f"checkpoints: {{mid: {mid}}}\n"
        )
        make_lora_checkpoints(exp / "models" / "tiny-base", att, steps)
        rows = [{"global_step": s, "monitor_acc": 0.1 * s} for s in range(1, max(steps) + 1)]
        (att / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return att

    return build


def make_lora_checkpoints(base_dir, attempt_dir, steps, scale=1.0):
    """Random (non-identity) LoRA adapters saved as checkpoints/global_step{N}_hf."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    for step in steps:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(step)
            model = AutoModelForCausalLM.from_pretrained(base_dir)
            peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False))
            if scale != 1.0:
                with torch.no_grad():
                    for name, param in peft_model.named_parameters():
                        if "lora_B" in name:
                            param.mul_(scale)
            peft_model.save_pretrained(attempt_dir / "checkpoints" / f"global_step{step}_hf")
