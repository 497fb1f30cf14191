python examples/scripts/openenv/echo.py
