"""Pure lifecycle decisions (design §1): backoff, drain order, leases (D2), heartbeats (D1),
pendingReason with numbers (T1)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from pools.core import leases, pool_phase, stall_messages
from pools.core import lifecycle as rules

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_backoff_doubles_from_thirty_seconds_and_is_capped_at_ten_minutes():
    assert [rules.backoff(n).total_seconds() for n in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]


@given(st.integers(min_value=1, max_value=10_000))
def test_backoff_never_shrinks_and_stays_within_bounds(attempt):
    assert timedelta(seconds=30) <= rules.backoff(attempt) <= rules.backoff(attempt + 1) <= timedelta(minutes=10)


def test_steps_walk_the_articles_order_and_a_prewarmed_image_skips_the_driver():
    """G1: initialise OS -> install driver -> install kubelet -> register."""
    assert rules.steps_for(prewarmed=False) == ("boot", "image_pull", "driver_install", "kubelet_install", "kubelet_join")
    assert rules.next_step("image_pull", prewarmed=True) == "kubelet_install"
    assert rules.next_step("kubelet_join", prewarmed=False) is None


def test_surplus_takes_burst_nodes_first_then_expired_then_nearest_lease_end():
    nodes = [
        rules.NodeView("m-late", "monthly", "Ready", NOW + timedelta(days=20)),
        rules.NodeView("m-soon", "monthly", "Ready", NOW + timedelta(days=2)),
        rules.NodeView("m-expired", "monthly", "Ready", NOW - timedelta(hours=1)),
        rules.NodeView("burst-ready", "on_demand", "Ready"),
        rules.NodeView("burst-booting", "on_demand", "Provisioning"),
    ]
    order = [n.name for n in rules.drain_order(nodes, now=NOW)]
    assert order == ["m-expired", "burst-booting", "burst-ready", "m-soon", "m-late"]
    assert [n.name for n in rules.surplus(nodes, max_nodes=3, now=NOW)] == ["m-expired", "burst-booting"]
    assert rules.surplus(nodes, max_nodes=5, now=NOW) == []


def test_surplus_lets_an_unrenewed_lease_go_before_a_renewed_one():
    """Cheapest to lose first: within a group, a node with no renewal before one whose renewal
    is ordered (even if its lease ends later), then the nearest lease end; a paid renewal shows
    as its later lease end. Burst and not-Ready nodes still go first."""
    end = NOW + timedelta(days=2)
    nodes = [
        rules.NodeView("a-renewing", "monthly", "Ready", end, renewing=True),
        rules.NodeView("b-paid", "monthly", "Ready", end + timedelta(days=31)),
        rules.NodeView("c-unrenewed", "monthly", "Ready", end + timedelta(days=1)),
        rules.NodeView("d-unrenewed", "monthly", "Ready", end),
        rules.NodeView("e-booting", "monthly", "Provisioning", end, renewing=True),
        rules.NodeView("f-burst", "on_demand", "Ready"),
    ]
    order = [n.name for n in rules.drain_order(nodes, now=NOW)]
    assert order == ["f-burst", "e-booting", "d-unrenewed", "c-unrenewed", "b-paid", "a-renewing"]


def test_renewal_skips_the_surplus_and_the_surplus_skips_the_renewed():
    """Two nodes of one order (same lease end), the pool shrunk 2 -> 1 at notice time: the node
    renewed is the one kept, and after the renewal the surplus is still the other one."""
    end = NOW + timedelta(days=2)
    nodes = [rules.NodeView("node-1", "monthly", "Ready", end), rules.NodeView("node-2", "monthly", "Ready", end)]
    [leaving] = rules.surplus(nodes, max_nodes=1, now=NOW)
    chosen = rules.renewals_chosen(nodes, expiring=["node-1", "node-2"], allowed=1, max_nodes=1, now=NOW)
    assert chosen == {"node-2"} and leaving.name == "node-1"
    after = [rules.NodeView(n.name, n.billing, n.phase, n.lease_end, renewing=n.name in chosen) for n in nodes]
    assert [n.name for n in rules.surplus(after, max_nodes=1, now=NOW)] == ["node-1"]
    # Without surplus, autoRenew renews what nodeCount.min allows, the Ready node before one that is not.
    nodes.append(rules.NodeView("node-0", "monthly", "Unknown", end))
    assert rules.renewals_chosen(nodes, expiring=["node-0", "node-1"], allowed=1, max_nodes=3, now=NOW) == {"node-1"}
    assert rules.renewals_chosen(nodes, expiring=["node-0", "node-1"], allowed=0, max_nodes=3, now=NOW) == set()


_node_views = st.lists(
    st.builds(
        rules.NodeView,
        name=st.text("abc", min_size=1, max_size=3),
        billing=st.sampled_from(["monthly", "preemptible", "on_demand"]),
        phase=st.sampled_from(["Ready", "Unknown", "Provisioning"]),
        lease_end=st.one_of(st.none(), st.integers(-2, 5).map(lambda d: NOW + timedelta(days=d))),
        renewing=st.booleans(),
    ),
    max_size=8,
    unique_by=lambda n: n.name,
)


@given(_node_views, st.integers(0, 8), st.integers(0, 8), st.data())
def test_a_node_renewed_is_never_the_surplus_of_the_same_pass(nodes, max_nodes, allowed, data):
    expiring = data.draw(st.lists(st.sampled_from([n.name for n in nodes]), unique=True) if nodes else st.just([]))
    before = [n.name for n in rules.surplus(nodes, max_nodes=max_nodes, now=NOW)]
    chosen = rules.renewals_chosen(nodes, expiring=expiring, allowed=allowed, max_nodes=max_nodes, now=NOW)
    assert chosen <= set(expiring) and len(chosen) <= allowed and not chosen & set(before)
    after = [rules.NodeView(n.name, n.billing, n.phase, n.lease_end, renewing=n.renewing or n.name in chosen) for n in nodes]
    assert [n.name for n in rules.surplus(after, max_nodes=max_nodes, now=NOW)] == before


def test_eviction_takes_the_lowest_priority_first():
    pods = [rules.PodView("ns", "online", 1000), rules.PodView("ns", "batch", 0), rules.PodView("ns", "mid", 10)]
    assert [p.name for p in rules.eviction_order(pods)] == ["batch", "mid", "online"]


def test_a_lease_is_announced_once_within_the_notice_and_expires_at_its_end():
    end, notice = NOW + timedelta(days=3), timedelta(days=3)
    assert leases.lease_action(lease_end=end, now=NOW - timedelta(seconds=1), notice=notice, notified=False) == leases.NONE
    assert leases.lease_action(lease_end=end, now=NOW, notice=notice, notified=False) == leases.NOTIFY
    assert leases.lease_action(lease_end=end, now=NOW, notice=notice, notified=True) == leases.NONE
    assert leases.lease_action(lease_end=end, now=end, notice=notice, notified=True) == leases.EXPIRE
    assert leases.lease_action(lease_end=None, now=end, notice=notice, notified=False) == leases.NONE


def test_renewals_fill_up_to_the_minimum_only():
    assert leases.renewals_allowed(min_nodes=2, staying=0, renewing=0) == 2
    assert leases.renewals_allowed(min_nodes=2, staying=1, renewing=0) == 1
    assert leases.renewals_allowed(min_nodes=1, staying=2, renewing=0) == 0


def test_calendar_months_clamp_the_day():
    assert leases.add_months(datetime(2027, 1, 31, tzinfo=UTC), 1) == datetime(2027, 2, 28, tzinfo=UTC)
    assert leases.add_months(datetime(2026, 12, 1, tzinfo=UTC), 12) == datetime(2027, 12, 1, tzinfo=UTC)


def test_a_silent_node_is_unknown_only_after_the_grace_period():
    """D1: default grace 5 minutes; a node that never reported keeps its phase."""
    grace = timedelta(minutes=5)
    beat = NOW - timedelta(minutes=5)
    assert rules.heartbeat_phase(phase="Ready", last_heartbeat=beat, now=NOW, grace=grace) == "Ready"
    assert rules.heartbeat_phase(phase="Ready", last_heartbeat=beat - timedelta(seconds=1), now=NOW, grace=grace) == "Unknown"
    assert rules.heartbeat_phase(phase="Unknown", last_heartbeat=NOW, now=NOW, grace=grace) == "Ready"
    assert rules.heartbeat_phase(phase="Ready", last_heartbeat=None, now=NOW, grace=grace) == "Ready"
    assert rules.heartbeat_phase(phase="Draining", last_heartbeat=beat - grace, now=NOW, grace=grace) == "Draining"


def test_pending_reasons_carry_the_numbers():
    """T1: stock in the zone (and where else there is some); the balance against the price."""
    assert stall_messages.out_of_stock_reason(tried=["cn-east-2a"], alternatives={"cn-east-2a": 0, "cn-east-2b": 3}) == "OutOfStock in cn-east-2a, 3 in cn-east-2b"
    assert stall_messages.out_of_stock_reason(tried=["cn-east-2a"], alternatives={"cn-east-2b": 0}) == "OutOfStock in cn-east-2a, none in the region's other zones"
    assert (
        stall_messages.insufficient_balance_reason(need=Decimal("40000"), balance=Decimal("1000"), currency="CNY")
        == "InsufficientBalance: need 40000.00 CNY, balance 1000.00 CNY"
    )


def test_pool_status_from_counts():
    status = pool_phase.pool_status
    assert status(counts=pool_phase.PoolCounts(desired=2, ready=2), stalls=[], deleting=False) == ("Ready", "")
    assert status(counts=pool_phase.PoolCounts(desired=0, ready=0, awaiting_orders=(7,)), stalls=[], deleting=False) == (
        "Pending",
        "OrderPending: order #7 awaits approval by a platform admin",
    )
    phase, reason = status(counts=pool_phase.PoolCounts(desired=2, ready=0, provisioning=2), stalls=["ImagePullFailed: img"], deleting=False)
    assert (phase, reason) == ("Provisioning", "ImagePullFailed: img")
    assert status(counts=pool_phase.PoolCounts(desired=3, ready=2, provisioning=1), stalls=[], deleting=False) == (
        "Scaling",
        "WaitingForNodes: 2/3 Ready, 1 provisioning",
    )
    assert status(counts=pool_phase.PoolCounts(desired=2, ready=1, unknown=1), stalls=[], deleting=False)[0] == "Degraded"
    # Ready only with the baseline Ready and nothing on its way (issue 21 item 5).
    assert status(counts=pool_phase.PoolCounts(desired=2, ready=2, min_nodes=3, ordered=3, awaiting_orders=(8,)), stalls=[], deleting=False) == (
        "Scaling",
        "OrderPending: order #8 awaits approval by a platform admin",
    )
    assert status(counts=pool_phase.PoolCounts(desired=1, ready=1, min_nodes=2, ordered=1, last_refusal="order #9 Rejected: budget freeze"), stalls=[], deleting=False) == (
        "Degraded",
        "BaselineNotOrdered: nodeCount.min is 2 but 1 monthly node(s) are ordered; order #9 Rejected: budget freeze",
    )
    assert status(counts=pool_phase.PoolCounts(desired=2, ready=2, min_nodes=2, ordered=2), stalls=[], deleting=False) == ("Ready", "")
    assert status(counts=pool_phase.PoolCounts(desired=2, ready=1, draining=1), stalls=[], deleting=True) == (
        "Deleting",
        "Draining: 2 node(s) left to drain and release",
    )


def test_a_pool_whose_node_is_cordoned_for_repair_is_degraded_not_provisioning():
    """Its only node cordoned for a GPU fault read "Provisioning: WaitingForNodes: 0/1 Ready, 0
    provisioning", as if a node were on its way."""
    counts = pool_phase.PoolCounts(desired=1, ready=0, repairing=1, min_nodes=1, ordered=1)
    phase, reason = pool_phase.pool_status(counts=counts, stalls=[], deleting=False)
    assert (phase, reason) == ("Degraded", "NodeRepairing: 1 node(s) cordoned for repair or being repaired (each node's history says why)")
    healthy = next(c for c in pool_phase.pool_conditions(counts=counts, phase=phase, pending_reason=reason, previous=[], now=NOW) if c["type"] == "NodesHealthy")
    assert (healthy["status"], healthy["reason"], healthy["message"]) == ("False", "NodeRepairing", "1 node(s) under repair")
    assert pool_phase.pool_status(counts=counts, stalls=[], deleting=True)[1] == "Draining: 1 node(s) left to drain and release"


