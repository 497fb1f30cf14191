python examples/scripts/openenv/sudoku.py --env-mode docker-local --vllm-mode colocate
