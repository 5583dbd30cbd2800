"""The `Pod` document (seed O3, §3.3): a Kubernetes-like pod, validated with field paths.

    apiVersion: v1
    kind: Pod
    metadata:
      name: bert-train-0
      namespace: algorithm
      labels: {project: nlp}
      annotations:
        ebcloud.io/gpu-models: "A100_80G,H100_80G"   # gpuSpec: allowed models
        ebcloud.io/checkpointable: "true"    # may be preempted
        ebcloud.io/duration: "2h"            # the simulated run time
    spec:
      priorityClassName: training            # a PriorityClass (pools.core.priority) gives the priority
      nodeSelector: {gpu-class: a100}
      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution:
                   {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [train]}]}]}}}
      tolerations: [{key: pool, operator: Equal, value: train, effect: NoSchedule}]
      containers:
      - name: main
        resources: {requests: {cpu: "8", memory: 64Gi}, limits: {nvidia.com/gpu: 1}}
        # or a share of one GPU: limits: {ebcloud.io/gpu-milli: 500}

Requests of all containers add up, as the kube-scheduler counts them. Requests and limits
follow Kubernetes' validation and defaulting: a limit without a request sets the request (so
`limits: {nvidia.com/gpu: 8}` asks for 8 GPUs); cpu and memory requests may be below their
limits, never above; `nvidia.com/gpu` is an extended resource, which cannot be overcommitted,
so it needs a limit and a request, if given, must equal it ("Limit must be set for non
overcommitable resources", "must be equal to nvidia.com/gpu limit of N"). A share of one GPU
is the extended resource `ebcloud.io/gpu-milli` (thousandths of a GPU, 1-1000, the same rules),
which the control plane advertises on every GPU node (1000 per GPU) so that kube-scheduler
counts shares too; a pod asks for whole GPUs or for a share, not both. Annotations and the
containers' strings are free text: any text but control characters (newline and tab aside).
Priority is Kubernetes': `spec.priorityClassName` names a PriorityClass and admission
(`admit`, the rules in `pools.core.priority`) writes its value and preemption policy into the
pod; a `spec.priority` of the user's own is refused unless it equals that value.
Unknown fields are rejected and named; every problem carries its path and all are reported
at once, like `pools.core.spec`. Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from pools.core.durations import parse_duration
from pools.core.errors import ValidationError, control_characters
from pools.core.fields import DNS1123_LABEL, DNS1123_SUBDOMAIN, Checker
from pools.core.pod_placement_spec import affinity as node_affinity
from pools.core.pod_placement_spec import affinity_terms, preferred_terms, tolerations
from pools.core.priority import (
    INT32_MAX,
    INT32_MIN,
    PREEMPT_LOWER_PRIORITY,
    PREEMPTION_POLICIES,
    PriorityClass,
    admit_priority,
)
from pools.core.quantities import mib, milli, non_negative
from pools.core.scheduling.nodes import MILLI, Toleration
from pools.core.scheduling.nodes import Pod as CorePod

API_VERSION = "v1"
KIND = "Pod"
ANNOTATION_GPU_MODELS = "ebcloud.io/gpu-models"
ANNOTATION_CHECKPOINTABLE = "ebcloud.io/checkpointable"
ANNOTATION_DURATION = "ebcloud.io/duration"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_SHARE_RESOURCE = "ebcloud.io/gpu-milli"  # a share of one GPU, in thousandths
EXTENDED_RESOURCES = (GPU_RESOURCE, GPU_SHARE_RESOURCE)

EPHEMERAL_STORAGE = "ephemeral-storage"  # accepted as Kubernetes does; the product's nodes do not count disk
# The most a pod may ask for, in the units the product stores (its columns are 32-bit, the GPU
# count 16-bit): far beyond any node, so a pod asking for more is refused, not stored wrongly.
MAX_REQUEST = {"cpu": INT32_MAX, "memory": INT32_MAX, GPU_RESOURCE: 2**15 - 1}
MAX_DURATION_SECONDS = 10 * 365 * 86400  # the simulated run time: ten years at most
RESTART_POLICIES = ("Always", "OnFailure", "Never")

_TOP = ("apiVersion", "kind", "metadata", "spec")
_METADATA = ("name", "namespace", "labels", "annotations")
_SPEC = ("containers", "priority", "priorityClassName", "preemptionPolicy", "tolerations", "nodeSelector", "affinity", "restartPolicy")
_CONTAINER = ("name", "image", "command", "args", "env", "resources", "workingDir", "ports")


@dataclass(frozen=True)
class PodSpec:
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # as admitted (`admit`); 0 before
    checkpointable: bool = False
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_shares: int = 0  # thousandths asked as ebcloud.io/gpu-milli (core `Pod.gpu_shares`)
    gpu_models: tuple[str, ...] = ()
    tolerations: tuple[dict, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    duration_seconds: int | None = None
    priority_class_name: str = ""
    preemption_policy: str = PREEMPT_LOWER_PRIORITY  # as admitted
    written_priority: int | None = None  # spec.priority and spec.preemptionPolicy as the user wrote them
    written_preemption_policy: str | None = None


def admit(spec: PodSpec, classes: Mapping[str, PriorityClass]) -> PodSpec:
    """The pod after the Priority admission plugin: priority, policy and class from `classes`
    (the user classes by name; the system ones are built in). Raises ValidationError."""
    admitted = admit_priority(class_name=spec.priority_class_name, priority=spec.written_priority,
                              preemption_policy=spec.written_preemption_policy, classes=classes)  # fmt: skip
    return replace(spec, priority=admitted.priority, preemption_policy=admitted.preemption_policy, priority_class_name=admitted.class_name)


def parse_pod(document: Any, *, default_namespace: str = "") -> PodSpec:
    """Validate a Pod document; raise ValidationError naming every bad field."""
    check = Checker()
    top, metadata = check.document(document, api_version=API_VERSION, kind=KIND, known=_TOP, required=_TOP, metadata=_METADATA)
    name, namespace = check.namespaced_name(metadata, default_namespace=default_namespace, what="pod")
    labels = check.labels(metadata.get("labels", {}), "metadata.labels")
    annotations = check.annotations(metadata.get("annotations", {}), "metadata.annotations")

    spec = check.mapping(top.get("spec", {}), "spec", _SPEC, ("containers",))
    _free_text(check, {k: v for k, v in spec.items() if k in ("containers", "restartPolicy")}, "spec")
    priority = policy = None
    if "priority" in spec:
        priority = check.integer(spec["priority"], "spec.priority", minimum=INT32_MIN, maximum=INT32_MAX)
    class_name = spec.get("priorityClassName", "")
    if not (isinstance(class_name, str) and len(class_name) <= 253 and (not class_name or DNS1123_SUBDOMAIN.match(class_name))):
        check.error("spec.priorityClassName", f"invalid PriorityClass name {class_name!r}: a DNS-1123 subdomain such as training")
    if "preemptionPolicy" in spec:
        policy = check.choice(spec["preemptionPolicy"], "spec.preemptionPolicy", PREEMPTION_POLICIES, "preemption policy")
    cpu, memory, gpus, shares = _containers(check, spec.get("containers", []))
    if "restartPolicy" in spec and spec["restartPolicy"] not in RESTART_POLICIES:
        check.error("spec.restartPolicy", f"must be one of {', '.join(RESTART_POLICIES)}")
    placement = tolerations(check, spec.get("tolerations", []))
    node_selector = check.labels(spec.get("nodeSelector", {}), "spec.nodeSelector")
    affinity = node_affinity(check, spec.get("affinity", {}))

    gpus, gpu_milli = gpu_request(gpus, shares)
    if GPU_SHARE_RESOURCE in annotations:  # where shares were asked for before they were a resource
        check.error(f"metadata.annotations.{GPU_SHARE_RESOURCE}",
                    f"a share of one GPU is a resource: set spec.containers[*].resources.limits.{GPU_SHARE_RESOURCE} instead")
    models = tuple(m.strip() for m in annotations.get(ANNOTATION_GPU_MODELS, "").split(",") if m.strip())
    checkpointable = False
    if ANNOTATION_CHECKPOINTABLE in annotations:
        text = annotations[ANNOTATION_CHECKPOINTABLE].lower()
        if text not in ("true", "false"):
            check.error(f"metadata.annotations.{ANNOTATION_CHECKPOINTABLE}", 'must be "true" or "false"')
        checkpointable = text == "true"
    duration = None
    if ANNOTATION_DURATION in annotations:
        try:
            duration = parse_duration(annotations[ANNOTATION_DURATION])
        except ValueError as exc:
            check.error(f"metadata.annotations.{ANNOTATION_DURATION}", str(exc))
        else:
            if duration > MAX_DURATION_SECONDS:
                check.error(f"metadata.annotations.{ANNOTATION_DURATION}", f"must be at most {MAX_DURATION_SECONDS // 3600}h (ten years)")
    if check.errors:
        raise ValidationError(check.errors)
    return PodSpec(
        namespace=namespace,
        name=name,
        labels=labels,
        checkpointable=checkpointable,
        cpu_milli=cpu,
        memory_mib=memory,
        gpu_count=gpus,
        gpu_milli=gpu_milli,
        gpu_shares=shares,
        gpu_models=models,
        tolerations=placement,
        node_selector=node_selector,
        affinity=affinity,
        duration_seconds=duration,
        priority_class_name=class_name,
        written_priority=priority,
        written_preemption_policy=policy,
    )


def _free_text(check: Checker, value: Any, path: str) -> None:
    """Every string under `value` (the containers' names, images, commands, arguments,
    environment): no control characters but newline and tab. Iterative, so a deep document
    cannot exhaust the stack; mapping keys are checked as well as values."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if problem := control_characters(item, allowed="\n\t"):
                check.error(where, problem)
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, where))
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))


