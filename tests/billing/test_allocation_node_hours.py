"""A node billed for part of an hour has capacity for that part only: its GPUs × its node-hours.

An on-demand node alive from :30, or until :15, and fully used while alive is not idle: its
cost goes to the workloads that used it, to the cent, and the owner pays no idle for it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.allocation import NodeHour, PodHour, allocate_hour, gpu_hours, total
from billing.models import CostRecord, UsageRecord
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool

H0 = datetime(2025, 1, 1, tzinfo=UTC)


def node_hour(cost: str, hours: str, gpus: int = 8) -> NodeHour:
    return NodeHour(H0, "od-0", "burst", "ml", "on_demand", gpus, D(cost), "A100", hours=D(hours))


def pod_hour(name: str, used: D) -> PodHour:
    return PodHour(H0, "infer", name, "od-0", used, {}, team="inference")


def test_a_node_alive_half_the_hour_and_fully_used_has_no_idle():
    rows = allocate_hour([node_hour("50.00", "0.5")], [pod_hour("job", gpu_hours(8, hours=D("0.5")))])
    assert [(r.cost_kind, r.team, r.amount) for r in rows] == [("usage", "inference", D("50.00"))]


def test_a_node_alive_half_the_hour_and_half_used_leaves_the_other_half_idle():
    rows = allocate_hour([node_hour("50.00", "0.5")], [pod_hour("job", gpu_hours(4, hours=D("0.5")))])
    by = {r.cost_kind: r for r in rows}
    assert by["usage"].amount == D("25.00") and by["idle"].amount == D("25.00")
    assert by["idle"].gpu_hours == D("2.0")  # 8 GPUs × 0.5 h − 2 GPU-hours used


def test_node_hours_outside_the_hour_are_rejected():
    with pytest.raises(ValueError):
        allocate_hour([node_hour("50.00", "1.5")], [])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(1, 8),
    st.integers(1, 3600),
    st.lists(st.integers(0, 3600), max_size=5),
)
def test_part_hours_still_add_up_to_the_node_cost_and_idle_is_never_negative(cents, gpus, alive_s, ran_s):
    hours = D(alive_s) / 3600
    pods = [pod_hour(f"p{i}", gpu_hours(1, hours=D(min(s, alive_s)) / 3600)) for i, s in enumerate(ran_s)]
    node = NodeHour(H0, "od-0", "burst", "ml", "on_demand", gpus, cents * D("0.01"), hours=hours)
    rows = allocate_hour([node], pods)
    assert total(rows) == node.cost
    idle = [r for r in rows if r.cost_kind == "idle"]
    assert all(r.gpu_hours >= 0 for r in idle)
    if sum(p.gpu_hours for p in pods) >= gpus * hours and pods:
        assert not idle  # used to capacity while it was alive: nothing idle


# --------------------------------------------------------------------------- metered


def gpu_costs() -> dict[tuple[str, str], D]:
    out: dict[tuple[str, str], D] = {}
    for r in CostRecord.objects.filter(hour=T0, component="gpu").select_related("team"):
        out[(r.team.slug, r.cost_kind)] = out.get((r.team.slug, r.cost_kind), D(0)) + r.amount
    return out


@pytest.mark.django_db
def test_a_node_created_mid_hour_and_fully_used_since_charges_its_guest_all_of_it(actors, teams):
    host = pool(actors["lead"], sharedWith=["inference"])
    od = node(host, "od-0", billing="on_demand", created=T0 + timedelta(minutes=30))
    pod(teams["inference"], od, "job", namespace="inference", gpus=8, started=T0 + timedelta(minutes=30))
    meter()
    record = UsageRecord.objects.get(kind="node")
    assert (record.quantity, record.amount) == (D("0.5"), D("50.00"))
    assert gpu_costs() == {("inference", "usage"): D("50.00")}  # was 25.00 + the owner's idle 25.00


@pytest.mark.django_db
def test_a_node_terminated_mid_hour_and_fully_used_until_then_has_no_idle(actors, teams):
    p = pool(actors["lead"])
    od = node(p, "od-0", billing="on_demand", created=T0 - HOUR, terminated=T0 + timedelta(minutes=15))
    end = T0 + timedelta(minutes=15)
    pod(teams["algorithm"], od, "job", gpus=8, started=T0 - HOUR, finished=end, phase="Succeeded")
    meter()
    assert UsageRecord.objects.get(kind="node").amount == D("25.00")
    assert gpu_costs() == {("algorithm", "usage"): D("25.00")}  # was usage 6.25 + idle 18.75


@pytest.mark.django_db
def test_alike_nodes_billed_in_one_record_each_have_their_own_part_hour(actors, teams):
    host = pool(actors["lead"], sharedWith=["inference"])
    half = T0 + timedelta(minutes=30)
    for name in ("od-0", "od-1"):
        od = node(host, name, billing="on_demand", created=half)
        pod(teams["inference"], od, f"job-{name}", namespace="inference", gpus=8, started=half)
    meter()
    record = UsageRecord.objects.get(kind="node")
    assert record.nodes_billed == ["od-0", "od-1"] and record.quantity == D("1.0")
    assert gpu_costs() == {("inference", "usage"): D("100.00")}
