"""Allocation: every cent of node cost and fees lands on a pod or on the pool owner's idle."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.allocation import (
    CENT,
    FeeHour,
    NodeHour,
    PodHour,
    allocate,
    effective_labels,
    gpu_hours,
    group_columns,
    group_rows,
    iter_allocate,
    split_money,
    total,
)
from billing.lease_costs import (
    add_months,
    lease_hours,
    lease_months,
    lease_payment,
    monthly_hour_cost,
    monthly_hourly_rate,
    on_demand_hour_cost,
    preemptible_hour_cost,
)

H0 = datetime(2025, 1, 1, tzinfo=UTC)
POOL_LABELS = {"team": "ml", "project": "llm", "gpu-class": "a100"}


def node(name="n1", pool="train", cost="26.88", gpus=8, kind="monthly", hour=H0, **kw):
    return NodeHour(hour, name, pool, "ml", kind, gpus, D(cost), "A100_80G", **kw)


def pod(name, gpus=D(1), node_name="n1", ns="research", labels=None, hour=H0):
    return PodHour(hour, ns, name, node_name, D(gpus), labels if labels is not None else {})


# --------------------------------------------------------------------------- labels, quantities


def test_pod_label_wins_over_node_and_pool_labels():
    labels = effective_labels(
        {"team": "ml", "project": "a", "gpu-class": "a100"},
        {"project": "b", "zone": "z1"},
        {"project": "c"},
    )
    assert labels == {"team": "ml", "project": "c", "gpu-class": "a100", "zone": "z1"}


def test_effective_labels_accepts_missing_levels():
    assert effective_labels(None, {}, {"a": "1"}) == {"a": "1"}


def test_whole_gpus_count_one_each_and_a_shared_gpu_counts_its_milli():
    assert gpu_hours(gpus=2) == D(2)
    assert gpu_hours(gpu_milli=250) == D("0.25")
    assert gpu_hours(gpus=1, gpu_milli=500, hours=2) == D(3)
    with pytest.raises(ValueError):
        gpu_hours(gpu_milli=1001)


# --------------------------------------------------------------------------- prices


def test_a_monthly_node_amortises_its_lease_exactly_over_the_lease_hours():
    start, end = H0, add_months(H0, 1)
    assert lease_hours(start, end) == 744
    assert lease_payment(D(20000), start, end) == D("20000.00")
    rate = monthly_hourly_rate(D(20000), start, end)
    hours = [
        monthly_hour_cost(D(20000), start, end, start + timedelta(hours=i)) for i in range(744)
    ]
    assert sum(hours) == D("20000.00")
    assert all(abs(h - rate) < CENT for h in hours)


def test_a_three_month_lease_prices_three_months():
    start, end = H0, add_months(H0, 3)
    assert lease_months(start, end) == 3
    assert lease_payment(D(20000), start, end) == D("60000.00")


def test_a_part_month_is_priced_pro_rata():
    end = datetime(2025, 2, 11, tzinfo=UTC)  # 1 month + 10 of February's 28 days
    assert lease_payment(D(28000), H0, end) == D("38000.00")


def test_month_arithmetic_clamps_the_day():
    assert add_months(datetime(2024, 1, 31), 1) == datetime(2024, 2, 29)
    assert add_months(datetime(2024, 11, 30), 3) == datetime(2025, 2, 28)


def test_an_hour_outside_the_lease_is_rejected():
    with pytest.raises(ValueError):
        monthly_hour_cost(D(20000), H0, add_months(H0, 1), H0 - timedelta(hours=1))


def test_on_demand_and_preemptible_hours():
    assert on_demand_hour_cost(D(100)) == D("100.00")
    assert on_demand_hour_cost(D(100), hours=D("0.5")) == D("50.00")
    assert preemptible_hour_cost(D(100), D("0.7")) == D("30.00")
    with pytest.raises(ValueError):
        preemptible_hour_cost(D(100), D("1.5"))


def test_largest_remainder_split_is_exact_and_deterministic():
    assert split_money(D("1.00"), [1, 1, 1]) == [D("0.34"), D("0.33"), D("0.33")]
    assert split_money(D("0.05"), [0, 1, 0]) == [D(0), D("0.05"), D(0)]


# --------------------------------------------------------------------------- allocation


def test_a_pod_pays_its_gpu_hours_times_the_per_gpu_rate_and_the_rest_is_idle():
    rows = allocate([node(labels=POOL_LABELS)], [pod("a", 3), pod("b", D("0.5"), ns="infer")])
    by = {(r.cost_kind, r.pod): r for r in rows}
    assert by[("usage", "a")].amount == D("10.08")  # 26.88 / 8 GPUs × 3
    assert by[("usage", "b")].amount == D("1.68")
    idle = by[("idle", "")]
    assert idle.amount == D("15.12") and idle.team == "ml" and idle.gpu_hours == D("4.5")


def test_a_pool_idle_all_month_still_bills_its_owner():
    nodes = [node(hour=H0 + timedelta(hours=i)) for i in range(24)]
    rows = allocate(nodes, [])
    assert {r.cost_kind for r in rows} == {"idle"}
    assert {r.team for r in rows} == {"ml"}
    assert total(rows) == D("26.88") * 24


def test_shared_fees_follow_usage_and_fall_to_the_owner_when_nobody_ran():
    fees = [
        FeeHour(H0, "train", "ml", "storage", D("1.00")),
        FeeHour(H0, "empty", "ops", "network", D("0.30")),
    ]
    rows = allocate([node()], [pod("a", 3), pod("b", 1)], fees)
    fee_rows = {r.pod: r.amount for r in rows if r.cost_kind == "fee"}
    assert fee_rows == {"a": D("0.75"), "b": D("0.25")}
    orphan = [r for r in rows if r.pool == "empty"]
    assert len(orphan) == 1 and orphan[0].cost_kind == "idle" and orphan[0].team == "ops"
    assert orphan[0].component == "network" and orphan[0].amount == D("0.30")


def test_a_team_the_pool_is_lent_to_pays_its_share_of_the_pools_gpus_of_a_fee_whoever_else_ran():
    """A guest alone in a lent pool for an hour, on 2 of its 8 GPUs, took all of the hour's
    registry and storage fees; it pays a quarter of them, as of the node, and the owner the
    rest, whether the owner's own pods ran or the pool stood idle."""
    guest = PodHour(H0, "inference", "serve", "n1", D(2), {}, team="inference")
    fees = [FeeHour(H0, "train", "ml", "storage", D("1.00")), FeeHour(H0, "train", "ml", "registry", D("0.40"))]
    alone = {(r.team, r.cost_kind, r.component): r.amount for r in allocate([node(labels=POOL_LABELS)], [guest], fees)}
    assert alone == {
        ("inference", "usage", "gpu"): D("6.72"), ("ml", "idle", "gpu"): D("20.16"),
        ("inference", "fee", "storage"): D("0.25"), ("ml", "idle", "storage"): D("0.75"),
        ("inference", "fee", "registry"): D("0.10"), ("ml", "idle", "registry"): D("0.30"),
    }
    own = pod("train", 1, labels=POOL_LABELS)
    shared = sorted((r.team, r.component, r.amount) for r in allocate([node()], [guest, own], fees) if r.cost_kind == "fee")
    assert shared == [("inference", "registry", D("0.10")), ("inference", "storage", D("0.25")),
                      ("ml", "registry", D("0.30")), ("ml", "storage", D("0.75"))]
    # Guests that fill the pool pay by their use, all of it: nobody else had room.
    full = [PodHour(H0, "inference", f"s{i}", "n1", D(4), {}, team="inference") for i in range(2)]
    assert {r.pod: r.amount for r in allocate([node()], full, fees[:1]) if r.cost_kind == "fee"} == {"s0": D("0.50"), "s1": D("0.50")}


