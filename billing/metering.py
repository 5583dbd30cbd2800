"""Hourly metering: what each node, pod and pool used in one hour, priced (issue 7 §2).

`usage_collect(hour=...)` reads nodes, pods and pool samples and returns unsaved
`UsageRecord`s:

- node-hours per node by billing kind, a pool's alike nodes (same billing, GPUs, labels and
  price in the hour) in one record that names them all (`UsageRecord.nodes_billed`), as a
  workload's replicas on a node are one pod record. A node on the lease ledger (ordered on a lease term,
  monthly or preemptible: `billing.lease_ledger`) is billed its share of each paid lease period
  it holds, spread over the period's hours, so its hours add up to what was debited for it. An
  older monthly node is billed every hour of its lease
  (`lease_start` .. `lease_end`), used or not, at its lease payment amortised by
  `billing.lease_costs.monthly_hour_cost`; on-demand nodes are billed pro rata while their
  machine exists (`machine_at`, when the cloud delivered it, .. `terminated_at`: a node still
  waiting for stock costs nothing), and preemptible nodes off a lease while they exist
  (`created_at` .. `terminated_at`).
- pod GPU-hours by request (whole GPUs count 1 each, a shared GPU its milli/1000), pro rata
  to the part of the hour the pod ran on each node (one it left mid-hour, moved, evicted or
  preempted, from its `PodPlacement`), with a snapshot of its effective labels (pool labels,
  then node labels, then pod labels: the pod wins) and its namespace. A pod of another team
  on a pool lent to it is charged to its own team and does not inherit the owner's `team`
  and `project` labels (`guest_labels`).
- pool fees: registry per pool-month (amortised over the calendar month's hours), storage per
  GB-month (same), cross-zone network per GB, from `PoolResourceSample`s.
- lease corrections: the whole share of a lease period recorded after every hour of its lease
  was metered, in the hour the ledger chose (`billing.lease_corrections`), not split over pods.

Records name their labels' sets (`billing.label_sets`), unsaved in `Collected.label_sets`:
`billing.services.meter_hour` stores the new ones before the hour's transaction.

`allocation_inputs(records)` turns stored records back into the pure core's `NodeHour`,
`PodHour` and `FeeHour`, in a fixed order, so allocation (metering) and the FOCUS export
compute the same split from the same rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from itertools import chain
from operator import attrgetter

from django.db.models import Case, Count, Exists, F, Min, OuterRef, Q, TextField, When
from django.db.models.functions import Cast, Coalesce

from billing import lease_corrections
from billing.allocation import FeeHour, NodeHour, PodHour, effective_labels, frozen_new, gpu_hours
from billing.bulk_insert import Unsaved
from billing.hours import HOUR, QUANTITY, WHOLE_HOUR, floor_hour, hour_overlap
from billing.label_sets import LabelSets
from billing.lease_costs import add_months, monthly_hour_cost, quantize_money
from billing.models import LeasePeriod, MeterRun, PoolResourceSample, PriceBookEntry, UsageRecord
from billing.node_prices import (
    NODE_COLUMNS,
    BilledNode,
    HeldPeriod,
    cached,
    node_price,
    price_entry_in_force,
    price_memo,
)
from pools.claims import WHOLE, Part
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, Node, Pod, Team
from pools.models.pods import PodPlacement
from pools.providers import get_cloud_provider

log = logging.getLogger("ebcloud.billing")

MILLI = 1000
FEE_KINDS = (UsageRecord.Kind.STORAGE, UsageRecord.Kind.NETWORK, UsageRecord.Kind.REGISTRY)
MAX_GPUS_IN_RECORD = 32767  # `UsageRecord.gpu_count`'s column

# Unsaved `UsageRecord`s without `Model.__init__`: an hour of a 200,000-pod fleet is ~210,000.
_new_usage = Unsaved(UsageRecord)


def parts_unmetered(hours: list[datetime], *, parts: int = 1) -> list[tuple[datetime, list[Part]]]:
    """Of these hours, those not wholly metered, each with its parts not metered yet: in its own
    split if it was started, else in `parts` parts."""
    taken: dict[datetime, tuple[int, set[int]]] = {}
    for hour, index, count in MeterRun.objects.filter(hour__in=hours).values_list("hour", "part", "parts"):
        taken.setdefault(hour, (count, set()))[1].add(index)
    unmetered = []
    for hour in hours:
        count, done = taken.get(hour, (parts, set()))
        if len(done) < count:
            unmetered.append((hour, [Part(index, count) for index in range(count) if index not in done]))
    return unmetered


@dataclass
class Collected:
    records: list[UsageRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    label_sets: LabelSets = field(default_factory=LabelSets)  # the records', not stored yet (`label_sets_store`)


# --------------------------------------------------------------------------- collection


def usage_collect(*, hour: datetime, part: Part = WHOLE) -> Collected:
    """Unsaved usage records of every resource (of the `part`'s pools) alive in [hour, hour + 1h)."""
    hour = _check_hour(hour)
    token = price_memo.set({})
    try:
        return _collect(hour, part)
    finally:
        price_memo.reset(token)


def _collect(hour: datetime, part: Part) -> Collected:
    """A fixed number of queries whatever the size of the fleet (issue 9): nodes with their
    orders' prices, their pools, pods grouped by workload, teams, then the pools' resource
    samples together, and the hour's lease corrections."""
    out = Collected()
    billed = _node_records(hour, out, part)
    out.records.extend(_pod_records(billed, hour, part, out.label_sets))
    billed_pools = {node.pool_id: node.pool for node, _ in billed.values()}
    machines: dict[int, list[str]] = {}
    for node, _ in billed.values():
        if node.provider_id:
            machines.setdefault(node.pool_id, []).append(node.provider_id)
    samples = resource_samples([billed_pools[pk] for pk in sorted(billed_pools)], hour, machines=machines)
    for pool_id in sorted(billed_pools):
        out.records.extend(_fee_records(billed_pools[pool_id], hour, sample=samples.get(pool_id), label_sets=out.label_sets))
    out.records.extend(lease_corrections.correction_records(hour=hour, part=part, label_sets=out.label_sets))
    return out


def node_usage_collect(*, hour: datetime) -> Collected:
    """The node half of `usage_collect`: what each node cost in the hour, without pods and
    fees (the same records `usage_collect` writes for nodes)."""
    hour = _check_hour(hour)
    token = price_memo.set({})
    try:
        out = Collected()
        _node_records(hour, out, WHOLE)
        return out
    finally:
        price_memo.reset(token)


def _node_records(hour: datetime, out: Collected, part: Part) -> dict[int, tuple[BilledNode, UsageRecord]]:
    """Every node (of the part's pools) billed in the hour, priced, appended to `out`; by node
    id with its record. Nodes are read as values (`BilledNode`), not model instances: an hour
    of a 1,000-pool fleet bills ~20,000 of them; with the lease periods they hold in the hour."""
    rows = (
        part.of(Node.objects.all())
        .filter(Q(lease_start__lt=hour + HOUR) | Q(created_at__lt=hour + HOUR) & ~Q(billing=Node.Billing.ON_DEMAND) | Q(machine_at__lt=hour + HOUR))
        # Gone before the hour and no lease running into it: nothing to bill (keeps history out).
        .exclude(Q(terminated_at__lte=hour) & (Q(lease_end__isnull=True) | Q(lease_end__lte=hour)))
        .annotate(labels_text=Cast("labels", TextField()), on_ledger=Exists(LeasePeriod.objects.filter(node=OuterRef("pk"))))
        .values_list(*NODE_COLUMNS)
        .order_by("name")
    )
    nodes = [BilledNode.from_row(row) for row in rows]
    if any(node.on_ledger for node in nodes):  # else no query: nodes ordered before the ledger
        held = held_periods(hour)
        for node in nodes:
            node.periods = held.get(node.pk, ())
    pools = {
        p.pk: p
        for p in GpuNodePool.objects.filter(pk__in={n.pool_id for n in nodes}).select_related("team", "gpu_model", "node_type", "zone").without_status()
    }
    # Alike nodes of a pool (same billing, GPUs, labels and price in the hour) are one record,
    # in the order of their first by name; labels by identity: `from_row` shares equal ones.
    alike: dict[tuple, list[BilledNode]] = {}
    for node in nodes:
        node.pool = pools[node.pool_id]  # one pool object per pool, shared by its nodes
        try:
            priced = node_price(node, hour)
        except ValidationError as exc:
            out.skipped.append(f"node {node.name}: {exc}")
            log.warning("metering %s: node %s not billed: %s", hour.isoformat(), node.name, exc)
            continue
        if priced is not None:
            # A name `node_names` could not hold apart (never one this product gives) stays alone.
            alone = node.pk if len(node.name.split()) != 1 else None
            alike.setdefault((node.pool_id, node.billing, node.gpu_count, id(node.labels), alone, priced), []).append(node)
    billed: dict[int, tuple[BilledNode, UsageRecord]] = {}
    for (*_, priced), group in alike.items():
        per_record = MAX_GPUS_IN_RECORD // max(group[0].gpu_count, 1)  # the GPUs summed fit their column
        for start in range(0, len(group), per_record):
            together = group[start : start + per_record]
            record = _nodes_record(together, hour, priced, out.label_sets)
            out.records.append(record)
            for node in together:
                billed[node.pk] = (node, record)
    return billed


def held_periods(hour: datetime) -> dict[int, tuple[HeldPeriod, ...]]:
    """The lease periods whose spread covers the hour, by the node holding them in it (not those
    charged whole in one hour as a correction: `billing.lease_corrections`)."""
    rows = (
        LeasePeriod.objects.filter(lease_start__lt=hour + HOUR, lease_end__gt=hour, held_from__lte=hour, charged_in__isnull=True)
        .filter(Q(held_to__isnull=True) | Q(held_to__gt=hour))
        .values_list("node_id", "amount", "currency", "lease_start", "lease_end")
        .order_by("node_id", "lease_start", "pk")
    )
    held: dict[int, list[HeldPeriod]] = {}
    for node_id, amount, currency, start, end in rows:
        held.setdefault(node_id, []).append(HeldPeriod(amount, currency, start, end))
    return {node_id: tuple(periods) for node_id, periods in held.items()}


def _node_record(node: Node | BilledNode, hour: datetime, label_sets: LabelSets) -> UsageRecord | None:
    """One node's hour, priced, or None when it is not billed this hour (no lease running into
    it, not alive in it)."""
    priced = node_price(node, hour)
    return None if priced is None else _nodes_record([node], hour, priced, label_sets)


def _nodes_record(nodes: list, hour: datetime, priced: tuple, label_sets: LabelSets) -> UsageRecord:
    """The hour of alike nodes of one pool (`_node_records`), each priced `priced`, as one
    record: their node-hours, cost, list cost and GPUs summed, named by the first, all of them
    in `node_names` when more than one. Built with `Unsaved.with_values`."""
    quantity, cost, list_cost, currency = priced
    first, count = nodes[0], len(nodes)
    pool = first.pool
    # Nodes of a pool with the same labels share one dict (only read), so one set: see `allocation_inputs`.
    label_set = label_sets.of(cached(("labels", pool.pk, id(first.labels)), lambda: effective_labels(pool.labels, first.labels, None)))
    return _new_usage.with_values({"pool": pool, "team": pool.team, "label_set": label_set}, {
        "id": None, "hour": hour, "kind": UsageRecord.Kind.NODE, "resource": first.name, "pool_id": pool.pk,
        "team_id": pool.team_id, "node_name": first.name, "node_names": " ".join(n.name for n in nodes) if count > 1 else "",
        "namespace": "", "pod_name": "", "pod_count": 0, "billing_kind": first.billing, "gpu_class": pool.gpu_model.name,
        "region": pool.zone.name, "gpu_count": first.gpu_count * count, "quantity": quantity * count,
        "amount": cost * count, "list_amount": None if list_cost is None else list_cost * count,
        "currency": currency, "label_set_id": label_set.pk, "labels": label_set.labels,
    })  # fmt: skip


def _pod_records(
    billed: dict[int, tuple[BilledNode, UsageRecord]], hour: datetime, part: Part, label_sets: LabelSets
) -> list[UsageRecord]:
    """One record per workload on a node: the pods of one namespace, team and label set on one
    node (a Deployment's or a Job's replicas), with their GPU-hours summed and counted.

    Each pod's GPU-hours are computed as before (`pod_gpu_hours` of its part of the hour) and
    added exactly, so a group is the sum of its pods to the last digit. Grouping happens in the
    database (pods that ran the whole hour collapse per request shape), so an hour of a
    200,000-pod fleet reads and writes rows per workload and node, not per pod (issue 9): that
    is what chargeback splits by (team, project, namespace, labels), and per-pod hourly rows
    would be ~150 M a month at that size.
    """
    if not billed:
        return []
    end = hour + HOUR
    ran = (
        part.of(Pod.objects.all(), "node__pool_id")
        # On its node since: moved there while running, else since it started.
        .alias(placed=Coalesce("placed_at", "started_at"))
        # No GPU requested, no GPU-hours (`pod_gpu_hours`): a real cluster's DaemonSets (device
        # plugin, exporters, CNI) put several such pods on every node; they are not grouped.
        .filter(node__isnull=False, placed__lt=end, gpu_count__gt=0)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=hour))
        .exclude(phase=Pod.Phase.PENDING)
        # Ended at an unknown time: nothing to bill it for.
        .exclude(Q(finished_at__isnull=True) & ~Q(phase=Pod.Phase.RUNNING))
        .annotate(
            labels_text=Cast("labels", TextField()),
            # The part of the hour it ran; NULL for "from the start" and "to the end", so pods
            # that ran the whole hour are one group per request shape.
            since=Case(When(placed__gt=hour, then=F("placed")), default=None),
            until=Case(When(finished_at__lt=end, then=F("finished_at")), default=None),
        )
        .values_list("node_id", "namespace", "team_id", "labels_text", "gpu_count", "gpu_milli", "since", "until")  # fmt: skip
        .annotate(pods=Count("pk"), first=Min("name"))
        .order_by()
    )
    # The parts of the hour pods ran on a node they have left since (moved, evicted, preempted:
    # `PodPlacement`), grouped alike, one query more whatever the number of pods: that node is
    # charged for them, not left idle, and the one they run on now only from their move.
    left = (
        part.of(PodPlacement.objects.all(), "node__pool_id")
        .filter(started_at__lt=end, ended_at__gt=hour, pod__gpu_count__gt=0)
        .annotate(
            labels_text=Cast("pod__labels", TextField()),
            since=Case(When(started_at__gt=hour, then=F("started_at")), default=None),
            until=Case(When(ended_at__lt=end, then=F("ended_at")), default=None),
        )
        .values_list("node_id", "pod__namespace", "pod__team_id", "labels_text", "pod__gpu_count", "pod__gpu_milli", "since", "until")  # fmt: skip
        .annotate(pods=Count("pk"), first=Min("pod__name"))
        .order_by()
    )
    groups: dict[tuple, list] = {}
    for node_id, namespace, team_id, text, gpu_count, gpu_milli, since, until, pods, first in chain(ran, left):
        if node_id not in billed:
            continue  # its node is not billed this hour (no price, no lease): neither is it
        whole = since is None and until is None
        fraction = WHOLE_HOUR if whole else hour_overlap(since or hour, until or end, hour)
        quantity = _gpu_hourscached(gpu_count, gpu_milli, fraction) * pods
        if quantity <= 0:
            continue
        key = (node_id, namespace, team_id, text)
        group = groups.get(key)
        if group is None:
            groups[key] = [quantity, pods, gpu_count * pods, first]
        else:
            group[0] += quantity
            group[1] += pods
            group[2] += gpu_count * pods
            group[3] = min(group[3], first)
    decoded: dict[str, dict] = {}  # workloads share label texts: decode each once

    def merged(inherited: dict, text: str, labels: dict) -> dict:
        """A workload's effective labels on nodes with these inherited ones, one dict for all."""
        return cached(("pod-labels", id(inherited), text), lambda: {**inherited, **labels})

    teams = Team.objects.in_bulk({team_id for _, _, team_id, _ in groups} | {node.pool.team_id for node, _ in billed.values()})
    records = []
    make, POD = _new_usage.with_values, UsageRecord.Kind.POD
    for (node_id, namespace, team_id, text), (quantity, pods, gpu_count, first) in groups.items():
        labels = decoded.get(text)
        if labels is None:
            labels = decoded[text] = json.loads(text) if text else {}
        node, node_record = billed[node_id]
        inherited = node_record.labels  # pool labels, then node labels
        pool = node.pool
        team_id = team_id or pool.team_id  # a real cluster's namespace mapped to no team: the pool's owner pays
        if team_id != pool.team_id:  # a guest on a pool lent to its team (`spec.sharedWith`)
            inherited = guest_labels(inherited, teams[team_id].slug)
        label_set = label_sets.of(merged(inherited, text, labels))
        records.append(
            make({"pool": pool, "team": teams[team_id], "label_set": label_set}, {
                "id": None, "hour": hour, "kind": POD, "resource": f"{namespace}/{first}@{node.name}",
                "pool_id": pool.pk, "team_id": team_id, "node_name": node.name,
                "node_names": "", "namespace": namespace, "pod_name": first, "pod_count": pods, "billing_kind": node.billing,
                "gpu_class": node_record.gpu_class, "region": node_record.region,
                "gpu_count": min(gpu_count, MAX_GPUS_IN_RECORD), "quantity": quantity, "amount": 0, "list_amount": None,
                "currency": node_record.currency, "label_set_id": label_set.pk, "labels": label_set.labels,
            })
        )  # fmt: skip
    _resources_distinct(records)
    return records


