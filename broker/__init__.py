"""raftq broker: gRPC services, routing, cluster bring-up, CLI (see ARCHITECTURE.md)."""
