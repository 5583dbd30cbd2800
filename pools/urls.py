from django.urls import path

from pools import views

app_name = "pools"
urlpatterns = [
    path("", views.pool_list, name="list"),
    path("new/", views.pool_create, name="create"),
    path("new/row/", views.form_row, name="form-row"),
    path("import/", views.pool_import, name="import"),
    path("<str:name>/", views.pool_detail, name="detail"),
    path("<str:name>/edit/", views.pool_edit, name="edit"),
    path("<str:name>/yaml/", views.pool_export, name="export"),
    path("<str:name>/delete/", views.pool_delete, name="delete"),
]