def _resources_distinct(records: list[UsageRecord]) -> None:
    """Give workloads on one node that share a first pod's name (a pod recreated under its name,
    a StatefulSet's, with other labels or for another team) an ordinal each, in a fixed order, so
    the hour keeps one record per resource (the ledger's key). Across nodes the node's name in
    the resource keeps them apart, whichever part of the hour meters each."""
    if len({r.resource for r in records}) == len(records):
        return
    clashes: dict[str, list[UsageRecord]] = {}
    for r in records:
        clashes.setdefault(r.resource, []).append(r)
    for resource, clashing in clashes.items():
        if len(clashing) > 1:
            clashing.sort(key=lambda r: (r.team_id, json.dumps(r.labels, sort_keys=True)))
            for i, r in enumerate(clashing, 1):
                r.resource = f"{resource}#{i}"


# The labels that say whose money a pool is (C4's two levels): a guest does not inherit them.
OWNER_LABELS = ("team", "project")


def guest_labels(inherited: dict, team_slug: str) -> dict:
    """What a pod of another team inherits from the pool lent to it (issue 21 §4): the pool's
    and node's labels without the owner's `team` and `project`, and `team` set to its own
    team, so chargeback by the `team` label bills it to its team, not to the host's. Its own
    labels still win over these. One dict per (inherited labels, team), shared like theirs."""
    return cached(
        ("guest-labels", id(inherited), team_slug),
        lambda: {**{k: v for k, v in inherited.items() if k not in OWNER_LABELS}, "team": team_slug},
    )


