python examples/scripts/openenv/wordle.py --vllm-mode colocate
