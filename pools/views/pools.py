"""Web views for team leads, finance and admins: thin shells over services and selectors.

Pool pages: list, detail (with its charts fragment), create, edit, import, export and delete.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing.advisor_service import pool_advice
from billing.budget_admin import may_set_budgets
from billing.budget_selectors import pool_budget, pool_form_budget_hint
from billing.month_spend import pool_spend_attach
from pools import roles
from pools.controllers.lifecycle import pool_capacity_times
from pools.core.charts import pool_figures, samples_window
from pools.core.documents import dump_yaml
from pools.core.errors import ConflictError, StaleVersion, ValidationError
from pools.core.spec import TAINT_EFFECTS
from pools.core.words import plural
from pools.forms import PoolFilterForm, PoolForm, PoolImportForm
from pools.models import PoolEvent
from pools.selectors import pools as selectors
from pools.services import pools as services
from pools.views.base import document_form_page, htmx_render, query_name
from pools.views.repairs import repairs_context

CHART_WINDOW = timedelta(hours=24)
POOLS_PER_PAGE = 50  # the pool list pages at 1,000 pools (issue 9: p95 < 150 ms)


@login_required
@require_GET
def pool_list(request):
    filter_form = PoolFilterForm(request.GET or None, teams=selectors.teams_visible_to(user=request.user))
    filter_form.is_valid()
    data = filter_form.cleaned_data if filter_form.is_bound else {}
    filters = selectors.PoolFilters(
        team=data.get("team", ""),
        gpu_model=data.get("gpu_model", ""),
        phase=data.get("phase", ""),
        q=data.get("q", ""),
        sort=request.GET.get("sort", "name"),
    )
    page = Paginator(selectors.pools_visible(user=request.user, filters=filters), POOLS_PER_PAGE).get_page(request.GET.get("page"))
    pools = pool_spend_attach(selectors.node_counts_attach(list(page.object_list)), now=timezone.now())
    query = request.GET.copy()
    query.pop("sort", None)
    query.pop("page", None)  # a new sort starts at the first page
    paging = request.GET.copy()
    paging.pop("page", None)
    context = {
        "pools": pools,
        "page": page,
        "page_query": paging.urlencode(),
        "filter_form": filter_form,
        "sort": filters.sort,
        "base_query": query.urlencode(),
        "can_create": bool(selectors.teams_led_by(user=request.user).exists()),
        "sort_columns": [("name", "Name"), ("team", "Team"), ("gpu", "GPU"), ("zone", "Zone"), ("min", "Min"), ("max", "Max"), ("phase", "Phase")],
    }
    return htmx_render(request, "pools/pool_list.html", context, partial="pool-table")


@login_required
@require_GET
def pool_detail(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    repairs = repairs_context(user=request.user, pool=pool, poll_url=reverse("pools:detail", args=[pool.name]) + "?part=repairs")
    if request.htmx and request.GET.get("part") == "repairs":  # the repair section's poll: only what it shows
        return htmx_render(request, "pools/pool_detail.html", {"pool": pool, **repairs}, partial="repairs")
    warnings_only = request.GET.get("type") == PoolEvent.Type.WARNING  # anything else: every event
    context = {
        "pool": pool,
        "warnings_only": warnings_only,
        "spec": pool.document.get("spec", {}),
        "labels": pool.labels,
        "nodes": selectors.pool_nodes(pool=pool),
        "orders": pool.orders.select_related("requested_by", "decided_by").order_by("-created_at")[:20],
        "events": selectors.pool_events(pool=pool, limit=50, warnings_only=warnings_only),
        "can_manage": roles.can_manage_team_pools(request.user, pool.team_id),
        "can_decide": roles.is_admin(request.user),  # orders are decided in the queue, linked from here
        "polling": pool.changing,
        "yaml": dump_yaml(pool.document),
        "capacity": pool_capacity_times(pool=pool),
        "scaling": pool.scaling_activities.order_by("-at", "-id")[:20],
        "pool_budget": pool_budget(pool=pool, now=timezone.now()),
        "can_set_budget": may_set_budgets(request.user),
        "advice": pool_advice(pool=pool, now=timezone.now()),
    }
    context.update(repairs)
    # The parts that poll: status and timeline while the pool changes (repairs, above, while one moves).
    part = "status" if request.GET.get("part") == "status" else "timeline"
    return htmx_render(request, "pools/pool_detail.html", context, partial=part)


@login_required
@require_GET
def pool_charts(request, name: str):
    """The pool page's charts (a fragment it loads after it shows): a day of per-minute samples."""
    pool = selectors.pool_get(user=request.user, name=name)
    now = timezone.now()
    samples = selectors.pool_samples(pool=pool, since=now - CHART_WINDOW)
    context = {"pool": pool, "charts": pool_figures(samples, now=now), "window": samples_window(samples, now=now), "polling": pool.changing}
    return htmx_render(request, "pools/pool_detail.html#charts", context)


