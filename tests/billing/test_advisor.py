"""The advisor reproduces the article's numbers and finds the cheapest baseline."""

from decimal import Decimal as D
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.advisor import (
    baseline_cost,
    break_even_hours,
    budget_estimate,
    compare_split,
    optimal_baseline,
    plan_baseline,
    recommend_baseline,
    recommend_for_windows,
)

M, P = D(20000), D(100)


# --------------------------------------------------------------------------- C2


def test_break_even_is_monthly_price_over_hourly_price():
    assert break_even_hours(M, P) == D(200)


def test_break_even_rejects_a_free_hour():
    with pytest.raises(ValueError):
        break_even_hours(M, D(0))


# --------------------------------------------------------------------------- O1 budget


def test_budget_splits_80_15_5():
    est = budget_estimate(D(100000))
    assert (est.nodes, est.storage, est.network) == (D("80000.00"), D("15000.00"), D("5000.00"))


def test_budget_parts_sum_exactly_even_when_shares_do_not_divide():
    est = budget_estimate(D("0.03"))
    assert sum(v for _, v in est.parts) == D("0.03")


def test_budget_shares_must_sum_to_one():
    with pytest.raises(ValueError):
        budget_estimate(D(100), [("nodes", D("0.9"))])


def test_actual_spend_is_compared_with_the_estimate_and_extras_are_shown():
    est = budget_estimate(D(1000))
    rows = compare_split(est, {"nodes": D(900), "storage": D(100), "registry": D(20)})
    by = {r.component: r for r in rows}
    assert [r.component for r in rows] == ["nodes", "storage", "network", "registry"]
    assert by["nodes"].difference == D(100)
    assert by["network"].actual == 0 and by["network"].difference == D(-50)
    assert by["registry"].estimate == 0 and by["registry"].actual_share == D("0.0196")



def test_the_split_is_in_cents_whatever_the_database_summed():
    """SQLite sums a decimal column as a float: the pool page showed 0.400000000000000 and a bare
    0 beside 29.01 (found by a QA sweep)."""
    rows = compare_split(budget_estimate(D(1000)), {"nodes": D("0.400000000000000"), "storage": D("29.0100000000000")})
    assert [str(r.actual) for r in rows] == ["0.40", "29.01", "0.00"]
    assert [str(r.estimate) for r in rows] == ["800.00", "150.00", "50.00"]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**12))
def test_budget_parts_always_sum_to_the_total(cents):
    total = D(cents) / 100
    est = budget_estimate(total)
    assert sum(v for _, v in est.parts) == est.total == total
    assert all(v >= 0 for _, v in est.parts)


# --------------------------------------------------------------------------- O1 plan


def test_the_articles_24_gpu_peak_gives_two_monthly_8_gpu_nodes_and_burst_to_24():
    plan = plan_baseline(24, 8)
    assert (plan.baseline_nodes, plan.baseline_gpus) == (2, 16)
    assert (plan.peak_nodes, plan.burst_nodes, plan.burst_gpus) == (3, 1, 8)
    assert plan.plan_cost is None  # no prices, no invented saving


def test_the_plan_is_costed_from_prices_and_a_demand_profile():
    # 30 days: the third job runs 4 h a day (24 GPUs), otherwise 2 jobs (16 GPUs).
    profile = ([24] * 4 + [16] * 20) * 30
    plan = plan_baseline(24, 8, monthly_price=M, hourly_price=P, demand_profile=profile,
                         hours_per_month=720)  # fmt: skip
    assert plan.burst_node_hours == 120
    assert plan.all_monthly_cost == D("60000.00")
    assert plan.plan_cost == D("52000.00")  # 2 × 20,000 + 120 h × 100
    assert plan.saving_vs_all_monthly == D("8000.00")
    assert plan.saving_ratio == D("0.1333")  # not the article's ~30 %: it depends on the peak


