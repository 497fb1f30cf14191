python examples/scripts/openenv/browsergym_llm.py --vllm-mode colocate
