"""Issue 9 §2, budgets: two workers run the hourly task (`billing.tasks.meter_pending`: meter the
pending hours, then evaluate budgets; seed C3), one `kill -9`ed while firing an alert.

A `BudgetAlert` is unique per (budget, period, threshold, basis): the row is the claim. Whether
the worker dies before its alert commits or after, each crossed threshold ends with one alert,
one `BudgetThresholdReached` event, one notification and one e-mail.
"""

from __future__ import annotations

import email
from datetime import timedelta

import pytest

from billing.models import BudgetAlert
from pools.models import Notification, PoolEvent
from tests.billing.billing_helpers import HOUR, T0, node, pool
from tests.chaos.workers import CHAOS, chaos_round, worker_env

pytestmark = CHAOS

TASK = ["task", "billing.tasks.meter_pending"]
NOW = T0 + 4 * HOUR + timedelta(minutes=5)
KILLS = {
    "alert-inserted-uncommitted": {"target": "billing.budgets:event_record", "when": "after", "match": {"reason": "BudgetThresholdReached"}},
    "alert-committed-not-yet-notified": {"target": "pools.services.notifications:notification_deliver", "when": "before"},
}


@pytest.fixture
def budget_pool(actors):
    """A pool whose four hours of one monthly node cross 80% and 100% of its budget."""
    from billing.models import MeterRun

    p = pool(actors["lead"], budget={"monthly": "10"})
    node(p, "n-0", start=T0 - 24 * HOUR)
    MeterRun.objects.create(hour=T0 - HOUR)  # metered until then; nothing spent this month yet
    return p


@pytest.mark.parametrize("kill", KILLS.values(), ids=KILLS.keys())
def test_a_worker_killed_while_firing_a_budget_alert_fires_and_mails_each_once(budget_pool, kill):
    env = worker_env(CHAOS_NOW=NOW.isoformat())
    chaos = chaos_round(TASK, kill=kill, env=env)
    restarted = chaos.restarted.run()

    alerts = list(BudgetAlert.objects.order_by("threshold").values_list("threshold", "basis", "period"))
    assert alerts == [(80, "actual", T0.date()), (100, "actual", T0.date())]
    events = PoolEvent.objects.filter(pool=budget_pool, reason="BudgetThresholdReached")
    assert sorted(events.values_list("message", "count")) == sorted((m, 1) for m in _messages())
    mails = _subjects(chaos.normal.stdout) + _subjects(restarted.stdout)
    assert sorted(mails) == sorted(" ".join(f"[EBCloud] {m[:120]}".split()) for m in _messages()), "one e-mail per alert"
    assert not Notification.objects.filter(delivered_at__isnull=True).exists()
    assert Notification.objects.count() == len(alerts)


def _subjects(stdout: str) -> list[str]:
    """Subjects of the e-mails a worker sent (the console e-mail backend prints each one)."""
    separator = "\n" + "-" * 79 + "\n"
    parts = [p for p in stdout.split(separator) if "Subject: " in p]
    return [" ".join(email.message_from_string(p[p.index("Content-Type"):])["Subject"].split()) for p in parts]


def _messages() -> list[str]:
    from billing.budgets import alert_message

    return [alert_message(a) for a in BudgetAlert.objects.select_related("budget__pool", "budget__team")]
