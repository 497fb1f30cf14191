accelerate launch \
    --config_file examples/accelerate_configs/deepspeed_zero2.yaml \
    --num_processes 4 \
    examples/scripts/openreward/seta.py \
    --vllm-mode colocate
