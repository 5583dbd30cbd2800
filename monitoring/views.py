"""Monitoring web pages: the cluster overview (water levels and alerts) (issue 6 §6)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required

from monitoring import selectors
from pools.views.base import htmx_render


@login_required
def overview(request):
    """The page, or (htmx) its live part. That part asks again every 15 s while any pool shown
    changes by itself or has nodes (their agents report every few seconds); otherwise the
    numbers stand still and the page stops asking."""
    context = selectors.overview_for_user(user=request.user)
    context["polling"] = any(s.pool.changing or s.nodes_by_phase for s in context["stats"])
    return htmx_render(request, "monitoring/overview.html", context, partial="live")