def test_a_long_peak_makes_bursting_dearer_than_monthly():
    profile = ([24] * 10 + [16] * 14) * 30  # 300 burst hours > 200 h break-even
    plan = plan_baseline(24, 8, monthly_price=M, hourly_price=P, demand_profile=profile,
                         hours_per_month=720)  # fmt: skip
    assert plan.saving_vs_all_monthly == D("-10000.00")


# --------------------------------------------------------------------------- recommendation


def test_a_node_busy_longer_than_break_even_is_worth_a_monthly_lease():
    # one month of 720 h: 2 nodes always, a 3rd for 250 h (> 200 h), a 4th for 150 h (< 200 h)
    demand = [4] * 150 + [3] * 100 + [2] * 470
    rec = recommend_baseline(demand, M, P, hours_per_month=720, recent_hours=720)
    assert rec.nodes == 3 and rec.break_even_hours == D("200.00")
    assert rec.used_committed_hours == 150 * 3 + 100 * 3 + 470 * 2
    assert rec.utilisation == D("0.7824")  # 1690 / 2160
    assert rec.coverage == D("0.9185")  # 1690 / 1840
    assert rec.monthly_cost == D("75000.00")  # 3 × 20,000 + 150 h × 100
    assert rec.monthly_all_on_demand_cost == D("184000.00")
    assert rec.monthly_saving_vs_on_demand == D("109000.00")


def test_a_node_that_only_breaks_even_is_not_bought():
    demand = [3] * 200 + [2] * 520
    assert optimal_baseline(demand, M, P, hours_per_month=720) == 2


def test_recent_demand_caps_the_recommendation():
    demand = [4] * 648 + [1] * 72
    rec = recommend_baseline(demand, M, P, hours_per_month=720, current_nodes=4)
    assert rec.optimal_nodes == 4 and rec.nodes == 1 and rec.capped_by_recent_demand
    assert rec.recent_peak == 1
    # Figures are over the window: had the old demand persisted, the cap would cost this much.
    assert rec.monthly_current_cost == D("80000.00")
    assert rec.monthly_saving_vs_current == D("-134400.00")  # 80,000 - (20,000 + 1944 h x 100)


def test_window_prices_scale_with_the_window():
    week = [2] * 168
    rec = recommend_baseline(week, D(730), D(10))  # M' = 168 over a week; 2 × 168 committed
    assert rec.nodes == 2 and rec.window_cost == D("336.00") and rec.monthly_cost == D("1460.00")


def test_windows_are_slices_of_the_history_and_too_long_ones_are_left_out():
    history = [1] * (40 * 24)
    recs = recommend_for_windows(history, M, P)
    assert sorted(recs) == [7, 30]
    assert recs[7].window_hours == 168 and recs[30].window_hours == 720


def test_empty_or_negative_demand_is_rejected():
    with pytest.raises(ValueError):
        recommend_baseline([], M, P)
    with pytest.raises(ValueError):
        recommend_baseline([1, -1], M, P)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=60),
    st.integers(0, 5000),
    st.integers(1, 400),
    st.sampled_from([24, 100, 730]),
)
def test_the_recommended_baseline_is_optimal_against_brute_force(demand, monthly, hourly, month):
    got = optimal_baseline(demand, D(monthly), D(hourly), hours_per_month=month)
    costs = {n: baseline_cost(demand, n, D(monthly), D(hourly), month) for n in range(8)}
    best = min(costs.values())
    assert costs[got] == best
    assert got == min(n for n, c in costs.items() if c == best)
    assert isinstance(costs[got], Fraction)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=200), st.integers(0, 80))
def test_the_recommendation_never_exceeds_the_recent_peak(demand, recent):
    rec = recommend_baseline(demand, D(2000), D(10), recent_hours=recent)
    if recent:
        assert rec.nodes == min(rec.optimal_nodes, max(demand[-recent:]))
    assert rec.used_committed_hours + rec.on_demand_hours == rec.demanded_hours
    if rec.utilisation is not None:
        assert D(0) <= rec.utilisation <= D(1)
