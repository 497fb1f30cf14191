"""What TRL's generated training script runs (``launch/train_trl.py``, in ``.venv-trl``).

The script (:mod:`rlexp.trainers.trl.template`, which lists what a run does) holds the attempt's
values as one JSON document, puts the rlexp that launched the run on ``sys.path`` and calls
:func:`train` with them. Nothing here imports torch, transformers or TRL before :func:`train`
runs: this module is imported by rlexp's own process too (its tests and lint), where those are
absent or heavy.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from rlexp.evaluation.answers import extract_answer, is_correct  # pure Python: the reward's hot path


def rollout_module(argv: Sequence[str]) -> Any:
    """An environment task's rollout module, named by --rollout-module (None: single-turn prompts)."""
    if "--rollout-module" not in argv:
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("rlexp_trl_rollout", argv[list(argv).index("--rollout-module") + 1])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(config: Mapping[str, Any], argv: Sequence[str], *, environment_factory: bool = False) -> int:
    """One GRPOTrainer run on the attempt's ``config`` (an RLOOTrainer run where it holds
    ``rloo_config``, RLOOConfig's keyword arguments, instead of ``grpo_config``); ``environment_factory``: the module named by
    ``--rollout-module`` gives GRPOTrainer its ``ENVIRONMENT_FACTORY`` (an environment task whose
    actions are tool calls)."""
    os.environ["TENSORBOARD_LOGGING_DIR"] = config["tensorboard_dir"]
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, set_seed
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOConfig, GRPOTrainer, ModelConfig, RLOOConfig, RLOOTrainer, get_peft_config

    # what really ran (the launcher's provenance records the pinned versions)
    print(f"rlexp: trl {trl.__version__} transformers {transformers.__version__} torch {torch.__version__}",
          flush=True)
    rloo = "rloo_config" in config  # `trl rloo`: RLOOTrainer, RLOOConfig (no rollout_func: plan refuses an environment)
    config_kwargs = config["rloo_config" if rloo else "grpo_config"]
    set_seed(int(config_kwargs.get("seed", 42)))
    tokenizer = AutoTokenizer.from_pretrained(config["model_config"]["model_name_or_path"])
    agent = rollout_module(argv)  # an environment task: episodes through TRL's rollout_func
    pool = _rows(config["pool"], agent, tokenizer)
    monitor = _rows(config["monitor"], agent, tokenizer) if config["monitor"] else []

    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))
    callback, writer = _rlexp_callback(config, tokenizer, monitor, agent, stop)

    model_args = ModelConfig(**config["model_config"])
    grpo = (RLOOConfig if rloo else GRPOConfig)(**config_kwargs)
    # as TRL's own `trl grpo` script builds the model's keyword arguments from ModelConfig
    model_init_kwargs = dict(revision=model_args.model_revision, trust_remote_code=grpo.trust_remote_code,
                             attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    model_init_kwargs.update(grpo.model_init_kwargs or {})
    grpo.model_init_kwargs = model_init_kwargs
    factory = {"environment_factory": agent.ENVIRONMENT_FACTORY} if environment_factory else {}
    if agent is not None:
        factory["rollout_func"] = agent.rollout_func
    trainer = (RLOOTrainer if rloo else GRPOTrainer)(
        model=model_args.model_name_or_path,
        reward_funcs=agent.REWARD_FUNCS if agent is not None else [exact_match],
        **factory,
        args=grpo,
        train_dataset=Dataset.from_list(pool),
        eval_dataset=Dataset.from_list(monitor) if monitor else None,
        processing_class=tokenizer,
        callbacks=[callback],
        peft_config=get_peft_config(model_args),
    )
    resume = None
    if "--resume" in argv and os.path.isdir(grpo.output_dir):
        resume = get_last_checkpoint(grpo.output_dir)
    print(f"rlexp: TRL resume_from={resume}", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    writer.close()
    return 0


def _rows(ref: Mapping[str, Any], agent: Any, tokenizer: Any) -> list[dict[str, Any]]:
    """A dataset's rows as the trainer takes them: an environment task's own rows, else the rendered
    prompt and its gold answer."""
    from rlexp.evaluation.generation import render_prompt
    from rlexp.experiment.files import read_jsonl

    if agent is not None:
        return agent.train_rows(read_jsonl(ref["path"]), ref["suffix"], ref["path"])
    return [{"prompt": render_prompt(tokenizer, str(r["prompt"]), ref["suffix"]), "answer": str(r["answer"])}
            for r in read_jsonl(ref["path"])]


def grade(text: str, gold: str) -> tuple[float, str]:
    """1.0 when the completion's extracted answer equals ``gold``, with how it was extracted."""
    answer, method = extract_answer(text)
    return (1.0 if answer is not None and is_correct(answer, gold) else 0.0), method


def exact_match(prompts: Any, completions: list[str], answer: list[str], log_metric: Any = None,
                **kwargs: Any) -> list[float]:  # fmt: skip
    """The reward function (TRL logs it as ``rewards/exact_match``), with the share of boxed answers."""
    graded = [grade(text, gold) for text, gold in zip(completions, answer, strict=False)]
    if log_metric is not None:
        log_metric("has_boxed", sum(m == "boxed" for _, m in graded) / max(1, len(graded)))
    return [reward for reward, _ in graded]


def _rlexp_callback(config: Mapping[str, Any], tokenizer: Any, monitor: list[dict[str, Any]], agent: Any,
                    stop: dict[str, bool]) -> tuple[Any, Any]:
    """The TrainerCallback that prints the step count transformers computed, replaces TRL's sampled
    eval with the SOP's greedy monitor (to TensorBoard), saves each checkpoint where rlexp reads it and
    stops after a SIGTERM with a save; and its TensorBoard writer."""
    import torch
    from torch.utils.tensorboard import SummaryWriter
    from transformers import TrainerCallback

    from rlexp.evaluation.generation import generate

    writer = SummaryWriter(config["monitor_tensorboard_dir"])

    def monitor_score(model: Any) -> float:
        if agent is not None:  # greedy episodes: the share that succeed
            return agent.monitor_score(model, tokenizer, monitor)
        outs = generate(model, tokenizer, [r["prompt"] for r in monitor],
                        max_new_tokens=config["monitor_max_new_tokens"], temperature=0.0)
        return sum(grade(o[0].text, r["answer"])[0] for o, r in zip(outs, monitor, strict=False)) / len(monitor)

    class RlexpCallback(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # the step count transformers computed (rlexp plan predicts it): one line for humans and tests
            print(f"rlexp: TRL max_steps={state.max_steps} warmup_steps={args.get_warmup_steps(state.max_steps)}",
                  flush=True)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
            if control.should_evaluate:
                control.should_evaluate = False  # the SOP's greedy monitor replaces TRL's sampled eval
                if monitor:
                    model.eval()
                    with torch.no_grad():
                        acc = monitor_score(model)
                    model.train()
                    writer.add_scalar("train/monitor_acc", acc, state.global_step)
                    writer.flush()
            if stop["asked"]:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            out = config["checkpoint_pattern"].replace("{N}", str(state.global_step))
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)

    return RlexpCallback(), writer
