"""With a real cluster (EBCLOUD_CLUSTER=kubernetes) the product binds nothing itself: the
scheduler pass leaves Pending pods to kube-scheduler and only writes our hints beside its
verdict; pods are not submitted, deleted or moved here (409, with what to do instead)."""

from __future__ import annotations

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.core.errors import ConflictError
from pools.models.pods import Pod
from pools.services import pods as pod_services
from pools.services.fragmentation import repack_apply
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

pytestmark = pytest.mark.django_db

VERDICT = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."


@pytest.fixture
def real_cluster(settings):
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"


def test_the_scheduler_pass_binds_nothing_and_adds_hints_to_kube_schedulers_verdict(actors, settings):
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100"})
    fits = submit(actors["member"], "fits", pool_affinity=None)
    needs_label = submit(actors["member"], "needs-label")
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    Pod.objects.filter(pk=needs_label.pk).update(reason="Unschedulable", explanation=VERDICT)  # as the mirror stores it
    result = scheduler_pass(now=T0)
    fits.refresh_from_db()
    needs_label.refresh_from_db()
    assert fits.phase == "Pending" and fits.node is None  # kube-scheduler's to bind
    assert result.unschedulable == [needs_label.key] and needs_label.explanation == VERDICT
    assert any(pool.name in hint and "nodeLabels: {pool: train}" in hint for hint in needs_label.hints), needs_label.hints


def test_pods_are_not_submitted_deleted_or_moved_here(actors, real_cluster, teams):
    with pytest.raises(ConflictError, match="kubectl apply"):
        pod_services.pod_create(user=actors["member"], document=pod_document("new"), now=T0)
    pod = Pod.objects.create(namespace="algorithm", name="running", team=teams["algorithm"], uid="u-1", submitted_at=T0)
    with pytest.raises(ConflictError, match="kubectl delete"):
        pod_services.pod_delete(user=actors["lead"], pod=pod, now=T0)
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    with pytest.raises(ConflictError, match="drain it"):
        repack_apply(user=actors["lead"], pool=pool, now=T0)


def test_the_api_answers_409_with_the_reason(api, real_cluster):
    response = api("member").post("/api/v1/pods/", pod_document("new"), format="json")
    assert response.status_code == 409
    assert "kubectl" in response.json()["errors"][0]["message"]


def test_the_repack_plan_still_answers_when_the_disruption_budgets_cannot_be_read(api, actors, settings, cluster_away, caplog):
    """The plan asks the API server which evictions the PodDisruptionBudgets refuse; with the
    server away it plans without them (a drain's evictions still ask) and says so in the log."""
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "running", gpus=1, cpu="1")
    scheduler_pass(now=T0)
    settings.EBCLOUD_CLUSTER_BACKEND, settings.EBCLOUD_KUBECONFIG = cluster_away.values()
    response = api("member").get("/api/v1/pools/train-pool-a/fragmentation/?plan=1")
    assert response.status_code == 200 and "plan" in response.json()
    assert "disruption budgets could not be read" in caplog.text


def test_with_the_api_server_away_budgets_are_a_503_and_the_pod_page_says_why(api, browser, actors, settings, cluster_away):
    submit(actors["member"], "waiting", gpus=1, cpu="1")
    settings.EBCLOUD_CLUSTER_BACKEND, settings.EBCLOUD_KUBECONFIG = cluster_away.values()
    for url in ("/api/v1/poddisruptionbudgets/", "/api/v1/poddisruptionbudgets/algorithm/trainers/"):
        response = api("lead").get(url)
        assert response.status_code == 503 and "cannot be reached" in response.json()["errors"][0]["message"]
    page = browser("lead").get("/pods/algorithm/waiting/")
    assert page.status_code == 200 and "disruption budgets cannot be read" in page.content.decode()
