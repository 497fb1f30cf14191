"""TRL's own example scripts (``examples/scripts/`` of huggingface/trl, read at commit f2cd577; the
wheel does not ship them): what each runs and where its configuration comes from.

A command that launches one of them (``accelerate launch examples/scripts/rloo_vlm.py ...``) is read
by what that script does, not as a script of one's own (which rlexp reads as a GRPO script whose
``--field value`` flags are GRPOConfig's):

- a script that parses ``(ScriptArguments, GRPOConfig|RLOOConfig, ModelConfig)`` with ``TrlParser``
  takes its trainer's fields from the command line, as ``trl grpo`` / ``trl rloo`` do: it is planned
  with that trainer (``rloo_vlm.py``: RLOOTrainer, RLOOConfig's fields and defaults);
- a script that builds its config in its own code (``GRPOConfig(...)`` from its own argparse flags, the
  OpenEnv / Harbor / OpenReward agents, ``rloo.py``; ``AsyncGRPOConfig(...)`` in ``async_grpo.py`` and
  ``openenv/opencode.py``, run by AsyncGRPOTrainer) states nothing of it on the command line: its
  config is read from its source (:func:`rlexp.trainers.trl.script_args.read_source`, from the folder
  the command runs in), and refused when that file is not there (planning it from the command alone
  would plan the config's defaults, not the run);
- a script that runs another trainer (PPOTrainer of ``trl.experimental``, SFTTrainer, DPOTrainer, ...)
  is refused, naming it; so is one that imports what the release rlexp reads does not have (it cannot
  run on it).
"""

from __future__ import annotations

# path under examples/scripts/ -> the trainer (rlexp's estimator name) of a TrlParser script
PARSED = {"grpo_agent.py": "grpo", "grpo_continuous_batching.py": "grpo", "grpo_vlm.py": "grpo", "gspo.py": "grpo",
          "gspo_vlm.py": "grpo", "rloo_vlm.py": "rloo"}
# path -> the config class the script builds in its own code (its command line holds the script's own flags)
OWN_CONFIG = {"grpo_2048.py": "GRPOConfig", "rloo.py": "RLOOConfig", "harbor/data_agent.py": "GRPOConfig",
              "openreward/seta.py": "GRPOConfig", "async_grpo.py": "AsyncGRPOConfig",
              "openenv/opencode.py": "AsyncGRPOConfig",
              **{f"openenv/{name}.py": "GRPOConfig" for name in (
                  "browsergym", "browsergym_llm", "carla", "carla_vlm", "carla_vlm_gemma", "catch", "echo",
                  "multi_env", "sudoku", "wordle")}}
# TRL's main branch at f2cd577 still had trl.experimental.ppo; the 1.16.0 wheel, whose config rlexp reads, has not
PPO_GONE = "PPOTrainer (trl.experimental.ppo, a module TRL 1.16.0 does not ship: the example cannot run on it)"
# path -> what it imports that TRL 1.16.0 lacks (main at f2cd577 had it): it stops at its imports on the release
NOT_ON_RELEASE = {"openenv/opencode.py": "imports has_tool_call from trl.experimental.async_grpo.openenv_harness, "
                                         "which TRL 1.16.0 does not have: the example cannot run on it"}
# path -> the trainer it runs, which rlexp does not plan
OTHER_TRAINER = {"ppo/ppo.py": PPO_GONE, "ppo/ppo_tldr.py": PPO_GONE,
                 "bco.py": "BCOTrainer", "cpo.py": "CPOTrainer", "distillation.py": "DistillationTrainer",
                 "dpo.py": "DPOTrainer", "dpo_vlm.py": "DPOTrainer", "gkd.py": "GKDTrainer", "gold.py": "GOLDTrainer",
                 "kto.py": "KTOTrainer", "mpo_vlm.py": "DPOTrainer", "nash_md.py": "NashMDTrainer",
                 "online_dpo.py": "OnlineDPOTrainer", "online_dpo_vlm.py": "OnlineDPOTrainer", "orpo.py": "ORPOTrainer",
                 "prm.py": "PRMTrainer", "reward_modeling.py": "RewardTrainer", "sdft.py": "SDFTTrainer",
                 "sdpo.py": "SDPOTrainer", "sft.py": "SFTTrainer", "sft_diffusion_gemma.py": "SFTTrainer",
                 "sft_gemma3.py": "SFTTrainer", "sft_gpt_oss.py": "SFTTrainer", "sft_nemotron_3.py": "SFTTrainer",
                 "sft_tiny_aya_tool_calling.py": "SFTTrainer", "sft_vlm.py": "SFTTrainer",
                 "sft_vlm_gemma3.py": "SFTTrainer", "ssd.py": "SSDTrainer", "tpo.py": "TPOTrainer",
                 "xpo.py": "XPOTrainer"}
PLANNED = "rlexp plans TRL's GRPOTrainer, RLOOTrainer and AsyncGRPOTrainer"


def example_of(module: str) -> str | None:
    """The path under ``examples/scripts/`` of the TRL example ``module`` launches, or None."""
    path = module.replace("\\", "/")
    marker = "examples/scripts/"
    if not (path.startswith(marker) or f"/{marker}" in path):
        return None
    found = path[path.rindex(marker) + len(marker):]
    return found if found in PARSED or found in OWN_CONFIG or found in OTHER_TRAINER else None


def refusal(example: str) -> str | None:
    """Why a command launching TRL's ``examples/scripts/<example>`` is not planned, or None."""
    shown = f"examples/scripts/{example}"
    if example in NOT_ON_RELEASE:
        return f"{shown} {NOT_ON_RELEASE[example]}"
    if example in OTHER_TRAINER:
        return f"{shown} runs TRL's {OTHER_TRAINER[example]}; {PLANNED}"
    if example in OWN_CONFIG:
        return (f"{shown} builds its {OWN_CONFIG[example]} in its own code from flags of its own: rlexp plans the "
                "TRL config a command states (`trl grpo`, `trl rloo`, a TrlParser script)")
    return None
