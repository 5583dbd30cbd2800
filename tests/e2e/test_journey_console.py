"""Journeys of issue 21 item 11, what Kubecost and GKE console users expect: a lead reads each
pool's cost this month and forecast in the pool list; a lead reads the utilisation trends per
pool on the capacity page; the approver weighs quota left, balance and budget use beside each
order, approves one and sees the balance that is left for the next (seed T1, T6, C4, O4).

The clock is frozen at a moment of December 2026 (ticking), so that "this month" and "the last
24 hours" are the same on every run; background work runs in-process as in the other journeys.
Every page is checked with axe on the way (conftest's `browse`)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from billing import budgets
from billing.models import Account, CostRecord
from billing.month_spend import month_spend
from monitoring.models import NodeAgentState
from monitoring.services import pool_samples_rollup
from pools.controllers.lifecycle import pool_reconcile
from pools.controllers.scheduler import scheduler_pass
from pools.services import pools as pool_services
from tests.billing.billing_helpers import HOUR, T0, charge, scenario
from tests.conftest import make_document
from tests.pools.pod_helpers import pool_with_nodes, submit

# Sequences reset: order and node names are the same on every run.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]
NOW = T0 + 73 * HOUR + timedelta(minutes=30)  # 2026-12-04 01:30 UTC: three days of December metered


def test_a_lead_reads_each_pools_cost_this_month_and_forecast_in_the_pool_list(browse, actors, teams, time_machine):
    time_machine.move_to(NOW, tick=True)
    train, spot = scenario(actors, teams, hours=73)  # the hourly metering of 2026-12-01 00:00 to 12-04 00:00
    charged = Decimal(CostRecord.objects.filter(pool=train).aggregate(total=Sum("amount"))["total"]).quantize(Decimal("0.01"))
    [expected] = month_spend(scope="pool_id", ids=[train.pk], now=NOW)[train.pk]
    assert expected.spent == charged and expected.forecast == (charged / 73 * 744).quantize(Decimal("0.01"))

    lead = browse("lead")
    lead.follow("nav a:has-text('Pools')")
    header = lead.page.locator("#pool-table thead th").all_inner_texts()
    assert header[-2:] == ["Cost this month", "Forecast for the month"]
    row = lead.page.locator("#pool-table tbody tr", has_text="train-pool-a")
    assert row.locator("[data-spent]").inner_text() == f"{expected.spent} CNY"
    assert row.locator("[data-forecast]").inner_text() == f"{expected.forecast} CNY"
    assert "spot-pool" not in lead.page.inner_text("#pool-table")  # another team's pool and cost
    assert "three days of costs" in lead.page.inner_text("#pool-table .help")
    lead.shot("lead-09-pool-costs")
    # The columns stay when htmx redraws the table for a filter.
    lead.swap(lambda: lead.page.locator("#id_q").press_sequentially("train"))
    assert "q=train" in lead.page.url
    assert lead.page.locator("#pool-table tbody tr [data-forecast]").inner_text() == f"{expected.forecast} CNY"

    finance = browse("finance")
    finance.follow("nav a:has-text('Pools')")
    [spot_spend] = month_spend(scope="pool_id", ids=[spot.pk], now=NOW)[spot.pk]
    spot_row = finance.page.locator("#pool-table tbody tr", has_text="spot-pool")
    assert spot_row.locator("[data-spent]").inner_text() == f"{spot_spend.spent} CNY"


def test_a_lead_reads_the_utilisation_trend_of_each_pool_on_the_capacity_page(browse, actors, time_machine):
    time_machine.move_to(NOW, tick=True)
    busy = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})  # 2 Ready nodes, 16 GPUs
    pool_services.pool_create(user=actors["lead"], document=make_document("quiet-pool", nodeCount={"min": 0, "max": 2}))
    pool_with_nodes(actors["other_lead"], name="infer-pool", nodes=1)
    for i in range(2):
        submit(actors["member"], f"train-{i}", gpus=2)
    scheduler_pass(now=NOW)
    for node, util in zip(busy.nodes.order_by("name"), (40.0, 60.0), strict=True):  # what the agents last reported
        NodeAgentState.objects.create(node=node, gpu_util_avg=util, fb_total_mib=81920, fb_used_mib=20480, last_report_at=NOW)
    for minutes in range(0, 180, 20):  # the per-minute rollup over the last three hours
        pool_samples_rollup(now=NOW - timedelta(hours=3) + timedelta(minutes=minutes))

    lead = browse("lead")
    lead.follow("nav a:has-text('Capacity')")
    lead.page.wait_for_selector("#trends-panel table")  # the trends follow the page
    lead.landed()  # and the page with them passes axe
    assert "Hourly averages of the last 24 hours" in lead.page.inner_text("#trends-panel caption")
    row = lead.page.locator("#trends-panel tr[data-pool='train-pool-a']")
    allocated = row.locator("[data-trend=allocated] svg")
    assert allocated.get_attribute("aria-label") == "GPUs allocated, hourly, last 24 hours: average 25.0%, peak 25.0%, latest 25.0%"
    assert allocated.locator("path").get_attribute("d").startswith("M")
    assert "average 50.0% · peak 50.0% · latest 50.0%" in row.locator("[data-trend=utilisation]").inner_text()
    quiet = lead.page.locator("#trends-panel tr[data-pool='quiet-pool']")
    assert quiet.locator("[data-trend=allocated]").inner_text() == "no capacity measured in this window"
    assert quiet.locator("[data-trend=utilisation]").inner_text() == "no agent reports in this window"
    assert lead.page.locator("#trends-panel tr[data-pool='infer-pool']").count() == 0  # another team's
    lead.shot("lead-10-capacity-trends", element="section:has(#trends-panel)")


def test_the_approver_weighs_quota_balance_and_budget_beside_each_order(browse, actors, teams, time_machine):
    time_machine.move_to(NOW, tick=True)
    train = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a", budget={"monthly": 1000}))
    infer = pool_services.pool_create(user=actors["other_lead"], document=make_document("infer", nodeCount={"min": 1, "max": 2}))
    budgets.budgets_sync()  # the budgets task makes the pool budget from spec.budget
    budgets.budget_team_set(user=actors["admin"], team=teams["inference"], monthly_amount=Decimal("500"))
    charge(train, "1.00", hours=72)  # three days of the pool's costs, as metering records and rolls them up
    train_order, infer_order = train.orders.get(), infer.orders.get()
    # Enough for either order, not for both.
    Account.objects.filter(name="default").update(balance=train_order.amount + infer_order.amount - Decimal("1.00"))

    admin = browse("admin")
    admin.follow("nav a:has-text('Orders')")
    assert "more than the balance" in admin.page.inner_text("#queue-funds")
    row = admin.page.locator(f"#order-{train_order.pk}")
    assert "24 of 48 GPUs left in cn-east-2 · A100_80G after this order" in row.locator("[data-quota]").inner_text()
    assert "covers this order" in row.locator("[data-balance]").inner_text()
    assert row.locator("[data-budget]").inner_text() == "pool: 72.00 of 1000.00 CNY (7.2%)\nteam: no budget"
    other = admin.page.locator(f"#order-{infer_order.pk}")
    assert other.locator("[data-budget]").inner_text() == "pool: 0.00 of 38250.00 CNY (0.0%)\nteam: 0.00 of 500.00 CNY (0.0%)"  # the default
    admin.shot("admin-08-orders-quota-balance-budget", full_page=True)

    admin.follow(f"#order-{train_order.pk} button:has-text('Approve')")
    assert "approved" in admin.page.inner_text("main .messages")
    pool_reconcile(pool_id=train.pk, now=NOW)  # the controller pays the approved order
    admin.reload()
    balance = Account.objects.get(name="default").balance
    assert balance == infer_order.amount - Decimal("1.00")
    left = admin.page.locator(f"#order-{infer_order.pk} [data-balance]").inner_text()
    assert left == f"{balance} CNY\nshort by 1.00 CNY"
    assert f"Account balance {balance} CNY" in admin.page.inner_text("#queue-funds")
