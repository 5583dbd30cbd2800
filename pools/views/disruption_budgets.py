"""Web pages for disruption budgets: the list (how many of each budget's pods may be evicted
now), adding one by YAML paste, deleting one. Thin shells over the services and selectors of
`disruption_budgets` (design §6); on a real cluster the list shows the cluster's own and the
writes are kubectl's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from pools.core.errors import ConflictError, Unavailable
from pools.providers import real_cluster
from pools.selectors import disruption_budgets as selectors
from pools.services import disruption_budgets as services
from pools.services.pods import teams_submitting_for
from pools.views.base import document_form_page, htmx_render
from pools.views.pods import PodForm

EXAMPLE_BUDGET = """apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: nlp-trainers
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      project: nlp
"""


class BudgetForm(PodForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].help_text = "The team whose namespace holds the budget"
        self.fields["document"].label = "PodDisruptionBudget YAML"
        self.fields["document"].widget.attrs["rows"] = 12


@login_required
@require_GET
def budget_list(request):
    try:
        budgets, unavailable = selectors.budget_list(user=request.user), ""
    except Unavailable as exc:
        budgets, unavailable = [], str(exc)
    writes = not real_cluster()
    own = {team.slug for team in teams_submitting_for(user=request.user)} if writes else set()
    rows = [(budget, _selects(budget.get("spec") or {}), budget["metadata"].get("team") in own) for budget in budgets]
    return htmx_render(request, "pools/disruption_budget_list.html", {"rows": rows, "unavailable": unavailable, "can_add": bool(own)})


def _selects(spec: dict) -> tuple[str, list[str]]:
    """What the selector picks: in words (no pod, every pod), or its terms (`project=nlp`)."""
    selector = spec.get("selector")
    if selector is None:
        return "no pod", []
    terms = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or ():
        terms.append(f"{e.get('key')} {e.get('operator')}" + (f" ({', '.join(e['values'])})" if e.get("values") else ""))
    return ("", terms) if terms else ("every pod of the namespace", [])


@login_required
@require_http_methods(["GET", "POST"])
def budget_create(request):
    teams = teams_submitting_for(user=request.user)
    if not teams:
        raise PermissionDenied("only team members and platform admins can add disruption budgets")
    form = BudgetForm(request.POST or None, teams=teams, initial={"document": EXAMPLE_BUDGET})
    return document_form_page(
        request, form, template="pools/disruption_budget_form.html",
        create=lambda document, team: services.budget_create(user=request.user, document=document, team_slug=team),
        done=lambda budget: (reverse("disruption:list"), f"Disruption budget {budget} added."),
    )  # fmt: skip


@login_required
@require_POST
def budget_delete(request, namespace: str, name: str):
    try:
        services.budget_delete(user=request.user, namespace=namespace, name=name)
    except ConflictError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Disruption budget {namespace}/{name} deleted: its pods may be evicted freely again.")
    return HttpResponseRedirect(reverse("disruption:list"))
