"""A node's labels, taints and cordon, level-triggered (design §1: "labels and taints by
server-side apply, level-triggered every pass"). Pure: what the cluster shows of a node, what we
want there, and what differs, in words for the node's events. No Django here.

The GPU-share resource (`ebcloud.io/gpu-milli`, 1000 per GPU) is in the node's capacity too,
where kube-scheduler counts it: the control plane advertises it and puts it back when it is gone.

Three sets meet for each registered node:
- *wanted*: the labels and taints the pool's spec gives it now (`effective_node_labels`, the
  spec's `nodeTaints`) and, while it is drained or repaired, `spec.unschedulable`;
- *applied*: what the control plane last applied (the Node row's `labels`/`taints`);
- *observed*: what the cluster's Node carries now (`ClusterNodeState`), others' labels too.

`wanted != applied` is a spec edit to roll out; an applied label or taint missing (or changed)
in the observed node is drift to repair. Labels and taints the node has and that we never
applied belong to someone else and are left alone (Kubernetes server-side apply: a field
manager owns only what it applied).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

# Node phases where the node is registered in the cluster (the lifecycle keeps its labels there).
REGISTERED_PHASES = ("Ready", "Cordoned", "Draining", "Repairing", "Unknown")
# Phases where we cordoned the node in the cluster (`spec.unschedulable`) and it must stay so,
# whoever lifts it: a drain, and a repair's two phases: `Cordoned` (its GPU fault waits for the
# repair, or a reset or reboot failed) and `Repairing` (the reset or reboot runs). The repair
# pass sets and lifts these cordons itself (pools/controllers/repair_cordon.py); the drift check
# makes the cluster follow the row when a pass stopped between the two, or someone uncordoned.
CORDONED_PHASES = ("Draining", "Cordoned", "Repairing")
# Phases whose cordon no drain or repair of ours keeps: a Ready (or Unknown: its agent silent) node
# is cordoned only by a scale-down decision, just before its drain (or by someone else). One such
# cordon whose drain never started (its pass stopped) is lifted by a later autoscale pass
# (pools/controllers/scale_down_cordons.py), and the fleet view counts them to act on the pool.
LEFTOVER_PHASES = ("Ready", "Unknown")


@dataclass(frozen=True)
class ClusterNodeState:
    """A Node as the cluster has it now (`ClusterBackend.nodes_state`)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    unschedulable: bool = False
    # Of its annotations, those by which a Node opts out of scale-down (`disruption.NODE_OPT_OUTS`).
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Whether the Node's capacity shows the GPU-share resource for each of its GPUs (a real
    # cluster's kubelet drops it on restart; a simulated node has no capacity of its own).
    gpu_shares_advertised: bool = True
    # (key, effect) of the taints our last apply recorded on the Node (a real cluster's
    # annotation, read as none when someone removed or garbled it); None where the cluster
    # keeps that record out of others' reach (the simulated one).
    managed_taints: frozenset[tuple[str, str]] | None = None
    # What its kubelet reports, None where nothing does (the simulated cluster, a Node made by
    # hand): its Ready condition's status, and how many GPUs it offers (`nvidia.com/gpu`
    # allocatable; 0 when the device plugin serves none).
    ready: str | None = None
    gpus_allocatable: int | None = None


class ObservedNodes(dict):
    """One read of the cluster's nodes: their states by name, and the names the read asked for
    (`asked`). A name asked for and absent is a Node the cluster does not have; a name not asked
    for (a node registered after the read, every node of a read that failed) is not judged."""

    def __init__(self, states: Mapping[str, ClusterNodeState] | None = None, asked: Iterable[str] = ()):
        super().__init__(states or {})
        self.asked = frozenset(asked)


def judged(observed: Mapping[str, ClusterNodeState], name: str) -> bool:
    """Whether `observed` says anything of node `name`: its read asked for it (`ObservedNodes`),
    or, for a plain mapping, it holds it."""
    return name in (observed.asked if isinstance(observed, ObservedNodes) else observed)


