"""The real kube-scheduler places pods through our extender (issue 19 items 3 and 5; seed D1, O3).

kube-scheduler runs with deploy/kube-scheduler-config.yaml itself (only the addresses and the
secret filled in), its extender served by the live Django server on the test database. A slice
of Alibaba's trace (whole-GPU pods of its multigpu50 list, see below) is replayed one pod at a time on 24 Nodes of
three pools (fgd, the default fgd-cpu, bestfit); fake kubelets run what is bound and the pod mirror reads it
back, so the extender scores on what the cluster runs. Before each pod is created, the product's
simulated scheduler pass places the same pod on the same state (in a savepoint, rolled back):
kube-scheduler must bind the pod there, or, where several nodes tie for our best score and it
broke the tie differently, on one of them.

GPU shares (`ebcloud.io/gpu-milli`, which the product advertises on every GPU Node) have their
own test: sixteen half-GPU pods share one 8-GPU node through kube-scheduler, whose own count
of the resource refuses the seventeenth, while our filter refuses a whole GPU there (the two
resources are counted apart by kube-scheduler).
"""

from __future__ import annotations

import random
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from django.conf import settings as django_settings
from django.core.signals import request_started
from django.db import connection, transaction
from django.test import override_settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bench.scheduler_trace import load_pods
from pools.controllers.pending_hints import pending_hints_write
from pools.controllers.pod_mirror import PodMirror
from pools.controllers.scheduler import scheduler_pass
from pools.core.scheduling.extender import MAX_EXTENDER_PRIORITY, REASON_UNMANAGED
from pools.core.scheduling.nodes import REASON_GPU, REASON_GPU_MODEL, REASON_GPU_SHARE
from pools.models import GpuModel, Node, NodeType
from pools.models.pods import Pod
from pools.providers.fake_kubelet import FakeKubelet
from pools.providers.kubernetes import KubernetesCluster
from pools.providers.kubernetes_pods import TEAM_LABEL, ClusterPods
from pools.selectors.extender import extender_pod, extender_scores
from pools.services import pods as pod_services
from tests.k8s.control_plane import ROOT
from tests.k8s.helpers import SCHEDULER_WAIT, plane_running, pod_create_admitted, wait_for
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "kube-schedulers-own-secret"
DEPLOYED_CONFIG = ROOT / "deploy" / "kube-scheduler-config.yaml"
NAMESPACE = "algorithm"
# Three node shapes of the trace's node list: (GPU model, GPUs, CPU milli, memory MiB, policy).
# No policy: the product's default, fgd-cpu (fractional scores, which the extender turns into integers).
SHAPES = (("G2", 8, 96_000, 393_216, "fgd"), ("T4", 2, 104_000, 524_288, None), ("V100M16", 4, 32_000, 131_072, "bestfit"))
NODES_PER_SHAPE = 8
REPLAYED = 80  # ~150 GPUs asked of 112: the last pods find the fleet full


def scheduler_config(plane, server_url: str, secret: str = SECRET) -> Path:
    """The deployed configuration, pointed at this API server and the live server (plain HTTP)."""
    document = yaml.safe_load(DEPLOYED_CONFIG.read_text())
    document["clientConnection"]["kubeconfig"] = str(plane.kubeconfig)
    document["leaderElection"] = {"leaderElect": False}
    extender = document["extenders"][0]
    extender["urlPrefix"] = f"http://kube-scheduler:{secret}@{urlparse(server_url).netloc}/api/scheduler/v1"
    extender["enableHTTPS"] = False
    del extender["tlsConfig"]
    path = plane.work / "kube-scheduler-config.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def plane(live_server):
    """A control plane of its own, its kube-scheduler calling the live server's extender."""
    for plane in plane_running():
        plane.start_scheduler(config=scheduler_config(plane, live_server.url))
        yield plane