def test_durations_read_like_kubernetes():
    assert [rules.format_duration(timedelta(seconds=s)) for s in (45, 245, 7260, 3 * 86400)] == ["45s", "4m5s", "2h1m", "3d0h"]


def test_capacity_summary_takes_medians_and_counts_slow_nodes():
    minutes = [timedelta(minutes=m) for m in (4, 20, 5)]
    summary = rules.capacity_summary(minutes, [timedelta(minutes=6), timedelta(minutes=8)])
    assert (summary.nodes, summary.last_ready, summary.median_ready, summary.max_ready) == (3, minutes[-1], timedelta(minutes=5), timedelta(minutes=20))
    assert summary.median_first_pod == timedelta(minutes=7) and summary.slow == 1
    assert rules.capacity_summary([], []).median_ready is None


def test_steps_needed_names_each_step_of_the_pass_that_has_work_in_order():
    """Issue 9: `reconcile_all` runs only the steps a pool's rows call for; each check here is
    the condition under which that step of `pools.controllers.lifecycle._reconcile` does something."""
    now = datetime(2026, 3, 1, tzinfo=UTC)

    def needed(nodes=(), orders=(), max_nodes=2, slow=frozenset(), reclaiming=frozenset()):
        snapshot = rules.PoolSnapshot(pk=1, phase="Ready", min_nodes=1, max_nodes=max_nodes, nodes=tuple(nodes), orders=tuple(orders), slow_reported=slow)
        return rules.steps_needed(snapshot, now=now, lease_notice=timedelta(days=3), heartbeat_grace=timedelta(minutes=5), reclaiming=reclaiming)

    ready = [rules.NodeRow(i, f"n{i}", "Ready", "monthly", provider_id=f"m{i}", last_heartbeat=now, lease_end=now + timedelta(days=30)) for i in (1, 2)]
    paid = rules.OrderRow(9, "create", "Paid", 2, holding=2)
    assert needed(ready, [paid]) == ()
    assert needed([*ready, rules.NodeRow(3, "n3", "Draining", "on_demand", release_reason="ScaledIn")], [paid]) == ("Draining",)
    assert needed(ready, [paid, rules.OrderRow(10, "grow", "Approved", 1)]) == ("OrderApproved",)
    assert needed(ready, [paid], reclaiming=frozenset({"m2"})) == ("ReclaimNotice",)
    expiring = [ready[0], rules.NodeRow(2, "n2", "Ready", "monthly", last_heartbeat=now, lease_end=now + timedelta(days=1))]
    assert needed(expiring, [paid]) == ("LeaseAction",)
    assert needed(ready, [paid], max_nodes=1) == ("Surplus",)
    assert needed(ready[:1], [rules.OrderRow(9, "create", "Paid", 2, holding=1)]) == ("NodesMissing",)
    due = rules.NodeRow(3, "n3", "Provisioning", "monthly", created_at=now - timedelta(minutes=20), step_due_at=now)
    assert needed([*ready, due], [paid], max_nodes=3) == ("StepDue", "SlowCapacity")
    assert needed([*ready, due], [paid], max_nodes=3, slow=frozenset({3})) == ("StepDue",)
    silent = [ready[0], rules.NodeRow(2, "n2", "Ready", "monthly", last_heartbeat=now - timedelta(minutes=6))]
    assert needed(silent, [paid]) == ("Heartbeat",)
    assert rules.work_needed(rules.PoolSnapshot(pk=1, phase="Deleting", min_nodes=0, max_nodes=0), now=now, lease_notice=timedelta(days=3), heartbeat_grace=timedelta(minutes=5)) == "Deleting"


