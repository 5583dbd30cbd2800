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


def cold(*, additions: int) -> Workload:
    """Counted with no warm-up (`warm=False`): a second run would break."""
    runs = []

    def run() -> None:
        runs.append(1)
        if len(runs) == 2:
            raise ValueError("a cold workload was run twice")
        total = 0
        for i in range(additions):
            total += i

    return Workload("cold", "addition", run, lambda: additions, warm=False)
