"""Per-trainer step semantics (pure): how TRL (and other trainers) count steps and set the LR."""
