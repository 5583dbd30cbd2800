from django.urls import path

from monitoring.api import simulated as api_sim
from monitoring.api import views as api_views

app_name = "agent-api"

urlpatterns = [
    path("join-tokens/", api_views.JoinTokenCreateView.as_view(), name="join-tokens"),
    path("join/", api_views.JoinView.as_view(), name="join"),
    path("credential/rotate/", api_views.CredentialRotateView.as_view(), name="credential-rotate"),
    path("reports/", api_views.ReportsView.as_view(), name="reports"),
    path("simulated-faults/", api_sim.SimulatedFaultsView.as_view(), name="simulated-faults"),
]
