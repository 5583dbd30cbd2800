"""The fleet of the control-plane benchmark (issue 9 item 1): many pools of one shape, written
straight into the database (COPY on PostgreSQL, `bulk_create` elsewhere) in a state the
controllers could have left it in, so that one pass of reconcile + autoscale + metering can be
timed at 100 and at 1,000 pools with the same per-pool shape.

Per pool (defaults): one Paid order of 18 monthly nodes, 17 of them Ready and one still
provisioning (its `image_pull` step runs until after the pass), 2 on-demand burst nodes Ready,
10 pods on every Ready node (6 whole GPUs and 4 half GPUs: a full 8-GPU node) and 10 Pending
pods that fit only this pool (they tolerate its taint): exactly the autoscaler's
`queued_pods` target, so a steady pool does not scale. 1,000 pools are 20,000 nodes and
200,000 pods.

On top of that steady shape, the same amount of activity at every size: `draining` pools (20 by
default) have one node draining (scaled in) whose first pod refuses eviction until the drain's
deadline, as a disruption budget would. A pass evicts the other pods, which then queue and make
the autoscaler order burst nodes for them, which the next pass provisions: real work, whose
statements are those of the changes. Keeping it equal across sizes shows what a pass costs per
pool (nothing, it must be) apart from what it costs per change. The tests build tiny fleets with
the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.color import no_style
from django.db import connection, models

NOW = datetime(2026, 12, 15, 10, 0, 30, tzinfo=UTC)
GPU_MODELS = ("A100_80G", "H100_80G", "L40S")
ZONES = ("cn-east-2a", "cn-east-2b", "cn-north-1a", "cn-north-1b")
IMAGE = "ubuntu-22.04-cuda-12.2"
CHUNK_PODS = 20_000  # rows are written every this many pods, so memory stays flat


@dataclass(frozen=True)
class Shape:
    pools: int = 1000
    teams: int = 20
    monthly_ready: int = 17  # Ready monthly nodes per pool
    provisioning: int = 1  # monthly nodes of the same order, still provisioning
    burst_ready: int = 2  # Ready on-demand nodes
    pods_per_node: int = 10  # on every Ready node: 6 whole GPUs + 4 halves of 2 GPUs
    pending_per_pool: int = 10  # Pending pods that fit only this pool
    draining: int = 20  # pools (the first ones) with one node draining: activity, the same at every size
    events_per_pool: int = 20  # old timeline entries
    sample_minutes: int = 1440  # per-minute water-level samples per pool

    @property
    def nodes_per_pool(self) -> int:
        return self.monthly_ready + self.provisioning + self.burst_ready

    def describe(self) -> str:
        ready = self.monthly_ready + self.burst_ready
        return (
            f"{self.pools:,} pools, {self.teams} teams, {self.pools * self.nodes_per_pool:,} nodes, "
            f"{self.pools * (ready * self.pods_per_node + self.pending_per_pool):,} pods, {self.draining} draining nodes"
        )


@dataclass
class Fleet:
    pools: int
    nodes: int
    pods: int
    admin: object
    finance: object
    lead: object
    first_pool: str


class _Ids:
    """Explicit primary keys, so related rows can be written without reading ids back."""

    def __init__(self):
        self.next: dict[type, int] = {}

    def take(self, model: type[models.Model]) -> int:
        if model not in self.next:
            self.next[model] = (model.objects.aggregate(m=models.Max("pk"))["m"] or 0) + 1
        value = self.next[model]
        self.next[model] += 1
        return value


def write(model: type[models.Model], objects: list[models.Model]) -> None:
    """Insert unsaved instances with their primary keys: COPY on PostgreSQL, bulk_create elsewhere."""
    from billing.bulk_insert import bulk_insert

    bulk_insert(model, objects, with_pk=True)


def _reset_sequences(models_: list[type[models.Model]]) -> None:
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), models_):
            cursor.execute(sql)


def document(name: str, *, team: str, project: str, gpu_model: str, zone: str, shape: Shape) -> dict:
    """The pool's GpuNodePool: min = its monthly nodes, bursting on the queue of Pending pods."""
    monthly = shape.monthly_ready + shape.provisioning
    return {
        "apiVersion": "ebcloud.io/v1",
        "kind": "GpuNodePool",
        "metadata": {"name": name, "labels": {"team": team, "project": project}},
        "spec": {
            "nodeType": "GPU_8_CARD",
            "gpuModel": gpu_model,
            "nodeCount": {"min": monthly, "max": monthly + shape.burst_ready + 4},
            "region": zone,
            "leaseType": "monthly",
            "systemImage": IMAGE,
            "autoRepair": True,
            "nodeLabels": {"gpu-class": gpu_model.split("_")[0].lower()},
            "nodeTaints": [{"key": "pool", "value": name, "effect": "NoSchedule"}],
            "burst": {"enabled": True, "maxNodes": shape.burst_ready + 4},
            "scaling": {"default": {"metrics": [{"type": "Pods", "pods": "queued_pods", "target": max(1, shape.pending_per_pool)}]}},
        },
    }


