"""Billing URLs, included at the root: the costs page and the costs API."""

from django.urls import path

from billing import api, budget_views, views

app_name = "billing"
urlpatterns = [
    path("costs/", views.cost_list, name="costs"),
    path("costs/budgets/", views.budget_list, name="budgets"),
    path("costs/budgets/pools/<str:name>/", budget_views.budget_pool_edit, name="budget-pool"),
    path("costs/budgets/teams/new/", budget_views.budget_team_create, name="budget-team-create"),
    path("costs/budgets/teams/<slug:slug>/", budget_views.budget_team_edit, name="budget-team"),
    path("costs/budgets/teams/<slug:slug>/delete/", budget_views.budget_team_delete, name="budget-team-delete"),
    path("api/v1/costs/", api.CostsView.as_view(), name="api-costs"),
]
