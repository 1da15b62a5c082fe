"""Benchmarks, workloads and the model-free replay."""
