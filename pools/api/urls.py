from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from pools.api.alert_views import PoolAlertSilenceDetailView, PoolAlertSilenceListView
from pools.api.auth import TokenView
from pools.api.disruption_budget_views import BudgetDetailView, BudgetListView
from pools.api.pod_views import (
    ClusterFragmentationApplyView,
    ClusterFragmentationView,
    PodDetailView,
    PodListView,
    PoolFragmentationApplyView,
    PoolFragmentationView,
)
from pools.api.views import OrderViewSet, PoolViewSet

router = SimpleRouter(trailing_slash="/?")
router.register("pools", PoolViewSet, basename="pool")
router.register("orders", OrderViewSet, basename="order")

app_name = "api"
urlpatterns = [
    path("auth/token/", TokenView.as_view(), name="token"),
    re_path(r"^pods/?$", PodListView.as_view(), name="pod-list"),
    re_path(r"^pods/(?P<namespace>[^/]+)/(?P<name>[^/]+)/?$", PodDetailView.as_view(), name="pod-detail"),
    re_path(r"^poddisruptionbudgets/?$", BudgetListView.as_view(), name="pdb-list"),
    re_path(r"^poddisruptionbudgets/(?P<namespace>[^/]+)/(?P<name>[^/]+)/?$", BudgetDetailView.as_view(), name="pdb-detail"),
    re_path(r"^fragmentation/?$", ClusterFragmentationView.as_view(), name="fragmentation"),
    re_path(r"^fragmentation/apply/?$", ClusterFragmentationApplyView.as_view(), name="fragmentation-apply"),
    re_path(r"^pools/(?P<name>[^/]+)/fragmentation/?$", PoolFragmentationView.as_view(), name="pool-fragmentation"),
    re_path(r"^pools/(?P<name>[^/]+)/fragmentation/apply/?$", PoolFragmentationApplyView.as_view(), name="pool-fragmentation-apply"),
    re_path(r"^pools/(?P<name>[^/]+)/alert-silences/?$", PoolAlertSilenceListView.as_view(), name="pool-alert-silences"),
    re_path(r"^pools/(?P<name>[^/]+)/alert-silences/(?P<pk>[0-9]+)/?$", PoolAlertSilenceDetailView.as_view(), name="pool-alert-silence"),
    *router.urls,
]
