"""Hikyaku's benchmark harness: `make bench` (python -m bench.run). See README, Benchmark."""
