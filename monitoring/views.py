"""Monitoring web pages: the cluster overview (water levels and alerts) (issue 6 §6)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from monitoring import selectors


@login_required
def overview(request):
    return render(request, "monitoring/overview.html", selectors.overview_for_user(user=request.user))
