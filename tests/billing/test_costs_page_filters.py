"""The costs page's filter and its totals, as finance reads them (guide-finance §1):

- a refused filter (a malformed `name#id`, `to` before `from`, a stale sort) shows its errors
  where htmx swaps the table in (Filter submits through htmx) as in the full page, keeps every
  field as typed, and shows no figure and no download: the unfiltered totals beside the typed
  filter were read as the filtered ones (196.83 CNY for every team instead of 65.28 for one);
- a pool's total splits into its metered part, the pool list's "Cost this month" to the cent,
  and the hours still accruing (the hour in progress, whole), which the pool list does not count.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import CostRecord
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool

pytestmark = pytest.mark.django_db

DAY = T0 + timedelta(days=8)  # 2026-12-09, in the page's default range (this month so far)
BAD_POOL = {"team": "inference", "pool": "train-pool-a#abc"}
BACKWARDS = {"team": "inference", "from": "2026-12-09", "to": "2026-12-05"}


@pytest.fixture
def fleet(actors, teams, time_machine):
    """Two teams' pools, each with a monthly node and a pod, metered from midnight to 10:00 of
    DAY; the clock at 11:30, so the 11:00 hour is accruing and 10:00 is metered."""
    train = pool(actors["lead"])
    pod(teams["algorithm"], node(train, "n-0"), "llm", gpus=4, labels={"project": "llm"})
    spot = pool(actors["other_lead"], name="spot-pool", labels={"team": "inference"}, region="cn-north-1a")
    pod(teams["inference"], node(spot, "s-0"), "serve", namespace="inference", gpus=1)
    meter(start=DAY, hours=11)
    time_machine.move_to(DAY + 11 * HOUR + timedelta(minutes=30), tick=False)
    return train, spot


def finance(actors) -> Client:
    client = Client()
    client.force_login(actors["finance"])
    return client


def figure(html: str, name: str) -> Decimal:
    return Decimal(re.search(rf"<strong data-{name}>([\d.]+)</strong>", html).group(1))


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx-fragment"])
@pytest.mark.parametrize(
    ("params", "message"),
    [(BAD_POOL, "Pool: must be a pool&#x27;s name"), (BACKWARDS, "To: must not be before from")],
    ids=["malformed-pool", "to-before-from"],
)
def test_a_refused_filter_shows_its_error_and_no_figures(actors, fleet, htmx, params, message):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = finance(actors).get("/costs/", params, **headers)
    html = response.content.decode()
    assert response.status_code == 200  # htmx swaps a 2xx answer only
    assert html.lstrip().startswith('<div id="cost-table">') == htmx
    alert = re.search(r'<div class="error" role="alert">(.*?)</div>', html, re.S)
    assert alert and message in alert.group(1) and "no costs are shown" in alert.group(1)
    # Neither the unfiltered totals nor their rows, chart or exports (the budget bars above,
    # this month's whatever the filter, stay).
    table = html[html.index('<div id="cost-table">'):]
    assert "data-total" not in table and "<table>" not in table and 'id="cost-chart"' not in table
    assert "/api/v1/costs/" not in html and "Download CSV" not in html and "FOCUS 1.2 export" not in html
    if not htmx:  # the form (outside the fragment) keeps what was typed
        assert '<option value="inference" selected>' in html
        for key, value in params.items():
            if key != "team":
                assert f'name="{key}" value="{value}"' in html


def test_a_stale_sort_is_refused_and_dropped_from_the_form(actors, fleet):
    """A sort by a column the grouping no longer has: the form has no field to correct it in,
    so the next Filter goes without it."""
    html = finance(actors).get("/costs/", {"by": "team", "sort": "project"}).content.decode()
    assert "Sort: must be one of" in html and 'name="sort" value=""' in html
    assert 'name="by" value="team"' in html and "data-total" not in html


def test_the_exports_refuse_what_the_page_refuses(api, actors, fleet):
    for params in (BAD_POOL, BACKWARDS):
        for fmt in ("csv", "focus"):
            response = api("finance").get("/api/v1/costs/", {**params, "format": fmt})
            assert response.status_code == 400, (params, fmt)


def test_a_valid_filter_still_shows_its_figures_and_exports(actors, fleet):
    html = finance(actors).get("/costs/", {"team": "inference"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'role="alert"' not in html and "Download CSV" in html
    assert "team=inference" in html and "format=csv" in html
    everyone = finance(actors).get("/costs/").content.decode()
    assert 0 < figure(html, "total") < figure(everyone, "total")


def pool_list_cost(client: Client, name: str) -> Decimal:
    """The pool list's "Cost this month" for the pool."""
    html = client.get("/pools/").content.decode()
    return Decimal(re.search(rf'>{name}</a></td>.*?<td class="money" data-spent>([\d.]+) CNY', html, re.S).group(1))


