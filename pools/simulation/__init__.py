"""Offline replay of a workload through the pool's own cores (what-if planning and benchmarks); pure."""
