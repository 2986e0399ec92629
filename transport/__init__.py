"""I/O edges: the raft transport (multiplexed TCP and in-memory hub) and gRPC plumbing."""
