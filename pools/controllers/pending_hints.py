"""Why a Pending pod waits, in the words a team can act on: the hints beside the scheduler's
verdict (which label or toleration is missing, on which of the team's own pools; which pool is
full and has nodes starting that will take the pod, or could grow; which pool without a Ready
node yet will take it, and what it waits for; what to order when no pool of the team ever
could). The simulated scheduler pass (pools/controllers/scheduler.py) writes them with its own
verdict; on a real cluster kube-scheduler gives the verdict (the pod's `PodScheduled`
condition, mirrored into `Pod.explanation`) and `pending_hints_write` adds ours.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.urls import reverse

from pools.core.autoscaling import burst_ceiling
from pools.core.scale_up import first_fit
from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import (
    REASONS_INSUFFICIENT,
    NodeState,
    gpu_model_reason,
    may_use,
)
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.scheduling.waiting import (
    PoolProspect,
    could_take,
    fits_empty,
    is_guest,
    lent_hint,
    starting_hint,
    waiting_hints,
)
from pools.core.stall_messages import QUOTA_EXCEEDED
from pools.core.words import plural
from pools.models import GpuModel, GpuNodePool, Node, NodeType, ScalingActivity
from pools.models.pods import Pod
from pools.selectors.cluster import cluster_state, live_nodes, readable_core_pod
from pools.selectors.prospects import UnreadablePool, read_prospects


def pending_hints_write(*, now: datetime) -> list[str]:
    """On a real cluster: the hints of every Pending pod kube-scheduler found no node for,
    against the nodes of our pools as the pod's team may see them; written where they changed.
    Returns those pods' keys. Nothing is bound here: kube-scheduler binds."""
    with transaction.atomic():
        nodes = live_nodes()
        pools = {n.pool.name: n.pool for n in nodes}
        pods = list(Pod.objects.filter(phase__in=(Pod.Phase.PENDING, Pod.Phase.RUNNING)).exclude(team__isnull=True).select_related("team").order_by("-priority", "submitted_at", "id"))
        states = cluster_state(nodes, [p for p in pods if p.phase == Pod.Phase.RUNNING])
        ordered = [states[n.name] for n in nodes]
        waiting, changed, catalog = [], [], OrderCatalog()
        for pod in pods:
            if pod.phase != Pod.Phase.PENDING or pod.reason != "Unschedulable":
                continue
            if (core := readable_core_pod(pod)) is None:
                continue
            hints = pending_hints(core, ordered, pools, pod.team.slug, catalog).hints
            waiting.append(pod.key)
            if pod.hints != hints:
                pod.hints = hints
                changed.append(pod)
        Pod.objects.bulk_update(changed, ["hints"], batch_size=500)
    return waiting


BILLING_LABEL = "ebcloud.io/billing"  # pools/core/node_labels.py: monthly, on_demand (a burst node) or preemptible