def test_drift_is_found_on_any_node_when_nodes_share_what_was_applied():
    """Issue 23: the drift check compares each distinct pair of (applied, observed) values
    once; a node whose cluster state differs is still found, wherever it is in the pool."""
    from pools.core.node_labels import ClusterNodeState

    now = datetime(2026, 3, 1, tzinfo=UTC)
    labels, taints = {"pool": "a", "gpu-class": "a100"}, ({"key": "pool", "value": "a", "effect": "NoSchedule"},)
    seen = ClusterNodeState(labels={**labels, "kubernetes.io/hostname": "x"}, taints=(("pool", "a", "NoSchedule"),))
    nodes = [rules.NodeRow(i, f"n{i}", "Ready", "monthly", last_heartbeat=now, labels=labels, taints=taints) for i in range(6)]
    snapshot = rules.PoolSnapshot(pk=1, phase="Ready", min_nodes=6, max_nodes=6, nodes=tuple(nodes), generation=1, observed_generation=1)

    def needed(observed):
        return rules.steps_needed(snapshot, now=now, lease_notice=timedelta(days=3), heartbeat_grace=timedelta(minutes=5), observed=observed)

    assert "NodeDrift" not in needed({n.name: seen for n in nodes})
    for lost in (0, 5):
        observed = {n.name: seen for n in nodes}
        observed[f"n{lost}"] = ClusterNodeState(labels={"gpu-class": "a100"}, taints=seen.taints)  # its pool label removed
        assert "NodeDrift" in needed(observed)
    # The same applied values and the same state, but a drained node's cordon was lifted.
    draining = rules.NodeRow(6, "n6", "Draining", "monthly", release_reason="ScaledIn", labels=labels, taints=taints)
    snapshot = rules.PoolSnapshot(pk=1, phase="Ready", min_nodes=6, max_nodes=7, nodes=(*nodes, draining), generation=1, observed_generation=1)
    assert "NodeDrift" in needed({n.name: seen for n in snapshot.nodes})


