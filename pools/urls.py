from django.urls import path

from pools import views, views_diagnose, views_nodes, views_pods

app_name = "pools"
urlpatterns = [
    path("", views.pool_list, name="list"),
    path("new/", views.pool_create, name="create"),
    path("new/row/", views.form_row, name="form-row"),
    path("import/", views.pool_import, name="import"),
    path("<str:name>/", views.pool_detail, name="detail"),
    path("<str:name>/charts/", views.pool_charts, name="charts"),
    path("<str:name>/edit/", views.pool_edit, name="edit"),
    path("<str:name>/yaml/", views.pool_export, name="export"),
    path("<str:name>/delete/", views.pool_delete, name="delete"),
    path("<str:name>/nodes/<str:node>/", views_nodes.node_detail, name="node-detail"),
    path("<str:name>/fragmentation/", views_pods.pool_fragmentation, name="fragmentation"),
    path("<str:name>/fragmentation/apply/", views_pods.pool_fragmentation_apply, name="fragmentation-apply"),
    path("<str:name>/diagnose/", views_diagnose.pool_diagnose, name="diagnose"),
]
