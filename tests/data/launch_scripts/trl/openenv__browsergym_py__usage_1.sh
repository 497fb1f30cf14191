python examples/scripts/openenv/browsergym.py
