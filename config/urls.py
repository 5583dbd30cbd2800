from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from monitoring import views as monitoring_views
from monitoring.health import healthz
from monitoring.metrics import metrics_view
from pools.urls import disruption_budget_urls, pod_urls, pool_urls
from pools.views import orders
from pools.views import pods as pods_views
from pools.views.audit import audit_list
from pools.views.notifications import notification_acknowledge, notification_list
from pools.views.repairs import repair_list

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="pools:list", permanent=False), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("pools/", include((pool_urls, "pools"))),
    path("orders/", orders.order_list, name="orders"),
    path("audit/", audit_list, name="audit"),
    path("notifications/", notification_list, name="notifications"),
    path("notifications/<int:pk>/acknowledge/", notification_acknowledge, name="notification-acknowledge"),
    path("repairs/", repair_list, name="repairs"),
    path("pods/", include((pod_urls, "pods"))),
    path("disruption-budgets/", include((disruption_budget_urls, "disruption"))),
    path("fragmentation/", pods_views.cluster_fragmentation, name="fragmentation"),
    path("fragmentation/apply/", pods_views.cluster_fragmentation_apply, name="fragmentation-apply"),
    re_path(r"^orders/(?P<order_id>[0-9]+)/(?P<decision>approve|reject)/$", orders.order_decide, name="order-decide"),
    path("api/v1/", include("pools.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI's set-up script from its own URL, not inline: the Content-Security-Policy holds there too.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/agent/v1/", include("monitoring.api.urls")),
    path("api/scheduler/v1/", include("pools.api.extender_urls")),
    path("metrics", metrics_view, name="metrics"),
    path("healthz", healthz, name="healthz"),
    path("monitoring/", monitoring_views.overview, name="monitoring-overview"),
    path("monitoring/trends/", monitoring_views.utilisation_trends, name="monitoring-trends"),
    path("", include("billing.urls")),
    path("admin/", admin.site.urls),
]
# The API's JSON error shape under /api/, Django's pages elsewhere (pools/api/errors.py).
handler400 = "pools.api.errors.bad_request"
handler403 = "pools.api.errors.permission_denied"
handler404 = "pools.api.errors.not_found"
handler500 = "pools.api.errors.server_error"
