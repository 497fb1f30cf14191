python examples/scripts/openenv/wordle.py --vllm-mode colocate --env-url http://localhost:8001
