"""Helpers of the pod and scheduler tests: pools with Ready nodes created directly, pod documents
(with PriorityClasses created as needed)."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime

from pools.controllers.scheduler import scheduler_pass
from pools.core.documents import load_yaml
from pools.core.spec import effective_node_labels, parse_document
from pools.models import Node, PriorityClass
from pools.models.pods import Pod
from pools.selectors.pools import catalog_current
from pools.services import pods as pod_services
from pools.services import pools as services
from tests.conftest import EXAMPLES, make_document

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TRAIN_POD = EXAMPLES / "pods" / "train-pod.yaml"


def train_pod_document() -> dict:
    return copy.deepcopy(load_yaml(TRAIN_POD.read_text()))


def pool_with_nodes(user, *, name="train-pool-a", nodes=2, node_labels=None, taints="default", phase="Ready", **spec):
    """A pool (min 0: no order) with `nodes` Ready nodes created directly, labels and taints from its spec."""
    overrides = {"nodeCount": {"min": 0, "max": 6}, **spec}
    if node_labels is not None:
        overrides["nodeLabels"] = node_labels
    if taints != "default":
        overrides["nodeTaints"] = taints
    document = make_document(name, **overrides)
    pool = services.pool_create(user=user, document=document)
    parsed = parse_document(pool.document, catalog_current())
    for index in range(nodes):
        Node.objects.create(
            pool=pool,
            name=f"{name}-{index}",
            phase=phase,
            zone=pool.zone,
            gpu_count=pool.node_type.gpu_count,
            labels=effective_node_labels(parsed, zone=pool.zone.name, billing="monthly", team=pool.team.slug),
            taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in parsed.node_taints],
            ready_at=T0,
        )
    return pool


def priority_class(value: int, *, policy: str = "PreemptLowerPriority") -> str:
    """The name of a PriorityClass of this value and policy, created if missing (as an admin would)."""
    name = f"priority-{value}" + ("-never" if policy == "Never" else "")
    PriorityClass.objects.get_or_create(name=name, defaults={"value": value, "preemption_policy": policy})
    return name


def pod_document(name, *, namespace="algorithm", gpus=1, cpu="4", memory="32Gi", priority=0, milli=None,
                 checkpointable=False, duration=None, pool_affinity="train", tolerate="train", models=None,
                 preemption_policy="PreemptLowerPriority", labels=None):  # fmt: skip
    """A pod document; a priority other than 0 names a PriorityClass of that value (`priority_class`);
    `milli` asks for a share of one GPU instead of one whole GPU (with `gpus` other than 1, for
    both, which the API refuses)."""
    annotations = {}
    if checkpointable:
        annotations["ebcloud.io/checkpointable"] = "true"
    if duration:
        annotations["ebcloud.io/duration"] = duration
    if models:
        annotations["ebcloud.io/gpu-models"] = models
    limits = {"nvidia.com/gpu": gpus} if milli is None or gpus != 1 else {}
    if milli is not None:
        limits["ebcloud.io/gpu-milli"] = milli
    spec = {"containers": [{"name": "main", "image": "registry.local/train:1", "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}}]}
    if priority or preemption_policy != "PreemptLowerPriority":
        spec["priorityClassName"] = priority_class(priority, policy=preemption_policy)
    if pool_affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": [pool_affinity]}]}]}}}  # fmt: skip
    if tolerate:
        spec["tolerations"] = [{"key": "pool", "operator": "Equal", "value": tolerate, "effect": "NoSchedule"}]
    metadata = {"name": name, "namespace": namespace, "annotations": annotations, **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def submit(user, name, **kwargs):
    return pod_services.pod_create(user=user, document=pod_document(name, **kwargs), now=T0)


def labelled_pods_running(actors, names, labels):
    """train-pool-a with two Ready nodes, and a Running one-GPU pod of team algorithm per name,
    carrying these labels (for disruption budgets to select)."""
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    for name in names:
        submit(actors["member"], name, gpus=1, cpu="1", labels=labels)
    scheduler_pass(now=T0)
    return pool


# GPU -> the shares on it. No share fits into another GPU's free milli (400 and 100 free), so
# no single move frees a GPU, and a lone node cannot drain; 500+300+200 and 700+300 fill two.
SHARE_LAYOUT = {0: [("a", 500)], 1: [("b1", 300), ("b2", 300)], 2: [("c1", 700), ("c2", 200)]}


def pool_with_share_layout(actors, layout=SHARE_LAYOUT, **waiting):
    """One 8-GPU node: a whole-GPU pod on the GPUs past ``layout``'s, the shares of ``layout``
    (GPU -> [(name, milli)]) on the first GPUs (placed by a scheduler pass, then laid out so),
    and a pod "waiting" (by default for a whole GPU; ``waiting``: `submit`'s arguments)."""
    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    submit(actors["member"], "whole", gpus=8 - len(layout), cpu="1")
    for on in layout.values():
        for name, milli in on:
            submit(actors["member"], name, milli=milli, cpu="1", memory="1Gi")
    scheduler_pass(now=T0)
    for gpu, on in layout.items():
        Pod.objects.filter(name__in=[name for name, _ in on]).update(gpu_indices=[gpu])
    Pod.objects.filter(name="whole").update(gpu_indices=list(range(len(layout), 8)))
    assert Pod.objects.filter(phase=Pod.Phase.RUNNING).count() == 1 + sum(map(len, layout.values()))
    submit(actors["member"], "waiting", **({"gpus": 1, "cpu": "1"} | waiting))
    scheduler_pass(now=T0)
    assert Pod.objects.get(name="waiting").phase == Pod.Phase.PENDING
    return pool


def cluster_pod(node: str, name: str, *, namespace="algorithm", owner=None, annotations=None, pinned=False, gpus=0) -> dict:
    """A Running pod as a real API server lists it to the pod mirror; `pinned`: bound to its node by matchFields, as
    the DaemonSet controller makes its pods."""
    metadata = {"uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")), "namespace": namespace, "name": name, "creationTimestamp": "2026-12-01T08:00:00Z"}
    if owner:
        metadata["ownerReferences"] = [owner]
    if annotations:
        metadata["annotations"] = annotations
    resources = {"requests": {"cpu": "50m", "memory": "64Mi"}, **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {})}
    spec = {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": [{"name": "c", "image": "x", "resources": resources}]}
    if pinned:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}  # fmt: skip
    status = {"phase": "Running", "startTime": "2026-12-01T08:00:00Z", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return {"metadata": metadata, "spec": spec, "status": status}
