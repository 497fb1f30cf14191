python examples/scripts/openenv/carla.py
