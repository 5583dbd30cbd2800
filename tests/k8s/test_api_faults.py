"""The lifecycle controller against a sick API server (design: never a stalled controller;
failures are Warning events retried with backoff, the pool's pendingReason says why; one node's
failure never stops the others). The API server is the real test one; its faults are injected
by tests/k8s/fault_proxy.py: a hang, a 500 on one node's call, a role without a verb."""

from __future__ import annotations

import json
import signal
import socket
import time
from datetime import timedelta

import pytest

from pools.controllers.lifecycle import reconcile_all
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine
from pools.services import pools as services
from tests.conftest import ROOT
from tests.k8s.fault_proxy import Blackhole, Fault, FaultProxy, kubeconfig
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, run_until

pytestmark = pytest.mark.django_db
ETCD = "etcdserver: request timed out (500)"


@pytest.fixture
def cluster(on_kubernetes, settings, control_plane):
    """The machines' kubelets join the real API server whatever the controller's kubeconfig."""
    settings.EBCLOUD_SIM_KUBELET_KUBECONFIG = str(control_plane.kubeconfig)
    settings.EBCLOUD_KUBE_TIMEOUT_SECONDS = 1.0
    return control_plane


@pytest.fixture
def proxy(cluster, settings, tmp_path) -> FaultProxy:
    """The controller reaches the API server through a FaultProxy."""
    proxied = FaultProxy(cluster.api_port, cluster.work / "ca.crt")
    settings.EBCLOUD_KUBECONFIG = kubeconfig(tmp_path / "proxied", proxied.url, token=cluster.token)
    return proxied


@pytest.fixture
def pool_of(actors, train_document, unique):
    def make(prefix: str, nodes: int) -> GpuNodePool:
        train_document["metadata"]["name"] = f"{prefix}-{unique}"
        train_document["spec"]["nodeCount"] = {"min": nodes, "max": nodes}
        return approved_pool(actors, train_document)

    return make


class Stalled(BaseException):
    pass