_GPU_HOURS: dict[tuple[int, int, Decimal], Decimal] = {}


def _gpu_hourscached(gpu_count: int, gpu_milli: int, hours: Decimal) -> Decimal:
    """`pod_gpu_hours`, remembered: a fleet has few request shapes and most pods run whole hours."""
    key = (gpu_count, gpu_milli, hours)
    value = _GPU_HOURS.get(key)
    if value is None:
        if len(_GPU_HOURS) > 10_000:
            _GPU_HOURS.clear()
        value = _GPU_HOURS[key] = pod_gpu_hours(gpu_count=gpu_count, gpu_milli=gpu_milli, hours=hours)
    return value


def pod_gpu_hours(*, gpu_count: int, gpu_milli: int, hours: Decimal | int = 1) -> Decimal:
    """By request: whole GPUs count 1 each; a sharing pod (1 GPU, 0 < milli < 1000) milli/1000."""
    if gpu_count == 1 and 0 < gpu_milli < MILLI:
        value = gpu_hours(0, gpu_milli, hours)
    else:
        value = gpu_hours(gpu_count, 0, hours)
    return value.quantize(QUANTITY, ROUND_HALF_UP)


def resource_samples(pools: list, hour: datetime, *, machines: dict[int, list[str]]) -> dict[int, PoolResourceSample]:
    """Each pool's storage and cross-zone traffic in the hour, in a fixed number of queries: a
    sample someone reported (an agent, an import), else what the cloud provider says of the
    pool's `machines` (pool id -> provider ids: metering's, the machines of the nodes it bills
    in the hour, not the pool's whole history, which only grows), read once for all the pools
    without one and kept, so the hour is read once (C1, D4)."""
    ids = [p.pk for p in pools]
    samples = {s.pool_id: s for s in PoolResourceSample.objects.filter(pool_id__in=ids, hour=hour)}
    machines = {pk: machines[pk] for pk in ids if pk not in samples and pk in machines}
    if not machines:
        return samples
    cloud = get_cloud_provider()
    many = getattr(cloud, "resource_usage_many", None)  # optional batch form of the protocol
    if many is not None:
        usage = many(machines=machines, hour=hour)
    else:
        usage = {pk: cloud.resource_usage(provider_ids=ids_, hour=hour) for pk, ids_ in machines.items()}
    PoolResourceSample.objects.bulk_create(
        [PoolResourceSample(pool_id=pk, hour=hour, storage_gb=u.storage_gb, cross_zone_gb=u.cross_zone_gb) for pk, u in usage.items()],
        ignore_conflicts=True,  # a sample reported meanwhile wins
    )
    samples.update((s.pool_id, s) for s in PoolResourceSample.objects.filter(pool_id__in=list(usage), hour=hour))
    return samples


