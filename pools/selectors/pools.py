"""Reads: every query the web, the API and the CLI endpoints share (design §6).

Each selector starts from `for_user`, so what a user cannot see does not exist for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum, TextField
from django.db.models.functions import Cast
from django.http import Http404

from monitoring.models import PoolSample
from pools import roles
from pools.core.charts import Sample
from pools.core.errors import ValidationError
from pools.core.isolation import PoolAccess
from pools.core.lifecycle import RETIRING_REASONS, UNPAID
from pools.core.spec import Catalog, PoolSpec, effective_node_labels, parse_document
from pools.core.spec_changes import describe_change
from pools.models import (
    AuditEntry,
    GpuModel,
    GpuNodePool,
    Node,
    NodeType,
    PoolEvent,
    PoolOrder,
    Team,
    Zone,
)

# Orders that hold quota: requested or bought capacity (a rejected or failed order holds none).
QUOTA_HOLDING_STATUSES = (PoolOrder.Status.PENDING, *UNPAID, PoolOrder.Status.PAID)
# Orders an admin has decided on: capacity approved or bought (a Pending one is only a request).
DECIDED_STATUSES = (*UNPAID, PoolOrder.Status.PAID)
LIVE_NODE_EXCLUDED_PHASES = (Node.Phase.TERMINATED,)

POOL_SORTS = {
    "name": "name",
    "team": "team__name",
    "gpu": "gpu_model__name",
    "zone": "zone__name",
    "min": "min_nodes",
    "max": "max_nodes",
    "phase": "phase",
    "created": "created_at",
}
# What a list may be ordered by: a key of POOL_SORTS, with one `-` for descending. The API
# refuses anything else (`?ordering=bogus`, `--name`); the pool list page falls back to name.
POOL_ORDERINGS = (*POOL_SORTS, *(f"-{key}" for key in POOL_SORTS))


def catalog_current(*, writing: bool = False) -> Catalog:
    """What can be ordered now, from the database (GPU models, node types, zones); `writing`
    (a new or edited spec), also the team slugs its `sharedWith` may name and the rules only
    writes check (a stored spec stays valid when a team it lends to is gone)."""
    return Catalog(
        gpu_models=frozenset(GpuModel.objects.values_list("name", flat=True)),
        node_types=dict(NodeType.objects.values_list("name", "gpu_count")),
        zones=dict(Zone.objects.values_list("name", "region")),
        max_nodes=settings.EBCLOUD_MAX_NODES_PER_POOL,
        teams=frozenset(Team.objects.values_list("slug", flat=True)) if writing else None,
        writing=writing,
    )


def pools_access(*, with_nodes: bool = False) -> list[PoolAccess]:
    """Every live pool as the admission rule sees it: the labels all its nodes carry (their
    billing kind varies by node and is left out), the teams (slugs) that may use it, and, with
    `with_nodes` (the real cluster's policy), its nodes' names (all but those terminated: one
    being made has its name already)."""
    pools = list(GpuNodePool.objects.active().select_related("team", "node_type", "gpu_model", "zone"))
    slugs = frozenset(Team.objects.values_list("slug", flat=True)) if any(p.shared_with for p in pools) else frozenset()
    nodes: dict[int, set[str]] = {}
    live = Node.objects.filter(pool__in=pools).exclude(phase=Node.Phase.TERMINATED) if with_nodes else Node.objects.none()
    for pool_id, name in live.values_list("pool_id", "name"):
        nodes.setdefault(pool_id, set()).add(name)
    access = []
    for pool in pools:
        spec = PoolSpec(
            name=pool.name, node_type=pool.node_type.name, gpu_model=pool.gpu_model.name, min_nodes=pool.min_nodes,
            max_nodes=pool.max_nodes, region=pool.zone.name, labels=pool.labels,
            node_labels=pool.document.get("spec", {}).get("nodeLabels") or {},
        )  # fmt: skip
        labels = effective_node_labels(spec, zone=pool.zone.name, billing="", team=pool.team.slug)
        labels.pop("ebcloud.io/billing")
        teams = frozenset({pool.team.slug, *(s for s in pool.shared_with if s in slugs)})
        access.append(PoolAccess(pool.name, labels, teams, frozenset(nodes.get(pool.pk, ()))))
    return access


# The phases a pool in the list can be in: the list holds live pools (`active()`), and a pool
# is Deleted only once it is gone from it, so a filter offering Deleted could never match.
LISTED_POOL_PHASES = [p for p in GpuNodePool.Phase if p != GpuNodePool.Phase.DELETED]


@dataclass(frozen=True)
class PoolFilters:
    team: str = ""
    gpu_model: str = ""
    phase: str = ""
    q: str = ""
    sort: str = "name"


def pools_for_user(*, user, filters: PoolFilters | None = None) -> QuerySet[GpuNodePool]:
    """Live pools the user may see, filtered and sorted, with node counts in one query."""
    return _with_node_counts(pools_visible(user=user, filters=filters))


def pools_visible(*, user, filters: PoolFilters | None = None) -> QuerySet[GpuNodePool]:
    """Live pools the user may see, filtered and sorted; pages of it get their node counts from
    `node_counts_attach` (counting every pool's nodes to show fifty is what made the pool list
    slow at 1,000 pools, issue 9)."""
    filters = filters or PoolFilters()
    pools = GpuNodePool.objects.for_user(user).active().select_related("team", "gpu_model", "node_type", "zone")
    if filters.team:
        pools = pools.filter(team__slug=filters.team)
    if filters.gpu_model:
        pools = pools.filter(gpu_model__name=filters.gpu_model)
    if filters.phase:
        pools = pools.filter(phase=filters.phase)
    if filters.q:
        pools = pools.filter(name__icontains=filters.q)
    sort = filters.sort if filters.sort in POOL_ORDERINGS else "name"
    field = POOL_SORTS[sort.removeprefix("-")]
    return pools.order_by(f"-{field}" if sort.startswith("-") else field, "name")


def _node_count_filters(through: str = "") -> tuple[Q, Q]:
    """What a pool's `node_total` and `node_ready` count: its live nodes, and those Ready, not
    leaving, that the cluster runs pods on (no `cluster_fault`), as its status counts them
    (`lifecycle.status_of`); `through`: how the nodes are reached from what is counted."""
    at = f"{through}__" if through else ""
    ready = Q(**{f"{at}phase": Node.Phase.READY, f"{at}cluster_fault": "", f"{at}release_reason": ""})
    return ~Q(**{f"{at}phase__in": LIVE_NODE_EXCLUDED_PHASES}), ready


def node_counts_attach(pools: list[GpuNodePool]) -> list[GpuNodePool]:
    """Set `node_total` (live nodes) and `node_ready` on each pool, with one query."""
    live, ready = _node_count_filters()
    counts = {
        row["pool_id"]: row
        for row in Node.objects.filter(pool_id__in=[p.pk for p in pools])
        .values("pool_id")
        .annotate(total=Count("pk", filter=live), ready=Count("pk", filter=ready))
        .order_by()
    } if pools else {}
    for pool in pools:
        row = counts.get(pool.pk, {})
        pool.node_total, pool.node_ready = row.get("total", 0), row.get("ready", 0)
    return pools


def _with_node_counts(pools: QuerySet[GpuNodePool]) -> QuerySet[GpuNodePool]:
    live, ready = _node_count_filters("nodes")
    return pools.annotate(node_total=Count("nodes", filter=live, distinct=True), node_ready=Count("nodes", filter=ready, distinct=True))


def pool_get(*, user, name: str) -> GpuNodePool:
    """The live pool of that name, if the user may see it, with `node_total` and `node_ready`;
    otherwise 404. The counts come from their own small query (`node_counts_attach`): counting
    in a join would group the pool's row, JSON documents and all, by every column."""
    pool = GpuNodePool.objects.for_user(user).active().select_related("team", "gpu_model", "node_type", "zone", "created_by").filter(name=name).first()
    if pool is None:
        raise Http404(f"pool {name!r} not found")
    return node_counts_attach([pool])[0]


def pool_nodes(*, pool: GpuNodePool) -> QuerySet[Node]:
    return pool.nodes.select_related("zone", "successor").order_by("name")


def pool_events(*, pool: GpuNodePool, limit: int = 100, warnings_only: bool = False) -> QuerySet[PoolEvent]:
    """The pool's timeline, newest first; `warnings_only` is `kubectl get events
    --field-selector type=Warning` (a busy pool's pod churn hides what went wrong)."""
    events = pool.events.filter(type=PoolEvent.Type.WARNING) if warnings_only else pool.events.all()
    return events.select_related("node", "actor").order_by("-last_timestamp", "-id")[:limit]


def latest_spec_changes(*, pool: GpuNodePool, count: int) -> list[str]:
    """Who changed the pool's spec last, and what (its `count` latest updates): what a lead
    whose edit was refused as outdated needs to know. Read from the audit log, one entry per
    update: the SpecUpdated events fold an equal change into the first one's, actor and all,
    and named the lead for the admin's change (found by a QA sweep)."""
    entries = AuditEntry.objects.filter(object_type=GpuNodePool._meta.label, object_id=str(pool.pk), action="pool.update")
    catalog, said = catalog_current(), []
    for entry in entries.select_related("actor").order_by("-id")[: max(count, 0)]:
        try:
            what = describe_change(parse_document(entry.before, catalog), parse_document(entry.after, catalog)).removeprefix("Spec updated: ")
        except ValidationError:  # a document the catalog no longer reads (a retired node type)
            what = "its spec changed"
        said.append(f"{entry.actor.get_username() if entry.actor else 'the system'}: {what}")
    return said


def orders_for_user(*, user, status: str = "", paid_from: date | None = None, paid_to: date | None = None) -> QuerySet[PoolOrder]:
    """The orders `user` may see; with `paid_from`/`paid_to` (UTC days, inclusive), only those
    debited then (what finance reconciles a month's account statement with)."""
    orders = PoolOrder.objects.for_user(user).select_related(
        "pool", "pool__team", "pool__gpu_model", "pool__node_type", "pool__zone", "requested_by", "decided_by"
    )
    if status:
        orders = orders.filter(status=status)
    if paid_from is not None:
        orders = orders.filter(paid_at__gte=datetime.combine(paid_from, time(), UTC))
    if paid_to is not None:
        orders = orders.filter(paid_at__isnull=False)
        if paid_to < date.max:
            orders = orders.filter(paid_at__lt=datetime.combine(paid_to + timedelta(days=1), time(), UTC))
    return orders.order_by("-created_at", "-id")


def order_get(*, user, order_id: int) -> PoolOrder:
    order = orders_for_user(user=user).filter(pk=order_id).first()
    if order is None:
        raise Http404(f"order {order_id} not found")
    return order


def _capacity_orders(orders: QuerySet[PoolOrder], statuses=QUOTA_HOLDING_STATUSES) -> QuerySet[PoolOrder]:
    # A renewal extends the lease of nodes already counted; it adds no capacity (issue 3 §4).
    return orders.filter(status__in=statuses).exclude(kind=PoolOrder.Kind.RENEW)


def _retired(orders: QuerySet[PoolOrder]) -> QuerySet[Node]:
    """Nodes of those orders that left for good (lease expired without renewal, scaled in,
    pool deleted): their capacity is no longer held, so it can be ordered again."""
    return Node.objects.filter(order__in=orders, release_reason__in=RETIRING_REASONS)


def ordered_baseline(*, pool: GpuNodePool) -> int:
    """Monthly nodes requested or bought for the pool and still held (rejected/failed orders and
    retired nodes excluded)."""
    orders = _capacity_orders(pool.orders.all())
    total = orders.aggregate(n=Sum("node_count"))["n"] or 0
    return total - _retired(orders).count()


def decided_baseline(*, pool: GpuNodePool, exclude_order_id: int | None = None) -> int:
    """Monthly nodes of the pool that admins approved or that are bought, still held: what an
    order must fit beside under `nodeCount.min` (a Pending order is a request, not capacity)."""
    orders = _capacity_orders(pool.orders.all(), DECIDED_STATUSES)
    if exclude_order_id is not None:
        orders = orders.exclude(pk=exclude_order_id)
    total = orders.aggregate(n=Sum("node_count"))["n"] or 0
    return total - _retired(orders).count()


def quota_held(*, region: str, gpu_model_id: int, team_id: int | None = None, exclude_order_id: int | None = None) -> tuple[int, int]:
    """(in use, approved) GPUs in a region for a model, as the payment re-check counts them:
    in use is what is bought (paid orders of live pools, less retired nodes) and live burst
    nodes; approved is what admins approved and nobody has paid yet. Pending requests count for
    neither: they are not decided, and must not hold back an order that is."""
    paid = quota_usage(region=region, gpu_model_id=gpu_model_id, team_id=team_id, exclude_order_id=exclude_order_id, statuses=(PoolOrder.Status.PAID,))
    approved = quota_usage(region=region, gpu_model_id=gpu_model_id, team_id=team_id, exclude_order_id=exclude_order_id, statuses=UNPAID, burst=False)
    return paid, approved


def quota_usage(
    *, region: str, gpu_model_id: int, team_id: int | None = None, exclude_order_id: int | None = None,
    statuses=QUOTA_HOLDING_STATUSES, burst: bool = True,
) -> int:  # fmt: skip
    """GPUs held in a region for a model: quota-holding orders of live pools + live burst nodes.

    With `team_id`, only that team's pools count (for a team quota); `statuses` narrows the
    orders counted (`quota_held`), `burst=False` leaves burst nodes out.
    """
    orders = _capacity_orders(PoolOrder.objects.filter(pool__deleted_at__isnull=True, pool__zone__region=region, pool__gpu_model_id=gpu_model_id), statuses)
    bursts = Node.objects.filter(
        pool__zone__region=region, pool__gpu_model_id=gpu_model_id, order__isnull=True  # ordered nodes count via their order
    ).exclude(billing=Node.Billing.MONTHLY).exclude(phase__in=LIVE_NODE_EXCLUDED_PHASES)
    if team_id is not None:
        orders = orders.filter(pool__team_id=team_id)
        bursts = bursts.filter(pool__team_id=team_id)
    if exclude_order_id is not None:
        orders = orders.exclude(pk=exclude_order_id)
    ordered = orders.aggregate(n=Sum("gpus"))["n"] or 0
    retired = _retired(orders).aggregate(n=Sum("gpu_count"))["n"] or 0
    bursting = (bursts.aggregate(n=Sum("gpu_count"))["n"] or 0) if burst else 0
    return ordered - retired + bursting


def teams_led_by(*, user) -> QuerySet[Team]:
    if roles.is_admin(user):
        return Team.objects.all()
    return Team.objects.filter(pk__in=roles.lead_team_ids(user))


def teams_visible_to(*, user) -> QuerySet[Team]:
    if roles.sees_all_teams(user):
        return Team.objects.all()
    return Team.objects.filter(pk__in=roles.team_ids(user))


def pool_samples(*, pool: GpuNodePool, since: datetime) -> list:
    """The pool's per-minute samples since a moment, as the chart core's plain rows. The node
    counts come as JSON text and each distinct text is decoded once (they rarely change from
    one minute to the next): a day of samples is 1,440 rows on every pool page view."""
    rows = (
        PoolSample.objects.filter(pool=pool, minute__gte=since)
        .order_by("minute")
        .annotate(counts_text=Cast("node_counts", TextField()))
        .values_list("minute", "min_nodes", "max_nodes", "capacity_gpus", "allocated_gpus", "gpu_memory_used_pct", "pending_pods", "counts_text")
    )
    decoded: dict[str, dict] = {}
    samples = []
    for *values, text in rows:
        counts = decoded.get(text)
        if counts is None:
            counts = decoded[text] = json.loads(text) if text else {}
        samples.append(Sample(*values, node_counts=counts))
    return samples