class OrderCatalog:
    """What can be ordered (node types smallest first, GPU models) and every live pool with what
    it waits for (`read_prospects`), each read once per pass and only if some Pending pod needs
    it: the pass's statements stay independent of its pods."""

    def __init__(self) -> None:
        self._read: tuple[list[NodeType], list[str]] | None = None
        self._prospects: list[PoolProspect] | None = None
        self._unreadable: list[UnreadablePool] = []
        self._by_name: dict[str, PoolProspect] | None = None
        self._by_shape: dict[tuple, tuple[list[str], bool]] = {}
        self._starting_room: dict[str, list[NodeState]] = {}
        self._quota_held: dict[int, str] | None = None

    def read(self) -> tuple[list[NodeType], list[str]]:
        if self._read is None:
            self._read = (list(NodeType.objects.order_by("gpu_count", "cpu_milli", "memory_mib", "name")),
                          list(GpuModel.objects.order_by("name").values_list("name", flat=True)))  # fmt: skip
        return self._read

    def quota_held(self, pool: GpuNodePool) -> str | None:
        """What held the autoscaler's last decision on the pool back when that was a GPU quota
        (the team's, or the region's): no burst node comes until an admin raises it, whatever
        the pool's own limits say (a lead was told a burst node would come, found by a QA sweep)."""
        if self._quota_held is None:
            latest = ScalingActivity.objects.filter(pool=OuterRef("pk")).order_by("-at", "-pk")
            rows = GpuNodePool.objects.active().annotate(last=Subquery(latest.values("reason")[:1]), said=Subquery(latest.values("message")[:1]))
            self._quota_held = dict(rows.filter(last=QUOTA_EXCEEDED).values_list("pk", "said"))
        return self._quota_held.get(pool.pk)

    def prospects(self) -> list[PoolProspect]:
        if self._prospects is None:
            self._prospects, self._unreadable = read_prospects()
        return self._prospects

    def unreadable(self, pod: CorePod) -> list[UnreadablePool]:
        """The pools the pod's team may use (its own, and those shared with it) whose stored spec
        no longer parses and whose GPU model and GPUs per node would hold the pod, by name: their
        labels and taints are unknown, so whether they take it cannot be told, and an order might
        buy their capacity twice."""
        self.prospects()
        return sorted((u for u in self._unreadable if pod.team in u.teams and u.gpu_count >= pod.gpu_count
                       and (not pod.gpu_models or u.gpu_model in pod.gpu_models)), key=lambda u: u.name)  # fmt: skip

    def by_name(self) -> dict[str, PoolProspect]:
        if self._by_name is None:
            self._by_name = {p.name: p for p in self.prospects()}
        return self._by_name

    def starting_takes(self, pool_name: str, pod: CorePod) -> PoolProspect | None:
        """The pool, when one of its starting nodes will take `pod`. The pass asks in queue
        order, and each pod it says yes to takes its room on an empty copy of the pool's node
        (as Cluster Autoscaler counts Pending pods onto upcoming nodes), so the pods the
        starting nodes cannot all hold get the pool's other hints (raise the max, grow)."""
        prospect = self.by_name().get(pool_name)
        if prospect is None or not prospect.starting:
            return None
        room = self._starting_room.setdefault(pool_name, [prospect.template.clone() for _ in range(prospect.starting)])
        return prospect if first_fit(pod, room) is not None else None

    def waiting(self, pod: CorePod) -> tuple[list[str], bool]:
        """The pools without a Ready node yet that will take the pod (`waiting_hints`), and
        whether any pool the team may use could ever take it; once per shape of pod (equal
        requests, selectors, tolerations and team: a workload's replicas are asked once)."""
        if pod.shape_key not in self._by_shape:
            prospects = self.prospects()
            self._by_shape[pod.shape_key] = (waiting_hints(pod, prospects), any(could_take(pod, p) for p in prospects))
        hints, takes = self._by_shape[pod.shape_key]
        return list(hints), takes