def _quantities(check: Checker, value: Any, path: str) -> dict[str, tuple[Decimal, int, Any]]:
    """A container's `requests` or `limits`: {resource: (exact quantity, amount, as written)}, amounts in
    milli-CPU (rounded up), MiB (rounded up), whole GPUs and thousandths of one GPU. The
    extended resources are integers, as kube-apiserver requires (`2000m` is 2, `1.5` is not)."""
    if not isinstance(value, dict):
        check.error(path, "must be a mapping")
        return {}
    result: dict[str, tuple[Decimal, int, Any]] = {}
    for key, quantity in value.items():
        where = f"{path}.{key}"
        if key not in ("cpu", "memory", EPHEMERAL_STORAGE, *EXTENDED_RESOURCES):
            check.error(where, f"unknown resource; expected cpu, memory, {EPHEMERAL_STORAGE}, {GPU_RESOURCE} or {GPU_SHARE_RESOURCE}")
            continue
        try:
            exact = non_negative(quantity)
        except ValueError as exc:
            check.error(where, str(exc))
            continue
        if key in EXTENDED_RESOURCES and exact != exact.to_integral_value():
            check.error(where, "must be an integer")
            continue
        amount = int(exact) if key in EXTENDED_RESOURCES else milli(exact) if key == "cpu" else mib(exact) if key == "memory" else 0
        if amount > _LIMITS[key][0]:
            check.error(where, f"must be at most {_LIMITS[key][1]}")
            continue
        result[key] = (exact, amount, quantity)
    return result


