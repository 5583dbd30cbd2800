"""A workload for tests/bench/test_instruction_costs.py that breaks in its counted run (kept out
of the test module so that the counting child imports neither pytest nor Django for it)."""

from __future__ import annotations

from bench.instructions import Workload


def failing_on_the_second_run() -> Workload:
    runs = []

    def run() -> None:
        runs.append(1)
        if len(runs) == 2:
            raise ValueError("the counted run broke")

    return Workload("failing", "run", run, lambda: 1)