def order_hint(pod: CorePod, usable: list[NodeState], others: list[NodeState], team_slug: str, catalog: OrderCatalog) -> list[str]:
    """When no pool the team may use could ever take the pod (even an empty node of each is too
    small, or of a GPU model the pod does not allow; pools without a Ready node yet count, so a
    pool on its way is never bought twice), what to order: the smallest node type that fits, of
    the pod's GPU model (else the model such pods run on elsewhere in the fleet, else any), with
    the order form's address, pre-filled. Other teams' pools are never named: only what to buy
    (a pool shared with the team, `spec.sharedWith`, is the team's to use, not another's here).
    A pool the team may use whose stored spec no longer parses, and that might hold the pod, is
    named instead of an order (`OrderCatalog.unreadable`): the team applies its own pool's YAML
    again; a pool shared with it is named as such, with the owner team that must (a guest cannot)."""
    if any(fits_empty(pod, node) for node in usable) or catalog.waiting(pod)[1]:
        return []
    unreadable = catalog.unreadable(pod)
    if unreadable:
        return unreadable_hints(unreadable, team_slug)
    node_types, models = catalog.read()
    fitting = [t for t in node_types if t.gpu_count >= pod.gpu_count and t.cpu_milli >= pod.cpu_milli and t.memory_mib >= pod.memory_mib]
    if not fitting:
        return []
    seen = Counter(node.gpu_model for node in others if fits_empty(pod, node)).most_common(1)
    model = next(iter(pod.gpu_models), None) or (seen[0][0] if seen else None) or (models[0] if models else "")
    needs = [plural(pod.gpu_count, "GPU"), *([f"{pod.cpu_milli}m CPU"] if pod.cpu_milli else []), *([f"{pod.memory_mib}Mi memory"] if pod.memory_mib else [])]
    what = (", ".join(needs[:-1]) + " and " + needs[-1] if len(needs) > 1 else needs[0]) + " on one node"
    what += f", GPU model {', '.join(pod.gpu_models)}" if pod.gpu_models else ""
    form = reverse("pools:create") + "?" + urlencode({"team": team_slug, "gpu_model": model, "node_type": fitting[0].name})
    return [  # a lead orders it (the form is a 403 to a member, who asks one)
        f"No pool of your team can run this pod: it needs {what}. A lead of team {team_slug} can order a pool of node type "
        f"{fitting[0].name} ({plural(fitting[0].gpu_count, 'GPU')} per node) with GPU model {model}: {form}"
    ]


def unreadable_hints(pools: list[UnreadablePool], team_slug: str) -> list[str]:
    """One hint for the team's own unreadable pools, one per owner team for those shared with it."""
    owners: dict[str, list[str]] = defaultdict(list)
    for pool in pools:
        owners[pool.owner].append(pool.name)
    why = "may be meant for this pod, but the stored spec of each no longer passes validation, so whether they would take it cannot be told"
    hints = []
    if team_slug in owners:
        hints.append(f"Pool(s) {', '.join(owners.pop(team_slug))} of your team {why}: apply the pool's YAML again "
                     f"(ebcloud node-pool apply -f) before ordering another pool.")  # fmt: skip
    for owner, names in sorted(owners.items()):
        hints.append(f"Pool(s) {', '.join(names)}, shared with your team by team {owner}, {why}: team {owner} must apply "
                     f"the pool's YAML again (ebcloud node-pool apply -f); ask its lead before ordering another pool.")  # fmt: skip
    return hints


@dataclass(frozen=True)
class PendingHints:
    message: str
    hints: list[str]


def pending_hints(pod: CorePod, states: list[NodeState], pools: dict[str, GpuNodePool], team_slug: str, catalog: OrderCatalog) -> PendingHints:
    """kube-scheduler's message over the nodes the pod's team may use, and every hint: first
    the pools of the team with no Ready node yet that will take the pod (what each waits for),
    then the core's (labels, taints, requests), the pools' (grow, raise max) and, only when no
    pool of the team could ever take the pod, what to order."""
    usable = [state for state in states if may_use(pod, state)]
    explanation = explain(pod, usable, coming=[p.template for p in catalog.prospects() if not p.live])
    hints = list(explanation.hints) + capacity_hints(pod, explanation.node_reasons, {s.name: s for s in usable}, pools, catalog)
    if explanation.available == 0:
        hints = catalog.waiting(pod)[0] + hints
        hints += order_hint(pod, usable, [state for state in states if not may_use(pod, state)], team_slug, catalog)
    return PendingHints(explanation.message, hints)


