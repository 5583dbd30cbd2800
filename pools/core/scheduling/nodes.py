"""Pure placement core, the cluster's nouns and filters (seed O3 placement, T2 pending explanation).

This is the kube-scheduler model the control plane uses for simulated clusters, what-if
planning and the trace benchmark. It is plain Python over plain dataclasses and never imports
Django: services load state, call these functions and persist the result, so the live
controller, the offline simulator and the tests all run the same decisions.

Vocabulary and semantics follow Kubernetes on purpose, so that people who know Kubernetes can
predict the outcome: taints and tolerations (``ToleratesTaint``), required node affinity
(terms ORed, expressions ANDed), the filter order of kube-scheduler's default profile and its
reason strings. The rest of the package builds on this module: score policies in
:mod:`pools.core.scheduling.policies`, one placement in :mod:`pools.core.scheduling.schedule`,
the incremental :class:`ClusterScheduler` in :mod:`pools.core.scheduling.cluster`, explanations
in :mod:`pools.core.scheduling.explain` and preemption in :mod:`pools.core.scheduling.preempt`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pools.core.priority import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER

MILLI = 1000  # one whole GPU in milli-GPU units
NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"

# kube-scheduler's own reason strings, so `kubectl describe`-literate users recognise them.
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_GPU_MODEL = "node(s) didn't match pod's GPU model"
REASON_PODS = "Too many pods"  # the node holds its allocatable pod count (`max_pods`)
REASON_CPU = "Insufficient cpu"
REASON_MEMORY = "Insufficient memory"
REASON_GPU = "Insufficient nvidia.com/gpu"
REASON_GPU_SHARE = "Insufficient ebcloud.io/gpu-milli"  # a share of one GPU: the resource it asks for (podspec.GPU_SHARE_RESOURCE)
REASONS_INSUFFICIENT = (REASON_PODS, REASON_CPU, REASON_MEMORY, REASON_GPU, REASON_GPU_SHARE)  # NodeResourcesFit's, in its order
MAX_PODS = 110  # kubelet's default --max-pods: a node's allocatable "pods", which kube-scheduler counts
# Ours: a pool's nodes take only its team's pods (and those of teams it is shared with).
REASON_TEAM = "node(s) belong to a pool the pod's team may not use"

POLICIES = ("spread", "binpack", "bestfit", "fgd", "fgd-cpu", "random")
MAX_NODE_SCORE = 100  # kube-scheduler's framework.MaxNodeScore


@dataclass(frozen=True)
class Taint:
    """A node taint; NoSchedule/NoExecute repel pods that do not tolerate them."""

    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect must be one of {TAINT_EFFECTS}, got {self.effect!r}")


@dataclass(frozen=True)
class Toleration:
    """A pod toleration with Kubernetes' exact matching rules (see :meth:`tolerates`)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def stored(cls, entry: Any) -> Toleration | None:
        """From a toleration as the product stores it (the Pod document's dict); None for one
        the API would refuse today (a field that is not a string, such as `effect: {}`, stored
        before the API checked them): it tolerates nothing, rather than breaking every pass."""
        if not isinstance(entry, Mapping):
            return None
        key, operator, value, effect = (entry.get(name, "") for name in ("key", "operator", "value", "effect"))
        if not all(isinstance(field, str) for field in (key, operator, value, effect)):
            return None
        return cls(key, operator or "Equal", value, effect)

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes ``Toleration.ToleratesTaint``: empty effect matches every effect, empty
        key matches every key, ``Exists`` ignores the value, ``Equal`` compares it."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True)
