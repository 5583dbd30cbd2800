"""A deleted pool's budget is history (review of pool deletion; seed T6, O1; OpenCost and cloud
budgets keep theirs): it stays with its alerts and finance's override, and while the deleted
pool is still charged (its monthly leases run on to their end) it is evaluated and listed as a
deleted pool's. Deleting it took the month's alerts off Budgets -> Alerts and finance's
override with no audit entry."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import budget_sync, budgets
from billing.budget_admin import budget_pool_set
from billing.models import Budget, BudgetAlert
from pools.claims import Part
from pools.models import AuditEntry, Notification
from pools.services import notifications
from pools.services import pools as pool_services
from tests.billing.billing_helpers import HOUR, T0, charge, pool

pytestmark = pytest.mark.django_db

NEXT_MONTH = T0 + timedelta(days=40)  # January 10th: T0 is December 1st


def deleted_pool(actors, **budget):
    """A pool with a spec budget of 1000 a month, charged 900 in its first hour, whose 80%
    alert has fired, then deleted (it has no node: gone at once)."""
    p = pool(actors["lead"], budget={"monthly": "1000", **budget})
    charge(p, "900.00", hours=1)
    fired = budgets.budgets_evaluate(now=T0 + 2 * HOUR)
    assert [(a.threshold, a.basis) for a in fired] == [(80, "actual")]
    pool_services.pool_delete(user=actors["lead"], pool=p, now=T0 + 3 * HOUR)
    p.refresh_from_db()
    assert p.deleted_at is not None
    return p


def test_deleting_a_pool_keeps_its_budget_and_its_alerts(actors, browser, time_machine):
    p = deleted_pool(actors)
    budget = Budget.objects.get(pool=p)
    alert = BudgetAlert.objects.get()
    budgets.budgets_evaluate(now=T0 + 4 * HOUR)
    assert list(Budget.objects.values_list("pk", "pool_id", "monthly_amount", "source")) == [
        (budget.pk, p.pk, Decimal("1000.00"), "spec")
    ]
    assert list(BudgetAlert.objects.values_list("pk", flat=True)) == [alert.pk]
    time_machine.move_to(T0 + 5 * HOUR, tick=False)  # the page shows this month's budgets
    page = browser("finance").get("/costs/budgets/").content.decode()
    # Listed as a deleted pool's (this month, while it is charged), not changeable, no link to
    # a pool page that is gone (or is another pool's of the same name).
    assert page.count(f"deleted pool train-pool-a#{p.pk}") == 2  # its budget and its alert
    assert "/costs/budgets/pools/train-pool-a/" not in page and 'href="/pools/train-pool-a/"' not in page
    assert "900.00 / 1000.00 CNY" in page


def test_a_deleted_pool_still_charged_is_still_evaluated(actors):
    p = deleted_pool(actors)
    charge(p, "200.00", hours=1, start=T0 + 5 * HOUR)  # its lease runs on
    fired = budgets.budgets_evaluate(now=T0 + 6 * HOUR)
    assert [(a.threshold, a.basis, a.amount) for a in fired] == [(100, "actual", Decimal("1100.00"))]
    assert BudgetAlert.objects.count() == 2
    message = f"Deleted pool train-pool-a#{p.pk} spend 1100.00 CNY reached 100% of its monthly budget 1000.00 CNY (2026-12)"
    assert Notification.objects.get(key=fired[0].notification_key).message == message
    # Evaluated in its own part of the pools only, as a live pool's budget is.
    mine, other = Part(p.pk % 2, 2), Part(1 - p.pk % 2, 2)
    assert [b.pool_id for b in budget_sync.pool_budgets_synced(now=T0 + 6 * HOUR, part=mine)] == [p.pk]
    assert budget_sync.pool_budgets_synced(now=T0 + 6 * HOUR, part=other) == []


def test_finance_override_of_a_deleted_pool_is_kept_and_a_new_pool_of_its_name_has_its_own(actors, browser, time_machine):
    p = pool(actors["lead"], budget={"monthly": "1000"})
    budget_pool_set(user=actors["finance"], pool=p, monthly_amount=Decimal("2000"), now=T0)
    charge(p, "1700.00", hours=1)
    assert [a.threshold for a in budgets.budgets_evaluate(now=T0 + 2 * HOUR)] == [80]
    pool_services.pool_delete(user=actors["lead"], pool=p, now=T0 + 3 * HOUR)
    successor = pool(actors["lead"], budget={"monthly": "500"})  # the name is free again
    budgets.budgets_evaluate(now=T0 + 4 * HOUR)
    kept = Budget.objects.get(pool=p)
    assert (kept.override_amount, kept.monthly_amount, kept.source) == (Decimal("2000.00"), Decimal("2000.00"), "finance")
    assert Budget.objects.get(pool=successor).monthly_amount == Decimal("500.00")
    assert BudgetAlert.objects.get().budget_id == kept.pk
    # Nothing was removed, so the only budget audit entry is finance's own change.
    assert list(AuditEntry.objects.filter(action__startswith="budget.").values_list("action", flat=True)) == ["budget.pool.set"]
    time_machine.move_to(T0 + 5 * HOUR, tick=False)
    page = browser("finance").get("/costs/budgets/").content.decode()
    assert f"deleted pool train-pool-a#{p.pk}" in page
    assert 'aria-label="Change the budget of pool train-pool-a"' in page  # the live one's row
    assert page.count('aria-label="Change the budget of pool train-pool-a"') == 1


def test_a_deleted_pool_no_longer_charged_is_history(actors, browser, time_machine):
    """Next month its leases have ended: its budget is not evaluated nor listed as this
    month's, yet it is still there, and its alert still listed."""
    p = deleted_pool(actors)
    assert budgets.budgets_evaluate(now=NEXT_MONTH) == []
    assert budget_sync.pool_budgets_synced(now=NEXT_MONTH) == []
    assert Budget.objects.filter(pool=p).exists() and BudgetAlert.objects.count() == 1
    assert budgets.budgets_sync(now=T0 + 4 * HOUR) == 1  # still this month's in December
    time_machine.move_to(NEXT_MONTH, tick=False)
    page = browser("finance").get("/costs/budgets/").content.decode()
    assert page.count(f"deleted pool train-pool-a#{p.pk}") == 1  # its alert, no budget row
    assert "No budgets." in page


