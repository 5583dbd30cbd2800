from django.urls import path

from pools import views_pods

app_name = "pods"
urlpatterns = [
    path("", views_pods.pod_list, name="list"),
    path("new/", views_pods.pod_create, name="create"),
    path("<str:namespace>/<str:name>/", views_pods.pod_detail, name="detail"),
    path("<str:namespace>/<str:name>/delete/", views_pods.pod_delete, name="delete"),
]