_LIMITS = {  # resource: (the most its amount may be, said in the document's units)
    "cpu": (MAX_REQUEST["cpu"], f"{MAX_REQUEST['cpu']}m"), "memory": (MAX_REQUEST["memory"], f"{MAX_REQUEST['memory']}Mi"),
    EPHEMERAL_STORAGE: (0, ""), GPU_RESOURCE: (MAX_REQUEST[GPU_RESOURCE], str(MAX_REQUEST[GPU_RESOURCE])), GPU_SHARE_RESOURCE: (MILLI, str(MILLI)),
}  # fmt: skip


def _effective_requests(check: Checker, requests: dict, limits: dict, path: str) -> dict[str, int]:
    """Kubernetes' rules for one container (kube-apiserver's validateResourceRequirements and
    the Pod defaulting): a limit without a request sets the request; a request may not exceed
    its limit (compared exactly, not after rounding); an extended resource (nvidia.com/gpu,
    ebcloud.io/gpu-milli) needs a limit, and its request must equal it."""
    result = {key: amount for key, (_, amount, _) in limits.items()}
    for key, (exact, amount, _) in requests.items():
        where = f"{path}.requests.{key}"
        if key not in limits:
            if key in EXTENDED_RESOURCES:
                check.error(f"{path}.limits.{key}", "Limit must be set for non overcommitable resources "
                            f"(set limits: {{{key}: N}}; the request defaults to it)")
            result[key] = amount
            continue
        limit, _, written = limits[key]
        if key in EXTENDED_RESOURCES and exact != limit:
            check.error(where, f"must be equal to {key} limit of {written}")
        elif exact > limit:
            check.error(where, f"must be less than or equal to {key} limit of {written}")
        result[key] = amount
    return result


