"""The web pages of pools (under /pools/), of pods (under /pods/) and of disruption budgets (under
/disruption-budgets/), each list in its own URL namespace (`pools:`, `pods:`, `disruption:`)."""

from django.urls import path

from pools.views import alerts, diagnose, disruption_budgets, nodes, pods, pools

pool_urls = [
    path("", pools.pool_list, name="list"),
    path("new/", pools.pool_create, name="create"),
    path("new/row/", pools.form_row, name="form-row"),
    path("new/preview/", pools.pool_preview, name="preview"),
    path("import/", pools.pool_import, name="import"),
    path("<str:name>/", pools.pool_detail, name="detail"),
    path("<str:name>/charts/", pools.pool_charts, name="charts"),
    path("<str:name>/edit/", pools.pool_edit, name="edit"),
    path("<str:name>/yaml/", pools.pool_export, name="export"),
    path("<str:name>/delete/", pools.pool_delete, name="delete"),
    path("<str:name>/nodes/<str:node>/", nodes.node_detail, name="node-detail"),
    path("<str:name>/fragmentation/", pods.pool_fragmentation, name="fragmentation"),
    path("<str:name>/fragmentation/apply/", pods.pool_fragmentation_apply, name="fragmentation-apply"),
    path("<str:name>/diagnose/", diagnose.pool_diagnose, name="diagnose"),
    path("<str:name>/alerts/", alerts.pool_alerts, name="alerts"),
]

pod_urls = [
    path("", pods.pod_list, name="list"),
    path("new/", pods.pod_create, name="create"),
    path("<str:namespace>/<str:name>/", pods.pod_detail, name="detail"),
    path("<str:namespace>/<str:name>/delete/", pods.pod_delete, name="delete"),
]

disruption_budget_urls = [
    path("", disruption_budgets.budget_list, name="list"),
    path("new/", disruption_budgets.budget_create, name="create"),
    path("<str:namespace>/<str:name>/delete/", disruption_budgets.budget_delete, name="delete"),
]
