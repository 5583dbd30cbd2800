"""The alert list `/notifications/`: budget and capacity alerts of the user's teams (finance and
admins: every team's), open first; a team's leads and platform admins acknowledge them."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from pools.core.alerting import RULES_BY_REASON
from pools.models import Notification
from pools.selectors import notifications as selectors
from pools.services import notifications as services
from pools.views.base import htmx_render

PAGE_SIZE = 50


@login_required
@require_GET
def notification_list(request):
    show = "open" if request.GET.get("show") == "open" else "all"
    rows = selectors.notifications_for_user(user=request.user, open_only=show == "open")
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "show": show,
        "acknowledgeable": {n.pk for n in page.object_list if services.may_acknowledge(request.user, n)},
        "webhook": bool(settings.EBCLOUD_ALERT_WEBHOOK_URL),
        "capacity_kinds": RULES_BY_REASON,  # these link to the pool's alert page (rules, silences)
    }
    return htmx_render(request, "pools/notification_list.html", context)


@login_required
@require_POST
def notification_acknowledge(request, pk: int):
    try:
        notification = selectors.notification_get(user=request.user, notification_id=pk)
    except Notification.DoesNotExist:
        raise Http404("no such notification") from None
    if not services.may_acknowledge(request.user, notification):
        raise PermissionDenied("only the team's leads and platform admins acknowledge its alerts")
    if services.notification_acknowledge(user=request.user, notification=notification, now=timezone.now()):
        messages.success(request, "Alert acknowledged.")
    else:
        messages.info(request, "That alert was already acknowledged.")
    return HttpResponseRedirect(reverse("notifications"))
