"""The order queue: leads see their team's orders, admins approve or reject them (design §3)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from billing.order_context import order_contexts
from pools import roles
from pools.core.errors import ConflictError, ValidationError
from pools.models import PoolOrder
from pools.selectors import pools as selectors
from pools.services import pools as services
from pools.views.base import htmx_render


@login_required
@require_GET
def order_list(request):
    return _orders_page(request, request.GET.get("status", "Pending" if roles.is_admin(request.user) else ""))


def _orders_page(request, status: str, *, http_status: int = 200):
    if status not in dict(PoolOrder.Status.choices):
        status = ""
    orders = list(selectors.orders_for_user(user=request.user, status=status)[:200])
    can_decide = roles.is_admin(request.user)
    context = {
        "orders": orders,
        "status": status,
        "statuses": PoolOrder.Status.choices,
        "can_decide": can_decide,
    }
    if can_decide:  # the approver's view: quota room, balance and budget use beside each order
        contexts, context["queue_funds"] = order_contexts(orders=orders, now=timezone.now())
        context["rows"] = [(order, contexts[order.pk]) for order in orders]
    else:
        context["rows"] = [(order, None) for order in orders]
    return htmx_render(request, "pools/order_list.html", context, status=http_status)


@login_required
@require_POST
def order_decide(request, order_id: int, decision: str):
    order = selectors.order_get(user=request.user, order_id=order_id)
    try:
        if decision == "approve":
            services.order_approve(user=request.user, order=order)
            messages.success(request, f"Order #{order.pk} approved.")
        else:
            services.order_reject(user=request.user, order=order, reason=request.POST.get("reason", ""))
            messages.success(request, f"Order #{order.pk} rejected.")
    except (ValidationError, ConflictError) as exc:
        # Refused: the queue again with the reason, 400 (409 when the order moved on meanwhile).
        said = str(exc)
        messages.error(request, said[:1].upper() + said[1:] if said.lower().startswith(f"order #{order.pk} ") else f"Order #{order.pk}: {said}")
        return _orders_page(request, order.status, http_status=409 if isinstance(exc, ConflictError) else 400)
    return HttpResponseRedirect(reverse("orders"))