def test_oversubscribed_nodes_split_by_request_and_never_go_negative():
    rows = allocate([node(cost="10.00", gpus=1)], [pod("a", 1), pod("b", 1)])
    assert [r.amount for r in rows] == [D("5.00"), D("5.00")]


def test_amounts_that_are_not_whole_cents_are_rejected():
    with pytest.raises(ValueError, match="multiple"):
        allocate([node(cost="1.005")], [])


def test_a_pod_on_an_unknown_node_is_an_error():
    with pytest.raises(ValueError, match="unknown node"):
        allocate([node()], [pod("a", node_name="ghost")])


def test_a_coarser_quantum_is_honoured():
    rows = allocate([node(cost="10")], [pod("a", 3)], quantum=D(1))
    assert [r.amount for r in rows] == [D(4), D(6)]


def test_streaming_allocation_matches_batch_allocation():
    nodes = [node(hour=H0 + timedelta(hours=i)) for i in range(3)]
    pods = [pod("a", 2, hour=H0 + timedelta(hours=i)) for i in range(3)]
    batches = [([n], [p], []) for n, p in zip(nodes, pods, strict=True)]
    assert list(iter_allocate(batches)) == allocate(nodes, pods)


# --------------------------------------------------------------------------- grouping


def test_grouping_keeps_label_keys_verbatim_and_gives_idle_and_unlabelled_a_kind_not_a_label():
    """C4, issue 21 §4: the columns are the same whatever the rows; no marker in a label cell."""
    labelled = {"team": "ml", "project": "llm", "gpu-class": "a100"}
    rows = allocate(
        [node(labels=POOL_LABELS)],
        [pod("a", 4, labels=labelled), pod("b", 2, ns="scratch")],
    )
    groups = [g.as_dict() for g in group_rows(rows, ["team", "project", "gpu-class"])]
    assert all("gpu-class" in g and "gpu_class" not in g for g in groups)
    assert all(list(g) == list(group_columns()) for g in groups)
    assert not [v for g in groups for v in g.values() if v.startswith("__")]
    by_ns = {g["namespace"]: g for g in groups}
    assert by_ns["research"]["amount"] == "13.44" and by_ns["research"]["kind"] == "allocated"
    assert by_ns["scratch"]["team"] == "" and by_ns["scratch"]["kind"] == "unallocated"
    idle = by_ns[""]
    assert idle["kind"] == "idle" and idle["charged_team"] == "ml" and idle["project"] == "llm"
    assert {g["status"] for g in groups} == {"metered"}


