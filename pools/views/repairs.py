"""The fleet's repair page `/repairs/` (issue 21: "no fleet-wide view" of repairs): platform
admins only; anyone else gets a 404, as on the audit log. What is being repaired now in every
pool and at what stage, the requests waiting for an admin, and the last week's repair events.
The same section, limited to one pool, is on the pool page (`pools.views.pools.pool_detail`).
The section polls every 5 s while a repair moves by itself and stops once none does.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from pools import roles
from pools.selectors.repairs import repair_approvals_open, repair_outcomes, repairs_in_progress
from pools.views.base import htmx_render


def repairs_context(*, user, pool=None, poll_url: str) -> dict:
    """What the repair section shows, for the fleet (`pool` None) or one pool."""
    now = timezone.now()
    rows = repairs_in_progress(user=user, pool=pool, now=now)
    return {
        "repairs": rows,
        "repair_approvals": repair_approvals_open(user=user, pool=pool),
        "repair_outcomes": repair_outcomes(user=user, pool=pool, now=now),
        "repairs_polling": any(r.moving for r in rows),
        "repairs_poll_url": poll_url,
    }


@login_required
@require_GET
def repair_list(request):
    if not roles.is_admin(request.user):
        raise Http404("no such page")
    context = repairs_context(user=request.user, poll_url=reverse("repairs"))
    return htmx_render(request, "pools/repair_list.html", context, partial="repairs")
