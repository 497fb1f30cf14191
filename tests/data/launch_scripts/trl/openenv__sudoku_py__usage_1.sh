python examples/scripts/openenv/sudoku.py --vllm-mode colocate