def test_a_pools_metered_part_is_the_pool_lists_cost_this_month(actors, fleet, time_machine):
    """On the default range (this month so far) at 11:30, a pool's total is its metered hours
    (00:00 to 10:00), the pool list's figure, plus the 11:00 hour accruing, whole; it is not
    counted twice: once metered, the total is the pool list's figure alone."""
    client = finance(actors)
    html = client.get("/costs/", {"pool": "train-pool-a"}).content.decode()
    listed = pool_list_cost(client, "train-pool-a")
    metered, accruing, total = figure(html, "metered"), figure(html, "accruing"), figure(html, "total")
    assert metered == listed > 0 and accruing > 0 and total == metered + accruing
    assert "Cost this month" in html and "count the metered hours only" in html
    # A monthly node's hour costs the same every hour (to a cent of rounding): one hour accrues.
    assert abs(accruing - listed / 11) <= Decimal("0.11")
    meter(start=DAY + 11 * HOUR, hours=1)
    time_machine.move_to(DAY + 12 * HOUR + timedelta(minutes=5), tick=False)
    listed_after = pool_list_cost(client, "train-pool-a")
    html = client.get("/costs/", {"pool": "train-pool-a"}).content.decode()
    assert listed_after == listed + accruing
    assert figure(html, "metered") == listed_after and figure(html, "total") == listed_after + figure(html, "accruing")
    time_machine.move_to(DAY + timedelta(days=1, hours=9), tick=False)  # nothing accrues in the range now
    html = client.get("/costs/", {"pool": "train-pool-a", "to": DAY.date().isoformat()}).content.decode()
    assert figure(html, "total") == pool_list_cost(client, "train-pool-a") and "data-metered" not in html


def test_a_pool_that_is_not_the_users_is_unknown_as_one_that_does_not_exist(api, actors, fleet):
    """`?pool=nosuch` read "No costs in this range", as if the pool cost nothing (QA). A pool no
    one has and another team's pool are refused alike, as a filter error naming the pool, on
    the page and in the API, with nothing that tells them apart (teams are isolated)."""
    lead = Client()
    lead.force_login(actors["lead"])
    pages, errors = {}, {}
    for name in ("nosuch", "spot-pool"):  # spot-pool is inference's; the lead is algorithm's
        html = lead.get("/costs/", {"pool": name}).content.decode()
        alert = re.search(r'<div class="error" role="alert">(.*?)</div>', html, re.S)
        assert alert and f"Pool: unknown pool &#x27;{name}&#x27;" in alert.group(1), name
        assert "data-total" not in html and "No costs in this range" not in html
        pages[name] = re.sub(r'("X-CSRFToken": "|name="csrfmiddlewaretoken" value=")\w+', r"\1", html.replace(name, "NAME"))  # a token per response
        response = api("lead").get("/api/v1/costs/", {"pool": name})
        assert response.status_code == 400
        errors[name] = [{**e, "message": e["message"].replace(name, "NAME")} for e in response.json()["errors"]]
    assert pages["nosuch"] == pages["spot-pool"]
    assert errors["nosuch"] == errors["spot-pool"] == [
        {"field": "pool", "message": "unknown pool 'NAME' (a deleted pool is named as the reports name it, such as train-pool-a#12)"}
    ]
    assert api("other_lead").get("/api/v1/costs/", {"pool": "spot-pool"}).status_code == 200
    assert api("finance").get("/api/v1/costs/", {"pool": "spot-pool"}).status_code == 200
    assert api("finance").get("/api/v1/costs/", {"pool": "nosuch"}).status_code == 400


def test_a_pool_lent_to_the_users_team_or_charged_to_it_is_known(api, actors, teams, fleet):
    """A guest team's lead filters by the pool lent to it (`spec.sharedWith`), and by a pool its
    team was charged on, lent no more."""
    lent = pool(actors["lead"], name="lent-pool", sharedWith=["inference"])
    assert api("other_lead").get("/api/v1/costs/", {"pool": "lent-pool"}).status_code == 200
    was_lent = pool(actors["lead"], name="was-lent")
    assert api("other_lead").get("/api/v1/costs/", {"pool": "was-lent"}).status_code == 400
    CostRecord.objects.create(hour=DAY, pool=was_lent, team=teams["inference"], billing_kind="monthly", cost_kind="usage", amount=1)
    assert api("other_lead").get("/api/v1/costs/", {"pool": "was-lent"}).status_code == 200
    assert lent.team != teams["inference"]