def _container(check: Checker, item: Any, path: str, names: set[str]) -> dict:
    """One container's own fields as kube-apiserver validates them: a unique DNS-1123 label as
    its name, an image without surrounding blanks, lists of strings for the command and
    arguments, named environment variables and numbered ports."""
    container = check.mapping(item, path, _CONTAINER, ("name", "image"))
    name = container.get("name")
    if "name" in container:
        if not (isinstance(name, str) and len(name) <= 63 and DNS1123_LABEL.match(name)):
            check.error(f"{path}.name", f"invalid container name {str(name)[:80]!r}: a DNS-1123 label such as main")
        elif name in names:
            check.error(f"{path}.name", f"duplicate container name {name!r}")
        names.add(name if isinstance(name, str) else "")
    image = container.get("image")
    if "image" in container and not (isinstance(image, str) and image.strip()):
        check.error(f"{path}.image", "must be a non-empty string")
    elif isinstance(image, str) and image != image.strip():
        check.error(f"{path}.image", "must not have leading or trailing whitespace")
    for key in ("command", "args"):
        if key in container and not (isinstance(container[key], list) and all(isinstance(v, str) for v in container[key])):
            check.error(f"{path}.{key}", "must be a list of strings")
    if "workingDir" in container and not isinstance(container["workingDir"], str):
        check.error(f"{path}.workingDir", "must be a string")
    for index, variable in enumerate(_listed(check, container.get("env", []), f"{path}.env")):
        entry = check.mapping(variable, f"{path}.env[{index}]", ("name", "value", "valueFrom"), ("name",))
        text = entry.get("name")
        if "name" in entry and not (isinstance(text, str) and text and text.isascii() and text.isprintable() and "=" not in text):
            check.error(f"{path}.env[{index}].name", "must be printable ASCII characters other than '='")
        if not isinstance(entry.get("value", ""), str):
            check.error(f"{path}.env[{index}].value", "must be a string (quote numbers and booleans)")
    for index, port in enumerate(_listed(check, container.get("ports", []), f"{path}.ports")):
        entry = check.mapping(port, f"{path}.ports[{index}]", ("name", "containerPort", "hostPort", "hostIP", "protocol"), ("containerPort",))
        for key in ("containerPort", "hostPort"):
            if key in entry:
                check.integer(entry[key], f"{path}.ports[{index}].{key}", minimum=1, maximum=65535)
        if entry.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
            check.error(f"{path}.ports[{index}].protocol", "must be TCP, UDP or SCTP")
    return container


def _listed(check: Checker, value: Any, path: str) -> list:
    if not isinstance(value, list):
        check.error(path, "must be a list")
        return []
    return value


