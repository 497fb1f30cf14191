python examples/scripts/openenv/browsergym.py --use-vllm
