"""Benchmarks of agenttest itself (not of any model). See bench/README.md."""
