"""Web pages for pods (list, submit by YAML paste, the pod page with "why Pending") and the
fragmentation reports (per pool, cluster-wide) with plotly charts and the repack plan.

Thin shells over `pools.services.pods` and `pools.services.fragmentation` (design §6).
"""

from __future__ import annotations

import csv

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from pools import roles
from pools.core.documents import dump_yaml
from pools.core.errors import Unavailable, ValidationError
from pools.core.numbers import parse_whole_number
from pools.models.pods import Pod
from pools.selectors import pools as selectors
from pools.selectors.disruption_budgets import budgets_guarding
from pools.services import fragmentation as fragmentation_service
from pools.services import pods as pod_services
from pools.views.base import document_form_page, htmx_render

EXAMPLE_POD = """apiVersion: v1
kind: Pod
metadata:
  name: bert-train-0
  annotations:
    ebcloud.io/duration: "2h"
spec:
  priorityClassName: training
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: pool, operator: In, values: [train]}
  tolerations:
  - {key: pool, operator: Equal, value: train, effect: NoSchedule}
  containers:
  - name: trainer
    image: registry.ebcloud.io/algorithm/bert:1.4
    resources:
      requests: {cpu: "16", memory: 128Gi}
      limits: {nvidia.com/gpu: 8}
"""


class PodForm(forms.Form):
    team = forms.ChoiceField(required=False, help_text="The team that owns the pod")
    document = forms.CharField(label="Pod YAML", widget=forms.Textarea(attrs={"rows": 22, "spellcheck": "false"}))

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        team_list = list(teams or [])
        self.fields["team"].choices = [(t.slug, t.name) for t in team_list]
        self.fields["team"].required = len(team_list) > 1


class PodFilterForm(forms.Form):
    namespace = forms.CharField(required=False, max_length=63)
    phase = forms.ChoiceField(required=False, choices=[("", "any phase"), *Pod.Phase.choices])


@login_required
@require_GET
def pod_list(request):
    form = PodFilterForm(request.GET or None)
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    filters = pod_services.PodFilters(namespace=data.get("namespace", ""), phase=data.get("phase", ""))
    pods = list(pod_services.pods_for_user(user=request.user, filters=filters)[:500])
    context = {
        "pods": pods,
        "filter_form": form,
        "can_submit": bool(pod_services.teams_submitting_for(user=request.user)),
        "polling": any(p.phase == Pod.Phase.PENDING for p in pods),
        "pool_teams_seen": _pool_teams_seen(request.user),
    }
    return htmx_render(request, "pools/pod_list.html", context, partial="pod-table")


@login_required
@require_http_methods(["GET", "POST"])
def pod_create(request):
    teams = pod_services.teams_submitting_for(user=request.user)
    if not teams:
        raise PermissionDenied("only team members and platform admins can submit pods")
    form = PodForm(request.POST or None, teams=teams, initial={"document": EXAMPLE_POD})
    return document_form_page(
        request, form, template="pools/pod_form.html",
        create=lambda document, team: pod_services.pod_create(user=request.user, document=document, team_slug=team),
        done=lambda pod: (reverse("pods:detail", args=[pod.namespace, pod.name]), f"Pod {pod.key} submitted; the scheduler binds it on its next pass."),
    )  # fmt: skip


@login_required
@require_GET
def pod_detail(request, namespace: str, name: str):
    pod = pod_services.pod_get(user=request.user, namespace=namespace, name=name)
    context = {
        "pod": pod,
        "yaml": dump_yaml(pod.document),
        "can_delete": roles.is_admin(request.user) or pod.team_id in roles.team_ids(request.user),
        "polling": pod.phase == Pod.Phase.PENDING,
        "pool_teams_seen": _pool_teams_seen(request.user),
        **_budgets(pod),
    }
    return htmx_render(request, "pools/pod_detail.html", context, partial="pod-status")


def _pool_teams_seen(user) -> frozenset[int] | None:
    """The teams whose pool pages the user may open (None: every team's), so that a pod running
    on a pool lent to its team names that pool without linking to a page that is a 404."""
    return None if roles.sees_all_teams(user) else roles.team_ids(user)


