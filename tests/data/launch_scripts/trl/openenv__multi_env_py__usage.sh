    python examples/scripts/openenv/multi_env.py \
        --wordle-url https://openenv-wordle.hf.space \
        --catch-url https://openenv-openspiel-env.hf.space
