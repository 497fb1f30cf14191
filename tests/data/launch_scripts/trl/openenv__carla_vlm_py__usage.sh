python examples/scripts/openenv/carla_vlm.py \
    --model Qwen/Qwen3.5-0.8B \
    --env-urls https://server1.hf.space https://server2.hf.space
