"""A partition replica: the deterministic state machine over its own SQLite file."""
