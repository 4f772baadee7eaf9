"""The documents a2rl writes to the store: one module per document."""
