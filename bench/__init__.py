"""Benchmarks: `make bench` (python -m bench). Figures go to bench/RESULTS.md."""
