"""The protocol's stages as library functions returning result objects."""