def test_a_withdrawn_order_is_never_the_pools_last_refusal():
    """An order the pool took back (nodeCount.min lowered) is no refusal: BaselineNotOrdered
    names the admin's rejection, never the lead's own withdrawal, even when it is the newest."""
    rejected = rules.OrderRow(pk=7, kind="grow", status="Rejected", node_count=1, reason="budget freeze")
    withdrawn = rules.OrderRow(pk=9, kind="grow", status="Rejected", node_count=1, reason=f"{rules.WITHDRAWN}nodeCount.min lowered to 2")
    paid = rules.OrderRow(pk=3, kind="create", status="Paid", node_count=1, holding=1)
    node = rules.NodeRow(pk=1, name="p-001", phase="Ready", billing="monthly")
    snapshot = rules.PoolSnapshot(pk=1, phase="Ready", min_nodes=2, max_nodes=4, nodes=(node,), orders=(paid, rejected, withdrawn))
    status = rules.status_of(snapshot, now=NOW)
    assert status.pending_reason == "BaselineNotOrdered: nodeCount.min is 2 but 1 monthly node(s) are ordered; order #7 Rejected: budget freeze"
    only_withdrawn = rules.status_of(replace(snapshot, orders=(paid, withdrawn)), now=NOW)
    assert only_withdrawn.pending_reason == "BaselineNotOrdered: nodeCount.min is 2 but 1 monthly node(s) are ordered"
    assert rules.order_refused("Failed", "payment declined") and not rules.order_refused("Failed", f"{rules.WITHDRAWN}the pool was deleted")


