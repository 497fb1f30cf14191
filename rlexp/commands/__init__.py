"""One module per CLI verb. Module level: stdlib + typer only; heavy imports inside functions."""
