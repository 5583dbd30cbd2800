"""The offline replay (issue 5 items 6 and 8; seed G4, O1, O4, C2, T6): small, fast replays
through the real scheduler and autoscaler cores, checking the invariants and the T6 result."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.lease_costs import quantize_money
from pools.core.autoscaling import DEFAULT_SCALING_SPEC
from pools.core.scheduling.nodes import Pod
from pools.simulation.model import (
    HOUR,
    NO_PENDING_FIT,
    NOT_TRIGGER_SCALE_UP,
    PoolConfig,
    PriceModel,
    SimPod,
    peak_gpus,
    peak_nodes,
    percentile,
)
from pools.simulation.replay import replay
from pools.simulation.workloads import article_workload, diurnal_workload, t6_workload

DAY = 24 * HOUR
ANY = dataclasses.replace(DEFAULT_SCALING_SPEC, combine="Any")


def one_minute_window(spec=DEFAULT_SCALING_SPEC):
    return dataclasses.replace(
        spec, scale_down=dataclasses.replace(spec.scale_down, stabilization_window_seconds=60)
    )


def gpu_pod(name: str, gpus: int = 1, **kwargs) -> Pod:
    return Pod(
        name=name, cpu_milli=8_000 * gpus, memory_mib=64 * 1024 * gpus, gpu_count=gpus, **kwargs
    )


@pytest.fixture(scope="module")
def diurnal_two_days():
    workload = diurnal_workload(seed=7, days=2, peak_gpus=40, mean_duration=HOUR // 2)
    pool = PoolConfig(monthly_nodes=2, max_nodes=5)
    return workload, pool, replay(workload, pool, duration_seconds=2 * DAY)


def test_it_never_holds_more_nodes_than_max_and_never_removes_a_monthly_node(diurnal_two_days):
    _, pool, result = diurnal_two_days
    assert result.nodes_added > 0 and result.nodes_removed > 0  # it did scale both ways
    assert result.max_nodes_seen <= pool.max_nodes
    for sample in result.timeline:
        assert sample.desired <= pool.max_nodes
        assert sample.monthly == pool.monthly_nodes
        assert sample.ready >= pool.monthly_nodes
        assert sample.desired == sample.monthly + sample.burst_ready + sample.provisioning
    series = result.timeline_series()
    assert series["t"] == [s.t for s in result.timeline]
    assert set(series) >= {"desired", "ready", "provisioning", "gpu_memory_pct", "queued"}


def test_every_pod_either_ran_or_is_reported_waiting(diurnal_two_days):
    workload, _, result = diurnal_two_days
    assert result.pods_total == len(workload)
    assert result.pods_total == (
        result.pods_finished + result.pods_running_at_end + result.pods_waiting_at_end
    )
    assert len(result.waits) == result.pods_finished + result.pods_running_at_end
    assert len(result.start_times) == len(result.waits)
    assert all(w >= 0 for w in result.waits)
    assert result.gpu_hours_served <= result.gpu_hours_demanded + 1e-9


def test_cost_is_node_hours_times_rates_exactly(diurnal_two_days):
    _, pool, result = diurnal_two_days
    prices = result.prices
    expected = result.monthly_node_hours * Fraction(prices.monthly_price) / 730 + (
        result.on_demand_billed_hours * Fraction(prices.hourly_price)
    )
    assert result.cost_exact == expected
    assert result.total_cost == quantize_money(expected)
    assert result.monthly_node_seconds == pool.monthly_nodes * 2 * DAY
    assert result.on_demand_billed_seconds == result.on_demand_node_seconds  # per second


def test_billing_by_the_started_hour_rounds_every_burst_node_up():
    workload, _, _ = diurnal_workload(seed=7, days=1, peak_gpus=40), None, None
    pool = PoolConfig(monthly_nodes=2, max_nodes=5)
    by_second = replay(workload, pool, duration_seconds=DAY)
    by_hour = replay(
        workload, pool, duration_seconds=DAY, prices=PriceModel(on_demand_billing="hour")
    )
    assert by_hour.on_demand_node_seconds == by_second.on_demand_node_seconds
    assert by_hour.on_demand_billed_seconds % HOUR == 0
    assert by_hour.on_demand_billed_seconds > by_second.on_demand_billed_seconds
    assert by_hour.total_cost > by_second.total_cost


def test_an_all_monthly_pool_pays_its_lease_whatever_the_load():
    result = replay([], PoolConfig(monthly_nodes=3, max_nodes=3), duration_seconds=30 * DAY)
    # 3 nodes x 20,000 a month x 720 h / 730 h
    assert result.cost_exact == Fraction(3 * 20_000 * 720, 730)
    assert result.total_cost == Decimal("59178.08")
    assert result.on_demand_node_seconds == 0 and result.scale_events == 0


def test_the_skipped_ticks_change_nothing(diurnal_two_days):
    workload, pool, fast = diurnal_two_days
    slow = replay(workload, pool, duration_seconds=2 * DAY, fast_forward=False)
    assert slow.start_times == fast.start_times
    assert slow.cost_exact == fast.cost_exact
    assert (slow.scale_ups, slow.scale_downs, slow.pods_moved) == (
        fast.scale_ups,
        fast.scale_downs,
        fast.pods_moved,
    )
    assert slow.blocked == fast.blocked
    assert slow.activities == fast.activities


def test_a_burst_node_takes_the_provisioning_delay_before_it_accepts_pods():
    # 20 one-GPU pods on one monthly 8-GPU node: 12 queue (> 10), memory at 100 %.
    workload = [SimPod(gpu_pod(f"p/{i:02d}"), 0, 4 * HOUR) for i in range(20)]
    result = replay(workload, PoolConfig(monthly_nodes=1, max_nodes=3), duration_seconds=6 * HOUR)
    later = sorted(w for w in result.waits if w > 0)
    assert len(later) == 12
    assert min(later) == 300  # triggered at the first tick, Ready 5 min later
    first = result.activities[0]
    assert (first.t, first.from_nodes, first.to_nodes) == (0, 1, 2)


def test_a_pod_that_fits_no_new_node_never_triggers_a_scale_up():
    busy = SimPod(gpu_pod("p/busy", 8), 0, DAY)
    too_big = [
        SimPod(Pod(name=f"p/big-{i:02d}", cpu_milli=200_000, gpu_count=1), 60, HOUR)
        for i in range(12)
    ]
    result = replay([busy, *too_big], PoolConfig(1, 3), duration_seconds=2 * HOUR)
    assert result.nodes_added == 0
    assert result.blocked[NOT_TRIGGER_SCALE_UP] > 0
    assert "Insufficient cpu" in result.activities[0].message
    assert result.pods_waiting_at_end == 12


def test_the_fit_simulation_adds_only_the_nodes_pending_pods_need():
    # Any: memory at 100 % always wants more; only the pending 8-GPU job gets a node.
    jobs = [SimPod(gpu_pod("p/base", 8), 0, DAY), SimPod(gpu_pod("p/peak", 8), HOUR, HOUR)]
    result = replay(jobs, PoolConfig(1, 4, spec=ANY), duration_seconds=DAY)
    assert result.nodes_added == 1 and result.max_nodes_seen == 2
    assert result.blocked[NO_PENDING_FIT] > 0
    assert result.start_times["p/peak"] == HOUR + 300
    # the burst node is removed once it has been empty for the 30-minute window
    assert result.on_demand_node_seconds == 300 + HOUR + 1800


def test_scale_down_moves_pods_off_a_burst_node_onto_monthly_capacity():
    # A long pod lands on the burst node; when the monthly node frees up, the pool shrinks by
    # moving it there (monthly capacity is already paid) instead of keeping the burst node.
    pods = [SimPod(gpu_pod(f"p/a{i}", 4), 0, HOUR) for i in range(2)]
    pods += [SimPod(gpu_pod(f"p/q{i:02d}"), 0, 10 * HOUR) for i in range(12)]
    result = replay(pods, PoolConfig(1, 4, spec=ANY), duration_seconds=12 * HOUR)
    assert result.pods_moved > 0
    assert _nodes_at(result, 5 * HOUR).desired == 2  # 12 GPUs: monthly node + one burst node
    assert result.timeline[-1].desired == 1


def test_the_article_example_bursts_one_node_for_each_daily_peak():
    days = 3
    result = replay(
        article_workload(days=days), PoolConfig(2, 3, spec=ANY), duration_seconds=days * DAY
    )
    assert result.pods_waiting_at_end == 0 and max(result.waits) == 300
    # each day: 5 min provisioning + 4 h peak + 30 min empty before removal
    assert result.on_demand_node_seconds == days * (300 + 4 * HOUR + 1800)
    assert peak_nodes(article_workload(days=days), PoolConfig(0, 3), days * DAY) == 3
    assert peak_gpus(article_workload(days=days), days * DAY) == 24


def test_the_article_spec_never_bursts_for_one_queued_big_job():
    # memory > 85 % AND more than 10 queued pods: one pending 8-GPU job is not enough.
    result = replay(article_workload(days=2), PoolConfig(2, 3), duration_seconds=2 * DAY)
    assert result.nodes_added == 0
    assert result.wait_p95 > 4 * HOUR


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 95) == 95


# ---------------------------------------------------------------------------------- T6


@pytest.fixture(scope="module")
def t6_runs():
    workload = t6_workload()  # dip from 03:00 to 03:20, 32 one-GPU pods back at 03:20
    pool = PoolConfig(monthly_nodes=2, max_nodes=8)
    runs = {
        window: replay(
            workload,
            dataclasses.replace(pool, spec=spec),
            duration_seconds=6 * HOUR,
        )
        for window, spec in (("30m", DEFAULT_SCALING_SPEC), ("1m", one_minute_window()))
    }
    return workload, runs


def _nodes_at(result, t):
    return [s for s in result.timeline if s.t <= t][-1]


def test_the_30_minute_window_keeps_the_nodes_through_a_short_overnight_dip(t6_runs):
    workload, runs = t6_runs
    result = runs["30m"]
    dip_start, dip_end = 3 * HOUR, 3 * HOUR + 20 * 60
    before = _nodes_at(result, dip_start - 1)
    assert before.desired > 2
    assert _nodes_at(result, dip_end - 1).desired == before.desired  # nothing removed
    back = [w.pod.name for w in workload if w.arrival == dip_end]
    assert len(back) == 32
    assert all(result.start_times[name] == dip_end for name in back)  # no pod waits


def test_a_1_minute_window_collapses_the_pool_and_pods_wait_when_load_returns(t6_runs):
    workload, runs = t6_runs
    result = runs["1m"]
    dip_start, dip_end = 3 * HOUR, 3 * HOUR + 20 * 60
    assert _nodes_at(result, dip_start - 1).desired > 2
    assert _nodes_at(result, dip_end - 1).desired == 2  # shrunk to the monthly minimum
    back = [w.pod.name for w in workload if w.arrival == dip_end]
    waits = sorted(result.start_times[name] - dip_end for name in back)
    assert waits[0] == 0 and waits[-1] >= 300  # half run at once, the rest wait for nodes
    assert result.scale_events > runs["30m"].scale_events


# ---------------------------------------------------------------------------------- properties

pod_shapes = st.sampled_from([(1, 1000), (1, 500), (2, 1000), (4, 1000), (8, 1000)])


@st.composite
def workloads(draw):
    items = []
    for i in range(draw(st.integers(0, 40))):
        gpus, milli = draw(pod_shapes)
        pod = Pod(
            name=f"h/{i:03d}",
            cpu_milli=draw(st.integers(0, 64)) * 1000,
            memory_mib=draw(st.integers(0, 512)) * 1024,
            gpu_count=gpus,
            gpu_milli=milli,
        )
        arrival = draw(st.integers(0, 5 * HOUR))
        items.append(SimPod(pod, arrival, draw(st.integers(1, 3 * HOUR))))
    return items


@settings(max_examples=25, deadline=None)
@given(
    workload=workloads(),
    monthly=st.integers(0, 2),
    burst=st.integers(0, 3),
    window=st.sampled_from([60, 1800]),
    billing=st.sampled_from(["second", "hour"]),
)
def test_replay_invariants_hold_for_any_small_workload(workload, monthly, burst, window, billing):
    spec = DEFAULT_SCALING_SPEC if window == 1800 else one_minute_window()
    pool = PoolConfig(monthly, monthly + burst, spec=spec)
    prices = PriceModel(on_demand_billing=billing)
    result = replay(workload, pool, duration_seconds=6 * HOUR, prices=prices)
    assert result.max_nodes_seen <= pool.max_nodes
    assert all(
        s.monthly == monthly and monthly <= s.desired <= pool.max_nodes for s in result.timeline
    )
    assert result.pods_total == (
        result.pods_finished + result.pods_running_at_end + result.pods_waiting_at_end
    )
    assert result.cost_exact == result.monthly_node_hours * Fraction(20_000, 730) + (
        result.on_demand_billed_hours * 100
    )
    assert result.on_demand_billed_seconds >= result.on_demand_node_seconds
    assert result.nodes_added - result.nodes_removed == result.timeline[-1].desired - monthly
    if burst == 0:
        assert result.on_demand_node_seconds == 0


@settings(max_examples=20, deadline=None)
@given(workload=workloads(), monthly=st.integers(0, 2), window=st.sampled_from([60, 1800]))
def test_skipping_repeated_ticks_never_changes_a_replay(workload, monthly, window):
    spec = DEFAULT_SCALING_SPEC if window == 1800 else one_minute_window(ANY)
    pool = PoolConfig(monthly, monthly + 3, spec=spec)
    fast = replay(workload, pool, duration_seconds=6 * HOUR)
    slow = replay(workload, pool, duration_seconds=6 * HOUR, fast_forward=False)
    assert fast.start_times == slow.start_times
    assert fast.cost_exact == slow.cost_exact
    assert fast.activities == slow.activities
    assert fast.blocked == slow.blocked
    assert fast.timeline == slow.timeline
