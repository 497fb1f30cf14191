#!/bin/bash
# An A28-like launch (docs/plan.md, "Optimizer steps and global steps"): a 400-prompt pool for one
# episode, meant to run 200 global steps. 400 prompts x 8 samples / 16 = 200 *optimizer* steps = 25
# global steps, and 25 is a multiple of neither eval_steps nor save_steps. `rlexp plan` shows both:
#   rlexp import experiments/seed-a30/train_a28.sh experiments/seed-a30/a28i --version 0.9.3 \
#       --pool-size 400 --monitor-size 202 --parent a29b --intent-steps 200
set -euo pipefail

MODEL=openai/gpt-oss-20b
POOL=data/sft_rl_pool_400.jsonl
SAVE=/mnt/data/ckpt/a28
LR=5.0e-7

ray job submit --address="http://127.0.0.1:8265" \
  --runtime-env-json='{"working_dir": "/openrlhf"}' \
  -- python3 -m openrlhf.cli.train_ppo_ray \
  --pretrain ${MODEL} \
  --prompt_data ${POOL} \
  --eval_dataset data/probe_set_200_ood.jsonl \
  --input_key prompt --label_key answer --apply_chat_template \
  --remote_rm_url /openrlhf/reward_func.py \
  --advantage_estimator dr_grpo \
  --eps_clip 0.1 \
  --init_kl_coef 0.001 \
  --n_samples_per_prompt 8 \
  --rollout_batch_size 16 \
  --train_batch_size 16 \
  --micro_train_batch_size 1 \
  --num_episodes 1 \
  --max_epochs 1 \
  --actor_learning_rate ${LR} \
  --lr_warmup_ratio 0.05 \
  --lora_rank 32 --lora_alpha 64 \
  --target_modules q_proj k_proj v_proj o_proj \
  --max_norm 1.0 \
  --prompt_max_len 1024 --generate_max_len 4096 --max_len 5120 \
  --eval_steps 10 --save_steps 10 \
  --seed 42 \
  --zero_stage 3 --gradient_checkpointing \
  --actor_num_nodes 1 --actor_num_gpus_per_node 4 \
  --ref_num_nodes 1 --ref_num_gpus_per_node 4 --colocate_actor_ref \
  --vllm_num_engines 2 --vllm_tensor_parallel_size 2 \
  --save_hf_ckpt --disable_ds_ckpt \
  --save_path ${SAVE}/final --ckpt_path ${SAVE}/ckpt \
  --use_tensorboard ${SAVE}/tb 2>&1 | tee ${SAVE}.log