def test_the_charged_team_is_the_pods_own_team_whatever_its_labels():
    """A pod of a team the pool is lent to is charged to its team (issue 21 §4)."""
    guest = PodHour(H0, "inference", "serve", "n1", D(2), {"team": "ml", "project": "llm"}, team="inference")
    rows = allocate([node(labels=POOL_LABELS)], [guest])
    groups = {g.as_dict()["charged_team"]: g.as_dict() for g in group_rows(rows, ["project"])}
    assert groups["inference"]["kind"] == "allocated" and groups["inference"]["amount"] == "6.72"
    assert groups["ml"]["kind"] == "idle" and groups["ml"]["amount"] == "20.16"


def test_the_kind_is_its_own_column_for_any_grouping_keys():
    rows = allocate([node(labels=POOL_LABELS)], [pod("a", 4, labels={"team": "ml", "gpu-class": "a100"})])
    for by in (["team"], ["project"], ["gpu-class", "team"], []):
        groups = [g.as_dict() for g in group_rows(rows, by)]
        assert {g["kind"] for g in groups} <= {"allocated", "unallocated", "idle"}
        assert all(list(g) == list(group_columns(by)) for g in groups)
        kinds = {g["kind"] for g in groups}
        assert "idle" in kinds and ("unallocated" in kinds) == ("project" in by)


