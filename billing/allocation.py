"""OpenCost-style cost allocation for GPU node pools, exact to the cent (C1, C4, G3).

Why this module exists: the pool is the billing unit (G3). Every hour, each node of a pool
costs something (a slice of its monthly lease, its on-demand price, or its discounted
preemptible price); pods running on it use some of its GPUs; the pool also pays shared fees
(storage, cross-zone network, registry: C1). Finance wants that money split down to team,
project and namespace (C4) *without losing a cent*: whatever no pod used is the pool's idle
cost and is charged to the team that owns the pool (a pool idle all month still bills its
owner).

The core invariant, checked by property tests::

    sum(allocations) + sum(idle) == sum(node costs) + sum(fees)      # exactly

It holds because every split is done in integer units of a money quantum (the cent by
default) with the largest-remainder method, and every input amount must already be a
multiple of that quantum (the price helpers below produce such amounts).

Pure core: standard library only, no Django, ``now`` never read. Services load usage records
from the database, build these dataclasses and persist the rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from billing.cents import hour_seed, split_units
from billing.lease_costs import (
    CENT,
    from_units,
    to_units,
    units_exact,
)

DEFAULT_CURRENCY = "CNY"

MONTHLY = "monthly"
ON_DEMAND = "on_demand"
PREEMPTIBLE = "preemptible"
BILLING_KINDS = (MONTHLY, ON_DEMAND, PREEMPTIBLE)

USAGE = "usage"
IDLE = "idle"
FEE = "fee"

GPU = "gpu"
FEE_KINDS = ("storage", "network", "registry")
CORRECTION = "correction"  # a lease period charged whole in one later hour (billing.lease_corrections)

# Chargeback columns (issue 21): who is charged, what kind of cost, metered or still accruing.
CHARGED_TEAM = "charged_team"
ALLOCATED = "allocated"
UNALLOCATED = "unallocated"
GROUP_KINDS = (ALLOCATED, UNALLOCATED, IDLE)
METERED = "metered"
ACCRUING = "accruing"
DEFAULT_GROUP_LABELS = ("team", "project", "gpu-class")

_HOUR = timedelta(hours=1)


# --------------------------------------------------------------------------- inputs


def frozen_new(cls: type, values: dict):
    """An instance of the frozen dataclass `cls` whose fields are `values` (every one of them,
    by name): equal to `cls(**values)` and as frozen, but `values` becomes its `__dict__`.
    A frozen dataclass's `__init__` sets each field through `object.__setattr__`, ~1.4 µs for
    a `NodeHour` against ~0.4 µs this way, and metering builds an input per usage record,
    ~20,000 a part of an hour (issue 23). Only for classes without `__post_init__`; that
    every field is given is the caller's test (`test_allocation_inputs_are_the_classes_own`).
    """
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", values)
    return instance


@dataclass(frozen=True)
class NodeHour:
    """One node for one hour, with what that hour costs.

    ``cost`` is the node's whole cost for the hour (compute it with :func:`monthly_hour_cost`,
    :func:`on_demand_hour_cost` or :func:`preemptible_hour_cost`). ``labels`` are the node's
    effective labels (pool labels + node labels); idle rows carry them. ``list_price`` is the
    on-demand list price of the same node-hour (FOCUS ListCost; ``None``: same as cost).
    ``hours`` is the node-hours billed (the part of the hour an on-demand node was alive, 1 for
    a leased hour): its capacity is ``gpu_count`` × ``hours`` GPU-hours (what idle is left of).
    """

    hour: datetime
    node: str
    pool: str
    team: str
    billing_kind: str
    gpu_count: int
    cost: Decimal
    gpu_class: str = ""
    region: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    list_price: Decimal | None = None
    hours: Decimal = Decimal(1)


@dataclass(frozen=True)
class PodHour:
    """One pod's GPU use on one node during one hour, or that of ``pods`` replicas of one
    workload (same namespace and labels) on the node, ``name`` being the first of them.

    ``gpu_hours`` is by request, not by measured utilisation (what the pod reserved is what
    nobody else could use): see :func:`gpu_hours`. ``labels`` is the pod's effective label
    snapshot for that hour (see :func:`effective_labels`). ``team`` is the team charged for
    it, the one its namespace belongs to (empty: its ``team`` label).
    """

    hour: datetime
    namespace: str
    name: str
    node: str
    gpu_hours: Decimal
    labels: Mapping[str, str] = field(default_factory=dict)
    pods: int = 1
    team: str = ""


@dataclass(frozen=True)
class FeeHour:
    """A shared fee a pool paid for one hour: ``kind`` is storage, network or registry.

    ``team`` is the pool's owner, who absorbs what no pod pays (:func:`fee_splits`).
    ``billing_kind`` may be left empty; it is then derived from the pool's nodes that hour.
    """

    hour: datetime
    pool: str
    team: str
    kind: str
    amount: Decimal
    labels: Mapping[str, str] = field(default_factory=dict)
    billing_kind: str = ""


@dataclass(frozen=True)
class AllocationRow:
    """One slice of money: who is charged, for what, how much.

    ``cost_kind`` is ``usage`` (a pod's share of a node), ``fee`` (a pod's share of a shared
    fee) or ``idle`` (absorbed by the pool owner ``team``). ``component`` says what was paid
    for: ``gpu`` or one of the fee kinds. ``gpu_hours`` is the quantity behind a usage row
    (the idle GPU-hours for a GPU idle row, 0 for fee rows). ``pods`` is how many pods the
    row's `PodHour` stands for (0 for idle rows).
    """

    hour: datetime
    pool: str
    team: str
    namespace: str
    pod: str
    node: str
    labels: Mapping[str, str]
    gpu_class: str
    billing_kind: str
    cost_kind: str
    component: str
    amount: Decimal
    currency: str
    gpu_hours: Decimal = Decimal(0)
    pods: int = 0


@dataclass(frozen=True)
class GroupTotal:
    """A grouped total. ``key`` holds ``(column, value)`` pairs: the charged team, the label
    columns verbatim (empty where the label is missing), namespace and billing kind.

    ``kind`` is ``allocated`` (used by workloads carrying every asked label), ``unallocated``
    (used by workloads missing one of them) or ``idle`` (paid for, used by nobody): a column
    of its own, so no label column ever holds a marker such as ``__idle__`` (issue 21 §4).
    ``status`` is ``metered`` or ``accruing`` (hours the hourly run has not written yet).
    """

    key: tuple[tuple[str, str], ...]
    kind: str
    amount: Decimal
    currency: str
    status: str = METERED

    @property
    def idle(self) -> bool:
        return self.kind == IDLE

    def as_dict(self) -> dict[str, str]:
        """Flatten for CSV / JSON in :func:`group_columns` order."""
        out = dict(self.key)
        out["kind"] = self.kind
        out["status"] = self.status
        out["amount"] = str(self.amount)
        out["currency"] = self.currency
        return out


# --------------------------------------------------------------------------- labels & quantities


def effective_labels(
    pool_labels: Mapping[str, str] | None,
    node_labels: Mapping[str, str] | None,
    pod_labels: Mapping[str, str] | None,
) -> dict[str, str]:
    """Labels as billing sees them: pool labels inherited by nodes, then by pods.

    The more specific level wins on conflict (pod over node over pool), the same rule FOCUS
    uses for tag finalisation, so a pod that says ``project=b`` in a pool labelled
    ``project=a`` is billed to ``b``. Keys are kept verbatim (``gpu-class`` stays
    ``gpu-class``).
    """
    merged: dict[str, str] = {}
    for level in (pool_labels, node_labels, pod_labels):
        if level:
            merged.update(level)
    return merged


def gpu_hours(gpus: int = 0, gpu_milli: int = 0, hours: Decimal | int = 1) -> Decimal:
    """GPU-hours of a request: whole GPUs count 1 each, a shared GPU counts ``milli/1000``.

    By request because a reserved GPU is unavailable to anyone else, used or not.
    """
    if gpus < 0 or not 0 <= gpu_milli <= 1000:
        raise ValueError("gpus must be >= 0 and gpu_milli within 0..1000")
    hours = Decimal(hours)
    if hours < 0:
        raise ValueError("hours must be >= 0")
    return (Decimal(gpus) + Decimal(gpu_milli).scaleb(-3)) * hours


# --------------------------------------------------------------------------- exact splitting


def split_money(total: Decimal, weights: Sequence[Fraction | Decimal | int], quantum: Decimal = CENT, seed: int | None = None) -> list[Decimal]:
    """Split money in proportion to weights; parts are quantum multiples summing to total."""
    return [from_units(u, quantum) for u in split_units(to_units(total, quantum), weights, seed)]


# --------------------------------------------------------------------------- allocation


def allocate(
    node_hours: Iterable[NodeHour], pod_hours: Iterable[PodHour], fees: Iterable[FeeHour] = (), *,
    quantum: Decimal = CENT, currency: str = DEFAULT_CURRENCY,
) -> list[AllocationRow]:
    """Allocate any number of hours; see :func:`allocate_hour` for the rules."""
    by_hour: dict[datetime, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for slot, items in enumerate((node_hours, pod_hours, fees)):
        for item in items:
            by_hour[item.hour][slot].append(item)
    batches = (by_hour[hour] for hour in sorted(by_hour))
    return list(iter_allocate(batches, quantum=quantum, currency=currency))


def iter_allocate(
    batches: Iterable[tuple[Sequence[NodeHour], Sequence[PodHour], Sequence[FeeHour]]], *,
    quantum: Decimal = CENT, currency: str = DEFAULT_CURRENCY,
) -> Iterator[AllocationRow]:
    """Allocate hour batches lazily, so a month of records streams in constant memory."""
    for nodes, pods, hour_fees in batches:
        yield from allocate_hour(nodes, pods, hour_fees, quantum=quantum, currency=currency)


def allocate_hour(
    node_hours: Sequence[NodeHour], pod_hours: Sequence[PodHour], fees: Sequence[FeeHour] = (), *,
    quantum: Decimal = CENT, currency: str = DEFAULT_CURRENCY, guest_fees_by_use: frozenset[str] = frozenset(),
) -> list[AllocationRow]:
    """Split one hour's node costs and fees into usage, fee and idle rows.

    - A pod's share of a node is its GPU-hours × the node's per-GPU-hour rate; what is left
      of its capacity (GPUs × the node's hours) is idle, charged to the pool's owner. If
      requests exceed it (they should not), the node's cost is split by request and idle is
      zero: never negative. Leftover cents of equal shares go by the hour (:func:`split_units`).
    - A pool's fees are split over the pool's pods by their GPU-hours, a team it is lent to
      paying at most its share of the pool's GPUs (:func:`fee_splits`); what no pod pays
      falls to idle, i.e. to the owner. Nothing disappears.
    - Zero-amount rows are omitted.
    """
    nodes, on_node = nodes_checked(node_hours, pod_hours, quantum)
    rows: list[AllocationRow] = []
    # Nodes of one shape (cost, requests) split alike: a fleet has few shapes (issue 9).
    splits: dict[tuple, list[Decimal]] = {}
    for node in nodes.values():
        pods = on_node[node.node]
        weights = [p.gpu_hours for p in pods]
        used = sum(weights, Decimal(0))
        idle_gpu_hours = max(node.gpu_count * node.hours - used, Decimal(0))
        weights.append(idle_gpu_hours if used or idle_gpu_hours else Decimal(1))
        shape = (node.hour, node.cost, *weights)
        amounts = splits.get(shape)
        if amounts is None:
            amounts = splits[shape] = split_money(node.cost, weights, quantum, hour_seed(node.hour))
        for pod, amount in zip(pods, amounts, strict=False):
            if amount:
                rows.append(node_row(node, pod, USAGE, GPU, amount, currency, pod.gpu_hours))
        if amounts[-1]:
            rows.append(node_row(node, None, IDLE, GPU, amounts[-1], currency, idle_gpu_hours))

    for fee, members, amounts in fee_splits(nodes, on_node, fees, quantum, guest_fees_by_use):
        for (node, pod), amount in zip(members, amounts, strict=True):
            if amount:
                rows.append(fee_idle_row(fee, nodes.values(), currency, amount) if pod is None
                            else node_row(node, pod, FEE, fee.kind, amount, currency))
    return rows


def nodes_checked(
    node_hours: Sequence[NodeHour], pod_hours: Sequence[PodHour], quantum: Decimal
) -> tuple[dict[str, NodeHour], defaultdict[str, list[PodHour]]]:
    """An hour's nodes by name and its pods by node, in input order; a node twice, a pod on a
    node not given or negative GPU-hours is an error."""
    nodes: dict[str, NodeHour] = {}
    for node in node_hours:
        _check_node(node, quantum)
        if node.node in nodes:
            raise ValueError(f"node {node.node} appears twice in one hour")
        nodes[node.node] = node
    on_node: defaultdict[str, list[PodHour]] = defaultdict(list)
    for pod in pod_hours:
        if pod.node not in nodes:
            raise ValueError(f"pod {pod.namespace}/{pod.name} is on unknown node {pod.node}")
        if pod.gpu_hours < 0:
            raise ValueError(f"pod {pod.namespace}/{pod.name} has negative GPU-hours")
        on_node[pod.node].append(pod)
    return nodes, on_node


def fee_splits(
    nodes: Mapping[str, NodeHour], on_node: Mapping[str, list[PodHour]], fees: Sequence[FeeHour], quantum: Decimal,
    guest_fees_by_use: frozenset[str] = frozenset(),
) -> Iterator[tuple[FeeHour, list[tuple[NodeHour | None, PodHour | None]], list[Decimal]]]:
    """Each non-zero fee with its payers and their amounts: the (node, pod) pairs of its pool
    that used GPUs, in node order, by GPU-hours, and (None, None) for the owner's idle part.

    A team the pool is lent to pays a fee as it pays the nodes: its GPU-hours' share of the
    pool's GPU capacity that hour (2 of 8 GPUs: a quarter), whoever else ran; the owner's pods
    share the rest by their GPU-hours, and with none of them the owner absorbs it. The owner
    keeps paying for its pool ("your team keeps paying for it"): a guest alone in it for an
    hour took all of the hour's registry and storage before. The pools of `guest_fees_by_use`
    are split as then, by GPU-hours alone: hours metered so are recomputed as they were charged
    (`MeterRun.guest_fees_by_capacity`)."""
    pool_pods: dict[str, list[tuple[NodeHour, PodHour]]] = defaultdict(list)
    capacity: dict[str, Fraction] = defaultdict(Fraction)  # GPU-hours
    for node in nodes.values():
        capacity[node.pool] += Fraction(node.gpu_count * node.hours)
        for pod in on_node[node.node]:
            pool_pods[node.pool].append((node, pod))
    for fee in fees:
        _check_fee(fee, quantum)
        if not fee.amount:
            continue
        members: list[tuple[NodeHour | None, PodHour | None]] = [(n, p) for n, p in pool_pods[fee.pool] if p.gpu_hours > 0]
        guest = [_guest(p, fee) for _, p in members]
        weights = [Fraction(p.gpu_hours) for _, p in members]
        guests_use = sum((w for w, g in zip(weights, guest, strict=True) if g), Fraction(0))
        rest = capacity[fee.pool] - guests_use
        if guests_use and rest > 0 and fee.pool not in guest_fees_by_use:
            own_use = sum(weights) - guests_use
            if own_use:
                weights = [w if g else w * rest / own_use for w, g in zip(weights, guest, strict=True)]
            else:
                members.append((None, None))
                weights.append(rest)
        if members:
            yield fee, members, split_money(fee.amount, weights, quantum, hour_seed(fee.hour))
        else:
            yield fee, [(None, None)], [fee.amount]


# --------------------------------------------------------------------------- aggregation


# The columns every report ends with, after the label keys: a label key of one of these names
# would be a second column of that name, whose value the row's own overwrote.
FIXED_COLUMNS = ("kind", "status", "amount", "currency")


def group_columns(
    by_labels: Sequence[str] = DEFAULT_GROUP_LABELS, include_namespace: bool = True
) -> tuple[str, ...]:
    """CSV header matching :meth:`GroupTotal.as_dict`: the same columns whatever the rows hold
    (C4, issue 21 §4): the charged team first, then the label keys, namespace, billing kind,
    the kind of cost, metered or accruing, amount and currency."""
    cols = [CHARGED_TEAM, *by_labels]
    if include_namespace:
        cols.append("namespace")
    if "billing" not in by_labels:
        cols.append("billing")
    return (*cols, *FIXED_COLUMNS)


def group_key(
    *, charged_team: str, labels: Mapping[str, object], namespace: str, billing_kind: str, cost_kind: str,
    by_labels: Sequence[str], include_namespace: bool = True,
) -> tuple[tuple[tuple[str, str], ...], str]:
    """The chargeback group of one row and its kind: the one rule shared by :func:`group_rows`,
    the database grouping and the accruing hours, so all three give the same columns.

    - ``charged_team`` is who pays: a workload's own team (also on a pool lent to it), the
      pool's owner for idle capacity and the fees no workload paid.
    - A label missing from a workload leaves its cell empty and makes the row ``unallocated``;
      idle rows keep the pool's and node's label values (``gpu-class``), their namespace is
      empty. A ``billing`` label, if asked for, defaults to the billing kind.
    """
    missing = False
    key: list[tuple[str, str]] = [(CHARGED_TEAM, charged_team)]
    for name in by_labels:
        value = labels.get(name) or (billing_kind if name == "billing" else "")
        missing = missing or not value
        key.append((name, str(value)))
    idle = cost_kind == IDLE
    if include_namespace:
        key.append(("namespace", "" if idle else namespace))
    if "billing" not in by_labels:
        key.append(("billing", billing_kind))
    return tuple(key), IDLE if idle else UNALLOCATED if missing else ALLOCATED


def check_group_labels(by_labels: Sequence[str]) -> None:
    """Label keys must be distinct, non-empty and not a fixed column's name."""
    labels = list(by_labels)
    if len(set(labels)) != len(labels) or any(not k for k in labels):
        raise ValueError("by_labels must be distinct, non-empty label keys")
    if CHARGED_TEAM in labels or set(labels) & set(FIXED_COLUMNS):
        raise ValueError(f"{', '.join(k for k in labels if k in (CHARGED_TEAM, *FIXED_COLUMNS))} is always a column; it is not a label key")


def group_rows(
    rows: Iterable[AllocationRow],
    by_labels: Sequence[str] = DEFAULT_GROUP_LABELS,
    include_namespace: bool = True,
) -> list[GroupTotal]:
    """Total allocation rows per :func:`group_key` (charged team = the row's ``team``).

    Totals are exact Decimal sums, so the grand total equals the input total.
    """
    check_group_labels(by_labels)
    totals: dict[tuple, Decimal] = defaultdict(Decimal)
    for row in rows:
        key, kind = group_key(
            charged_team=row.team, labels=row.labels, namespace=row.namespace,
            billing_kind=row.billing_kind, cost_kind=row.cost_kind, by_labels=by_labels,
            include_namespace=include_namespace,
        )  # fmt: skip
        totals[(key, kind, row.currency)] += row.amount
    return [
        GroupTotal(key=key, kind=kind, amount=amount, currency=cur)
        for (key, kind, cur), amount in sorted(totals.items(), key=lambda kv: kv[0])
    ]


def total(rows: Iterable[AllocationRow | GroupTotal]) -> Decimal:
    """Exact sum of amounts (single currency assumed by the caller)."""
    return sum((r.amount for r in rows), Decimal(0))


# --------------------------------------------------------------------------- rows and checks


def node_row(
    node: NodeHour,
    pod: PodHour | None,
    kind: str,
    component: str,
    amount: Decimal,
    cur: str,
    quantity: Decimal = Decimal(0),
) -> AllocationRow:
    """A row on a node: the pod's (usage or fee) when ``pod`` is given, else the node's idle.
    Its labels are the input's mapping itself (rows are read, never changed)."""
    if pod is None:
        team, namespace, name, labels, pods = node.team, "", "", node.labels, 0
    else:
        team, namespace, name, pods = pod_team(pod), pod.namespace, pod.name, pod.pods
        labels = pod.labels
    return AllocationRow(
        node.hour, node.pool, team, namespace, name, node.node, labels, node.gpu_class,
        node.billing_kind, kind, component, amount, cur, quantity, pods,
    )  # fmt: skip


def pod_team(pod: PodHour) -> str:
    """Who is charged for a pod: its own team, else its `team` label."""
    return pod.team or pod.labels.get("team", "")


def _guest(pod: PodHour, fee: FeeHour) -> bool:
    """Whether `pod` is not the pool owner's (one of no known team is, as metering has it)."""
    return bool(fee.team and pod_team(pod) not in ("", fee.team))


def fee_idle_row(fee: FeeHour, nodes: Iterable[NodeHour], cur: str, amount: Decimal) -> AllocationRow:
    """A fee's `amount` no pod paid: the owner absorbs it, under the pool's own billing kind."""
    pool_nodes = [n for n in nodes if n.pool == fee.pool]
    kinds = {n.billing_kind for n in pool_nodes}
    classes = {n.gpu_class for n in pool_nodes}
    billing = fee.billing_kind or next(
        (k for k in (PREEMPTIBLE, MONTHLY, ON_DEMAND) if k in kinds), MONTHLY
    )
    gpu_class = classes.pop() if len(classes) == 1 else ""
    return AllocationRow(
        fee.hour, fee.pool, fee.team, "", "", "", fee.labels, gpu_class, billing, IDLE,
        fee.kind, amount, cur,
    )  # fmt: skip


def _check_node(node: NodeHour, quantum: Decimal) -> None:
    if node.billing_kind not in BILLING_KINDS:
        raise ValueError(f"node {node.node}: unknown billing kind {node.billing_kind!r}")
    if node.gpu_count < 0 or not 0 <= node.hours <= 1:
        raise ValueError(f"node {node.node}: negative GPU count or node-hours not within 0..1")
    _check_amount(node.cost, quantum, f"node {node.node} cost")


def _check_fee(fee: FeeHour, quantum: Decimal) -> None:
    if fee.kind not in FEE_KINDS:
        raise ValueError(f"fee of pool {fee.pool}: unknown kind {fee.kind!r}")
    _check_amount(fee.amount, quantum, f"{fee.kind} fee of pool {fee.pool}")


def _check_amount(amount: Decimal, quantum: Decimal, what: str) -> None:
    if amount < 0:
        raise ValueError(f"{what} is negative")
    if units_exact(amount, quantum)[1]:
        raise ValueError(f"{what} {amount} is not a multiple of {quantum}; quantize it first")
