"""The node page `/pools/<pool>/nodes/<node>/` (issue 6): phase, conditions, taints and cordon,
the GPUs as the agent last reported them (DCGM fields), the agent credential, the pods, the
repair history, and the pending repair approval.

Team members see their own pools' nodes (another team's is a 404); platform admins also act
here, by POST to the same URL with an `action`: approve or reject a pending repair, revoke the
agent credential, mint a join token (the node re-joins and its old credential is revoked: a
rotation from the UI; the agent rotates by itself with `/api/agent/v1/credential/rotate/`),
and, with the simulated cloud, make a GPU raise an Xid. Thin shell over the services.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from monitoring import services as monitoring_services
from pools import roles
from pools.core.errors import ConflictError, FieldError, ValidationError
from pools.core.numbers import parse_whole_number
from pools.models import Node
from pools.models.repair import RepairApproval
from pools.providers.faults import gpu_fault_inject, simulated_cloud
from pools.selectors.nodes import node_get, node_page
from pools.selectors.repairs import node_lineage
from pools.services.repair import repair_approve, repair_reject
from pools.views.base import htmx_render

GONE = (Node.Phase.TERMINATING, Node.Phase.TERMINATED)
ACTIONS = ("approve", "reject", "revoke", "join-token", "inject-fault")
# The page's labels of the posted fields, so a refusal names the field the admin sees; a refused
# reason is shown beside the reject form's Reason field instead.
FIELD_LABELS = {"action": "Action", "approval": "Repair", "gpu": "GPU", "xid": "Xid"}


def _said(error: FieldError) -> str:
    said = f"{FIELD_LABELS.get(error.field, error.field)}: {error.message}" if error.field else error.message
    return said[:1].upper() + said[1:]


def _int(value: str | None, field: str) -> int:
    try:
        return parse_whole_number(value or "", signed=True)
    except ValueError as exc:
        raise ValidationError("must be a whole number", field=field) from exc


def _act(request, node: Node) -> str | None:
    """Run one admin action; returns a join token to show once, else None."""
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        raise ValidationError(f"unknown action; expected one of {', '.join(ACTIONS)}", field="action")
    if action in ("approve", "reject"):
        approval = get_object_or_404(RepairApproval, pk=_int(request.POST.get("approval"), "approval"), node=node)
        if action == "approve":
            repair_approve(user=request.user, approval=approval)
            messages.success(request, f"Repair {approval.what} of {node.name} approved: the next repair pass starts it.")
        else:
            repair_reject(user=request.user, approval=approval, note=request.POST.get("note", "").strip())
            messages.success(request, f"Repair {approval.what} of {node.name} rejected.")
    elif action == "revoke":
        count = monitoring_services.credential_revoke_for_node(node, reason="RevokedByAdmin", actor=request.user)
        messages.success(request, f"Agent credential of {node.name} revoked." if count else f"{node.name} has no active agent credential.")
    elif action == "join-token":
        _, token = monitoring_services.join_token_create(user=request.user, node=node)
        return token
    else:
        gpu, xid = _int(request.POST.get("gpu"), "gpu"), _int(request.POST.get("xid"), "xid")
        gpu_fault_inject(user=request.user, node=node, gpu=gpu, xid=xid)
        messages.success(request, f"Simulated cloud: GPU {gpu} of {node.name} raised Xid {xid}; the agent reports it next.")
    return None


@login_required
@require_http_methods(["GET", "POST"])
def node_detail(request, name: str, node: str):
    target = node_get(user=request.user, pool_name=name, node_name=node)
    is_admin = roles.is_admin(request.user)
    join_token = None
    status = 200
    reject_errors: list[str] = []
    if request.method == "POST":
        if not is_admin:
            raise PermissionDenied("only platform admins act on nodes here")
        try:
            join_token = _act(request, target)
        except ValidationError as exc:
            # Refused: the page again with the reason (400), a refused reason beside its field.
            for error in exc.errors:
                if error.field == "note":
                    reject_errors.append(error.message[:1].upper() + error.message[1:])
                else:
                    messages.error(request, _said(error))
            status = 400
        except ConflictError as exc:  # the repair moved on meanwhile, or the node did
            messages.error(request, str(exc))
            status = 409
        else:
            if join_token is None:  # done: POST-redirect-GET
                return HttpResponseRedirect(reverse("pools:node-detail", args=[name, node]))
        target.refresh_from_db()
    context = {
        "node": target,
        "pool": target.pool,
        "is_admin": is_admin,
        "join_token": join_token,
        "reject_errors": reject_errors,
        "can_inject": is_admin and target.phase not in GONE and bool(target.provider_id) and simulated_cloud() is not None,
        **node_page(user=request.user, node=target),
        "lineage": node_lineage(node=target),
    }
    response = htmx_render(request, "pools/node_detail.html", context, status=status)
    if join_token:
        response["Cache-Control"] = "no-store"  # the token is a secret shown once
    return response