def build(shape: Shape, *, now: datetime = NOW, prefix: str = "pool") -> Fleet:
    """Write the whole fleet; the catalog and price book are loaded first (idempotent)."""
    from billing.demo import load_prices
    from billing.models import Account
    from monitoring.models import PoolSample
    from pools import roles
    from pools.core.spec import effective_node_labels, parse_document
    from pools.demo.seed import load_catalog
    from pools.models import (
        GpuModel,
        GpuNodePool,
        Membership,
        Node,
        NodeType,
        Pod,
        PoolEvent,
        PoolOrder,
        Quota,
        Team,
        Zone,
    )
    from pools.models.cloud import SimClusterNode, SimFailure, SimMachine, SimPayment, SimStock
    from pools.selectors.pools import catalog_current

    load_catalog()
    load_prices()
    Account.objects.update_or_create(name="default", defaults={"balance": Decimal("1000000000.00"), "currency": "CNY"})
    node_type = NodeType.objects.get(name="GPU_8_CARD")
    gpu_models = {m.name: m for m in GpuModel.objects.filter(name__in=GPU_MODELS)}
    zones = {z.name: z for z in Zone.objects.filter(name__in=ZONES)}
    for region in {z.region for z in zones.values()}:
        for model in gpu_models.values():
            Quota.objects.update_or_create(region=region, gpu_model=model, team=None, defaults={"limit_gpus": 10_000_000})
            for zone in (z for z in zones.values() if z.region == region):
                SimStock.objects.update_or_create(zone=zone, gpu_model=model, defaults={"available_gpus": 1_000_000})
    ids = _Ids()
    teams = []
    for t in range(shape.teams):
        team, _ = Team.objects.get_or_create(slug=f"{prefix}-team-{t}", defaults={"name": f"{prefix} team {t}"})
        teams.append(team)
    users = get_user_model().objects
    admin = users.filter(username=f"{prefix}-admin").first() or users.create_superuser(f"{prefix}-admin", password=f"pw-{prefix}-admin")
    finance = users.get_or_create(username=f"{prefix}-finance")[0]
    finance.groups.add(Group.objects.get_or_create(name=roles.FINANCE)[0])
    lead = users.get_or_create(username=f"{prefix}-lead")[0]
    Membership.objects.get_or_create(user=lead, team=teams[0], defaults={"role": Membership.Role.LEAD})

    catalog = catalog_current()
    lease_start, lease_end = now - timedelta(days=10), now + timedelta(days=20)
    rows: dict[type, list] = {m: [] for m in (GpuNodePool, PoolOrder, SimPayment, Node, SimMachine, SimClusterNode, Pod, SimFailure, PoolEvent, PoolSample)}
    written = dict.fromkeys(rows, 0)
    first_pool = f"{prefix}-{0:04d}" if shape.pools else ""
    account = Account.objects.get(name="default")
    monthly_count = shape.monthly_ready + shape.provisioning
    for i in range(shape.pools):
        team = teams[i % shape.teams]
        name = f"{prefix}-{i:04d}"
        gpu_model, zone = gpu_models[GPU_MODELS[i % len(GPU_MODELS)]], zones[ZONES[(i // len(GPU_MODELS)) % len(ZONES)]]
        doc = document(name, team=team.slug, project=f"project-{i % 37}", gpu_model=gpu_model.name, zone=zone.name, shape=shape)
        spec = parse_document(doc, catalog)
        pool = GpuNodePool(
            pk=ids.take(GpuNodePool), name=name, team=team, document=doc, gpu_model=gpu_model, node_type=node_type, zone=zone,
            min_nodes=spec.min_nodes, max_nodes=spec.max_nodes, lease_type="monthly", generation=1, observed_generation=1,
            phase=GpuNodePool.Phase.SCALING if shape.provisioning else GpuNodePool.Phase.READY,
            created_at=now - timedelta(days=10), updated_at=now - timedelta(days=10),
        )  # fmt: skip
        rows[GpuNodePool].append(pool)
        order = PoolOrder(
            pk=ids.take(PoolOrder), pool=pool, kind=PoolOrder.Kind.CREATE, status=PoolOrder.Status.PAID, node_count=monthly_count,
            gpus=monthly_count * 8, lease_type="monthly", lease_months=1, unit_monthly_price=Decimal("20000.00"), discount=Decimal("0"),
            amount=Decimal("20000.00") * monthly_count, currency="CNY", created_at=lease_start, decided_at=lease_start,
        )  # fmt: skip
        rows[PoolOrder].append(order)
        rows[SimPayment].append(SimPayment(pk=ids.take(SimPayment), order=order, account=account, amount=order.amount, currency="CNY", balance_after=account.balance, paid_at=lease_start))
        labels = {billing: effective_node_labels(spec, zone=zone.name, billing=billing, team=team.slug) for billing in ("monthly", "on_demand")}
        taints = [{"key": "pool", "value": name, "effect": "NoSchedule"}]
        toleration = [{"key": "pool", "operator": "Equal", "value": name, "effect": "NoSchedule"}]
        draining = i < shape.draining
        for seq in range(shape.nodes_per_pool):
            monthly = seq < monthly_count
            billing = "monthly" if monthly else "on_demand"
            provisioning = shape.monthly_ready <= seq < monthly_count
            node = Node(
                pk=ids.take(Node), pool=pool, name=f"{name}-{pool.pk}-{seq + 1:03d}", billing=billing, zone=zone, gpu_count=8,
                order=order if monthly else None, lease_start=lease_start if monthly else None, lease_end=lease_end if monthly else None,
                created_at=now - timedelta(minutes=2) if provisioning else lease_start, provider_id=f"sim-{zone.name}-{pool.pk}-{seq + 1:03d}",
            )  # fmt: skip
            node.machine_at = node.created_at  # its machine was delivered as it was requested
            if provisioning:
                node.phase, node.step, node.step_due_at = Node.Phase.INITIALIZING, "image_pull", now + timedelta(seconds=40)
            else:
                node.phase, node.labels, node.taints = Node.Phase.READY, labels[billing], taints
                node.ready_at, node.last_heartbeat = node.created_at + timedelta(minutes=4), now - timedelta(seconds=10)
                if not monthly:
                    node.created_at = now - timedelta(hours=3)
                    node.ready_at = node.created_at + timedelta(minutes=4)
            if draining and seq == 0:
                node.phase, node.release_reason, node.unschedulable = Node.Phase.DRAINING, "ScaledIn", True
                node.drain_deadline = now + timedelta(minutes=5)
            rows[Node].append(node)
            rows[SimMachine].append(SimMachine(
                pk=ids.take(SimMachine), provider_id=node.provider_id, client_token=node.name, zone=zone, gpu_model=gpu_model,
                node_type=node_type, gpus=8, billing=billing, image=IMAGE, created_at=node.created_at,
                status=SimMachine.Status.PROVISIONING if provisioning else SimMachine.Status.RUNNING,
                step="image_pull" if provisioning else "kubelet_join", step_due_at=node.step_due_at or node.ready_at, step_done=not provisioning,
            ))  # fmt: skip
            if provisioning:
                continue
            rows[SimClusterNode].append(SimClusterNode(pk=ids.take(SimClusterNode), name=node.name, labels=node.labels, taints=taints, unschedulable=node.unschedulable, registered_at=node.ready_at))
            for j in range(shape.pods_per_node):
                whole = j < 6
                pod = Pod(
                    pk=ids.take(Pod), namespace=f"{team.slug}-ns-{i % 7}", name=f"{node.name}-{j}", team=team,
                    labels={"app": f"train-{i}", "project": f"project-{i % 37}"}, priority=j % 3, cpu_milli=4000, memory_mib=32768,
                    gpu_count=1, gpu_milli=1000 if whole else 500, tolerations=toleration, phase=Pod.Phase.RUNNING, node=node,
                    gpu_indices=[j] if whole else [6 + (j - 6) // 2], submitted_at=now - timedelta(hours=6), pending_since=now - timedelta(hours=6),
                    started_at=now - timedelta(hours=5),
                )  # fmt: skip
                rows[Pod].append(pod)
                if draining and seq == 0 and j == 0:
                    rows[SimFailure].append(SimFailure(pk=ids.take(SimFailure), step="evict", token_prefix=f"{pod.namespace}/{pod.name}", remaining=None, message="disruption budget"))
        for j in range(shape.pending_per_pool):
            rows[Pod].append(Pod(
                pk=ids.take(Pod), namespace=f"{team.slug}-ns-{i % 7}", name=f"{name}-pending-{j}", team=team,
                labels={"app": f"train-{i}", "project": f"project-{i % 37}"}, cpu_milli=4000, memory_mib=32768, gpu_count=1,
                gpu_milli=1000, tolerations=toleration, phase=Pod.Phase.PENDING, submitted_at=now - timedelta(minutes=1),
                pending_since=now - timedelta(minutes=1),
            ))  # fmt: skip
        for k in range(shape.events_per_pool):
            at = now - timedelta(hours=1, minutes=k)
            rows[PoolEvent].append(PoolEvent(
                pk=ids.take(PoolEvent), pool=pool, reason="NodeReady", message=f"Node {name}-{pool.pk}-{k % shape.nodes_per_pool + 1:03d} is Ready",
                first_timestamp=at, last_timestamp=at,
            ))  # fmt: skip
        for m in range(shape.sample_minutes if connection.vendor != "postgresql" else 0):
            rows[PoolSample].append(PoolSample(
                pk=ids.take(PoolSample), pool=pool, minute=now.replace(second=0) - timedelta(minutes=m + 1), capacity_gpus=8 * 19,
                allocated_gpus=8 * 19 - (m % 17), pending_pods=m % 11, min_nodes=pool.min_nodes, max_nodes=pool.max_nodes,
                nodes_by_phase={"Ready": 19, "Initializing": 1}, node_counts={"monthly": {"desired": 18, "current": 18, "ready": 17}},
            ))  # fmt: skip
        if len(rows[Pod]) >= CHUNK_PODS or i == shape.pools - 1:
            for model, objects in rows.items():
                write(model, objects)
                written[model] += len(objects)
                objects.clear()
    if connection.vendor == "postgresql" and shape.sample_minutes:
        _samples_sql(prefix=prefix, minutes=shape.sample_minutes, now=now)
    _reset_sequences(list(rows))
    _statuses_settle(prefix=prefix, now=now - timedelta(minutes=10))
    return Fleet(pools=written[GpuNodePool], nodes=written[Node], pods=written[Pod], admin=admin, finance=finance, lead=lead, first_pool=first_pool)


def _statuses_settle(*, prefix: str, now: datetime) -> None:
    """Store each pool's status as the controller computes it (as if the last pass ran at
    `now`), so that a measured pass rewrites only the status of pools where something changed."""
    from pools.claims import ClaimsSeen
    from pools.controllers.state import pools_update, snapshots_load
    from pools.core import lifecycle as rules
    from pools.models import GpuNodePool

    pools = list(GpuNodePool.objects.filter(name__startswith=f"{prefix}-"))
    statuses = {pk: rules.status_of(snapshot, now=now) for pk, snapshot in snapshots_load(pools).items()}
    pools_update(
        {
            pool.pk: {
                "phase": statuses[pool.pk].phase, "pending_reason": statuses[pool.pk].pending_reason, "observed_generation": pool.generation,
                "conditions": statuses[pool.pk].conditions, "node_counts": statuses[pool.pk].node_counts,
            }  # fmt: skip
            for pool in pools
        },
        seen=ClaimsSeen(busy=frozenset(), versions={}),
    )


def _samples_sql(*, prefix: str, minutes: int, now: datetime) -> None:
    """The per-minute water-level samples of the last `minutes`, generated inside PostgreSQL."""
    from monitoring.models import PoolSample
    from pools.models import GpuNodePool

    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {PoolSample._meta.db_table} (pool_id, minute, capacity_gpus, allocated_gpus, gpu_memory_used_pct, gpu_util_avg,
                pending_pods, nodes_by_phase, node_counts, min_nodes, max_nodes)
            SELECT p.id, %(end)s::timestamptz - m * interval '1 minute', 152, 152 - m %% 17, NULL, NULL, m %% 11,
                   '{{"Ready": 19, "Initializing": 1}}'::jsonb, '{{"monthly": {{"desired": 18, "current": 18, "ready": 17}}}}'::jsonb,
                   p.min_nodes, p.max_nodes
            FROM {GpuNodePool._meta.db_table} p, generate_series(1, %(minutes)s) AS m
            WHERE p.name LIKE %(prefix)s
            """,
            {"end": now.replace(second=0), "minutes": minutes, "prefix": f"{prefix}-%"},
        )


def costs_history(*, now: datetime = NOW, days: int = 10) -> int:
    """The metered hours before the measured one, as a fleet running since its pools were
    created (`days` ago) has them: the hour before is metered for real, and its cost records,
    day rollups and claims are repeated back to then (PostgreSQL, `generate_series`). What an
    hour's budget check reads grows with the month (issue 23): without this history it meets an
    empty month. The thresholds those hours crossed have fired. Usage records are left out (an
    hour's ~41,000, some 10 M for ten days, which nothing measured reads). Returns the cost
    records written."""
    from billing import budgets, services
    from billing.hours import HOUR, last_complete_hour
    from billing.models import CostRecord, MeterRun

    measured = last_complete_hour(now)
    first, last = measured - timedelta(days=days) + HOUR, measured - HOUR
    back = int((last - first) / HOUR)  # the hours repeated before `last`
    run = services.meter_hour(hour=last)
    fields = [f.column for f in CostRecord._meta.concrete_fields if not f.primary_key and f.column != "hour"]
    columns = ", ".join(fields)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {CostRecord._meta.db_table} (hour, {columns})
            SELECT r.hour - k * interval '1 hour', {columns}
            FROM {CostRecord._meta.db_table} r, generate_series(1, %(back)s) AS k
            WHERE r.hour = %(last)s
            """,
            {"back": back, "last": last},
        )
        written = cursor.rowcount + run.cost_records
    day = first.date()
    while day <= last.date():
        services.cost_day_rebuild(day=day)
        day += timedelta(days=1)
    # The alerts those hours crossed fired then, once (a measured check meets them fired).
    budgets.budgets_evaluate(now=last + HOUR + timedelta(minutes=2))
    metered = MeterRun.objects.get(hour=last)
    MeterRun.objects.bulk_create(
        MeterRun(hour=first + k * HOUR, started_at=first + (k + 1) * HOUR, node_records=metered.node_records, pod_records=metered.pod_records,
                 cost_records=metered.cost_records, total=metered.total)
        for k in range(back)
    )  # fmt: skip
    return written