def _budgets(pod: Pod) -> dict:
    """The budgets guarding the pod, or why they cannot be shown now (a real cluster away)."""
    try:
        return {"budgets": budgets_guarding(pod)}
    except Unavailable as exc:
        return {"budgets": [], "budgets_unavailable": str(exc)}


@login_required
@require_POST
def pod_delete(request, namespace: str, name: str):
    pod = pod_services.pod_get(user=request.user, namespace=namespace, name=name)
    pod_services.pod_delete(user=request.user, pod=pod)
    messages.success(request, f"Pod {pod.key} deleted.")
    return HttpResponseRedirect(reverse("pods:list"))


# --- fragmentation ---------------------------------------------------------------------------

TEAM_POOLS_SHOWN = 50  # a lead's summary: a team's pools, not a fleet's


def _charts(report, trend) -> dict:
    """Plotly figure specs (embedded by json_script, drawn by static/js/charts.js)."""
    nodes = list(report.nodes)
    histogram = report.free_fragment_histogram
    return (
        {
            "allocation": {
                "data": [{"type": "bar", "x": [n.name for n in nodes], "y": [round(n.allocated_pct, 1) for n in nodes], "name": "allocated %"}],
                "layout": {"title": {"text": "GPU allocation per node (%)"}, "yaxis": {"range": [0, 100]},
                           "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 50, "y1": 50, "line": {"dash": "dash"}}]},
            },
            "trend": {
                "data": [
                    {"type": "scatter", "mode": "lines+markers", "name": "unallocated %", "x": [t.taken_at.isoformat() for t in trend], "y": [t.unallocated_pct for t in trend]},
                    {"type": "scatter", "mode": "lines+markers", "name": "fragmented GPUs", "yaxis": "y2", "x": [t.taken_at.isoformat() for t in trend], "y": [t.fragmentation_gpus for t in trend]},
                ],
                "layout": {"title": {"text": "Fragmentation trend (weekly)"}, "yaxis": {"title": {"text": "unallocated %"}},
                           "yaxis2": {"title": {"text": "fragmented GPUs"}, "overlaying": "y", "side": "right"}},
            },
            "fragments": {
                "data": [{"type": "bar", "x": list(histogram), "y": list(histogram.values()), "name": "GPUs"}],
                "layout": {"title": {"text": "Free milli-GPU per GPU (1000 = idle GPU, 1-999 = fragment)"}, "xaxis": {"type": "category"}},
            },
        }  # fmt: skip
    )


def _csv(view) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="fragmentation-{view.scope}.csv"'
    writer = csv.writer(response)
    writer.writerow(["node", "pool", "gpus", "allocated_pct", "free_milli_gpu", "fragmented_milli_gpu", "underused"])
    underused = set(view.report.underused_nodes)
    for n in view.report.nodes:
        writer.writerow([n.name, n.pool, n.gpu_count, f"{n.allocated_pct:.1f}", n.free_milli, f"{n.fragmentation_milli:.0f}", "yes" if n.name in underused else "no"])
    return response


def _fragmentation_page(request, *, pools, scope: str, can_apply: bool, apply_url: str, status: int = 200):
    if request.GET.get("format") == "csv":
        return _csv(fragmentation_service.fragmentation_for(pools=pools, scope=scope))
    if request.htmx and request.GET.get("part") == "plan":  # the plan, which the page loads after it shows
        view = fragmentation_service.fragmentation_for(pools=pools, scope=scope, with_plan=True)
        return htmx_render(request, "pools/fragmentation.html#plan", {"plan": view.plan, "can_apply": can_apply, "apply_url": apply_url}, status=status)
    view = fragmentation_service.fragmentation_for(pools=pools, scope=scope)
    trend = fragmentation_service.fragmentation_trend(user=request.user, pool=pools[0] if pools else None)
    context = {
        "trend": trend,
        "scope": scope,
        "pool": pools[0] if pools else None,
        "report": view.report,
        "charts": _charts(view.report, trend),
        "can_apply": can_apply,
        "apply_url": apply_url,
        "unallocated_gpus": view.report.free_gpu_milli / 1000,
        "fragmented_gpus": round(view.report.cluster_fragmentation_milli / 1000, 2),
    }
    return htmx_render(request, "pools/fragmentation.html", context, status=status)


def _pool_page(request, pool, *, status: int = 200):
    return _fragmentation_page(
        request,
        pools=[pool],
        scope=pool.name,
        can_apply=roles.can_manage_team_pools(request.user, pool.team_id),
        apply_url=reverse("pools:fragmentation-apply", args=[pool.name]),
        status=status,
    )


def _cluster_page(request, *, status: int = 200):
    return _fragmentation_page(request, pools=None, scope="cluster", can_apply=roles.is_admin(request.user),
                               apply_url=reverse("fragmentation-apply"), status=status)


@login_required
@require_GET
def pool_fragmentation(request, name: str):
    return _pool_page(request, selectors.pool_get(user=request.user, name=name))


@login_required
@require_GET
def cluster_fragmentation(request):
    """Admins and finance: the whole cluster's report. Everyone else (the menu links here for
    every role): their team's pools, each linking to its own report (another team's nodes are
    not theirs to see)."""
    if not roles.sees_all_teams(request.user):
        if request.GET.get("format") == "csv":
            raise PermissionDenied("the cluster-wide report is for platform admins and finance; each pool's report has its own CSV")
        pools = list(selectors.pools_visible(user=request.user).select_related("team", "gpu_model")[:TEAM_POOLS_SHOWN])
        reports = fragmentation_service.fragmentation_by_pool(pools=pools)
        rows = [_pool_summary(pool, reports[pool.name]) for pool in pools]
        return htmx_render(request, "pools/fragmentation_pools.html", {"rows": rows})
    return _cluster_page(request)


def _pool_summary(pool, report) -> dict:
    """A pool's line on a lead's fragmentation page: its Ready GPUs, the share unallocated and
    the GPUs fragmented (free capacity its pods could not use as it is split now)."""
    ready = report.total_gpu_milli > 0
    return {
        "pool": pool,
        "gpus": report.total_gpu_milli // 1000,
        "unallocated_pct": report.unallocated_pct if ready else None,
        "fragmented_gpus": round(report.cluster_fragmentation_milli / 1000, 2) if ready else None,
    }


def _apply(request, *, pool, back: str, page):
    """Apply the repack; done, back to the report (POST-redirect-GET); refused, the report
    again with the reason and a 400, so a script or a browser both see the refusal."""
    try:
        try:
            max_nodes = parse_whole_number(request.POST.get("max_nodes", "1"), signed=True)
        except ValueError:
            raise ValidationError("must be a whole number", field="maxNodes") from None
        shares = request.POST.get("part") == "shares"
        applied = fragmentation_service.repack_apply(user=request.user, pool=pool, max_nodes=max_nodes, shares=shares)
    except ValidationError as exc:
        messages.error(request, f"Repack not applied: {exc}")
        return page(status=400)
    if shares:
        started = f"; waiting pod(s) started: {', '.join(applied.started)}" if applied.started else ""
        messages.success(request, f"GPU shares repacked: {len(applied.moved)} pod(s) moved; {applied.plan.share_gpus_freed} whole GPU(s) freed{started}.")
    else:
        freed = ", ".join(applied.plan.freed_nodes) or "none"
        messages.success(request, f"Repack applied: {len(applied.moved)} pod(s) moved; freed nodes: {freed}.")
    return HttpResponseRedirect(back)


@login_required
@require_POST
def pool_fragmentation_apply(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    return _apply(request, pool=pool, back=reverse("pools:fragmentation", args=[pool.name]),
                  page=lambda status: _pool_page(request, pool, status=status))


@login_required
@require_POST
def cluster_fragmentation_apply(request):
    if not roles.sees_all_teams(request.user):
        raise PermissionDenied("the cluster-wide report is for platform admins and finance")
    return _apply(request, pool=None, back=reverse("fragmentation"), page=lambda status: _cluster_page(request, status=status))
