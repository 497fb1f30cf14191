accelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml \
    examples/scripts/grpo_continuous_batching.py \
    --model_name_or_path Qwen/Qwen3-1.7B \
    --output_dir grpo-gsm8k-continuous-batching \
    --num_generations 32 \
    --max_completion_length 1024 \
    --use_peft \
    --log_completions
