"""The costs page's "accruing now" line: the hour in progress, priced by the metering core
(issue 8 §1: costs accrue on the dashboard before the hourly run writes them)."""

from __future__ import annotations

from decimal import Decimal
from unittest import mock

from billing import selectors, services
from billing.models import CostRecord
from tests.billing.billing_helpers import HOUR, T0, node, pod, pool


def test_the_projection_of_an_hour_is_what_metering_then_writes_split_by_visible_team(actors, teams):
    p = pool(actors["lead"])
    n = node(p, "a100-1")
    pod(teams["algorithm"], n, "train-0", started=T0)
    projection = selectors.current_hour_projection(user=actors["finance"], now=T0 + HOUR / 2)
    assert projection.hour == T0
    services.meter_hour(hour=T0)
    metered = {}
    for record in CostRecord.objects.filter(hour=T0).select_related("team"):
        metered[record.team.name] = metered.get(record.team.name, Decimal("0")) + record.amount
    assert dict(projection.by_team) == metered
    assert projection.total == sum(metered.values())
    # A lead of another team sees nothing of it; nothing running, nothing accruing.
    assert selectors.current_hour_projection(user=actors["other_lead"], now=T0 + HOUR / 2) is None


def test_the_costs_page_shows_what_is_accruing(client, actors, teams):
    p = pool(actors["lead"])
    node(p, "a100-1")
    projection = selectors.current_hour_projection(user=actors["lead"], now=T0 + HOUR / 4)
    client.force_login(actors["lead"])
    with mock.patch("billing.views.timezone.now", return_value=T0 + HOUR / 4):
        html = client.get("/costs/").content.decode()
    assert f"Accruing now: {projection.total} {projection.currency} this hour" in html
