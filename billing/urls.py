"""Billing URLs, included at the root: the costs page and the costs API."""

from django.urls import path

from billing import api, views

app_name = "billing"
urlpatterns = [
    path("costs/", views.cost_list, name="costs"),
    path("costs/budgets/", views.budget_list, name="budgets"),
    path("api/v1/costs/", api.CostsView.as_view(), name="api-costs"),
]