def _fee_records(pool, hour: datetime, *, sample: PoolResourceSample | None, label_sets: LabelSets) -> list[UsageRecord]:
    month_start = hour.replace(day=1, hour=0)
    month_end = add_months(month_start, 1)
    # The pool's labels and those every node of it carries (`spec.nodeLabels`, such as gpu-class),
    # as its nodes' records have them: a fee the owner absorbs is grouped by gpu-class too (QA).
    label_set = label_sets.of(effective_labels(pool.labels, pool.document.get("spec", {}).get("nodeLabels"), None))
    base = dict(
        hour=hour,
        resource=ledger_pool_name(pool),
        pool=pool,
        team=pool.team,
        region=pool.zone.name,
        label_set=label_set,
        labels=label_set.labels,
    )
    records = []

    def add(kind: str, entry: PriceBookEntry | None, quantity: Decimal, amount: Decimal) -> None:
        if entry is not None and amount > 0:
            records.append(
                _new_usage(
                    **base, kind=kind, quantity=quantity, amount=amount, currency=entry.currency
                )
            )

    registry = price_entry_in_force(kind=PriceBookEntry.Kind.REGISTRY_POOL_MONTH, at=hour)
    if registry is not None:
        amount = cached(("registry", registry.pk, hour), lambda: monthly_hour_cost(quantize_money(registry.amount), month_start, month_end, hour))
        add(UsageRecord.Kind.REGISTRY, registry, Decimal(1), amount)
    if sample is not None and sample.storage_gb > 0:
        storage = price_entry_in_force(kind=PriceBookEntry.Kind.STORAGE_GB_MONTH, at=hour)
        if storage is not None:
            monthly = quantize_money(Fraction(storage.amount) * Fraction(sample.storage_gb))
            amount = cached(("storage", monthly, hour), lambda: monthly_hour_cost(monthly, month_start, month_end, hour))  # pools of one size share it
            add(UsageRecord.Kind.STORAGE, storage, Decimal(sample.storage_gb), amount)
    if sample is not None and sample.cross_zone_gb > 0:
        network = price_entry_in_force(kind=PriceBookEntry.Kind.NETWORK_CROSS_ZONE_GB, at=hour)
        if network is not None:
            amount = quantize_money(Fraction(network.amount) * Fraction(sample.cross_zone_gb))
            add(UsageRecord.Kind.NETWORK, network, Decimal(sample.cross_zone_gb), amount)
    return records


