"""Every live pool as an empty node of it would register (labels, taints, the teams that may use
it), with what its capacity waits for: the Pending-pod hints read them to name a pool that is
on its way instead of suggesting a duplicate purchase (`pools.core.scheduling.waiting`), and the
self-checks read them to tell which pool a Pending pod is aimed at. A fixed number of queries,
whatever the number of pools, nodes or orders.

A stored spec is parsed against the catalog rows it was valid against when saved: the pool's
own, and the fallback zones its `spec.zones` names (read for all pools in one query). One that
no longer parses (a validation rule changed since) is logged and reported as unreadable, so
that no caller takes it for "no pool" and suggests buying the capacity twice."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count

from pools.core.errors import ValidationError
from pools.core.lifecycle import PROVISIONING_PHASES, UNPAID
from pools.core.scheduling.nodes import NodeState
from pools.core.scheduling.waiting import PoolProspect
from pools.core.spec import Catalog, PoolSpec, parse_document
from pools.models import GpuNodePool, Node, PoolOrder, Zone
from pools.selectors.cluster import SCHEDULER_PHASES, pool_teams, team_identity
from pools.selectors.queue import daemon_set_pods, template_node

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnreadablePool:
    """A live pool whose stored spec no longer parses: what its row alone tells (its node's GPUs
    and model, the teams that may use it, the slug of the team that owns it), so a hint can name
    it instead of suggesting an order, and tell a team it is shared with whom to ask."""

    name: str
    owner: str
    teams: frozenset[str]
    gpu_model: str
    gpu_count: int


def _other_zones(pool: GpuNodePool) -> set[str]:
    """The zones the stored spec names besides the pool's own (its fallback zones)."""
    spec = pool.document.get("spec") if isinstance(pool.document, dict) else None
    zones = spec.get("zones") if isinstance(spec, dict) else None
    return {z for z in zones if isinstance(z, str)} - {pool.zone.name} if isinstance(zones, list) else set()


def zone_regions(pools: Iterable[GpuNodePool]) -> dict[str, str]:
    """The region of each zone the pools' stored specs name beyond their own zone: one query for
    all of them, none when no pool has a fallback zone."""
    names = set().union(*(_other_zones(pool) for pool in pools))
    return dict(Zone.objects.filter(name__in=names).values_list("name", "region")) if names else {}


def stored_spec(pool: GpuNodePool, zones: Mapping[str, str] | None = None) -> PoolSpec | None:
    """The stored document, parsed against the catalog rows it was valid against when saved: the
    pool's own and its fallback zones (`zones`, from `zone_regions`; read here when not given,
    one query and only for a pool with fallback zones). None, logged, if it no longer parses."""
    if zones is None:
        zones = zone_regions([pool])
    catalog = Catalog(
        gpu_models=frozenset({pool.gpu_model.name}),
        node_types={pool.node_type.name: pool.node_type.gpu_count},
        zones={**zones, pool.zone.name: pool.zone.region},
        max_nodes=max(settings.EBCLOUD_MAX_NODES_PER_POOL, pool.max_nodes),
    )
    try:
        return parse_document(pool.document, catalog)
    except ValidationError as error:
        logger.warning("pool %s: its stored spec no longer parses, so the Pending-pod hints and self-checks cannot read it: %s", pool.name, error)
        return None


def live_pools() -> list[GpuNodePool]:
    """Pools not deleted nor being deleted, with what their templates need selected."""
    return list(
        GpuNodePool.objects.active().exclude(phase=GpuNodePool.Phase.DELETING).without_status()
        .select_related("team", "node_type", "gpu_model", "zone").order_by("name")
    )  # fmt: skip


def pool_templates(pools: Iterable[GpuNodePool]) -> dict[int, NodeState]:
    """An empty node of each pool (by id) as its first node would register: monthly where it
    keeps a baseline, preemptible for a preemptible pool, else a burst node; `teams` set to the
    teams that may use it. A pool whose stored spec no longer parses is left out (and logged)."""
    pools = list(pools)
    teams = pool_teams(pools)
    zones = zone_regions(pools)
    templates, daemon_sets = {}, daemon_set_pods([pool.pk for pool in pools])
    for pool in pools:
        spec = stored_spec(pool, zones)
        if spec is None:
            continue
        billing = Node.Billing.PREEMPTIBLE if pool.preemptible else Node.Billing.MONTHLY if pool.min_nodes else Node.Billing.ON_DEMAND
        template = template_node(pool, spec, billing=billing, daemon_sets=daemon_sets.get(pool.pk, ()))
        template.teams, template.owner = teams[pool.pk], team_identity(pool.team_id)
        templates[pool.pk] = template
    return templates


def read_prospects() -> tuple[list[PoolProspect], list[UnreadablePool]]:
    """Every live pool with its template and what it waits for: its nodes the scheduler sees,
    those still starting (named, with their phase), its orders awaiting approval or payment;
    and the live pools whose stored spec no longer parses. Five to seven queries."""
    pools = live_pools()
    templates = pool_templates(pools)
    unread = [pool for pool in pools if pool.pk not in templates]
    teams = pool_teams(unread) if unread else {}
    unreadable = [UnreadablePool(p.name, p.team.slug, teams[p.pk], p.gpu_model.name, p.node_type.gpu_count) for p in unread]
    live: dict[int, int] = defaultdict(int)
    starting: dict[int, list[tuple[str, str]]] = defaultdict(list)
    rows = (
        Node.objects.filter(pool_id__in=list(templates), phase__in=SCHEDULER_PHASES)
        .values_list("pool_id").annotate(n=Count("id")).order_by()
    )  # fmt: skip
    for pool_id, n in rows:
        live[pool_id] += n
    coming = Node.objects.filter(pool_id__in=list(templates), phase__in=PROVISIONING_PHASES, release_reason="")  # a machine being released is not on its way
    for pool_id, name, phase in coming.order_by("created_at", "name").values_list("pool_id", "name", "phase"):
        starting[pool_id].append((name, phase))
    orders: dict[tuple[int, str], list[int]] = defaultdict(list)
    waiting = PoolOrder.objects.filter(pool_id__in=list(templates), status__in=(PoolOrder.Status.PENDING, *UNPAID))
    for pool_id, status, pk in waiting.order_by("pk").values_list("pool_id", "status", "pk"):
        orders[(pool_id, "unpaid" if status in UNPAID else status)].append(pk)  # being paid: still awaiting payment
    prospects = []
    for pool in pools:
        if pool.pk not in templates:
            continue
        prospects.append(PoolProspect(
            template=templates[pool.pk], min_nodes=pool.min_nodes, max_nodes=pool.max_nodes,
            live=live[pool.pk], starting_nodes=tuple(starting[pool.pk]),
            awaiting_approval=tuple(orders[(pool.pk, PoolOrder.Status.PENDING)]),
            awaiting_payment=tuple(orders[(pool.pk, "unpaid")]),
            bursts=pool.bursts, pending_reason=pool.pending_reason,
        ))  # fmt: skip
    return prospects, unreadable