@login_required
@require_http_methods(["GET", "POST"])
def pool_create(request):
    teams = list(selectors.teams_led_by(user=request.user))
    if not teams:
        raise PermissionDenied("only team leads and platform admins can create pools")
    # A Pending pod's hint links here with what to order (?team=&gpu_model=&node_type=).
    prefill = {key: request.GET[key] for key in ("team", "gpu_model", "node_type") if request.GET.get(key)}
    form = PoolForm(request.POST or None, teams=teams, initial={"min_nodes": 2, "max_nodes": 6, "auto_repair": True, **prefill})
    form.fields["budget_monthly"].help_text = pool_form_budget_hint(pool=None, now=timezone.now(), shape=form.chosen_shape())
    if request.method == "POST":
        form.read_rows()
        if form.is_valid():
            try:
                pool = services.pool_create(user=request.user, document=form.to_document(), team_slug=form.cleaned_data.get("team", ""))
            except ValidationError as exc:
                form.add_spec_errors(exc)
            except ConflictError as exc:
                form.add_error("name", str(exc))
            else:
                messages.success(request, f"Pool {pool.name} created; its order awaits approval." if pool.phase == "Pending" else f"Pool {pool.name} created.")
                return HttpResponseRedirect(reverse("pools:detail", args=[pool.name]))
    else:
        form.rows = {"label": [], "nodelabel": [], "taint": []}
    return htmx_render(request, "pools/pool_form.html", {"form": form, "editing": None, "taint_effects": TAINT_EFFECTS}, status=400 if form.errors or any(form.row_errors.values()) else 200)


