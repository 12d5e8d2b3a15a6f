"""The benchmark harness (see README, Benchmark)."""
