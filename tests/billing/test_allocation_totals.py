"""`allocate_hour_totals` is `allocate_hour`'s rows summed per group, exactly and in the same
order (issue 23 item 3: metering splits each shape of node once, C4: not a cent moves)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.allocation import FeeHour, NodeHour, PodHour, allocate_hour, gpu_hours
from billing.allocation_totals import allocate_hour_totals, row_group

H0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
# Label mappings shared by identity, as metering's inputs share them; the last two are equal
# but distinct objects, which group apart (the caller merges them).
LABELS = [{}, {"team": "ml"}, {"project": "x", "team": "ml"}, {"project": "y"}, {"project": "y"}]


def summed(rows) -> dict:
    """The reference: `allocate_hour`'s rows summed per group, each with its first row."""
    out: dict = {}
    for row in rows:
        first, amount, hours = out.get(row_group(row), (row, D(0), D(0)))
        out[row_group(row)] = (first, amount + row.amount, hours + row.gpu_hours)
    return out


@st.composite
def fleet_hours(draw):
    """Nodes drawn from a few shapes (pool, owner, billing kind, GPUs, cost, labels, workloads),
    each shape repeated, with some nodes off their shape's cost; fees on some pools."""
    quantum = draw(st.sampled_from([D("0.01"), D("1")]))
    nodes, pods = [], []
    for s in range(draw(st.integers(1, 4))):
        pool, team = draw(st.sampled_from([("train", "ml"), ("infer", "ops")]))
        kind = draw(st.sampled_from(["monthly", "on_demand", "preemptible"]))
        gpus, cost = draw(st.integers(0, 8)), draw(st.integers(0, 10**6)) * quantum
        labels = draw(st.sampled_from(LABELS))
        workloads = [
            (draw(st.sampled_from(["a", "b"])), draw(st.sampled_from(["ml", "ops"])), gpu_hours(draw(st.integers(0, 4)), draw(st.sampled_from([0, 250, 333]))), draw(st.sampled_from(LABELS)))
            for _ in range(draw(st.integers(0, 3)))
        ]
        for i in range(draw(st.integers(1, 5))):
            name = f"s{s}-n{i}"
            own_cost = cost if draw(st.booleans()) or i == 0 else draw(st.integers(0, 10**6)) * quantum
            nodes.append(NodeHour(H0, name, pool, team, kind, gpus, own_cost, labels=labels))
            for j, (namespace, pod_team, hours, pod_labels) in enumerate(workloads):
                pods.append(PodHour(H0, namespace, f"{name}-w{j}", name, hours, pod_labels, pods=j + 1, team=pod_team))
    fees = [
        FeeHour(H0, pool, "ml", kind, draw(st.integers(0, 10**5)) * quantum)
        for pool, kind in draw(st.lists(st.tuples(st.sampled_from(["train", "infer", "empty"]), st.sampled_from(["storage", "network", "registry"])), max_size=4, unique=True))
    ]
    order = draw(st.permutations(range(len(nodes))))  # shapes interleaved, not in blocks
    return quantum, [nodes[i] for i in order], pods, fees


@settings(max_examples=300, deadline=None)
@given(fleet_hours())
def test_totals_are_the_rows_summed_per_group_in_first_row_order(inputs):
    quantum, nodes, pods, fees = inputs
    expected = summed(allocate_hour(nodes, pods, fees, quantum=quantum))
    totals = allocate_hour_totals(nodes, pods, fees, quantum=quantum)
    assert [row_group(t.first) for t in totals] == list(expected)
    assert [(t.first, t.amount, t.gpu_hours) for t in totals] == list(expected.values())


def test_nodes_alike_are_split_once_and_counted():
    """Twenty nodes of one shape: one split, twenty times its cents, the first node's rows."""
    nodes = [NodeHour(H0, f"n{i:02}", "train", "ml", "monthly", 8, D("26.88"), labels=LABELS[1]) for i in range(20)]
    pods = [PodHour(H0, "a", f"p{i:02}", f"n{i:02}", D(3), LABELS[2], team="ml") for i in range(20)]
    totals = allocate_hour_totals(nodes, pods)
    assert [(t.first.cost_kind, t.first.node, t.amount, t.gpu_hours) for t in totals] == [
        ("usage", "n00", 20 * D("10.08"), D(60)),
        ("idle", "n00", 20 * D("16.80"), D(100)),
    ]


def test_the_inputs_are_checked_as_allocate_hour_checks_them():
    node = NodeHour(H0, "n1", "train", "ml", "monthly", 8, D("1.00"))
    for bad_nodes, bad_pods in (([node, node], []), ([node], [PodHour(H0, "a", "p", "n9", D(1))])):
        for allocate in (allocate_hour, allocate_hour_totals):
            try:
                allocate(bad_nodes, bad_pods)
            except ValueError:
                continue
            raise AssertionError(f"{allocate.__name__} accepted {bad_nodes}, {bad_pods}")
