"""The demo of `make run`: seed data, the living fleet of simulated agents, its replayed workload."""
