"""The passes over every pool run with Python's garbage collector held off (`collector_paused`,
issue 23): the collector rescanned a tick's ~10^5 live objects every 700 allocations, a sixth of
the tick's Python time. It comes back on after the pass, whatever happened, and stays off if it
was off before."""

from __future__ import annotations

import gc
import sys
from datetime import timedelta

import pytest

from billing import tasks as billing_tasks
from billing.demo import load_prices
from pools.claims import collector_paused
from pools.controllers import autoscaler, lifecycle
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, run_until

# The loops of a tick, and what the hourly task (`meter_part`) runs: the hour and its budgets.
PASSES = {"reconcile_all", "autoscale_all", "meter_hour", "budgets_evaluate"}


@pytest.fixture
def collections():
    """The collections that start inside a pass (`PASSES` on the stack) while the test runs;
    the test makes the collector as eager as it can be (a collection every allocation), so
    that any pass that left it on would show."""
    started = []

    def record(phase, info):
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in PASSES:
                if phase == "start":
                    started.append((frame.f_code.co_name, info["generation"]))
                return
            frame = frame.f_back

    thresholds = gc.get_threshold()
    gc.callbacks.append(record)
    try:
        yield started
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)


def test_the_collector_is_off_in_the_block_and_on_again_after_it_even_after_an_error():
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.django_db
def test_the_tick_and_the_hour_run_without_collections(actors, collections):
    load_prices()
    pool = approved_pool(actors, make_document("paused"))
    ready = run_until(pool, T0)
    hour = (ready + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    gc.set_threshold(1)
    lifecycle.reconcile_all(now=ready + timedelta(seconds=15))
    autoscaler.autoscale_all(now=ready + timedelta(seconds=15))
    done = billing_tasks.meter_part(hour.isoformat(), 0, 1)
    gc.set_threshold(700)
    assert done["metered"] == 1
    assert collections == [] and gc.isenabled()