def _containers(check: Checker, value: Any) -> tuple[int, int, int, int]:
    """Requests summed over the containers: (milli-CPU, MiB, GPUs, thousandths of a GPU)."""
    if not isinstance(value, list) or not value:
        check.error("spec.containers", "must be a non-empty list of containers")
        return 0, 0, 0, 0
    cpu = memory = gpus = shares = 0
    share_paths: list[str] = []
    names: set[str] = set()
    for index, item in enumerate(value):
        path = f"spec.containers[{index}]"
        container = _container(check, item, path, names)
        resources = check.mapping(container.get("resources", {}), f"{path}.resources", ("requests", "limits"))
        requests = _quantities(check, resources.get("requests", {}), f"{path}.resources.requests")
        limits = _quantities(check, resources.get("limits", {}), f"{path}.resources.limits")
        effective = _effective_requests(check, requests, limits, f"{path}.resources")
        cpu += effective.get("cpu", 0)
        memory += effective.get("memory", 0)
        gpus += effective.get(GPU_RESOURCE, 0)
        if effective.get(GPU_SHARE_RESOURCE):
            shares += effective[GPU_SHARE_RESOURCE]
            share_paths.append(f"{path}.resources.limits.{GPU_SHARE_RESOURCE}")
    for resource, total in (("cpu", cpu), ("memory", memory), (GPU_RESOURCE, gpus)):
        if total > MAX_REQUEST[resource]:
            check.error("spec.containers", f"the containers ask for more {resource} in all than a pod may ({_LIMITS[resource][1]})")
    if shares and gpus:
        check.error(share_paths[0], f"a pod asks for whole GPUs ({GPU_RESOURCE}) or for a share of one GPU ({GPU_SHARE_RESOURCE}), not both")
    elif shares > MILLI:
        check.error(share_paths[-1], f"the containers ask for {shares} thousandths in all: a share is of one GPU (at most {MILLI}); ask for whole GPUs with {GPU_RESOURCE}")
    return cpu, memory, gpus, shares


def gpu_request(gpus: int, shares: int) -> tuple[int, int]:
    """(GPU count, thousandths of each GPU) of a pod asking for `gpus` whole GPUs and `shares`
    thousandths of one (Alibaba's trace model: a share is one GPU used in part). A pod of a real
    cluster may ask for what the product's API refuses (both, or more than one GPU in shares):
    it is counted as the whole GPUs it could hold, never less."""
    if shares and not gpus and shares <= MILLI:
        return 1, shares
    whole = gpus + math.ceil(shares / MILLI)
    return whole, MILLI if whole else 0


def with_defaults(document: dict) -> dict:
    """The document as Kubernetes stores it after defaulting (call it on a valid document):
    each container's requests filled from its limits where a request is missing, so that
    `kubectl get pod -o yaml` (here `ebcloud pod get -o yaml`) shows what the pod asks for."""
    spec = document.get("spec") or {}
    containers = []
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if not limits:
            containers.append(container)
            continue
        requests = dict(resources.get("requests") or {})
        requests.update({key: value for key, value in limits.items() if key not in requests})
        containers.append({**container, "resources": {**resources, "requests": requests}})
    return {**document, "spec": {**spec, "containers": containers}}


def core_pod(
    *,
    key: str,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    gpu_count: int = 0,
    gpu_milli: int = 0,
    gpu_shares: int = 0,
    gpu_models=(),
    priority: int = 0,
    preemption_policy: str = PREEMPT_LOWER_PRIORITY,
    checkpointable: bool = False,
    labels: Mapping[str, str] | None = None,
    tolerations=(),
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    team: str = "",
    started_at: datetime | None = None,
) -> CorePod:
    """The scheduling core's Pod from stored (validated) fields; `key` is namespace/name,
    `team` the identity of its namespace's team, `started_at` a running pod's start (which
    preemption weighs, as kube-scheduler weighs `status.startTime`)."""
    return CorePod(
        name=key,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_count=gpu_count,
        gpu_milli=gpu_milli if gpu_count else 0,
        gpu_shares=gpu_shares,
        gpu_models=tuple(gpu_models or ()),
        priority=priority,
        preemption_policy=preemption_policy or PREEMPT_LOWER_PRIORITY,
        checkpointable=checkpointable,
        labels=dict(labels or {}),
        tolerations=tuple(t for t in map(Toleration.stored, tolerations or ()) if t is not None),
        node_selector=dict(node_selector or {}),
        affinity_terms=affinity_terms(affinity or {}),
        preferred_terms=preferred_terms(affinity or {}),
        team=team,
        started_at=started_at,
    )


def core_pod_from_spec(spec: PodSpec) -> CorePod:
    return core_pod(
        key=f"{spec.namespace}/{spec.name}",
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        gpu_count=spec.gpu_count,
        gpu_milli=spec.gpu_milli,
        gpu_shares=spec.gpu_shares,
        gpu_models=spec.gpu_models,
        priority=spec.priority,
        preemption_policy=spec.preemption_policy,
        checkpointable=spec.checkpointable,
        labels=spec.labels,
        tolerations=spec.tolerations,
        node_selector=spec.node_selector,
        affinity=spec.affinity,
    )
