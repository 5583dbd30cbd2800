"""`/api/scheduler/v1/`: the scheduler extender, for kube-scheduler only (pools/api/extender_auth.py).
kube-scheduler posts to `<urlPrefix>/<verb>`, without a trailing slash; both forms are served."""

from django.urls import re_path

from pools.api.extender_views import FilterView, PreemptView, PrioritizeView

app_name = "scheduler-extender"

urlpatterns = [
    re_path(r"^filter/?$", FilterView.as_view(), name="filter"),
    re_path(r"^prioritize/?$", PrioritizeView.as_view(), name="prioritize"),
    re_path(r"^preempt/?$", PreemptView.as_view(), name="preempt"),
]
