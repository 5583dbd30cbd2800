"""Finance's budget pages (issue 21 item 11): set a pool's budget over its spec and default, and
create, change or remove a team's budget. Thin: forms shape, `billing.budget_admin` decides.

A pool or a team budget of another team is a 404 (a lead or member never learns what another
team has); anyone but finance and admins who may see it is refused (403), as is anyone but them
on the page that creates a team budget."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from billing import budget_admin
from billing.budget_forms import PoolBudgetForm, TeamBudgetForm
from billing.budget_selectors import PRECEDENCE, pool_budget_sources
from billing.models import Budget
from pools.core.errors import ValidationError
from pools.models import Team
from pools.selectors.pools import pool_get, teams_visible_to


def _require_finance(user) -> None:
    if not budget_admin.may_set_budgets(user):
        raise PermissionDenied("only finance and platform admins set budgets")


@login_required
@require_http_methods(["GET", "POST"])
def budget_pool_edit(request, name: str):
    pool = pool_get(user=request.user, name=name)
    _require_finance(request.user)
    now = timezone.now()
    sources = pool_budget_sources(pool=pool, now=now)
    form = PoolBudgetForm(request.POST or None, initial={"monthly": sources.finance})
    if request.method == "POST" and form.is_valid():
        try:
            budget = budget_admin.budget_pool_set(user=request.user, pool=pool, monthly_amount=form.cleaned_data["monthly"], now=now)
        except ValidationError as exc:
            for item in exc.errors:
                form.add_error("monthly" if item.field == "monthly" else None, item.message)
        else:
            if budget is None:
                messages.success(request, f"Pool {pool.name} has no budget now.")
            else:
                messages.success(request, f"Pool {pool.name}'s budget is {budget.monthly_amount} {budget.currency} a month ({budget.get_source_display().lower()}).")
            return HttpResponseRedirect(reverse("billing:budgets"))
    context = {"pool": pool, "form": form, "sources": sources, "precedence": PRECEDENCE}
    return render(request, "billing/budget_pool_form.html", context, status=400 if form.errors else 200)


def _team_budget_page(request, *, editing: Budget | None):
    teams = list(teams_visible_to(user=request.user).order_by("name"))
    initial = {"thresholds": "80, 100", "currency": "CNY"}
    if editing is not None:
        initial = {"team": editing.team.slug, "monthly": editing.monthly_amount, "currency": editing.currency,
                   "thresholds": ", ".join(str(t) for t in editing.thresholds)}  # fmt: skip
    form = TeamBudgetForm(request.POST or None, teams=teams, editing=editing, initial=initial)
    if request.method == "POST" and form.is_valid():
        team = next(t for t in teams if t.slug == form.cleaned_data["team"])
        if editing is None and Budget.objects.filter(team=team, pool=None).exists():
            form.add_error("team", f"team {team.name} already has a budget: change it from the budgets page")
        else:
            try:
                budget = budget_admin.budget_team_set(
                    user=request.user, team=team, monthly_amount=form.cleaned_data["monthly"],
                    currency=form.cleaned_data["currency"], thresholds=form.cleaned_data["thresholds"],
                )  # fmt: skip
            except ValidationError as exc:
                form.add_service_errors(exc)
            else:
                messages.success(request, f"Team {team.name}'s budget is {budget.monthly_amount} {budget.currency} a month.")
                return HttpResponseRedirect(reverse("billing:budgets"))
    context = {"form": form, "editing": editing}
    return render(request, "billing/budget_team_form.html", context, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def budget_team_create(request):
    _require_finance(request.user)
    return _team_budget_page(request, editing=None)


def _team_budget(user, slug: str) -> Budget:
    """The team's budget for finance and admins; another team's is a 404 before the 403 (as a
    pool of another team is), so a lead or member learns nothing of the teams they are not in."""
    if not teams_visible_to(user=user).filter(slug=slug).exists():
        raise Http404(f"no team {slug!r}")
    _require_finance(user)
    budget = Budget.objects.filter(team__slug=slug, pool=None).select_related("team").first()
    if budget is None:
        raise Http404(f"team {slug!r} has no budget")
    return budget


@login_required
@require_http_methods(["GET", "POST"])
def budget_team_edit(request, slug: str):
    return _team_budget_page(request, editing=_team_budget(request.user, slug))


@login_required
@require_POST
def budget_team_delete(request, slug: str):
    budget = _team_budget(request.user, slug)
    team: Team = budget.team
    budget_admin.budget_team_delete(user=request.user, budget=budget)
    messages.success(request, f"Team {team.name}'s budget removed.")
    return HttpResponseRedirect(reverse("billing:budgets"))
