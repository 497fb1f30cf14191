"""The models a demo trains from: tiny models built locally and GGUF base models."""
