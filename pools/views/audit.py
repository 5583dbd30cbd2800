"""The audit log page `/audit/` (issue #9 item 4): platform admins read every entry; finance
reads the money's (budgets, prices, the account, orders), as its guide says (budgets, §3).

Who did what to which object, when, with the state before and after; newest first, filtered by
action prefix (`price`, `role.group`, ...) and actor (username; `system` for entries without
one), paginated. Anyone else gets a 404: a page they may not use does not exist for them.
"""

from __future__ import annotations

import json
import operator
from functools import reduce
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from pools import roles
from pools.models import AuditEntry

PAGE_SIZE = 50
ACTION_PREFIXES = ("pool", "order", "price", "budget", "quota", "account", "repair", "credential", "role")
# The entries about money, which finance reads: who set a budget, changed a price, topped up
# the account, requested, approved or paid an order.
FINANCE_PREFIXES = ("order", "price", "budget", "account")
SYSTEM = "system"


def _readable(user) -> tuple[str, ...] | None:
    """The action prefixes `user` reads (() for every entry), or None where the page is none of theirs."""
    if roles.is_admin(user):
        return ()
    return FINANCE_PREFIXES if roles.is_finance(user) else None


def _compact(value) -> str:
    """One line of JSON; the space after each comma lets a long document wrap in its cell."""
    return "" if value is None else json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False, default=str)


@login_required
@require_GET
def audit_list(request):
    readable = _readable(request.user)
    if readable is None:
        raise Http404("no such page")
    # NUL characters cannot reach PostgreSQL (a 500); no action or username contains one.
    # Actions are lower case: `ORDER` matched on SQLite (LIKE ignores case), not on PostgreSQL.
    action = request.GET.get("action", "").replace("\x00", "").strip().lower()[:60]
    actor = request.GET.get("actor", "").replace("\x00", "").strip()[:150]
    entries = AuditEntry.objects.select_related("actor").order_by("-at", "-id")
    if readable:
        entries = entries.filter(reduce(operator.or_, (Q(action__startswith=f"{prefix}.") for prefix in readable)))
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
        "prefixes": readable or ACTION_PREFIXES,
        "money_only": bool(readable),
        "filter_query": urlencode({k: v for k, v in (("action", action), ("actor", actor)) if v}),
    }
    return render(request, "pools/audit_list.html", context)
