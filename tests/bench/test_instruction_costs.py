"""Regression guards on the cost of a unit of work, in units that do not move with the machine
(issue 23 item 4): a change that doubles what one agent report, one pool in the per-minute
pass or one metered node-hour costs fails here on any machine, however fast or loaded.

Two kinds: SQL statements (the real test database, no extra tool), and machine instructions
counted by callgrind on a tiny fixed workload (bench/instructions.py; skipped with the reason
where valgrind is not installed). The instruction baselines were counted on CPython 3.11 and
Django 5.2 (this project's versions); the bounds are a factor of two either way, so a new
patch release does not trip them while a doubling does, and a halving (a count that suddenly
measures nothing, or a real improvement) asks for the baseline to be lowered.
"""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench import instructions, workloads

# Counted 2026-12-02 with `python bench/instructions.py` (docs/benchmarks.md, issue 23); the
# node-hour's on 2026-12-03 (2.62 -> 2.13 M on this plan: SQLite's rows prepared through the
# connection itself, not its per-context proxy).
BASELINE_PER_REPORT = 9.0e6
BASELINE_PER_POOL_PASS = 3.6e6
BASELINE_PER_NODE_HOUR = 2.2e6

needs_valgrind = pytest.mark.skipif(instructions.unavailable() is not None, reason=instructions.unavailable() or "")


def within_twice(value: float, baseline: float, what: str) -> None:
    assert baseline / 2 <= value <= baseline * 2, (
        f"{what}: {value / 1e6:.2f} M instructions, the baseline is {baseline / 1e6:.2f} M "
        "(more than twice: find what doubled it; less than half: lower the baseline)"
    )


@pytest.mark.django_db(transaction=True)
def test_a_report_costs_the_same_statements_whoever_sends_it_and_however_many_do():
    """Steady-state reports (each node's second) from 1 node and from 10: the same statements
    per report, so 10,000 nodes cost 10,000 times one report, not more."""
    from bench.agent_ingest import report_body
    from config.wsgi import application

    credentials = workloads.agents_make(10)
    bodies = {seq: report_body(seq, random.Random(seq)) for seq in (1, 2)}
    for credential in credentials:
        assert workloads.report_post(application, credential, bodies[1]).startswith("200")
    with CaptureQueriesContext(connection) as one:
        assert workloads.report_post(application, credentials[0], bodies[2]).startswith("200")
    with CaptureQueriesContext(connection) as ten:
        for credential in credentials[1:]:
            assert workloads.report_post(application, credential, bodies[2]).startswith("200")
    per_report = len(one)
    assert len(ten) == 9 * per_report, [q["sql"][:80] for q in ten.captured_queries[: per_report + 2]]
    assert 1 <= per_report <= 6  # the read of the credential with its node and state, the writes, the transaction


# Every counted workload of this module, prepared once (natively: fleets built, agents made).
PLAN = {
    "ingest": ("bench.workloads:ingest", {"reports": 5, "database": None}),
    "tick small": ("bench.workloads:tick", {"pools": 3, "shape": "small", "database": None}),
    "tick large": ("bench.workloads:tick", {"pools": 6, "shape": "small", "database": None}),
    "meter small": ("bench.workloads:meter", {"pools": 3, "shape": "small", "database": None}),
    "meter large": ("bench.workloads:meter", {"pools": 6, "shape": "small", "database": None}),
}


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    if instructions.unavailable():
        pytest.skip(instructions.unavailable())
    return workloads.prepared(tmp_path_factory.mktemp("instructions"), PLAN)


def counted(specs: dict, *names: str) -> list[instructions.Count]:
    found = workloads.counts({name: specs[name] for name in names})
    return [found[name] for name in names]


@needs_valgrind
def test_one_agent_report_costs_what_it_did(specs):
    (ingest,) = counted(specs, "ingest")
    assert ingest.units == 5
    within_twice(ingest.per_unit, BASELINE_PER_REPORT, "one agent report through Django")


@needs_valgrind
def test_one_more_pool_costs_the_per_minute_pass_what_it_did(specs):
    small, large = counted(specs, "tick small", "tick large")
    assert small.statements == large.statements  # none per pool
    within_twice(instructions.marginal(small, large), BASELINE_PER_POOL_PASS, "one pool in reconcile + autoscale")


@needs_valgrind
def test_one_more_metered_node_hour_costs_what_it_did(specs):
    small, large = counted(specs, "meter small", "meter large")
    assert large.units == 2 * small.units > 0
    within_twice(instructions.marginal(small, large), BASELINE_PER_NODE_HOUR, "one metered node-hour")


@needs_valgrind
def test_twice_the_work_counts_twice_the_instructions():
    """The count is the counted call's own: not the interpreter's start, the setup or the
    warm-up (a fixed cost would break the proportion), and about the same in a second child."""
    target = "bench.instructions:additions"
    short, long_, again = instructions.count([(target, {"n": 20_000}), (target, {"n": 40_000}), (target, {"n": 20_000})])
    assert 1.9 < long_.instructions / short.instructions < 2.1, (short, long_)
    assert abs(again.instructions - short.instructions) < short.instructions / 20
    assert 20 < short.per_unit < 1000  # a Python-level addition costs tens to hundreds of instructions


@needs_valgrind
def test_a_workload_that_fails_in_the_counted_run_fails_the_count():
    """The counted call runs inside a ctypes callback, which would swallow an exception: the
    child carries it out, so a broken workload is an error, not a small count."""
    with pytest.raises(RuntimeError, match="the counted run broke"):
        instructions.count([("tests.bench.instruction_workloads:failing_on_the_second_run", {})])


@needs_valgrind
def test_a_cold_workload_is_counted_on_its_first_run():
    """A unit that is a process's first work (the demo's first start) is counted without the
    warm-up run, which would leave it nothing to do; the count is still the run's own."""
    [cold] = instructions.count([("tests.bench.instruction_workloads:cold", {"additions": 20_000})])
    assert cold.units == 20_000 and 20 < cold.per_unit < 1000
