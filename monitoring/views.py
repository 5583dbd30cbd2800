"""Monitoring web pages: the cluster overview (water levels and alerts) (issue 6 §6) and its
utilisation trends (issue 21), which follow the page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.utils import timezone
from django.views.decorators.http import require_GET

from monitoring import selectors, trends
from pools.views.base import htmx_render


@login_required
def overview(request):
    """The page, or (htmx) its live part. That part asks again every 15 s while any pool shown
    changes by itself or has nodes (their agents report every few seconds); otherwise the
    numbers stand still and the page stops asking."""
    context = selectors.overview_for_user(user=request.user)
    context["polling"] = any(s.pool.changing or s.nodes_by_phase for s in context["stats"])
    return htmx_render(request, "monitoring/overview.html", context, partial="live")


@login_required
@require_GET
def utilisation_trends(request):
    """The overview's trends section, loaded after the page shows: a day of samples of every
    pool is the page's heaviest read, and the water levels must not wait for it."""
    context = {"trends": trends.trends_for_user(user=request.user, now=timezone.now()), "window": trends.trend_window()}
    return htmx_render(request, "monitoring/overview.html#trends", context)
