python examples/scripts/openenv/carla_vlm_gemma.py \
    --env-urls https://server1.hf.space https://server2.hf.space \
    --use-lora
