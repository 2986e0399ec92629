"""The one-process simulation tier: brokers on the in-memory hub, stepped on a manual clock."""
