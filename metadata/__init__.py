"""The metadata Raft group: frontend -> state machine -> table -> backend."""
