"""One hour's allocation summed per group, without a row per node: what metering stores.

`allocation.allocate_hour` gives a row per node and workload (the FOCUS export lists them);
metering keeps only their sums per chargeback group (`billing.costing`). Nodes of one pool that
cost the same and run the same workloads split alike, row for row but for the node's and pod's
names, and a fleet has few such shapes: an hour of a 1,000-pool fleet has 20,000 nodes and about
as many shapes as pools (issue 23). So each shape is split once, by `allocate_hour` itself, and
its rows counted as often as it occurs; fees are summed as `allocation.fee_splits` splits them.

The totals are exactly the sums of `allocate_hour`'s rows per `row_group`, in the order of each
group's first row, each with that first row (property-tested against `allocate_hour`).

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from billing.allocation import (
    CENT,
    DEFAULT_CURRENCY,
    FEE,
    AllocationRow,
    FeeHour,
    NodeHour,
    PodHour,
    allocate_hour,
    fee_idle_row,
    fee_splits,
    node_row,
    nodes_checked,
    pod_team,
)


@dataclass
class RowTotal:
    """The rows of one group: the first of them, their amounts and GPU-hours summed."""

    first: AllocationRow
    amount: Decimal
    gpu_hours: Decimal


def row_group(row: AllocationRow) -> tuple:
    """What a total sums over: pool, charged team, namespace, the label mapping (by identity:
    inputs share one mapping per label set, and a caller merges equal ones it wants merged),
    GPU class, billing kind, kind of cost and component."""
    return _group(row.pool, row.team, row.namespace, row.labels, row.gpu_class, row.billing_kind, row.cost_kind, row.component)


def _group(pool, team, namespace, labels, gpu_class, billing_kind, cost_kind, component) -> tuple:
    """`row_group` from a row's columns, for a row not built yet."""
    return (pool, team, namespace, id(labels), gpu_class, billing_kind, cost_kind, component)


def allocate_hour_totals(
    node_hours: Sequence[NodeHour],
    pod_hours: Sequence[PodHour],
    fees: Sequence[FeeHour] = (),
    *,
    quantum: Decimal = CENT,
    currency: str = DEFAULT_CURRENCY,
) -> list[RowTotal]:
    """`allocate_hour(node_hours, pod_hours, fees)`'s rows summed per `row_group`."""
    nodes, on_node = nodes_checked(node_hours, pod_hours, quantum)
    # What a node's rows depend on but its name and its pods' names (see `allocate_hour`).
    shapes: dict[tuple, list[NodeHour]] = {}
    for node in nodes.values():
        workloads = tuple((p.team, p.namespace, id(p.labels), p.gpu_hours) for p in on_node[node.node])
        shape = (node.hour, node.pool, node.team, id(node.labels), node.gpu_class, node.billing_kind, node.cost, node.gpu_count, node.hours, workloads)
        shapes.setdefault(shape, []).append(node)

    totals: dict[tuple, RowTotal] = {}

    def add(row: AllocationRow, amount: Decimal, gpu_hours: Decimal) -> None:
        group = row_group(row)
        total = totals.get(group)
        if total is None:
            totals[group] = RowTotal(row, amount, gpu_hours)
        else:
            total.amount += amount
            total.gpu_hours += gpu_hours

    # Shapes in the order of their first node, that node's rows first: each group's first row
    # is the one `allocate_hour` would give first.
    for alike in shapes.values():
        first, times = alike[0], len(alike)
        for row in allocate_hour([first], on_node[first.node], (), quantum=quantum, currency=currency):
            add(row, row.amount * times, row.gpu_hours * times)
    for fee, members, amounts in fee_splits(nodes, on_node, fees, quantum):
        for (node, pod), amount in zip(members, amounts, strict=True):
            if not amount:
                continue
            if pod is None:  # what no pod paid: the owner absorbs it
                add(fee_idle_row(fee, nodes.values(), currency, amount), amount, Decimal(0))
                continue
            # `row_group` of the row `allocate_hour` gives; the row is built for a new group only.
            group = _group(node.pool, pod_team(pod), pod.namespace, pod.labels, node.gpu_class, node.billing_kind, FEE, fee.kind)
            total = totals.get(group)
            if total is None:
                totals[group] = RowTotal(node_row(node, pod, FEE, fee.kind, amount, currency), amount, Decimal(0))
            else:
                total.amount += amount
    return list(totals.values())
