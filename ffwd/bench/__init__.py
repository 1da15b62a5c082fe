"""Workloads, teacher-forced replay and benchmarks."""