def within(limit: int, call, *args, **kwargs):
    """The call's result, failing the test (instead of hanging it) past `limit` seconds (main thread only)."""

    def fire(*_):
        raise Stalled(f"still blocked after {limit} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(limit)
    try:
        return call(*args, **kwargs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def passes(pool: GpuNodePool, start, count: int):
    """`count` passes over every pool, a tick apart; the moment after the last and this pool's results."""
    now, results = start, []
    for _ in range(count):
        results += [r for r in reconcile_all(now=now) if r.pool_id == pool.pk]
        now += TICK
    return now, results


def warnings(pool: GpuNodePool, reason: str) -> list[str]:
    return list(PoolEvent.objects.filter(pool=pool, reason=reason, type="Warning").order_by("id").values_list("message", flat=True))


def status(pool: GpuNodePool) -> tuple[str, str]:
    return GpuNodePool.objects.filter(pk=pool.pk).values_list("phase", "pending_reason").get()


# ---------------------------------------------------------------------------------------------
# Hangs: every call is bounded (EBCLOUD_KUBE_TIMEOUT_SECONDS)


def test_a_hung_api_server_delays_the_lifecycle_pass_by_a_timeout_not_for_ever(cluster, settings, pool_of, tmp_path):
    pool = pool_of("hang", 1)
    now = run_until(pool, T0)
    settings.EBCLOUD_KUBECONFIG = kubeconfig(tmp_path / "hung", Blackhole().url, token=cluster.token, cafile=cluster.work / "ca.crt")
    started = time.monotonic()
    results = within(30, reconcile_all, now=now + TICK)
    assert time.monotonic() - started < 15
    assert [r.error for r in results if r.pool_id == pool.pk] == [""]


def test_a_hung_api_server_delays_the_scheduler_pass_by_a_timeout_not_for_ever(cluster, settings, tmp_path, caplog):
    from pools.controllers.scheduler import scheduler_pass

    settings.EBCLOUD_KUBECONFIG = kubeconfig(tmp_path / "hung", Blackhole().url, token=cluster.token, cafile=cluster.work / "ca.crt")
    started = time.monotonic()
    within(30, scheduler_pass, now=T0)
    assert time.monotonic() - started < 20
    assert "admission_policy_sync: the cluster could not be read or written" in caplog.text


# ---------------------------------------------------------------------------------------------
# Refusals of one node's call: that node backs off with a Warning, the others go on


def test_a_500_on_one_nodes_registration_backs_it_off_while_the_other_gets_ready(proxy, pool_of):
    pool = pool_of("reg", 2)
    first = f"{pool.name}-{pool.pk}-001"
    proxy.faults.append(Fault("GET", rf"/api/v1/nodes/{first}$", 500))
    now, results = passes(pool, T0, 40)  # 10 minutes

    assert not [r.error for r in results if r.error]
    one, two = live_nodes(pool)
    assert two.phase == "Ready" and one.phase != "Ready"
    assert one.attempts >= 2 and one.last_error == f"ClusterRefused: the API server did not get nodes/{first}: {ETCD}"
    said = warnings(pool, "ClusterRefused")
    assert said and said[0].startswith(f"Node {first}: ClusterRefused: the API server did not get nodes/{first}: {ETCD}; retrying in 30s")
    assert len(proxy.requests("GET", rf"/api/v1/nodes/{first}$")) <= one.attempts + 1  # backing off, not every pass
    phase, reason = status(pool)
    assert phase == "Scaling" and f"ClusterRefused: the API server did not get nodes/{first}" in reason
    assert SimMachine.objects.filter(client_token=first, status="Released").count() == 0  # the machine is not blamed

    proxy.faults.clear()
    run_until(pool, now, limit=timedelta(minutes=30))
    assert status(pool) == ("Ready", "")


def test_a_role_without_patch_on_nodes_status_is_reported_by_the_verb_and_resource(cluster, settings, pool_of):
    text = (ROOT / "deploy" / "rbac.yaml").read_text().replace("ebcloud-controller", "ebcloud-nostatus").replace("name: ebcloud-node-pools", "name: ebcloud-nostatus")
    grant = 'resources: ["nodes/status"]\n    verbs: ["patch"]'
    assert grant in text
    applied = cluster.kubectl("apply", "-f", "-", input=text.replace(grant, 'resources: ["nodes/status"]\n    verbs: ["get"]'))
    assert applied.returncode == 0, applied.stderr
    settings.EBCLOUD_KUBECONFIG = str(cluster.service_account_kubeconfig("ebcloud-system", "ebcloud-nostatus"))
    pool = pool_of("nst", 1)
    _, results = passes(pool, T0, 24)

    assert not [r.error for r in results if r.error]
    said = warnings(pool, "ClusterRefused")
    assert said and "the API server did not patch nodes/" in said[0]
    assert 'cannot patch resource "nodes/status"' in said[0] and "(403)" in said[0]
    assert 'cannot patch resource "nodes/status"' in status(pool)[1]


def test_a_500_on_one_nodes_label_apply_warns_and_backs_off_while_the_others_are_put_right(proxy, pool_of, core):
    pool = pool_of("lbl", 2)
    now = run_until(pool, T0)
    one, two = (n.name for n in live_nodes(pool))
    for name in (one, two):
        core.patch_node(name, {"metadata": {"labels": {"gpu-class": None}}})  # drift on both
    proxy.faults.append(Fault("PATCH", rf"/api/v1/nodes/{one}\?", 500))
    now, results = passes(pool, now, 2)

    assert not [r.error for r in results if r.error]
    assert core.read_node(two).metadata.labels["gpu-class"] == "a100"  # the healthy node is put right
    assert "gpu-class" not in core.read_node(one).metadata.labels
    said = warnings(pool, "NodeUpdateFailed")
    assert said == [f"Labels, taints, cordon or GPU shares of {one} not applied: the API server did not apply (patch) labels and taints of nodes/{one}: {ETCD}; retrying in 30s"]
    refused = [r for r in proxy.requests("PATCH", rf"/api/v1/nodes/{one}\?") if r[2] == 500]
    assert len(refused) == 1  # backing off: not asked again 15 s later
    assert f"ClusterRefused: the API server did not apply (patch) labels and taints of nodes/{one}" in status(pool)[1]

    proxy.faults.clear()
    now, _ = passes(pool, now + timedelta(seconds=30), 1)
    assert core.read_node(one).metadata.labels["gpu-class"] == "a100"
    assert Node.objects.get(name=one).last_error == "" and status(pool) == ("Ready", "")


def test_a_500_on_node_delete_leaves_it_terminating_with_a_warning_and_the_delete_is_retried(proxy, pool_of, actors, core):
    pool = pool_of("del", 1)
    now = run_until(pool, T0)
    node = live_nodes(pool)[0]
    proxy.faults.append(Fault("DELETE", rf"/api/v1/nodes/{node.name}$", 500))
    services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), now=now)
    now, results = passes(pool, now + TICK, 2)

    assert not [r.error for r in results if r.error]
    node.refresh_from_db()
    assert (node.phase, node.attempts) == ("Terminating", 1)
    assert warnings(pool, "NodeRemoveFailed") == [
        f"Machine of node {node.name} released, but its Node could not be deleted from the cluster: "
        f"the API server did not delete nodes/{node.name}: {ETCD}; retrying in 30s"
    ]
    assert len(proxy.requests("DELETE", rf"/api/v1/nodes/{node.name}$")) == 1
    phase, reason = status(pool)
    assert phase == "Deleting" and f"ClusterRefused: the API server did not delete nodes/{node.name}" in reason

    proxy.faults.clear()
    passes(pool, now + timedelta(seconds=30), 2)
    node.refresh_from_db()
    assert node.phase == "Terminated" and status(pool)[0] == "Deleted"
    assert not core.list_node(field_selector=f"metadata.name={node.name}").items


# ---------------------------------------------------------------------------------------------
# A cluster out of reach: drift waits a pass, the cloud work goes on


def test_an_unreachable_api_server_does_not_keep_a_pool_with_a_spec_edit_from_its_cloud_work(cluster, settings, pool_of, actors, tmp_path):
    pool = pool_of("down", 1)
    now = run_until(pool, T0)
    pool = GpuNodePool.objects.get(pk=pool.pk)
    document = json.loads(json.dumps(pool.document))
    document["spec"]["nodeCount"] = {"min": 2, "max": 3}
    document["spec"]["nodeLabels"] = {**document["spec"].get("nodeLabels", {}), "project": "llm"}
    services.pool_update(user=actors["lead"], pool=pool, document=document, now=now)
    order = PoolOrder.objects.filter(pool=pool).order_by("-pk").first()
    services.order_approve(user=actors["admin"], order=order, now=now)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connections are refused
    settings.EBCLOUD_KUBECONFIG = kubeconfig(tmp_path / "down", f"https://127.0.0.1:{port}", token="x", cafile=cluster.work / "ca.crt")
    _, results = passes(pool, now + TICK, 4)

    assert not [r.error for r in results if r.error]
    order.refresh_from_db()
    assert order.kind == "grow" and order.status == "Paid"
    assert len(live_nodes(pool)) == 2  # the second node is on its way
    assert warnings(pool, "NodeDriftDeferred")
    pool.refresh_from_db()
    assert pool.observed_generation < pool.generation  # the new labels are not on the node yet
    assert "the nodes' labels and taints are checked next pass" in pool.pending_reason