def capacity_hints(pod: CorePod, node_reasons: dict[str, str], states: dict[str, NodeState], pools: dict[str, GpuNodePool],
                   catalog: OrderCatalog) -> list[str]:  # fmt: skip
    """Pool-level hints the pure core cannot give: a pool whose nodes would take the pod if they
    were free has a node starting that will (wait for it: `starting_hint`), else what brings it
    a new node (`growth_hint`), which a guest of a lent pool cannot do: its lead's commands would
    be refused (404) and would not help (a guest's pods never grow a lent pool), so the guest is
    told whom to ask. What makes room on its nodes is the core's hint."""
    hints = []
    full: dict[str, int] = defaultdict(int)
    for name, reason in node_reasons.items():
        if reason in REASONS_INSUFFICIENT:
            full[states[name].pool] += 1
    for pool_name in sorted(full):
        pool = pools.get(pool_name)
        members = [s for s in states.values() if s.pool == pool_name]
        if pool is None or not members:
            continue
        empty = members[0]
        if pod.gpu_count > empty.gpu_count or pod.cpu_milli > empty.cpu_milli or pod.memory_mib > empty.memory_mib:
            continue  # even an empty node of this pool is too small: more nodes will not help
        if gpu_model_reason(pod, empty) is not None:
            continue  # its nodes are of a GPU model the pod does not take: a new one would not take it either
        prospect = catalog.by_name().get(pool_name)
        if catalog.starting_takes(pool_name, pod):
            hints.append(starting_hint(prospect, len(members), guest=is_guest(pod, empty.owner)))
        elif is_guest(pod, empty.owner):
            hints.append(lent_hint(pool_name, pool.team.slug, state="busy"))
        elif pool.bursts and (held := catalog.quota_held(pool)):
            hints.append(f"pool {pool_name}'s nodes are busy, and the autoscaler's last scale-up was held back by a GPU quota ({held}): "
                         "a platform admin raises that quota (Admin → Quotas); until then this pod waits for room.")  # fmt: skip
        else:  # the starting nodes are spoken for, and count against the pool's limits
            hints.append(growth_hint(pool, members, len(members) + (prospect.starting if prospect else 0)))
    return hints


def growth_hint(pool: GpuNodePool, members: list[NodeState], live: int) -> str:
    """What brings the busy pool a node that would take the pod, as the autoscaler decides
    (pools/controllers/autoscaler.py): a pool that does not burst gets nodes only from
    nodeCount.min (at its max, raising the max alone adds none); a bursting one gets burst nodes
    up to its ceiling, nodeCount.max or, lower, spec.burst.maxNodes above its monthly nodes,
    when its scaling policy asks. Only the limit the pool is at is named. `live`: its nodes the
    scheduler sees and those starting (their billing unknown: the monthly ones are those of
    `members`)."""
    name, top = pool.name, pool.max_nodes
    grow = f"raise nodeCount.min (ebcloud node-pool scale {name} --min N)"
    off = "the pool does not burst (no spec.scaling block, or spec.burst.enabled: false)"
    at_max = f"pool {name} is at its nodeCount.max ({plural(top, 'node')}) and they are busy"
    has = f"pool {name} has {len(members)} Ready node(s) of at most {top}: a new node would fit the pod"
    if not pool.bursts:
        if live < top:
            return f"{has}, but {off}, so none is added until you {grow} or enable burst."
        return (f"{at_max}, and {off}: raising the max alone adds no node. Raise both (ebcloud node-pool scale {name} "
                f"--min N --max N), or raise nodeCount.max and enable burst.")  # fmt: skip
    baseline = sum(1 for s in members if s.labels.get(BILLING_LABEL) != Node.Billing.ON_DEMAND)
    burst = pool.burst_max_nodes
    ceiling = burst_ceiling(baseline=baseline, max_nodes=top, burst_max_nodes=burst)
    if live < ceiling:
        return (f"{has}; the autoscaler adds a burst node when the pool's scaling policy asks (ebcloud node-pool "
                f"diagnose {name} says when it will not), or {grow}.")  # fmt: skip
    if ceiling >= top:
        return (f"{at_max}: raise it (ebcloud node-pool scale {name} --max N); the autoscaler then adds a burst node when the "
                f"pool's scaling policy asks.")  # fmt: skip
    return (f"pool {name} is at its burst limit (spec.burst.maxNodes: {burst} above its {plural(baseline, 'monthly node')}) and "
            f"they are busy: raise spec.burst.maxNodes (ebcloud node-pool apply -f with the pool's YAML), or {grow}.")