@pytest.fixture
def cluster(plane, settings):
    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = SECRET
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    settings.EBCLOUD_KUBECONFIG = str(plane.kubeconfig)
    api = config.new_client_from_config(config_file=str(plane.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE, labels={TEAM_LABEL: NAMESPACE})))
        core.create_namespaced_service_account(NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield api
    for item in core.list_namespaced_pod(NAMESPACE).items:
        core.delete_namespaced_pod(item.metadata.name, NAMESPACE, grace_period_seconds=0)
    core.delete_collection_node()  # the next test starts on an empty cluster, as on an emptied database
    connection.close()


@pytest.fixture
def calls():
    """The extender verbs the live server was asked for."""
    seen: list[str] = []

    def record(sender, environ, **kwargs):
        if environ.get("PATH_INFO", "").startswith("/api/scheduler/v1/"):
            seen.append(environ["PATH_INFO"].rsplit("/", 1)[-1])

    request_started.connect(record, weak=False)
    yield seen
    request_started.disconnect(record)


def fleet(actors, api, prefix: str) -> list[Node]:
    """NODES_PER_SHAPE Ready nodes of each shape in the product, joined to the API server."""
    kubelet = FakeKubelet(api)
    nodes = []
    for model, gpus, cpu, memory, policy in SHAPES:
        GpuModel.objects.get_or_create(name=model, defaults={"memory_gib": 16})
        node_type, _ = NodeType.objects.get_or_create(name=f"OPENB_{model}", defaults={"gpu_count": gpus, "cpu_milli": cpu, "memory_mib": memory})
        chosen = {"schedulingPolicy": policy} if policy else {}
        pool = pool_with_nodes(actors["lead"], name=f"{prefix}-{model.lower()}", nodes=NODES_PER_SHAPE, node_labels={"pool": "train"},
                               taints=[], nodeType=node_type.name, gpuModel=model, **chosen)  # fmt: skip
        for node in pool.nodes.all():
            kubelet.join(name=node.name, cpu_milli=cpu, memory_mib=memory, gpus=gpus, labels=node.labels, now=T0)
            nodes.append(node)
    return nodes


def cluster_document(document: dict) -> dict:
    """The product's pod document as a cluster manifest (with an image)."""
    container = document["spec"]["containers"][0]
    container["image"] = "registry.invalid/train:1"
    container["resources"]["limits"] = {key: str(value) for key, value in container["resources"]["limits"].items()}
    return document


def verdict(core: client.CoreV1Api, name: str):
    pod = core.read_namespaced_pod(name, NAMESPACE)
    if pod.spec.node_name:
        return ("bound", pod.spec.node_name)
    refused = next((c for c in pod.status.conditions or () if c.type == "PodScheduled" and c.status == "False"), None)
    return ("pending", refused.message) if refused is not None else None


def simulated_choice(member, document: dict) -> str | None:
    """Where the product's simulated scheduler pass binds the pod on the current state (a
    savepoint, rolled back: nothing of it stays)."""
    with override_settings(EBCLOUD_CLUSTER_BACKEND="simulated"), transaction.atomic():
        pod_services.pod_create(user=member, document=document, now=T0)
        scheduler_pass(now=T0)
        node = Pod.objects.live().get(namespace=NAMESPACE, name=document["metadata"]["name"]).node
        transaction.set_rollback(True)
    return node.name if node else None


def top_nodes(document: dict) -> set[str]:
    """The nodes that tie for our best score for the pod on the current state."""
    pod = extender_pod({**document, "metadata": {**document["metadata"], "uid": "not-created-yet"}})
    names = list(Node.objects.filter(phase="Ready").values_list("name", flat=True))
    return {name for name, score in extender_scores(pod, names).items() if score == MAX_EXTENDER_PRIORITY}


def trace_slice() -> list:
    pods = [p for p in load_pods(django_settings.EBCLOUD_TRACE_DIR, "multigpu50") if p.gpu_count and p.gpu_milli == 1000]
    random.Random(42).shuffle(pods)
    return pods[:REPLAYED]


def test_kube_scheduler_places_a_trace_slice_where_the_simulated_scheduler_does(plane, cluster, actors, calls):
    fleet(actors, cluster, "openb")
    core, kubelet = client.CoreV1Api(cluster), FakeKubelet(cluster)
    mirror = PodMirror(ClusterPods(cluster), clock=lambda: T0)
    mirror.relist()
    placed, ties, refused, unique = 0, 0, 0, 0
    for trace_pod in trace_slice():
        name = trace_pod.name
        document = cluster_document(pod_document(name, gpus=trace_pod.gpu_count, cpu=f"{trace_pod.cpu_milli}m", memory=f"{trace_pod.memory_mib}Mi"))
        expected, tied = simulated_choice(actors["member"], document), top_nodes(document)
        core.create_namespaced_pod(NAMESPACE, document)
        kind, detail = wait_for(lambda name=name: verdict(core, name), timeout=SCHEDULER_WAIT, what=f"kube-scheduler's verdict on {name}")
        if kind == "pending":
            assert expected is None, f"{name}: kube-scheduler found no node ({detail}); the simulated scheduler chose {expected}"
            core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            refused += 1
        else:
            assert expected is not None, f"{name}: bound to {detail}; the simulated scheduler found no node"
            assert expected in tied, f"{name}: the simulated scheduler's {expected} is not among our best {sorted(tied)}"
            assert detail == expected or detail in tied, f"{name}: bound to {detail}, the simulated scheduler chose {expected} (best: {sorted(tied)})"
            placed += detail == expected
            unique += len(tied) == 1
            ties += detail != expected
            kubelet.sync_pods(node_name=detail, now=T0)
        mirror.relist()
        assert Pod.objects.live().filter(name=name, phase="Running" if kind == "bound" else "Pending").count() == (kind == "bound")
    outcome = f"{placed} placed as simulated, {ties} on another of the tied best nodes ({unique} had one best node), {refused} refused"
    print(outcome)
    assert placed + ties + refused == REPLAYED and unique > 0 and refused > 0, outcome
    assert calls.count("filter") >= placed + ties and calls.count("prioritize") > 0, calls
    assert "Skipping extender" not in plane.log_tail("kube-scheduler", 200)


def test_the_filters_refusals_are_in_kube_schedulers_message(plane, cluster, actors, calls):
    """A GPU model no node has (an annotation kube-scheduler does not read) and a GPU node that
    belongs to no pool: the Pending pod's condition counts our reasons beside kube-scheduler's."""
    nodes = fleet(actors, cluster, "refuse")
    FakeKubelet(cluster).join(name="stray-gpu-node", cpu_milli=96_000, memory_mib=393_216, gpus=8, labels={"pool": "train"}, now=T0)
    core = client.CoreV1Api(cluster)
    core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("wants-h100", gpus=1, models="H100_80G")))
    kind, message = wait_for(lambda: verdict(core, "wants-h100"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
    assert kind == "pending", message
    assert f"{len(nodes)} {REASON_GPU_MODEL}" in message, message
    assert REASON_UNMANAGED in message, message
    assert "filter" in calls


def test_our_gpu_model_check_counts_only_the_nodes_kube_scheduler_s_filters_passed(plane, cluster, actors, calls):
    """kube-scheduler asks the extender only about the nodes its own filters passed: a pod of 4
    GPUs of a model no node has is "Insufficient nvidia.com/gpu" on the 2-GPU nodes and "didn't
    match pod's GPU model" on the others. The simulated scheduler's verdict is the same, word
    for word."""
    fleet(actors, cluster, "order")
    core = client.CoreV1Api(cluster)
    core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("wants-4-h100", gpus=4, models="H100_80G")))
    kind, message = wait_for(lambda: verdict(core, "wants-4-h100"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
    assert kind == "pending" and f"8 {REASON_GPU}" in message, message
    assert simulated_explanation(actors["member"], pod_document("wants-4-h100-simulated", gpus=4, models="H100_80G")) == message


def test_a_full_node_of_another_gpu_model_is_told_as_kube_scheduler_s_preemption_tells_it(plane, cluster, actors, calls):
    """A node of another GPU model whose GPUs are all taken: kube-scheduler's own filters refuse
    it for its GPUs (the extender is never asked), and its preemption, which knows nothing of
    GPU models, looks for victims there and finds none (pods of the pod's own priority). The
    simulated scheduler's verdict is the same, word for word."""
    full = filled(cluster, fleet(actors, cluster, "full"))
    core = client.CoreV1Api(cluster)
    assert Pod.objects.live().get(name="filler").node_id == full.pk
    core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("wants-4-h100", gpus=4, models="H100_80G")))
    kind, message = wait_for(lambda: verdict(core, "wants-4-h100"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
    assert kind == "pending" and "No preemption victims found for incoming pod" in message, message
    assert simulated_explanation(actors["member"], pod_document("wants-4-h100-simulated", gpus=4, models="H100_80G")) == message


def test_preemption_s_only_candidate_on_a_node_of_another_gpu_model_is_dropped_as_kube_scheduler_says(plane, cluster, actors, calls):
    """A pod of higher priority finds its victims only on a full node of another GPU model:
    kube-scheduler's preemption takes the node for a candidate, the extender's `preempt` drops
    it, and nothing is evicted. The simulated scheduler's verdict is the same, word for word."""
    filled(cluster, fleet(actors, cluster, "drop"))
    core = client.CoreV1Api(cluster)
    scheduling = client.SchedulingV1Api(cluster)
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="priority-1000"), value=1000))
    try:
        document = cluster_document(pod_document("wants-8-h100", gpus=8, models="H100_80G", priority=1000))
        pod_create_admitted(core, NAMESPACE, document)
        kind, message = wait_for(lambda: verdict(core, "wants-8-h100"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
        assert kind == "pending" and message.endswith("preemption: no candidate node for preemption"), message
        assert core.read_namespaced_pod("filler", NAMESPACE).metadata.deletion_timestamp is None  # not evicted
        simulated = pod_document("wants-8-h100-simulated", gpus=8, models="H100_80G", priority=1000)
        assert simulated_explanation(actors["member"], simulated) == message
    finally:
        scheduling.delete_priority_class("priority-1000")


def test_a_whole_gpu_of_higher_priority_finds_no_victim_among_gpu_shares_as_kube_scheduler_counts_them(plane, cluster, actors, calls):
    """kube-scheduler counts whole GPUs and GPU shares apart: on a node whose 8 GPUs each hold a
    share of 600 milli, a whole GPU fits by its count and only our filter refuses it, so its
    preemption finds no victim among the shares, evicts nothing and says so in its own words,
    which the product's message says too (tests/pools/test_preemption_budgets.py); the hints
    written beside it offer no preemption."""
    node, mirror = g2_node_of_shares(actors, cluster)
    message = pending_without_preemption(cluster, mirror, pod_document("whole-1", gpus=1, cpu="1", memory="4Gi", priority=1000))
    assert message == f'0/1 nodes are available: 1 {REASON_GPU}. preemption: expected at least one victim pod on node "{node.name}"'


def test_pods_asking_whole_gpus_and_shares_too_leave_gpus_free_by_kube_scheduler_s_count(plane, cluster, actors, calls):
    """Pods a real cluster takes and the product's API refuses: each asks `nvidia.com/gpu: 1` and
    `ebcloud.io/gpu-milli: 500`, so it holds two whole GPUs in the read model while
    kube-scheduler counts one GPU and 500 thousandths. Four of them fill an 8-GPU node for our
    filter; kube-scheduler's count has four GPUs to spare, so for a two-GPU pod of higher
    priority its preemption finds no victim, and the product's message and hints say as much
    (tests/pools/test_preemption_budgets.py)."""
    node = one_g2_node(actors, cluster)
    core = client.CoreV1Api(cluster)
    for i in range(4):
        both = cluster_document(pod_document(f"both-{i}", gpus=1, cpu="1", memory="4Gi"))
        both["spec"]["containers"][0]["resources"]["limits"]["ebcloud.io/gpu-milli"] = "500"
        both["spec"]["nodeName"] = node.name
        core.create_namespaced_pod(NAMESPACE, both)
    FakeKubelet(cluster).sync_pods(node_name=node.name, now=T0)
    mirror = PodMirror(ClusterPods(cluster), clock=lambda: T0)
    mirror.relist()
    assert set(Pod.objects.live().filter(name__startswith="both-").values_list("gpu_count", "gpu_milli", "gpu_shares")) == {(2, 1000, 500)}
    message = pending_without_preemption(cluster, mirror, pod_document("wants-2", gpus=2, cpu="1", memory="4Gi", priority=1000))
    assert message == f'0/1 nodes are available: 1 {REASON_GPU}. preemption: expected at least one victim pod on node "{node.name}"'


def g2_node_of_shares(actors, cluster, milli: int = 600) -> tuple[Node, PodMirror]:
    """`one_g2_node` with a running share of `milli` on each of its 8 GPUs, bound by name and
    mirrored into the extender's read model (the mirror is returned for the test to relist)."""
    node = one_g2_node(actors, cluster)
    core = client.CoreV1Api(cluster)
    for i in range(8):
        share = cluster_document(pod_document(f"share-{i}", milli=milli, cpu="1", memory="4Gi"))
        share["spec"]["nodeName"] = node.name
        core.create_namespaced_pod(NAMESPACE, share)
    FakeKubelet(cluster).sync_pods(node_name=node.name, now=T0)
    mirror = PodMirror(ClusterPods(cluster), clock=lambda: T0)
    mirror.relist()
    return node, mirror


def pending_without_preemption(cluster, mirror: PodMirror, document: dict) -> str:
    """kube-scheduler's message for a pod of priority 1000 (its PriorityClass made for it) that
    stays Pending, nobody evicted for it, the product's hints beside it offering no preemption."""
    core, scheduling = client.CoreV1Api(cluster), client.SchedulingV1Api(cluster)
    name = document["metadata"]["name"]
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="priority-1000"), value=1000))
    try:
        pod_create_admitted(core, NAMESPACE, cluster_document(document))
        kind, message = wait_for(lambda: verdict(core, name), timeout=SCHEDULER_WAIT, what=f"kube-scheduler's verdict on {name}")
        assert kind == "pending", message
        evicted = [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.deletion_timestamp is not None]
        assert evicted == [], evicted
        mirror.relist()
        assert name in " ".join(pending_hints_write(now=T0))
        hints = Pod.objects.live().get(name=name).hints
        assert hints and not any("preempt" in hint for hint in hints), hints
        return message
    finally:
        scheduling.delete_priority_class("priority-1000")


