"""The advisor on the pool page (seed C2, O1; issue 7 §7), from the pool's metered history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from billing.advisor_service import hourly_node_demand, pool_advice
from billing.budget_sync import budget_sync_pool
from billing.models import Budget, CostRecord, UsageRecord
from pools.services import pools as services
from tests.billing.billing_helpers import label_set
from tests.conftest import make_document

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
START = NOW.replace(minute=0) - timedelta(days=8)


def metered_pool(actors, *, budget=None):
    extra = {"budget": {"monthly": budget, "currency": "CNY"}} if budget else {}
    pool = services.pool_create(user=actors["lead"], document=make_document("advised", nodeCount={"min": 3, "max": 6}, **extra))
    hour = START
    while hour < NOW.replace(minute=0):
        # Two 8-GPU nodes busy around the clock, a third 4 hours a day (the article's shape).
        gpus = 24 if 10 <= hour.hour < 14 else 16
        UsageRecord.objects.create(
            hour=hour, kind="pod", resource=f"a/job-{hour:%j%H}", pool=pool, team=pool.team, quantity=Decimal(gpus), label_set=label_set()
        )
        hour += timedelta(hours=1)
    return pool


def test_hourly_demand_is_gpu_hours_over_gpus_per_node_rounded_up(actors):
    pool = metered_pool(actors)
    demand = hourly_node_demand(pool=pool, since=START, until=START + timedelta(days=1))
    assert len(demand) == 24 and demand.count(3) == 4 and demand.count(2) == 20


def test_the_advice_recommends_the_article_baseline_and_shows_break_even(actors):
    """C2: 20,000 / 100 = 200 h. A 4-hour daily peak is 120 h a month: below break-even, so the
    third node stays on demand and the baseline is 2 (O1: 16 monthly GPUs, burst to 24)."""
    advice = pool_advice(pool=metered_pool(actors), now=NOW)
    assert advice.break_even_hours == Decimal(200)
    assert advice.history_hours == 8 * 24
    week = advice.recommendations[7]
    assert week.nodes == 2 and week.current_nodes == 3
    assert week.monthly_saving_vs_current > 0
    assert 30 not in advice.recommendations  # not 30 days of evidence yet


def test_break_even_is_at_the_price_the_pools_orders_pay(actors):
    """A yearly pool pays 15% less a month, a preemptible yearly one 49% less: the list price
    put their break-even at 200 hours (QA sweep)."""
    for name, extra, monthly in (("yearly", {}, "17000.00"), ("spot", {"preemptible": True}, "10200.00")):
        pool = services.pool_create(user=actors["lead"], document=make_document(name, nodeCount={"min": 1, "max": 2}, leaseType="yearly", **extra))
        advice = pool_advice(pool=pool, now=NOW)
        assert (advice.monthly_price, advice.break_even_hours) == (Decimal(monthly), Decimal(monthly) / 100)


def test_the_budget_split_shows_the_estimate_beside_the_actual_bill(actors):
    pool = metered_pool(actors, budget=100000)
    for component, amount in (("gpu", "900.00"), ("storage", "60.00"), ("network", "40.00")):
        CostRecord.objects.create(hour=NOW.replace(minute=0) - timedelta(hours=2), pool=pool, team=pool.team, cost_kind="fee" if component != "gpu" else "usage",
                                  component=component, amount=Decimal(amount), currency="CNY")  # fmt: skip
    CostRecord.objects.create(hour=NOW.replace(minute=0) - timedelta(hours=2), pool=pool, team=pool.team, cost_kind="fee",
                              component="storage", amount=Decimal("7.00"), currency="USD")  # fmt: skip  # not added to CNY
    split = {c.component: c for c in pool_advice(pool=pool, now=NOW).split}
    assert split["nodes"].estimate == Decimal("80000.00") and split["nodes"].actual == Decimal("900.00")
    assert split["storage"].actual == Decimal("60.00")
    assert split["storage"].actual_share == Decimal("0.06") or split["storage"].actual_share == Decimal("0.0600")


def test_the_budget_split_is_of_the_budget_in_force(actors):
    """Finance's override is the budget the pool's alerts count against, and so its split: the
    split used to read only `spec.budget` (100000 here, overridden to 40000), and showed none
    for a pool on the default budget."""
    pool = metered_pool(actors, budget=100000)
    Budget.objects.filter(pool=pool).update(override_amount=Decimal("40000"))
    budget_sync_pool(pool=pool, now=NOW)
    assert {c.component: c.estimate for c in pool_advice(pool=pool, now=NOW).split}["nodes"] == Decimal("32000.00")
    default = services.pool_create(user=actors["lead"], document=make_document("on-default", nodeCount={"min": 1, "max": 2}))
    assert Budget.objects.get(pool=default).source == Budget.Source.DEFAULT
    assert pool_advice(pool=default, now=NOW).split != []


def test_the_pool_page_shows_the_advice(client, actors):
    pool = metered_pool(actors)
    client.force_login(actors["member"])
    html = client.get(f"/pools/{pool.name}/").content.decode()
    assert "Cost advice" in html and "200 hours" in html