@login_required
@require_http_methods(["GET", "POST"])
def pool_edit(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    if not roles.can_manage_team_pools(request.user, pool.team_id):
        raise PermissionDenied("only the team's leads and platform admins can change this pool")
    form = PoolForm.editing(pool, request.POST or None, budget_hint=pool_form_budget_hint(pool=pool, now=timezone.now()))
    outdated, conflict = "", False
    if request.method == "POST":
        form.read_rows()
        if form.is_valid():
            ordered = set(pool.orders.values_list("pk", flat=True))
            catalog = selectors.catalog_current()
            try:
                services.pool_update(user=request.user, pool=pool, document=form.to_update(pool, catalog))
            except ValidationError as exc:
                form.add_spec_errors(exc)
            except StaleVersion as exc:
                form, outdated = _outdated(form, selectors.pool_get(user=request.user, name=name), exc, catalog)
            except ConflictError as exc:  # the pool was made again or is being deleted: 409, as the API answers
                form.add_error(None, str(exc))
                conflict = True
            else:
                new = pool.orders.exclude(pk__in=ordered).order_by("pk").first()  # a baseline it lacks, asked again
                messages.success(request, f"Pool {pool.name} updated." + (f" Order #{new.pk} for {plural(new.node_count, 'node')} awaits approval." if new else ""))
                return HttpResponseRedirect(reverse("pools:detail", args=[pool.name]))
    status = 409 if outdated or conflict else 400 if form.errors or any(form.row_errors.values()) else 200
    context = {"form": form, "editing": pool, "outdated": outdated, "taint_effects": TAINT_EFFECTS}
    return htmx_render(request, "pools/pool_form.html", context, status=status)


def _outdated(form: PoolForm, pool, stale: StaleVersion, catalog) -> tuple[PoolForm, str]:
    """Another change landed while the form was open: nothing is saved, and the form comes back
    as the pool is now with this lead's changes on top (`PoolForm.merged_onto`), saying whose
    change it was and where both changed the same value, so that saving again keeps both. A
    post without the document it was opened at keeps what it sent, moved to the current
    version: saving it again is a choice made knowing that change."""
    changes = "; ".join(selectors.latest_spec_changes(pool=pool, count=min(stale.current - stale.read, 3))) or "its spec changed"
    said = f"This pool was changed after you opened this form ({changes}). Nothing was saved"
    merge = form.merged_onto(pool, catalog)
    if merge is None:
        form.data = form.data.copy()
        form.data["resource_version"] = str(stale.current)
        return form, f"{said}: check your values against that change, then save again to keep them, or reload the page to start from the pool as it is now."
    document, conflicts = merge
    merged = PoolForm.editing(pool, document=document, base=pool.document, budget_hint=pool_form_budget_hint(pool=pool, now=timezone.now()))
    both = "".join(f" You and that change both set {c.path.removeprefix('spec.')}: yours ({_shown(c.mine)}) is shown, not {_shown(c.theirs)}." for c in conflicts)
    return merged, f"{said}. The form now shows the pool as it is now with your changes on top: check it and save again.{both}"


def _shown(value) -> str:
    return "unset" if value is None else json.dumps(value)


@login_required
@require_GET
def form_row(request):
    """One empty editable row (htmx 'add row')."""
    kind = request.GET.get("kind", "label")
    if kind not in ("label", "nodelabel", "taint"):
        kind = "label"
    return render(request, "pools/pool_form.html#row", {"kind": kind, "row": {}, "taint_effects": TAINT_EFFECTS})


@login_required
@require_POST
def pool_preview(request):
    """The YAML the pool form would send (htmx, as the form changes): `?pool=NAME` when editing."""
    name = query_name(request, "pool")
    if name:
        pool = selectors.pool_get(user=request.user, name=name)
        if not roles.can_manage_team_pools(request.user, pool.team_id):
            raise PermissionDenied("only the team's leads and platform admins can change this pool")
        form = PoolForm.editing(pool, request.POST)
    else:
        teams = list(selectors.teams_led_by(user=request.user))
        if not teams:
            raise PermissionDenied("only team leads and platform admins can create pools")
        pool, form = None, PoolForm(request.POST, teams=teams)
    form.read_rows()
    if not form.is_valid():
        problems = "; ".join(f"{form[f].label if f in form.fields else 'form'}: {' '.join(e)}" for f, e in form.errors.items())  # a bound field's label
        return HttpResponse(escape(f"(fix the form first: {problems})"))
    return HttpResponse(escape(dump_yaml(form.to_document(base=pool.document if pool else None))))


@login_required
@require_http_methods(["GET", "POST"])
def pool_import(request):
    teams = list(selectors.teams_led_by(user=request.user))
    if not teams:
        raise PermissionDenied("only team leads and platform admins can create pools")
    form = PoolImportForm(request.POST or None, request.FILES or None, teams=teams)
    return document_form_page(
        request, form, template="pools/pool_import.html", text_field="text",
        create=lambda document, team: services.pool_create(user=request.user, document=document, team_slug=team),
        done=lambda pool: (reverse("pools:detail", args=[pool.name]), f"Pool {pool.name} imported."),
    )  # fmt: skip


@login_required
@require_GET
def pool_export(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    response = HttpResponse(dump_yaml(pool.document), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{pool.name}.yaml"'
    return response


@login_required
@require_http_methods(["GET", "POST"])
def pool_delete(request, name: str):
    pool = selectors.pool_get(user=request.user, name=name)
    if not roles.can_manage_team_pools(request.user, pool.team_id):
        raise PermissionDenied("only the team's leads and platform admins can delete this pool")
    if request.method == "POST":
        try:
            pool = services.pool_delete(user=request.user, pool=pool)
        except ConflictError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("pools:detail", args=[name]))
        messages.success(request, f"Pool {name} deleted." if pool.deleted_at else f"Pool {name} is being deleted.")
        return HttpResponseRedirect(reverse("pools:list") if pool.deleted_at else reverse("pools:detail", args=[name]))
    return htmx_render(request, "pools/pool_confirm_delete.html", {"pool": pool})
