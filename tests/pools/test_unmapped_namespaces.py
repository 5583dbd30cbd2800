"""Pods of a real cluster's namespace that no team owns are an admin's to see: a lead, a member
and finance do not see them (404 on the page), an admin does; a deleted pod leaves every list."""

from __future__ import annotations

import pytest
from django.http import Http404

from pools.models.pods import Pod
from pools.services.pods import pod_get, pods_for_user
from tests.pools.pod_helpers import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster_pods(teams):
    return {
        "unmapped": Pod.objects.create(namespace="kube-batch", name="loose", team=None, uid="u-1", submitted_at=T0),
        "mapped": Pod.objects.create(namespace="algorithm", name="trainer", team=teams["algorithm"], uid="u-2", submitted_at=T0),
        "deleted": Pod.objects.create(namespace="algorithm", name="gone", team=teams["algorithm"], uid="u-3", submitted_at=T0, deleted_at=T0, phase="Failed"),
    }


@pytest.mark.parametrize("role", ["lead", "member", "finance", "other_lead"])
def test_only_admins_see_pods_of_namespaces_no_team_owns(actors, cluster_pods, role):
    user = actors[role]
    assert cluster_pods["unmapped"] not in pods_for_user(user=user)
    with pytest.raises(Http404):
        pod_get(user=user, namespace="kube-batch", name="loose")


def test_an_admin_sees_them_and_no_one_sees_deleted_pods(actors, cluster_pods):
    admin = actors["admin"]
    assert set(pods_for_user(user=admin)) == {cluster_pods["unmapped"], cluster_pods["mapped"]}
    assert pod_get(user=admin, namespace="kube-batch", name="loose") == cluster_pods["unmapped"]
    assert list(pods_for_user(user=actors["lead"])) == [cluster_pods["mapped"]]


def test_the_pod_pages_show_an_unmapped_pod_to_admins_only(browser, cluster_pods):
    assert browser("admin").get("/pods/kube-batch/loose/").status_code == 200
    assert "mapped to none" in browser("admin").get("/pods/kube-batch/loose/").content.decode()
    assert browser("lead").get("/pods/kube-batch/loose/").status_code == 404