def cluster_fault(observed: ClusterNodeState | None, *, name: str, gpu_count: int) -> str:
    """Why the cluster runs no pod (no GPU pod) on a registered node now, "" when it does: its
    Node is gone (deleted; a kubelet registers it again only when it restarts), not Ready, or
    offers none of its GPUs. kube-scheduler places nothing there then, so neither the
    autoscaler nor Diagnose may count the node's room: it is read as not Ready, as Cluster
    Autoscaler reads a GPU node with no GPU allocatable. A node offering some of its GPUs (the
    device plugin withdraws one it finds unhealthy) still takes pods: the repair of that GPU is
    the node agent's Xid report's to start."""
    if observed is None:
        return f"the cluster has no Node {name!r} (deleted?); its kubelet registers it again when it restarts"
    if observed.ready not in (None, "True"):
        return f"its Node is not Ready (Ready={observed.ready})"
    if observed.gpus_allocatable == 0 and gpu_count:
        return f"its Node offers none of its {gpu_count} GPUs (nvidia.com/gpu allocatable 0): its GPU device plugin serves none"
    return ""


def fault_now(observed: Mapping[str, ClusterNodeState], *, name: str, gpu_count: int, leaving: bool) -> str | None:
    """The node's `cluster_fault` as `observed` shows it now, or None when the read does not judge
    it: the node registered after the read, or it is leaving (its Node is removed on purpose)."""
    if leaving or not judged(observed, name):
        return None
    return cluster_fault(observed.get(name), name=name, gpu_count=gpu_count)


def fault_start(fault: str, *, was: str, was_since: datetime | None, now: datetime) -> datetime | None:
    """When the node's `fault` began (None: it has none). A fault reworded (NotReady after the Node
    came back without its GPUs) goes on from when the first began, so a repair that waits out an
    outage's length is not restarted by its wording; one written with no start (by a release
    without the column) starts now."""
    if not fault:
        return None
    return (was_since or now) if was else now


def record_lost(applied_taints: Iterable[Mapping[str, str]], observed: ClusterNodeState) -> bool:
    """Whether the Node's record of which taints are ours differs from what we applied: the next
    apply writes it again, so that a taint we later stop applying is known as ours to remove."""
    return observed.managed_taints is not None and observed.managed_taints != {(t["key"], t["effect"]) for t in applied_taints}


def system_labels(*, pool: str, team: str, gpu_model: str, node_type: str, billing: str, zone: str) -> dict[str, str]:
    """The labels the control plane itself puts on every node of a pool: the admission policy,
    the pod mirror and billing read a node's pool and team from them, so a pool's own labels
    may not set them (`reserved_key_error`)."""
    return {
        "ebcloud.io/pool": pool,
        "ebcloud.io/team": team,
        "ebcloud.io/gpu-model": gpu_model,
        "ebcloud.io/node-type": node_type,
        "ebcloud.io/billing": billing,
        "topology.kubernetes.io/zone": zone,
    }


SYSTEM_LABEL_KEYS = tuple(system_labels(pool="", team="", gpu_model="", node_type="", billing="", zone=""))
# Kubernetes reserves the kubernetes.io and k8s.io namespaces (and their subdomains) for its own
# components: the kubelet sets kubernetes.io/hostname, the node lifecycle controller the
# node.kubernetes.io/ taints. A pool that wrote one would take it over by its forced apply and
# delete it when it stopped declaring it. Administrators' node roles are the exception.
_KUBERNETES_NAMESPACES = ("kubernetes.io", "k8s.io")
_ADMIN_PREFIXES = ("node-role.kubernetes.io",)


def reserved_key_error(key: str, *, what: str = "label") -> str | None:
    """Why a pool may not put this label (or taint) key on its nodes; None when it may."""
    if what == "label" and key in SYSTEM_LABEL_KEYS:
        return f"{key} is set by the control plane on every node of the pool"
    prefix = key.rpartition("/")[0]
    if prefix in _ADMIN_PREFIXES:
        return None
    if any(prefix == namespace or prefix.endswith("." + namespace) for namespace in _KUBERNETES_NAMESPACES):
        return f"{prefix}/ {what}s are reserved for Kubernetes' own components; use a prefix of your own"
    return None


def taint_tuple(taint: Mapping[str, str]) -> tuple[str, str, str]:
    return (taint["key"], taint.get("value") or "", taint["effect"])


def labels_taints_decoded(labels_text: str | None, taints_text: str | None) -> tuple[dict, tuple]:
    """A Node's labels and taint tuples from their stored JSON texts (None: none)."""
    labels, taints = (json.loads(text) if text else None for text in (labels_text, taints_text))
    return dict(labels or {}), tuple(taint_tuple(t) for t in taints or ())


