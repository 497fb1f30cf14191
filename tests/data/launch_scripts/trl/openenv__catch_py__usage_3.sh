python examples/scripts/openenv/catch.py --env-mode docker-local --vllm-mode colocate