def ledger_pool_name(pool: GpuNodePool) -> str:
    """The pool as an hour's ledger names it (`GpuNodePool.ledger_name`: a deleted pool's
    `name#id`), as a function for the callers that map pools to names."""
    return pool.ledger_name


def _check_hour(hour: datetime) -> datetime:
    if hour.tzinfo is None:
        raise ValueError("hour must be timezone-aware")
    if hour != floor_hour(hour):
        raise ValueError(f"{hour.isoformat()} is not the start of an hour")
    return hour.astimezone(UTC)


# --------------------------------------------------------------------------- to the pure core


def allocation_inputs(
    records: Iterable[UsageRecord], *, pools: dict[int, GpuNodePool] | None = None, teams: dict[int, Team] | None = None
) -> tuple[list[NodeHour], list[PodHour], list[FeeHour]]:
    """One hour's records as the allocation core's inputs, in a fixed order.

    Records need `pool` and `team` loaded (select_related) or cached, or the caller passes
    them by id (`related_by_id`); team is the slug. The inputs hold the records' label dicts
    themselves (neither side changes them), so records that share labels give rows that share
    them: metering groups rows by label set.
    """
    nodes: list[NodeHour] = []
    pods: list[PodHour] = []
    fees: list[FeeHour] = []
    records = sorted(records, key=lambda r: (r.kind, r.resource))
    # Each pool's name and team's slug read once, not through the relations on every record.
    pool_names = {pk: ledger_pool_name(pool) for pk, pool in (pools or related_by_id(records, "pool")).items()}
    team_slugs = {pk: team.slug for pk, team in (teams or related_by_id(records, "team")).items()}
    for r in records:  # every field given (`frozen_new`): the classes' defaults are not used
        if r.kind == UsageRecord.Kind.NODE:
            names = r.nodes_billed  # each node of the record is its own input, priced alike
            count = len(names)
            cost, listed = Decimal(r.amount), None if r.list_amount is None else Decimal(r.list_amount)
            hours = Decimal(r.quantity)  # node-hours: a node's capacity is its GPUs for them
            if count > 1:  # sums of equal amounts: divided exactly
                cost, listed, hours = cost / count, None if listed is None else listed / count, hours / count
            for name in names:
                nodes.append(frozen_new(NodeHour, {
                    "hour": r.hour, "node": name, "pool": pool_names[r.pool_id], "team": team_slugs[r.team_id],
                    "billing_kind": r.billing_kind, "gpu_count": r.gpu_count // count, "cost": cost,
                    "gpu_class": r.gpu_class, "region": r.region, "labels": r.labels, "list_price": listed,
                    "hours": hours,
                }))  # fmt: skip
        elif r.kind == UsageRecord.Kind.POD:
            pods.append(frozen_new(PodHour, {
                "hour": r.hour, "namespace": r.namespace, "name": r.pod_name, "node": r.node_name,
                "gpu_hours": Decimal(r.quantity), "labels": r.labels, "pods": r.pod_count or 1,
                "team": team_slugs[r.team_id],
            }))  # fmt: skip
        elif r.kind == UsageRecord.Kind.CORRECTION:
            continue  # the pool's team's, whole, not split (`billing.lease_corrections.allocation_rows`)
        else:
            fees.append(frozen_new(FeeHour, {
                "hour": r.hour, "pool": pool_names[r.pool_id], "team": team_slugs[r.team_id], "kind": r.kind,
                "amount": Decimal(r.amount), "labels": r.labels, "billing_kind": "",
            }))  # fmt: skip
    nodes.sort(key=attrgetter("node"))  # by name, as records of one node each give them
    return nodes, pods, fees


def related_by_id(records: list[UsageRecord], relation: str, attribute: str | None = None) -> dict:
    """The records' `pool` or `team` (or one attribute of it) by id, each read through its
    relation once: an hour's ~20,000 records name a few hundred pools and teams."""
    key = attrgetter(f"{relation}_id")
    first = {key(r): r for r in records}
    objects = {pk: getattr(r, relation) for pk, r in first.items()}
    return objects if attribute is None else {pk: getattr(o, attribute) for pk, o in objects.items()}
