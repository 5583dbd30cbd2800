"""The costs page: chargeback table, idle share, cost over time, CSV download, budget bars.
Totals, idle shares and the chart are per currency (`billing.chargeback.Summary`).

A thin shell over `billing.selectors`; the filter and sort state lives in the query string, so
a view of the costs is a shareable URL. The CSV button links to the API with the same query,
which groups with the same selector: its totals equal the page's to the cent.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from billing import api, chargeback, selectors
from billing.allocation import DEFAULT_GROUP_LABELS
from billing.budget_admin import may_set_budgets
from billing.budget_selectors import PRECEDENCE
from billing.cost_chart import cost_figure
from pools.core.errors import ValidationError
from pools.selectors.pools import teams_visible_to
from pools.views.base import htmx_render

QUERY_KEYS = ("by", "from", "to", "team", "pool", "billing", "sort")


@login_required
@require_GET
def cost_list(request):
    errors = []
    now = timezone.now()
    try:
        query = api.parse_query(request.GET, now=now)
    except ValidationError as exc:
        errors = exc.errors
        query = api.parse_query({}, now=now)
    accruing = chargeback.accruing_costs(user=request.user, query=query, now=now)
    groups = chargeback.chargeback(user=request.user, query=query, accruing=accruing)
    summary = chargeback.summarize(groups)
    series = chargeback.cost_series(user=request.user, query=query, accruing=accruing)
    state = {
        "by": ",".join(query.by),
        "from": query.start.isoformat() if query.start else "",
        "to": query.end.isoformat() if query.end else "",
        "team": query.team,
        "pool": query.pool,
        "billing": query.billing,
    }
    base = {k: v for k, v in state.items() if v}
    context = {
        "query": query,
        "state": state,
        "errors": errors,
        "columns": query.columns,
        "rows": [(g.as_dict(), g) for g in groups],
        "summary": summary,
        "sort": query.sort,
        "base_query": urlencode(base),
        "csv_url": reverse("billing:api-costs")
        + "?"
        + urlencode({**base, "sort": query.sort, "format": "csv"}),
        "focus_url": reverse("billing:api-costs") + "?" + urlencode({**base, "format": "focus"}),
        "chart": cost_figure(series, key=(query.by or ("team",))[0], start=query.start, end=query.end),
        "teams": teams_visible_to(user=request.user),
        "default_by": ",".join(DEFAULT_GROUP_LABELS),
        "budgets": selectors.budget_statuses(user=request.user, now=now),
        "accruing": chargeback.accruing_by_team(groups),
        "accruing_since": min((r.hour for r in accruing), default=None),
    }
    return htmx_render(request, "billing/cost_list.html", context, partial="cost-table")


@login_required
@require_GET
def budget_list(request):
    """Every budget the user may see with this month's spend and forecast, and recent alerts."""
    statuses = selectors.budget_statuses(user=request.user, now=timezone.now())
    statuses.sort(key=lambda s: s.percent, reverse=True)
    context = {
        "budgets": statuses,
        "alerts": selectors.budget_alerts_for_user(user=request.user),
        "can_set": may_set_budgets(request.user),
        "precedence": PRECEDENCE,
    }
    return render(request, "billing/budget_list.html", context)