def test_preemptible_pools_carry_their_own_billing_column():
    rows = allocate(
        [node(labels=POOL_LABELS), node("p1", pool="spot", kind="preemptible", cost="8.00")],
        [pod("a", 8, labels=POOL_LABELS), pod("b", 8, node_name="p1", labels=POOL_LABELS)],
    )
    groups = group_rows(rows, ["team"], include_namespace=False)
    assert {g.as_dict()["billing"]: g.amount for g in groups} == {
        "monthly": D("26.88"),
        "preemptible": D("8.00"),
    }


def test_idle_rows_stay_apart_even_without_namespaces():
    rows = allocate([node(labels=POOL_LABELS)], [pod("a", 4, labels=POOL_LABELS)])
    groups = group_rows(rows, ["team"], include_namespace=False)
    assert sorted((g.idle, g.amount) for g in groups) == [(False, D("13.44")), (True, D("13.44"))]


def test_grouping_rejects_duplicate_labels_and_the_charged_team_column_as_a_label():
    with pytest.raises(ValueError):
        group_rows([], ["team", "team"])
    with pytest.raises(ValueError):
        group_rows([], ["charged_team"])


# --------------------------------------------------------------------------- properties

POOLS = ["train", "infer", "spot"]
QUANTA = [D("0.01"), D("1"), D("0.0001")]


@st.composite
def hour_inputs(draw):
    quantum = draw(st.sampled_from(QUANTA))
    hours = [H0 + timedelta(hours=i) for i in range(draw(st.integers(1, 2)))]
    nodes, pods, fees = [], [], []
    for hour in hours:
        count = draw(st.integers(0, 4))
        for i in range(count):
            nodes.append(
                NodeHour(
                    hour,
                    f"n{i}",
                    draw(st.sampled_from(POOLS)),
                    draw(st.sampled_from(["ml", "ops"])),
                    draw(st.sampled_from(["monthly", "on_demand", "preemptible"])),
                    draw(st.integers(0, 8)),
                    draw(st.integers(0, 10**7)) * quantum,
                    labels=draw(st.sampled_from([{}, POOL_LABELS])),
                )
            )
            for j in range(draw(st.integers(0, 4))):
                whole = draw(st.integers(0, 4))
                milli = draw(st.sampled_from([0, 1, 250, 333, 999]))
                pods.append(
                    PodHour(
                        hour,
                        draw(st.sampled_from(["a", "b"])),
                        f"p{i}-{j}",
                        f"n{i}",
                        gpu_hours(whole, milli),
                        draw(st.sampled_from([{}, {"team": "ml"}, {"project": "x"}])),
                        team=draw(st.sampled_from(["", "ml", "inference"])),  # "inference": a guest
                    )
                )
        for pool in draw(st.lists(st.sampled_from(POOLS), max_size=3)):
            kind = draw(st.sampled_from(["storage", "network", "registry"]))
            fees.append(FeeHour(hour, pool, "ml", kind, draw(st.integers(0, 10**5)) * quantum))
    return quantum, nodes, pods, fees


@settings(max_examples=300, deadline=None)
@given(hour_inputs())
def test_allocations_plus_idle_equal_node_costs_plus_fees_exactly(inputs):
    quantum, nodes, pods, fees = inputs
    rows = allocate(nodes, pods, fees, quantum=quantum)
    expected = sum((n.cost for n in nodes), D(0)) + sum((f.amount for f in fees), D(0))
    assert total(rows) == expected
    assert all(r.amount > 0 for r in rows)
    assert all((r.amount / quantum) == (r.amount / quantum).to_integral_value() for r in rows)
    for by_labels in (["team", "project", "gpu-class"], ["gpu-class"], ["billing"]):
        for include_namespace in (True, False):
            assert total(group_rows(rows, by_labels, include_namespace)) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.lists(st.integers(0, 50), min_size=1, max_size=20))
def test_split_money_sums_exactly_and_stays_within_one_quantum_of_the_ideal(units, weights):
    if sum(weights) == 0:
        weights[0] = 1
    amount = units * CENT
    parts = split_money(amount, weights)
    assert sum(parts) == amount
    for part, w in zip(parts, weights, strict=True):
        assert abs(part - amount * w / sum(weights)) < CENT
