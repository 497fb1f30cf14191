CUDA_VISIBLE_DEVICES=0,1 accelerate launch \
    --config_file examples/accelerate_configs/deepspeed_zero2.yaml --num_processes 2 \
    examples/scripts/harbor/data_agent.py \
    --vllm-mode server --vllm-server-base-url http://localhost:8000 --env e2b
