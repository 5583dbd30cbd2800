"""The audit log page `/audit/` (issue #9 item 4): platform admins only.

Who did what to which object, when, with the state before and after; newest first, filtered by
action prefix (`price`, `role.group`, ...) and actor (username; `system` for entries without
one), paginated. Anyone else gets a 404: a page they may not use does not exist for them.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from pools import roles
from pools.models import AuditEntry

PAGE_SIZE = 50
ACTION_PREFIXES = ("pool", "order", "price", "quota", "account", "repair", "credential", "role")
SYSTEM = "system"


def _compact(value) -> str:
    """One line of JSON; the space after each comma lets a long document wrap in its cell."""
    return "" if value is None else json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False, default=str)


@login_required
@require_GET
def audit_list(request):
    if not roles.is_admin(request.user):
        raise Http404("no such page")
    # NUL characters cannot reach PostgreSQL (a 500); no action or username contains one.
    action = request.GET.get("action", "").replace("\x00", "").strip()[:60]
    actor = request.GET.get("actor", "").replace("\x00", "").strip()[:150]
    entries = AuditEntry.objects.select_related("actor").order_by("-at", "-id")
    if action:
        entries = entries.filter(action__startswith=action)
    if actor == SYSTEM:
        entries = entries.filter(actor__isnull=True)
    elif actor:
        entries = entries.filter(actor__username=actor)
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(entry, _compact(entry.before), _compact(entry.after)) for entry in page.object_list]
    context = {
        "page": page,
        "rows": rows,
        "action": action,
        "actor": actor,
        "prefixes": ACTION_PREFIXES,
        "filter_query": urlencode({k: v for k, v in (("action", action), ("actor", actor)) if v}),
    }
    return render(request, "pools/audit_list.html", context)