def test_an_alert_of_a_deleted_pool_names_it_name_id_and_links_no_pool_page(actors, browser):
    """The alert list and the webhook name a deleted pool as the reports do, `name#id`, and the
    list links neither its page nor its alert rules: they are gone, or are the new pool's of
    the same name. Its alerts from before it was deleted are listed so too."""
    p = deleted_pool(actors)
    successor = pool(actors["lead"], budget={"monthly": "5000"})  # the name is free again
    charge(p, "200.00", hours=1, start=T0 + 5 * HOUR)  # its lease runs on
    fired = budgets.budgets_evaluate(now=T0 + 6 * HOUR)
    assert Notification.objects.get(key=fired[0].notification_key).payload["pool"] == f"train-pool-a#{p.pk}"
    notifications.notification_raise(team=p.team, pool=p, kind="NodesNotReady", message="Nodes not ready", key="capacity-1", now=T0 + 2 * HOUR)
    notifications.notification_raise(team=successor.team, pool=successor, kind="NodesNotReady", message="Nodes not ready", key="capacity-2", now=T0 + 7 * HOUR)
    page = browser("lead").get("/notifications/").content.decode()
    assert page.count(f"train-pool-a#{p.pk} (deleted)") == 3  # two budget alerts and a capacity alert
    # The new pool's alert alone links its page and its rules.
    assert page.count('href="/pools/train-pool-a/"') == 1 and page.count('href="/pools/train-pool-a/alerts/"') == 1


def test_the_budgets_evaluated_are_the_budgets_in_force(actors):
    """One rule (`budget_sync.budgets_in_force_q`) decides both which pool budgets are evaluated
    each hour and which are this month's on the budgets page and `/metrics`."""
    charged = deleted_pool(actors)
    gone = pool(actors["lead"], name="old-pool", budget={"monthly": "100"})
    pool_services.pool_delete(user=actors["lead"], pool=gone, now=T0 + 3 * HOUR)  # never charged
    live = pool(actors["lead"], name="live-pool", budget={"monthly": "100"})
    for now, expected in ((T0 + 4 * HOUR, {charged.pk, live.pk}), (NEXT_MONTH, {live.pk})):
        in_force = Budget.objects.filter(budget_sync.budgets_in_force_q(now), pool__isnull=False)
        assert {b.pool_id for b in budget_sync.pool_budgets_synced(now=now)} == set(in_force.values_list("pool_id", flat=True)) == expected
