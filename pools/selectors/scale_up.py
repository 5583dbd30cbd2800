"""What a scale-up decision reads besides the queue: the room the teams' pools already have
(free capacity of Ready nodes, upcoming nodes) and the GPU quotas a new burst node would hold.
Each is a fixed number of queries, whatever the number of pools, nodes or pods, so that the
autoscaler's pass over every pool reads them once (issue 9)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q, Sum, Window
from django.db.models.functions import RowNumber

from pools.core.lifecycle import PROVISION_TIMEOUT, PROVISIONING_PHASES
from pools.core.scale_up import (
    BACKOFF_FAILURES_READ,
    Capacity,
    QuotaRooms,
    take_requests,
    take_totals,
)
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import Catalog, parse_document
from pools.models import GpuNodePool, Node, PoolEvent, Quota
from pools.models.pods import Pod
from pools.selectors.cluster import SCHEDULER_PHASES, node_state_from, pool_teams, team_identity
from pools.selectors.queue import daemon_set_pods, template_node
from pools.selectors.quotas import quota_use


def team_capacity(*, team_ids: Collection[int], catalog: Catalog) -> dict[int, Capacity]:
    """Per team, where its Pending pods can go before a node is bought, over the live pools it
    may use, its own and those other teams lend it (`spec.sharedWith`): the Ready nodes with
    the requests of their Running pods taken, and the nodes of its own pools still being
    provisioned (not released: a machine that failed for good is Terminated) as empty nodes of
    their pool. Each node carries its pool's teams (`pool_teams`), so a pod counts a node only
    where the scheduler may place it (`may_use`): a guest's pod that fits the free room of a
    lent pool's Ready node is placed there, and a burst node bought for it on its own pool
    would stay empty. A lent pool's upcoming nodes are not the guest's room: they were bought
    for the owner's Pending pods, which would take them first.
    For the backoff of the team's pools (`Capacity.backoff`): when each upcoming burst node of
    its own pools is given up unless Ready (requested + `EBCLOUD_MAX_NODE_PROVISION_SECONDS`),
    and when each of its own pools' latest burst nodes were given up (their `ProvisionTimeout`
    events, the few latest per pool that the backoff depends on).
    Seven queries at most: the pools, the slugs they lend to, the nodes, the given-up nodes'
    events, and on a real cluster the DaemonSet pods of the pools' nodes on their way
    (`daemon_set_pods`); the Running pods are summed per node, and read one by one only on nodes
    whose GPUs are partly used (a full node's sums say it all)."""
    out: dict[int, Capacity] = {team_id: Capacity() for team_id in team_ids}
    if not team_ids:
        return out
    live = GpuNodePool.objects.filter(Q(team_id__in=team_ids) | Q(document__spec__has_key="sharedWith"), deleted_at__isnull=True)
    candidates = list(live.select_related("node_type", "gpu_model", "zone", "team"))
    teams, asking = pool_teams(candidates), {team_identity(team_id): team_id for team_id in team_ids}
    users = {p.pk: [asking[t] for t in sorted(teams[p.pk]) if t in asking] for p in candidates}  # pool -> the teams asked for that may use it
    pools = {p.pk: p for p in candidates if users[p.pk]}
    nodes = list(
        Node.objects.filter(pool_id__in=list(pools), release_reason="", phase__in=(*SCHEDULER_PHASES, *PROVISIONING_PHASES))
        .order_by("name").values_list("pk", "name", "pool_id", "phase", "billing", "gpu_count", "labels", "taints", "unschedulable", "created_at", "cluster_fault")
    )  # fmt: skip
    states = {
        pk: node_state_from(name=name, pool=pools[pool_id], phase=phase, gpu_count=gpus, labels=labels, taints=taints,
                            unschedulable=unschedulable, teams=teams[pool_id], cluster_fault=fault)
        for pk, name, pool_id, phase, _, gpus, labels, taints, unschedulable, _, fault in nodes if phase in SCHEDULER_PHASES
    }  # fmt: skip
    running = Pod.objects.filter(phase=Pod.Phase.RUNNING, node_id__in=list(states))
    totals = running.values("node_id").annotate(cpu=Sum("cpu_milli"), memory=Sum("memory_mib"), gpu=Sum(F("gpu_count") * F("gpu_milli"))).order_by()
    partly = [row["node_id"] for row in totals if not take_totals(states[row["node_id"]], cpu_milli=row["cpu"] or 0, memory_mib=row["memory"] or 0, gpu_milli=row["gpu"] or 0)]
    rows = running.filter(node_id__in=partly).order_by("pk").values_list("node_id", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_indices") if partly else ()
    for index, (node_id, cpu, memory, gpus, milli, indices) in enumerate(rows):
        try:  # only the requests matter here: a light pod, not the scheduling core's whole one
            pod = CorePod(f"running-{index}", cpu_milli=cpu, memory_mib=memory, gpu_count=gpus, gpu_milli=milli if gpus else 0)
        except ValueError:  # a stored row the core refuses takes nothing, as `cluster_state` skips it
            continue
        take_requests(states[node_id], pod, indices or ())
    templates, daemon_sets = {}, None
    for pk, name, pool_id, _, billing, *_, created_at, _ in nodes:
        node = states.get(pk)
        if node is None and pools[pool_id].team_id not in out:
            continue  # upcoming on a pool lent to the teams asked for: its owner's own Pending pods come first
        if node is None:  # upcoming: a new node of its own pool (with the DaemonSet pods of a real cluster)
            if (pool_id, billing) not in templates:
                pool = pools[pool_id]
                daemon_sets = daemon_set_pods(list(pools)) if daemon_sets is None else daemon_sets  # read once, for the first upcoming node
                templates[(pool_id, billing)] = template = template_node(pool, parse_document(pool.document, catalog), billing=billing, daemon_sets=daemon_sets.get(pool_id, ()))
                template.teams = teams[pool_id]
            node = templates[(pool_id, billing)].clone()
            node.name = name
            if (deadline := give_up_at(billing=billing, created_at=created_at)) is not None:
                out[pools[pool_id].team_id].deadlines[name] = (pool_id, deadline)
        for team_id in users[pool_id] if pk in states else [pools[pool_id].team_id]:
            (out[team_id].existing if pk in states else out[team_id].upcoming).append(node)
    own = [pk for pk, pool in pools.items() if pool.team_id in out]
    for pool_id, moments in provision_timeouts_latest(own).items():
        out[pools[pool_id].team_id].given_up[pool_id] = moments
    return out


def give_up_at(*, billing: str, created_at: datetime) -> datetime | None:
    """When a node not Ready yet is given up (`ProvisionTimeout`): an on-demand (burst) node
    `EBCLOUD_MAX_NODE_PROVISION_SECONDS` after it was requested, as Cluster Autoscaler's
    --max-node-provision-time; None for bought capacity (monthly, preemptible), retried for as
    long as it takes. One rule for the provisioning controller, which gives the node up, and
    the scale-up, which backs its pool off when the node is overdue."""
    if billing != Node.Billing.ON_DEMAND:
        return None
    return created_at + timedelta(seconds=settings.EBCLOUD_MAX_NODE_PROVISION_SECONDS)


def provision_timeouts_latest(pool_ids: Collection[int]) -> dict[int, list[datetime]]:
    """Per pool, when its latest burst nodes were given up (`ProvisionTimeout` events, the
    `BACKOFF_FAILURES_READ` latest: an older one changes no backoff, `scale_up_backoff`), newest
    first. One query, whatever the number of pools."""
    latest = Window(RowNumber(), partition_by=[F("pool_id")], order_by=[F("first_timestamp").desc(), F("pk").desc()])
    given_up = PoolEvent.objects.filter(pool_id__in=list(pool_ids), reason=PROVISION_TIMEOUT).annotate(latest=latest).filter(latest__lte=BACKOFF_FAILURES_READ)
    out: dict[int, list[datetime]] = {}
    for pool_id, at in given_up.order_by("pool_id", "-first_timestamp", "-pk").values_list("pool_id", "first_timestamp"):
        out.setdefault(pool_id, []).append(at)
    return out


def quota_rooms(*, scopes: Collection[tuple[str, int]]) -> QuotaRooms:
    """The GPU quotas of these (region, GPU model id) pairs and the GPUs held against them,
    region-wide and per team, counted as `quota_usage` counts them (ordered capacity of live
    pools and live burst nodes). Four queries."""
    if not scopes:
        return QuotaRooms()
    regions, model_ids = {region for region, _ in scopes}, {model for _, model in scopes}
    use = quota_use(regions=regions, model_ids=model_ids)
    overall: dict[tuple, int] = defaultdict(int)
    for (region, model_id, _), gpus in use.items():
        overall[(region, model_id, None)] += gpus
    limits = {(q.region, q.gpu_model_id, q.team_id): q.limit_gpus for q in Quota.objects.filter(region__in=regions, gpu_model_id__in=model_ids)}
    return QuotaRooms(limits=limits, in_use={**use, **overall})

