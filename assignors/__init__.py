"""Pure assignment functions: replica placement (placement.py), the sticky consumer-group
assignor (sticky.py) and the key partitioner (partitioner.py). Imports no grpc, apsw or
pysyncobj (tests/unit/test_layering.py enforces it). The package imports nothing itself, so the
client loads only the partitioner."""
