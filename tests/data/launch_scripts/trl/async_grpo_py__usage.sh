CUDA_VISIBLE_DEVICES=0 accelerate launch examples/scripts/async_grpo.py
