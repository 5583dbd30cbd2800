"""The costs page: chargeback table, idle share, cost over time, CSV download, budget bars.
Totals, idle shares and the chart are per currency (`billing.chargeback.Summary`).

A thin shell over `billing.selectors`; the filter and sort state lives in the query string, so
a view of the costs is a shareable URL. The CSV button links to the API with the same query,
which groups with the same selector: its totals equal the page's to the cent.

A filter the parser refuses shows its errors in the table's fragment (the part htmx swaps in
when Filter is pressed) and no figures at all: neither the unfiltered totals, which finance
would read as the filtered ones beside the typed filter, nor the download links, which would
export them. The form keeps what was typed, so the one bad field is fixed in place.
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
from config.request_paths import CONTROL
from pools.core.errors import FieldError, ValidationError
from pools.selectors.pools import teams_visible_to
from pools.views.base import htmx_render

QUERY_KEYS = ("by", "from", "to", "team", "pool", "billing", "sort")
# The form's label of each query parameter, for the errors shown above the table.
FIELD_LABELS = {"by": "Group by label keys", "from": "From", "to": "To", "team": "Charged team", "pool": "Pool",
                "billing": "Billing", "sort": "Sort", "namespace": "Group by namespace"}  # fmt: skip


@login_required
@require_GET
def cost_list(request):
    now = timezone.now()
    context = {
        "teams": teams_visible_to(user=request.user),
        "default_by": ",".join(DEFAULT_GROUP_LABELS),
        "budgets": selectors.budget_statuses(user=request.user, now=now),
    }
    try:
        query = api.parse_query(request.GET, user=request.user, now=now)
    except ValidationError as exc:
        context.update(_refused(request.GET, exc.errors))
    else:
        context.update(_costs(request.user, query, now=now))
    return htmx_render(request, "billing/cost_list.html", context, partial="cost-table")


def _refused(params, errors: list[FieldError]) -> dict:
    """The page for a refused filter: the errors by the form's labels and the fields as typed
    (control characters dropped: they are what was refused, and no HTML holds them); no
    figures. A refused sort is not kept: the form has no field to correct it in."""
    state = {key: CONTROL.sub("", params.get(key, "")) for key in QUERY_KEYS}
    if any(e.field == "sort" for e in errors):
        state["sort"] = ""
    return {
        "errors": errors,
        "error_lines": [(FIELD_LABELS.get(e.field, e.field), e.message) for e in errors],
        "state": state,
        "sort": state["sort"],
    }


def _costs(user, query: selectors.CostQuery, *, now) -> dict:
    """The page's figures for a valid query: the metered days plus the hours still accruing."""
    accruing = chargeback.accruing_costs(user=user, query=query, now=now)
    groups = chargeback.chargeback(user=user, query=query, accruing=accruing)
    summary = chargeback.summarize(groups)
    series = chargeback.cost_series(user=user, query=query, accruing=accruing)
    state = {
        "by": ",".join(query.by) or ("namespace" if query.include_namespace else ""),  # by namespace alone (`cost_query_parse`)
        "from": query.start.isoformat() if query.start else "",
        "to": query.end.isoformat() if query.end else "",
        "team": query.team,
        "pool": query.pool,
        "billing": query.billing,
    }
    base = {k: v for k, v in state.items() if v}
    return {
        "query": query,
        "state": state,
        "errors": [],
        "columns": query.columns,
        "rows": [(g.as_dict(), g) for g in groups],
        "summary": summary,
        # Each currency's total with its metered part: the metered part is what the pool list's
        # "Cost this month" and the budgets count (`billing.month_spend`), the rest accrues.
        "total_lines": [(t, t.total - t.accruing) for t in summary.lines],
        "sort": query.sort,
        "base_query": urlencode(base),
        "csv_url": reverse("billing:api-costs")
        + "?"
        + urlencode({**base, "sort": query.sort, "format": "csv"}),
        "focus_url": reverse("billing:api-costs") + "?" + urlencode({**base, "format": "focus"}),
        "chart": cost_figure(series, key=(query.by or ("team",))[0], start=query.start, end=query.end),
        "accruing": chargeback.accruing_by_team(groups),
        "accruing_since": min((r.hour for r in accruing), default=None),
    }


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