class NodeSelectorRequirement:
    """One requirement of a node-affinity term: on the node's labels (matchExpressions) or,
    with ``field``, on its name (matchFields ``metadata.name``, operators In and NotIn)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if self.operator not in NODE_SELECTOR_OPERATORS or not isinstance(self.key, str) or not all(isinstance(v, str) for v in self.values):
            raise ValueError(f"key and values must be strings, and operator one of {NODE_SELECTOR_OPERATORS}")

    def matches(self, labels: Mapping[str, str], node_name: str | None = None) -> bool:
        """Kubernetes label-selector semantics. Gt/Lt compare integers as Go's ParseInt reads
        them (ASCII digits, an optional sign, within int64) and fail closed. A field requirement
        asked without a node name (a pool's labels, not one node) does not narrow anything."""
        if self.field:
            return node_name is None or (node_name in self.values) == (self.operator == "In")
        op, present = self.operator, self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if not present or len(self.values) != 1:
            return False
        have, want = go_int64(labels[self.key]), go_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want


_GO_INT = re.compile(r"[+-]?[0-9]+\Z")


def go_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where it fails."""
    if not _GO_INT.match(text) or len(text) > 20:
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def matches_affinity(terms: Sequence[Sequence[NodeSelectorRequirement]], labels, node_name: str | None = None) -> bool:
    """Required node affinity: terms are ORed, requirements inside a term ANDed. No terms at
    all means no affinity was set (matches); an empty term matches nothing, as in Kubernetes."""
    if not terms:
        return True
    return any(term and all(req.matches(labels, node_name) for req in term) for term in terms)


def first_untolerated_taint(
    taints: Iterable[Taint], tolerations: Sequence[Toleration], effects=(NO_SCHEDULE, NO_EXECUTE)
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates."""
    for taint in taints:
        if taint.effect in effects and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


REASON_TAINT = "node(s) had untolerated taint(s)"  # kube-scheduler 1.37's TaintToleration; the hints name the taint


@dataclass(frozen=True)
class Pod:
    """A pod's scheduling request. ``name`` is ``namespace/name``. GPUs: ``gpu_count`` whole GPUs
    (``gpu_milli`` is then 1000), or a *sharing* pod with ``gpu_count == 1`` and ``0 < gpu_milli <
    1000`` (a share of one GPU in 1/1000); ``gpu_shares``: the thousandths asked as
    ``ebcloud.io/gpu-milli`` (kube-scheduler counts them apart), a sharing pod's share or any a
    real cluster's pod asks (held whole). ``gpu_models`` lists the allowed GPU models (gpuSpec; empty = any). ``priority`` and
    ``checkpointable`` decide who may be preempted; a ``preemption_policy`` of ``Never`` (its
    PriorityClass's) means the pod preempts nobody, though it may itself be preempted.
    ``team`` is an opaque identity of the pod's team (its namespace's): a node whose ``teams``
    is set takes only pods of those teams. ``shape_key`` is derived: pods with equal keys filter
    and score identically, which is what the schedulers cache on.
    ``started_at`` is a running pod's start (its ``status.startTime``; None when it has none
    yet): only preemption reads it, as kube-scheduler does (the older of two pods of equal
    priority is the more important), so it is in neither ``shape_key`` nor equality."""

    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    priority: int = 0
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    checkpointable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    preferred_terms: tuple[tuple[int, tuple[NodeSelectorRequirement, ...]], ...] = ()  # (weight, term)
    team: str = ""
    gpu_shares: int = 0
    started_at: datetime | None = field(default=None, compare=False)
    shape_key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        if self.gpu_count < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("requests must not be negative")
        if self.gpu_count == 0 and self.gpu_milli:
            raise ValueError("gpu_milli needs gpu_count >= 1")
        if self.gpu_count and self.gpu_milli == 0:
            setattr_(self, "gpu_milli", MILLI)
        if not 0 <= self.gpu_milli <= MILLI or (self.gpu_count > 1 and self.gpu_milli != MILLI):
            raise ValueError("a GPU share (gpu_milli < 1000) is only allowed with gpu_count == 1")
        setattr_(self, "gpu_shares", self.gpu_milli if self.is_sharing else self.gpu_shares)
        if not 0 <= self.gpu_shares <= self.gpu_count * MILLI:
            raise ValueError("gpu_shares must be held: at most 1000 for each GPU in gpu_count")
        setattr_(self, "gpu_models", tuple(self.gpu_models))
        setattr_(self, "tolerations", tuple(self.tolerations))
        setattr_(self, "affinity_terms", tuple(tuple(t) for t in self.affinity_terms))
        setattr_(self, "preferred_terms", tuple((weight, tuple(term)) for weight, term in self.preferred_terms))
        constraints = (
            self.tolerations,
            tuple(sorted(self.node_selector.items())),
            self.affinity_terms,
            self.preferred_terms,
            self.team,
        )
        resources = (self.cpu_milli, self.memory_mib, self.gpu_count, self.gpu_milli, self.gpu_shares)
        setattr_(self, "shape_key", resources + (self.gpu_models, constraints))

    def __hash__(self) -> int:
        return hash(self.name)

    def renamed(self, name: str) -> Pod:
        """The same request under another name (a workload's replicas), sharing this pod's
        checked and derived fields instead of building and checking them again."""
        twin = object.__new__(Pod)
        twin.__dict__.update(self.__dict__)
        twin.__dict__["name"] = name
        return twin

    @property
    def namespace(self) -> str:
        return self.name.partition("/")[0] if "/" in self.name else ""

    @property
    def may_preempt(self) -> bool:
        return self.preemption_policy != PREEMPT_NEVER

    @property
    def is_sharing(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI

    @property
    def gpu_request_milli(self) -> int:
        """GPU request in milli: a share counts its milli, whole GPUs 1000 each."""
        return self.gpu_count * self.gpu_milli


@dataclass(frozen=True)
class Binding:
    pod: Pod
    gpu_indices: tuple[int, ...]


class OversubscribedError(ValueError):
    """Raised when a bind would exceed a node's CPU, memory or any GPU's milli."""


@dataclass(eq=False)
class NodeState:
    """A node's allocatable resources and what is bound to it (mutable, for fast binds).

    ``gpu_free`` holds the free milli of each GPU (1000 each when idle). ``version`` changes
    on every bind, unbind or :meth:`touch`, which is how caches know a node changed.
    ``teams``: the teams whose pods may run here (its pool's team and the teams the pool is
    shared with); None puts no limit (the trace benchmark, one team's what-if). ``owner``: its
    pool's team, whose pods a guest's never preempt (:func:`may_preempt`); None: no owner.
    ``max_pods``: how many pods it holds at most (its allocatable ``pods``), whatever they ask."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    pool: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    teams: frozenset[str] | None = None
    owner: str | None = None
    gpu_free: list[int] | None = None
    cpu_used: int = 0
    memory_used: int = 0
    bound: dict[str, Binding] = field(default_factory=dict)
    version: int = 0
    max_pods: int = MAX_PODS

    def __post_init__(self) -> None:
        if self.gpu_free is None:
            self.gpu_free = [MILLI] * self.gpu_count
        if len(self.gpu_free) != self.gpu_count:
            raise ValueError("gpu_free needs one entry per GPU")
        self.taints = tuple(self.taints)
        self._gpu_key: tuple[int, ...] | None = None

    @property
    def cpu_free(self) -> int:
        return self.cpu_milli - self.cpu_used

    @property
    def memory_free(self) -> int:
        return self.memory_mib - self.memory_used

    @property
    def gpu_free_milli(self) -> int:
        return sum(self.gpu_free)

    @property
    def gpu_used_milli(self) -> int:
        return self.gpu_count * MILLI - sum(self.gpu_free)

    @property
    def gpu_key(self) -> tuple[int, ...]:
        """Free milli per GPU, sorted: two nodes with equal keys fragment identically."""
        if self._gpu_key is None:
            self._gpu_key = tuple(sorted(self.gpu_free))
        return self._gpu_key

    def touch(self) -> None:
        """Mark the node changed (labels, taints, cordon, readiness) for caches."""
        self.version += 1
        self._gpu_key = None

    def bind(self, pod: Pod, gpu_indices: Sequence[int] = ()) -> Binding:
        """Bind ``pod`` on the given GPUs; refuses anything that would oversubscribe."""
        gpus = tuple(gpu_indices)
        if pod.name in self.bound:
            raise ValueError(f"pod {pod.name} is already bound to {self.name}")
        if len(self.bound) >= self.max_pods:
            raise OversubscribedError(f"{self.name}: {REASON_PODS}")
        if self.cpu_used + pod.cpu_milli > self.cpu_milli:
            raise OversubscribedError(f"{self.name}: {REASON_CPU}")
        if self.memory_used + pod.memory_mib > self.memory_mib:
            raise OversubscribedError(f"{self.name}: {REASON_MEMORY}")
        if len(gpus) != pod.gpu_count or len(set(gpus)) != len(gpus):
            raise ValueError(f"pod {pod.name} needs {pod.gpu_count} distinct GPU indices")
        for i in gpus:
            if not 0 <= i < self.gpu_count or self.gpu_free[i] < pod.gpu_milli:
                raise OversubscribedError(f"{self.name}: {REASON_GPU_SHARE if pod.is_sharing else REASON_GPU} (GPU {i})")
        for i in gpus:
            self.gpu_free[i] -= pod.gpu_milli
        self.cpu_used += pod.cpu_milli
        self.memory_used += pod.memory_mib
        binding = Binding(pod, gpus)
        self.bound[pod.name] = binding
        self.touch()
        return binding

    def unbind(self, pod_name: str) -> Binding:
        """Remove a bound pod (eviction, completion) and give its resources back."""
        binding = self.bound.pop(pod_name)
        for i in binding.gpu_indices:
            self.gpu_free[i] += binding.pod.gpu_milli
        self.cpu_used -= binding.pod.cpu_milli
        self.memory_used -= binding.pod.memory_mib
        self.touch()
        return binding

    def clone(self) -> NodeState:
        """An independent copy for what-if simulations (bindings are immutable, shared)."""
        return NodeState(
            name=self.name,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            pool=self.pool,
            labels=dict(self.labels),
            taints=self.taints,
            ready=self.ready,
            unschedulable=self.unschedulable,
            teams=self.teams,
            owner=self.owner,
            gpu_free=list(self.gpu_free),
            cpu_used=self.cpu_used,
            memory_used=self.memory_used,
            bound=dict(self.bound),
            max_pods=self.max_pods,
        )


# --- filters -------------------------------------------------------------------------------


def effective_taints(node: NodeState) -> tuple[Taint, ...]:
    """A node that is not Ready carries the not-ready taint, as the node controller adds it."""
    if node.ready:
        return node.taints
    return (Taint(NOT_READY_TAINT_KEY, "", NO_SCHEDULE), *node.taints)


def may_use(pod: Pod, node: NodeState) -> bool:
    """Whether the pod's team may run on the node at all: a pool is paid for by one team and
    lent only by its ``sharedWith``; a toleration of the pool's taints does not change that."""
    return node.teams is None or pod.team in node.teams


def may_preempt(preemptor: Pod, victim_team: str, node: NodeState) -> bool:
    """Whether ``preemptor`` may evict a pod of ``victim_team`` from ``node`` (priority aside).
    A team a pool is lent to runs on the pool's free capacity: its pods never evict the owner's,
    whatever their priority (the owner pays for the nodes); they may evict their own team's and
    other guests' lower-priority pods, and the owner's pods may evict anyone's, as may a pod of
    no team (the cluster's own: a critical DaemonSet pod preempts as Kubernetes decides)."""
    return node.owner is None or preemptor.team in (node.owner, "") or victim_team != node.owner


def static_filter_reason(pod: Pod, node: NodeState) -> str | None:
    """Filters that depend only on node attributes: first ours, the pod's team (see
    :func:`may_use`), then :func:`node_filter_reason`. Returns the first failing reason, or None."""
    if node.teams is not None and pod.team not in node.teams:
        return REASON_TEAM
    return node_filter_reason(pod, node)


def node_filter_reason(pod: Pod, node: NodeState) -> str | None:
    """The node-attribute filters but the team rule: kube-scheduler's (`builtin_filter_reason`),
    then our GPU-model check (the scheduler extender applies the team rule its own way to pods
    of no team). Preemption can change none of them. Returns the first failing reason, or None."""
    return builtin_filter_reason(pod, node) or gpu_model_reason(pod, node)


def gpu_model_reason(pod: Pod, node: NodeState) -> str | None:
    """Our GPU-model check (the pod's `ebcloud.io/gpu-models`), which kube-scheduler leaves to
    the extender: on a real cluster it judges only the nodes every built-in filter passed."""
    return REASON_GPU_MODEL if pod.gpu_count and pod.gpu_models and node.gpu_model not in pod.gpu_models else None


def builtin_filter_reason(pod: Pod, node: NodeState) -> str | None:
    """kube-scheduler's node-attribute filters in its default order: NodeUnschedulable,
    TaintToleration, NodeAffinity (selector + required affinity)."""
    tolerations = pod.tolerations
    if node.unschedulable and not any(
        t.tolerates(Taint(UNSCHEDULABLE_TAINT_KEY, "", NO_SCHEDULE)) for t in tolerations
    ):
        return REASON_UNSCHEDULABLE
    if node.taints or not node.ready:
        taint = first_untolerated_taint(effective_taints(node), tolerations)
        if taint is not None:
            return REASON_TAINT
    labels = node.labels
    if pod.node_selector and any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return REASON_AFFINITY
    if pod.affinity_terms and not matches_affinity(pod.affinity_terms, labels, node.name):
        return REASON_AFFINITY
    return None


def best_fit_gpus(pod: Pod, gpu_free: Sequence[int]) -> tuple[int, ...] | None:
    """GPU indices for ``pod`` or None: a share takes the fitting GPU with the least free
    milli (lowest index on ties); whole GPUs take the lowest-numbered idle GPUs."""
    if pod.gpu_count == 0:
        return ()
    need = pod.gpu_milli
    if need < MILLI:
        best = -1
        for i, free in enumerate(gpu_free):
            if free >= need and (best < 0 or free < gpu_free[best]):
                best = i
        return (best,) if best >= 0 else None
    idle = [i for i, free in enumerate(gpu_free) if free == MILLI]
    return tuple(idle[: pod.gpu_count]) if len(idle) >= pod.gpu_count else None


def resource_filter_reason(pod: Pod, node: NodeState) -> str | None:
    """NodeResourcesFit: the pod count, cpu, then memory, then GPUs (count or a share of one
    GPU); the first that is short (`insufficient_resources` lists them all)."""
    if len(node.bound) >= node.max_pods:
        return REASON_PODS
    if node.cpu_used + pod.cpu_milli > node.cpu_milli:
        return REASON_CPU
    if node.memory_used + pod.memory_mib > node.memory_mib:
        return REASON_MEMORY
    if pod.gpu_count:  # _gpus_short inlined: this runs for every node a pod is tried on
        free = node.gpu_free
        if pod.gpu_milli < MILLI:
            if not free or max(free) < pod.gpu_milli:
                return REASON_GPU_SHARE
        elif free.count(MILLI) < pod.gpu_count:
            return REASON_GPU
    return None


def _gpus_short(pod: Pod, node: NodeState) -> bool:
    """Same answer as best_fit_gpus(...) is None, without the Python loop."""
    if not pod.gpu_count:
        return False
    free = node.gpu_free
    if pod.gpu_milli < MILLI:
        return not free or max(free) < pod.gpu_milli
    return free.count(MILLI) < pod.gpu_count


def insufficient_resources(pod: Pod, node: NodeState) -> list[tuple[str, bool]]:
    """Every resource NodeResourcesFit finds short on the node, in its order, each with whether
    it is *unresolvable* there (the pod asks for more than the node has at all), which is what
    tells the scheduler's preemption that evicting pods cannot help."""
    short = []
    if len(node.bound) >= node.max_pods:
        short.append((REASON_PODS, node.max_pods == 0))
    if node.cpu_used + pod.cpu_milli > node.cpu_milli:
        short.append((REASON_CPU, pod.cpu_milli > node.cpu_milli))
    if node.memory_used + pod.memory_mib > node.memory_mib:
        short.append((REASON_MEMORY, pod.memory_mib > node.memory_mib))
    if _gpus_short(pod, node):
        short.append((REASON_GPU_SHARE if pod.is_sharing else REASON_GPU, pod.gpu_count > node.gpu_count))
    return short


def filter_node(pod: Pod, node: NodeState) -> str | None:
    """The first failing filter's reason for ``pod`` on ``node``, or None if it fits."""
    return static_filter_reason(pod, node) or resource_filter_reason(pod, node)


def soft_penalty(pod: Pod, node: NodeState) -> int:
    """The soft constraints kube-scheduler scores, as one integer where less is better, which
    ranks nodes before the pool's packing policy does: first the untolerated PreferNoSchedule
    taints (TaintToleration weighs 3 in the default profile), then the weight of the pod's
    preferred node-affinity terms the node does not match (NodeAffinity weighs 2; an empty term
    matches no node). 0 for a pod without preferences on an untainted node."""
    penalty = 0
    if pod.preferred_terms:
        matched = sum(weight for weight, term in pod.preferred_terms if term and all(r.matches(node.labels, node.name) for r in term))
        total = sum(weight for weight, _ in pod.preferred_terms)
        penalty = total - matched
        scale = total + 1
    else:
        scale = 1
    if node.taints:
        untolerated = sum(1 for taint in node.taints if taint.effect == PREFER_NO_SCHEDULE and not any(t.tolerates(taint) for t in pod.tolerations))
        penalty += untolerated * scale
    return penalty


class Policy(Protocol):
    """A score policy: a kube-style integer node score (0-100, higher wins) plus the GPU
    indices the pod would get on that node. Only called for nodes that pass the filters."""

    name: str

    def score(self, pod: Pod, node: NodeState) -> tuple[int, tuple[int, ...]]: ...