def taint_dict(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def drifted(*, applied_labels: Mapping[str, str], applied_taints: Iterable[Mapping[str, str]], cordoned: bool, observed: ClusterNodeState) -> bool:
    """Whether the cluster lost something we applied: a label of ours removed or changed, a taint
    of ours gone or no longer recorded as ours, or the cordon of a drained (or repaired) node lifted. Reads only what we applied (no spec),
    so a pass over every pool checks it without parsing any spec."""
    if any(observed.labels.get(k) != v for k, v in applied_labels.items()):
        return True
    have = set(observed.taints)
    if any(taint_tuple(t) not in have for t in applied_taints) or record_lost(applied_taints, observed):
        return True
    return cordoned and not observed.unschedulable or not observed.gpu_shares_advertised


@dataclass(frozen=True)
class NodeFix:
    """What one node needs, and the words of its events."""

    apply: bool  # labels/taints to (re)apply
    cordon: bool  # `spec.unschedulable` to set again
    advertise: bool = False  # the GPU-share capacity to advertise again
    labels: str = ""  # NodeLabeled message part, "" when the labels need nothing
    taints: str = ""  # NodeTainted message part
    rows_changed: bool = False  # the Node row's labels/taints (what we applied) change


def node_fix(
    *,
    wanted_labels: Mapping[str, str],
    wanted_taints: Sequence[Mapping[str, str]],
    applied_labels: Mapping[str, str],
    applied_taints: Sequence[Mapping[str, str]],
    cordoned: bool,
    observed: ClusterNodeState,
) -> NodeFix:
    """Compare the three sets (module docstring) for one node."""
    label_parts = []
    changes = label_changes(applied_labels, wanted_labels)
    if changes:
        label_parts.append(f"updated: {changes}")
    lost = {k: v for k, v in wanted_labels.items() if observed.labels.get(k) != v and applied_labels.get(k) == v}
    if lost:
        label_parts.append("restored: " + ", ".join(f"+{k}={v}" for k, v in sorted(lost.items())))
    wanted_set = [taint_tuple(t) for t in wanted_taints]
    applied_set = [taint_tuple(t) for t in applied_taints]
    taint_parts = []
    changes = taint_changes(applied_set, wanted_set)
    if changes:
        taint_parts.append(f"updated: {changes}")
    have = set(observed.taints)
    lost_taints = [t for t in wanted_set if t not in have and t in applied_set]
    if lost_taints:
        taint_parts.append("restored: " + ", ".join(f"+{_taint_text(t)}" for t in lost_taints))
    # A label or taint added by the spec that the cluster already has (someone set it) needs no
    # apply for the node's sake, but we take it over so that a later removal is ours to make.
    missing = any(observed.labels.get(k) != v for k, v in wanted_labels.items()) or any(t not in have for t in wanted_set)
    rows_changed = dict(applied_labels) != dict(wanted_labels) or applied_set != wanted_set
    return NodeFix(
        apply=missing or rows_changed or record_lost(applied_taints, observed),
        cordon=cordoned and not observed.unschedulable,
        advertise=not observed.gpu_shares_advertised,
        labels="; ".join(label_parts),
        taints="; ".join(taint_parts),
        rows_changed=rows_changed,
    )


def label_changes(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """`+pool=train, -old=x, gpu-class=a100→h100` (kubectl's spirit), "" when equal."""
    parts = [f"+{k}={after[k]}" for k in sorted(after.keys() - before.keys())]
    parts += [f"{k}={before[k]}→{after[k]}" for k in sorted(after.keys() & before.keys()) if before[k] != after[k]]
    parts += [f"-{k}={before[k]}" for k in sorted(before.keys() - after.keys())]
    return ", ".join(parts)


def taint_changes(before: Sequence[tuple[str, str, str]], after: Sequence[tuple[str, str, str]]) -> str:
    """`+pool=train:NoSchedule, -gpu=a100:NoExecute`, "" when equal (order aside)."""
    parts = [f"+{_taint_text(t)}" for t in after if t not in before]
    parts += [f"-{_taint_text(t)}" for t in before if t not in after]
    return ", ".join(parts)


def _taint_text(taint: tuple[str, str, str]) -> str:
    key, value, effect = taint
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"