def one_g2_node(actors, cluster) -> Node:
    """Pool "halves": one Ready 8-GPU node joined to the API server, its GPU shares advertised
    (as the lifecycle's join step does)."""
    GpuModel.objects.get_or_create(name="G2", defaults={"memory_gib": 16})
    NodeType.objects.get_or_create(name="OPENB_G2", defaults={"gpu_count": 8, "cpu_milli": 96_000, "memory_mib": 393_216})
    pool = pool_with_nodes(actors["lead"], name="halves", nodes=1, node_labels={"pool": "train"}, taints=[], nodeType="OPENB_G2", gpuModel="G2")
    node = pool.nodes.get()
    FakeKubelet(cluster).join(name=node.name, cpu_milli=96_000, memory_mib=393_216, gpus=8, labels=node.labels, now=T0)
    KubernetesCluster(cluster).register_node(name=node.name, now=T0)
    return node


def filled(cluster, nodes: list[Node]) -> Node:
    """The first 8-GPU node with all its GPUs taken by a pod of priority 0 (bound by name, run
    by its kubelet, mirrored into the read model)."""
    full = next(node for node in nodes if node.gpu_count == 8)
    filler = cluster_document(pod_document("filler", gpus=8, cpu="1", memory="1Gi"))
    filler["spec"]["nodeName"] = full.name
    client.CoreV1Api(cluster).create_namespaced_pod(NAMESPACE, filler)
    FakeKubelet(cluster).sync_pods(node_name=full.name, now=T0)
    PodMirror(ClusterPods(cluster), clock=lambda: T0).relist()
    return full


