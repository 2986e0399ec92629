"""Pure assignment functions: replica placement and the sticky consumer-group assignor.

Imports no grpc, apsw or pysyncobj (tests/test_layering.py enforces it).
"""