def test_a_node_cordoned_while_its_cluster_fault_waits_for_repair_still_counts_as_unavailable():
    """A node out of the cluster's use, cordoned while its replacement waits for approval, fell
    out of both counts: the pool read `WaitingForNodes 1/2 Ready` and left Degraded, and a
    Deleting pool's count of nodes left to drain missed it (found by review)."""
    paid = rules.OrderRow(pk=3, kind="create", status="Paid", node_count=2, holding=2)
    fine = rules.NodeRow(pk=1, name="p-001", phase="Ready", billing="monthly")
    waiting = rules.NodeRow(pk=2, name="p-002", phase="Cordoned", billing="monthly", cluster_fault="its Node is not Ready (Ready=Unknown)")
    snapshot = rules.PoolSnapshot(pk=1, phase="Ready", min_nodes=2, max_nodes=2, nodes=(fine, waiting), orders=(paid,))
    status = rules.status_of(snapshot, now=NOW)
    assert (status.phase, status.pending_reason) == ("Degraded", "NodeUnavailable: 1 node(s) the cluster runs no pod on (each node's NodeUnavailable event says why)")
    deleting = pool_phase.pool_status(counts=pool_phase.PoolCounts(desired=0, ready=1, unavailable=1), stalls=[], deleting=True)
    assert deleting == ("Deleting", "Draining: 2 node(s) left to drain and release")