def simulated_explanation(member, document: dict) -> str:
    """The Pending pod's message after the product's simulated scheduler pass on the current
    state (a savepoint, rolled back: nothing of it stays)."""
    with override_settings(EBCLOUD_CLUSTER_BACKEND="simulated"), transaction.atomic():
        pod_services.pod_create(user=member, document=document, now=T0)
        scheduler_pass(now=T0)
        explanation = Pod.objects.live().get(namespace=NAMESPACE, name=document["metadata"]["name"]).explanation
        transaction.set_rollback(True)
    return explanation


def test_a_scheduler_with_another_secret_is_refused_and_schedules_without_us(plane, cluster, actors, calls, live_server):
    """The extender answers kube-scheduler's credential only; a kube-scheduler holding another
    secret gets 401, skips the extender (`ignorable`: the data plane does not wait for the
    control plane) and binds the pod our filter would have refused."""
    FakeKubelet(cluster).join(name="plain-gpu-node", cpu_milli=96_000, memory_mib=393_216, gpus=8, labels={"pool": "train"}, now=T0)
    core = client.CoreV1Api(cluster)
    plane.start_scheduler(config=scheduler_config(plane, live_server.url, secret="not-" + SECRET))
    try:
        core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("wants-h100-anyway", gpus=1, models="H100_80G")))
        kind, node = wait_for(lambda: verdict(core, "wants-h100-anyway"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict")
        assert kind == "bound", node
        assert "filter" in calls
        log = plane.log_tail("kube-scheduler", 200)
        assert "Skipping extender" in log and "code 401" in log, log
    finally:
        plane.start_scheduler(config=scheduler_config(plane, live_server.url))


def test_half_gpu_shares_fill_a_real_node_and_a_whole_gpu_is_refused_there(plane, cluster, actors, calls):
    """Sixteen `ebcloud.io/gpu-milli: 500` pods on one 8-GPU node, bound by kube-scheduler through
    the extender, as the simulated cluster packs them; the seventeenth is refused by
    kube-scheduler's own count of the advertised resource; a pod of one whole GPU is refused by
    our filter (kube-scheduler sees 8 of 8 nvidia.com/gpu free)."""
    node = one_g2_node(actors, cluster)
    core, kubelet = client.CoreV1Api(cluster), FakeKubelet(cluster)
    mirror = PodMirror(ClusterPods(cluster), clock=lambda: T0)
    mirror.relist()
    for i in range(16):
        core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document(f"half-{i}", milli=500, cpu="1", memory="4Gi")))
        assert wait_for(lambda i=i: verdict(core, f"half-{i}"), timeout=SCHEDULER_WAIT, what=f"half-{i} scheduled") == ("bound", node.name)
        kubelet.sync_pods(node_name=node.name, now=T0)
        mirror.relist()
    assert set(Pod.objects.live().filter(name__startswith="half-").values_list("phase", "gpu_count", "gpu_milli")) == {("Running", 1, 500)}
    core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("half-16", milli=500, cpu="1", memory="4Gi")))
    kind, message = wait_for(lambda: verdict(core, "half-16"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict on half-16")
    assert kind == "pending" and f"1 {REASON_GPU_SHARE}" in message, message  # the simulated cluster says the same
    core.create_namespaced_pod(NAMESPACE, cluster_document(pod_document("whole-1", gpus=1, cpu="1", memory="4Gi")))
    kind, message = wait_for(lambda: verdict(core, "whole-1"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict on whole-1")
    assert kind == "pending" and f"1 {REASON_GPU}" in message, message
    skipped = [line for line in plane.log_tail("kube-scheduler", 400).splitlines() if "Skipping extender" in line and ("/half-" in line or "/whole-1" in line)]
    assert "filter" in calls and not skipped, skipped


def test_a_preemption_whose_victims_would_not_make_room_per_gpu_is_dropped_and_evicts_nobody(plane, cluster, actors, calls):
    """kube-scheduler counts a node's GPUs as one number: seven whole-GPU pods and a GPU share on
    an 8-GPU node leave it one `nvidia.com/gpu` to spare, so for a two-GPU pod of higher priority
    its preemption picks one whole-GPU pod as the victim. Once it went, the pod would still not
    fit (the eighth GPU is partly used), so the extender's `preempt` drops the node: nobody is
    evicted for nothing, kube-scheduler says so, and the product's hints offer no preemption
    (tests/pools/test_preemption_budgets.py has its message)."""
    node = one_g2_node(actors, cluster)
    core, kubelet = client.CoreV1Api(cluster), FakeKubelet(cluster)
    mirror = PodMirror(ClusterPods(cluster), clock=lambda: T0)
    mirror.relist()
    running = [pod_document(f"whole-{i}", gpus=1, cpu="1", memory="4Gi") for i in range(7)] + [pod_document("share", milli=600, cpu="1", memory="4Gi")]
    for document in running:
        name = document["metadata"]["name"]
        core.create_namespaced_pod(NAMESPACE, cluster_document(document))
        assert wait_for(lambda name=name: verdict(core, name), timeout=SCHEDULER_WAIT, what=f"{name} scheduled") == ("bound", node.name)
        kubelet.sync_pods(node_name=node.name, now=T0)
        mirror.relist()
    message = pending_without_preemption(cluster, mirror, pod_document("wants-2", gpus=2, cpu="1", memory="4Gi", priority=1000))
    assert message.endswith("preemption: no candidate node for preemption") and "preempt" in calls, message


@pytest.mark.parametrize(
    ("milli", "asked", "filters", "preemption"),
    [
        (600, {"gpus": 1}, f"1 {REASON_GPU_MODEL}", "0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
        (1000, {"gpus": 1}, f"1 {REASON_GPU_MODEL}", "0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
        (1000, {"milli": 300}, f"1 {REASON_GPU_SHARE}", "no candidate node for preemption"),
    ],
)
def test_a_node_of_another_gpu_model_is_tried_for_preemption_only_where_kube_schedulers_count_finds_it_short(
    plane, cluster, actors, calls, milli, asked, filters, preemption
):
    """An H100 asked of a G2 node whose GPUs each hold a share (all 1000 thousandths of it, or
    600): where kube-scheduler's own count (whole GPUs and shares apart, a share of 1000 among
    the shares) passes the node, the extender refuses it for its GPU model, which preemption
    cannot mend; where its count finds the shares short, preemption tries the node and the
    extender drops it. kube-scheduler's message says so, and the simulated scheduler's, word for
    word."""
    GpuModel.objects.get_or_create(name="H100_80G", defaults={"memory_gib": 80})
    g2_node_of_shares(actors, cluster, milli)
    core, scheduling = client.CoreV1Api(cluster), client.SchedulingV1Api(cluster)
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="priority-1000"), value=1000))
    try:
        asked = {**asked, "models": "H100_80G", "cpu": "1", "memory": "4Gi", "priority": 1000}
        pod_create_admitted(core, NAMESPACE, cluster_document(pod_document("h100", **asked)))
        kind, message = wait_for(lambda: verdict(core, "h100"), timeout=SCHEDULER_WAIT, what="kube-scheduler's verdict on h100")
        assert (kind, message) == ("pending", f"0/1 nodes are available: {filters}. preemption: {preemption}")
        assert simulated_explanation(actors["member"], pod_document("h100-simulated", **asked)) == message
    finally:
        scheduling.delete_priority_class("priority-1000")
