CUDA_VISIBLE_DEVICES=0,1 accelerate launch \
    --config_file examples/accelerate_configs/deepspeed_zero2.yaml \
    --num_processes 2 \
    examples/scripts/openreward/seta.py \
    --vllm-mode server --vllm-server-base-url http://localhost:8000
