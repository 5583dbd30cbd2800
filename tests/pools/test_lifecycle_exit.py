"""Graceful exits: leases end with notice, cordon, drain, release or are renewed (D2); preemptible
nodes are reclaimed and replaced, guaranteed ones never (D2); shrinking and deleting drain
first (issue 3 §6); a silent node is Unknown only after a grace period and keeps its pods (D1)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import Account, LeasePeriod
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimClusterNode, SimMachine
from pools.models.pods import Pod
from pools.providers import simulated, simulated_cluster
from pools.services import pools as services
from pools.services.disruption_budgets import budget_create
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import (
    T0,
    approved_pool,
    crash_before_events,
    live_nodes,
    reasons,
    reconcile,
    run_until,
)

NOTICE = timedelta(days=3)  # EBCLOUD_LEASE_NOTICE_SECONDS default
LEASE_END = T0.replace(year=2027, month=1)  # monthly lease paid at T0


@pytest.fixture
def ready_pool(actors, train_document):
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    return pool


def test_a_monthly_lease_warns_before_it_ends_then_cordons_drains_and_releases(ready_pool):
    """D2: a short-lease node at order expiry exits gracefully (drain, then destroy)."""
    nodes = live_nodes(ready_pool)
    simulated.pod_run(node_name=nodes[0].name, name="train-high", priority=1000)
    simulated.pod_run(node_name=nodes[0].name, name="train-low", priority=10)
    reconcile(ready_pool, LEASE_END - NOTICE - timedelta(minutes=1))
    assert not PoolEvent.objects.filter(reason="LeaseExpiring").exists()
    reconcile(ready_pool, LEASE_END - NOTICE + timedelta(minutes=1))
    expiring = PoolEvent.objects.filter(reason="LeaseExpiring")
    assert expiring.count() == 2 and all(e.type == "Warning" and "autoRenew is off" in e.message for e in expiring)
    reconcile(ready_pool, LEASE_END - timedelta(minutes=1))
    assert PoolEvent.objects.filter(reason="LeaseExpiring").count() == 2  # once per lease
    assert [n.phase for n in live_nodes(ready_pool)] == ["Ready", "Ready"]

    reconcile(ready_pool, LEASE_END)
    assert live_nodes(ready_pool) == []
    first = Node.objects.get(pk=nodes[0].pk)
    assert (first.phase, first.release_reason, first.terminated_at) == ("Terminated", "LeaseExpired", LEASE_END)
    assert reasons(ready_pool, first)[-4:] == ["LeaseExpired", "NodeCordoned", "NodeDraining", "NodeReleased"]
    drained = PoolEvent.objects.get(node=first, reason="NodeDraining").message
    assert drained.index("default/train-low") < drained.index("default/train-high")  # lowest priority first
    # Evicted pods leave the node and wait to be scheduled elsewhere (their work is not lost).
    assert list(Pod.objects.values_list("phase", "reason", "node")) == [("Pending", "Evicted", None)] * 2
    assert SimMachine.objects.filter(status="Released").count() == 2
    assert not SimClusterNode.objects.exists()
    # The capacity is gone: no replacement is ordered after the lease.
    reconcile(ready_pool, LEASE_END + timedelta(minutes=5))
    assert live_nodes(ready_pool) == []


def test_auto_renew_orders_a_renewal_instead_and_extends_the_lease(actors, train_document):
    """D2 + issue 3 §4: autoRenew creates a renewal order (kind renew) instead of draining."""
    train_document["spec"]["autoRenew"] = True
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    notice_at = LEASE_END - NOTICE + timedelta(minutes=1)
    reconcile(pool, notice_at)
    renewal = PoolOrder.objects.get(kind="renew")
    assert (renewal.status, renewal.node_count, renewal.amount, renewal.reason) == ("Approved", 2, 40000, "autoRenew")
    assert all("autoRenew ordered renewal" in e.message for e in PoolEvent.objects.filter(reason="LeaseExpiring"))
    reconcile(pool, notice_at + timedelta(minutes=1))
    renewal.refresh_from_db()
    assert renewal.status == "Paid"
    assert [n.lease_end for n in live_nodes(pool)] == [LEASE_END.replace(month=2)] * 2
    assert PoolEvent.objects.filter(reason="LeaseRenewed").count() == 2
    reconcile(pool, LEASE_END + timedelta(hours=1))
    assert [n.phase for n in live_nodes(pool)] == ["Ready", "Ready"]
    assert PoolOrder.objects.filter(kind="renew").count() == 1


def test_a_pass_killed_after_ordering_a_renewal_reruns_into_one_paid_renewal(actors, train_document, monkeypatch):
    """Issue 3 §3 + D2: the renewal order and its nodes' link to it are one step; a pass killed
    between them leaves neither, and the rerun orders, debits and renews once."""
    train_document["spec"]["autoRenew"] = True
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    balance = Account.objects.get(name="default").balance
    crash_before_events(monkeypatch, LeaseExpiring=1)
    notice_at = LEASE_END - NOTICE + timedelta(minutes=1)
    with pytest.raises(RuntimeError):
        reconcile(pool, notice_at)
    for minute in range(1, 4):
        reconcile(pool, notice_at + timedelta(minutes=minute))
    renewal = PoolOrder.objects.get(kind="renew")
    assert (renewal.status, renewal.node_count) == ("Paid", 2)
    assert balance - Account.objects.get(name="default").balance == renewal.amount == Decimal("40000")
    assert PoolEvent.objects.filter(reason="RenewalOrdered").count() == 1
    assert PoolEvent.objects.filter(reason="LeaseRenewed").count() == 2
    assert [n.lease_end for n in live_nodes(pool)] == [LEASE_END.replace(month=2)] * 2


def test_renewals_of_a_lease_paid_on_the_31st_keep_its_day_of_the_month(actors, train_document):
    """D2: a lease ends leaseType months after its order was paid, renewals included: a lease
    paid on 31 January 2028 ends on 29 February, then 31 March, 30 April and 31 May (renewing
    from the clamped 29 February ended every later month on the 29th: the same debit for up to
    two days less). The ledger's periods follow the leases, end to start."""
    train_document["spec"]["autoRenew"] = True
    paid = T0.replace(year=2028, month=1, day=31, hour=13, minute=27)
    pool = approved_pool(actors, train_document, now=paid)
    run_until(pool, paid)
    ends = [live_nodes(pool)[0].lease_end]
    for _ in range(3):
        reconcile(pool, ends[-1] - NOTICE + timedelta(minutes=1))
        reconcile(pool, ends[-1] - NOTICE + timedelta(minutes=2))
        ends.append(live_nodes(pool)[0].lease_end)
    assert [(e.month, e.day, e.hour, e.minute) for e in ends] == [(2, 29, 13, 27), (3, 31, 13, 27), (4, 30, 13, 27), (5, 31, 13, 27)]
    node = live_nodes(pool)[0]
    periods = list(LeasePeriod.objects.filter(node=node).order_by("lease_start").values_list("lease_start", "lease_end"))
    assert periods == list(zip([node.lease_start, *ends[:-1]], ends, strict=True))


def test_auto_renew_renews_only_up_to_the_lowered_minimum(actors, train_document):
    train_document["spec"]["autoRenew"] = True
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, now=T0 + timedelta(days=1))
    reconcile(pool, LEASE_END - NOTICE + timedelta(minutes=1))
    assert PoolOrder.objects.get(kind="renew").node_count == 1
    run_until(pool, LEASE_END, phase="Ready")
    assert len(live_nodes(pool)) == 1


def test_lowering_max_drains_surplus_burst_nodes_before_monthly_ones(actors, ready_pool):
    """Issue 3 §6: lowering max or min drains surplus burst/expired nodes first."""
    burst = Node.objects.create(
        pool=ready_pool, name="burst-1", billing="on_demand", phase="Ready", zone=ready_pool.zone, gpu_count=8, ready_at=T0
    )
    simulated_cluster.SimulatedCluster().register_node(name=burst.name, now=T0)
    services.pool_resize(user=actors["lead"], pool=ready_pool, max_nodes=2, now=T0 + timedelta(hours=1))
    reconcile(ready_pool, T0 + timedelta(hours=1))
    burst.refresh_from_db()
    assert (burst.phase, burst.release_reason) == ("Terminated", "ScaledIn")
    assert [n.billing for n in live_nodes(ready_pool)] == ["monthly", "monthly"]
    assert "nodeCount.max is 2" in PoolEvent.objects.get(reason="ScaledIn").message


def test_deleting_a_pool_drains_then_releases_and_says_the_lease_stays_billed(actors, ready_pool):
    nodes = live_nodes(ready_pool)
    simulated.pod_run(node_name=nodes[1].name, name="job", priority=0)
    later = T0 + timedelta(days=2)
    services.pool_delete(user=actors["lead"], pool=ready_pool, now=later)
    result = reconcile(ready_pool, later)
    assert result.phase == "Deleted"
    pool = GpuNodePool.objects.get(pk=ready_pool.pk)
    assert pool.deleted_at == later and pool.phase == "Deleted"
    released = PoolEvent.objects.filter(reason="NodeReleased")
    assert released.count() == 2
    assert all("monthly lease stays billed until 2027-01-01 08:00 UTC" in e.message for e in released)
    assert PoolEvent.objects.filter(reason="PoolDeleted").count() == 1
    assert Pod.objects.filter(name="job", phase="Pending", reason="Evicted", node=None).exists()


def test_a_drain_waits_for_a_pod_that_refuses_eviction_then_releases_at_the_deadline_with_a_warning(actors, ready_pool):
    """A node is never released with pods on it without an event saying why (issue 3 §4)."""
    node = live_nodes(ready_pool)[0]
    simulated.pod_run(node_name=node.name, name="guarded", eviction_blocked=True)
    later = T0 + timedelta(days=2)
    services.pool_delete(user=actors["lead"], pool=ready_pool, now=later)
    assert reconcile(ready_pool, later).phase == "Deleting"
    node.refresh_from_db()
    assert node.phase == "Draining" and node.drain_deadline == later + timedelta(minutes=10)
    assert PoolEvent.objects.get(reason="DrainWaiting").type == "Warning"
    assert reconcile(ready_pool, later + timedelta(minutes=5)).phase == "Deleting"
    assert reconcile(ready_pool, later + timedelta(minutes=10)).phase == "Deleted"
    timeout = PoolEvent.objects.get(reason="DrainTimeout")
    assert timeout.type == "Warning" and "default/guarded" in timeout.message


def test_a_reclaimed_preemptible_node_is_drained_and_replaced(actors):
    """D2: preemptible nodes may be reclaimed (with notice); the controller replaces them."""
    document = make_document("spot", preemptible=True, nodeCount={"min": 1, "max": 2})
    pool = approved_pool(actors, document)
    run_until(pool, T0)
    node = live_nodes(pool)[0]
    assert node.billing == "preemptible"
    simulated.pod_run(node_name=node.name, name="ckpt-job", checkpointable=True)
    reclaim_at = simulated.reclaim_inject(provider_id=node.provider_id, now=T0 + timedelta(hours=1))
    assert reclaim_at == T0 + timedelta(hours=1, minutes=2)
    reconcile(pool, T0 + timedelta(hours=1))
    node.refresh_from_db()
    assert (node.phase, node.release_reason) == ("Terminated", "Reclaimed")
    notice = PoolEvent.objects.get(reason="ReclaimNotice")
    assert notice.type == "Warning" and "2m0s notice" in notice.message
    replacement = live_nodes(pool)
    assert len(replacement) == 1 and replacement[0].order_id == node.order_id
    run_until(pool, T0 + timedelta(hours=1))
    assert [n.phase for n in live_nodes(pool)] == ["Ready"]


def test_guaranteed_nodes_are_never_reclaimed_during_their_lease(ready_pool):
    node = live_nodes(ready_pool)[0]
    with pytest.raises(ValueError, match="never reclaimed during its lease"):
        simulated.reclaim_inject(provider_id=node.provider_id, now=T0 + timedelta(hours=1))
    # Even a notice that reaches the controller does not take a guaranteed node away.
    SimMachine.objects.filter(provider_id=node.provider_id).update(reclaim_at=T0 + timedelta(hours=1))
    reconcile(ready_pool, T0 + timedelta(hours=1))
    assert Node.objects.get(pk=node.pk).phase == "Ready"
    assert PoolEvent.objects.get(reason="ReclaimRefused").type == "Warning"


def test_a_silent_node_is_unknown_only_after_the_grace_period_and_its_pods_stay(ready_pool):
    """D1: jitter or a control-plane outage never evicts a node; Unknown after 5 minutes."""
    node, other = live_nodes(ready_pool)
    simulated.pod_run(node_name=node.name, name="training")
    beat = T0 + timedelta(hours=1)
    Node.objects.filter(pk__in=[node.pk, other.pk]).update(last_heartbeat=beat)
    reconcile(ready_pool, beat + timedelta(minutes=5))
    assert Node.objects.get(pk=node.pk).phase == "Ready"
    Node.objects.filter(pk=other.pk).update(last_heartbeat=beat + timedelta(minutes=5))
    result = reconcile(ready_pool, beat + timedelta(minutes=5, seconds=1))
    assert Node.objects.get(pk=node.pk).phase == "Unknown"
    assert result.phase == "Degraded" and "NodeStatusUnknown: 1 node(s)" in result.pending_reason
    warning = PoolEvent.objects.get(reason="NodeStatusUnknown")
    assert warning.type == "Warning" and "not evicted" in warning.message
    pod = Pod.objects.get(name="training")
    assert (pod.phase, pod.node_id) == ("Running", node.pk)
    assert len(live_nodes(ready_pool)) == 2  # no replacement, no drain
    Node.objects.filter(pk=node.pk).update(last_heartbeat=beat + timedelta(minutes=7))
    assert reconcile(ready_pool, beat + timedelta(minutes=7)).phase == "Ready"
    assert Node.objects.get(pk=node.pk).phase == "Ready"


def test_after_a_control_plane_outage_silent_nodes_are_not_marked_unknown_until_the_agents_return(actors, train_document):
    """D1, like Kubernetes' full disruption: most of the fleet silent at once is the control
    plane's outage (its agents could not reach it), not the nodes'. Once most report again, a
    node still silent is Unknown."""
    train_document["spec"]["nodeCount"] = {"min": 4, "max": 4}
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    nodes = live_nodes(pool)
    beat = T0 + timedelta(hours=1)
    Node.objects.filter(pool=pool).update(last_heartbeat=beat)
    reconcile(pool, beat + timedelta(minutes=20))  # the web was down 20 min: nobody could report
    assert [n.phase for n in live_nodes(pool)] == ["Ready"] * 4
    assert not PoolEvent.objects.filter(reason="NodeStatusUnknown").exists()
    back = beat + timedelta(minutes=21)
    Node.objects.filter(pk__in=[n.pk for n in nodes[:3]]).update(last_heartbeat=back)
    reconcile(pool, back)
    assert [n.phase for n in live_nodes(pool)].count("Unknown") == 1
    assert PoolEvent.objects.filter(reason="NodeStatusUnknown", node=nodes[3]).count() == 1


def test_ready_nodes_stay_ready_while_the_control_plane_is_away(ready_pool):
    """D1: control plane down => no new nodes, but running nodes keep working."""
    result = reconcile(ready_pool, T0 + timedelta(days=2))
    assert result.phase == "Ready"
    assert [n.phase for n in live_nodes(ready_pool)] == ["Ready", "Ready"]


def test_a_renewal_or_a_preemptible_node_does_not_count_twice_against_the_quota(actors, train_document):
    """T1 quota: renewals keep capacity already counted; ordered nodes count via their order."""
    from pools.selectors.pools import ordered_baseline, quota_usage

    train_document["spec"]["autoRenew"] = True
    pool = approved_pool(actors, train_document)
    spot = approved_pool(actors, make_document("spot", preemptible=True, nodeCount={"min": 1, "max": 1}))
    run_until(pool, T0)
    run_until(spot, T0)
    reconcile(pool, LEASE_END - NOTICE + timedelta(minutes=1))
    reconcile(pool, LEASE_END - NOTICE + timedelta(minutes=2))
    assert PoolOrder.objects.get(kind="renew").status == "Paid"
    assert quota_usage(region="cn-east-2", gpu_model_id=pool.gpu_model_id) == 16 + 8
    assert ordered_baseline(pool=pool) == 2


def test_after_an_expired_lease_the_baseline_can_be_ordered_again(actors, ready_pool):
    """The expired lease no longer holds capacity or quota: saving the pool orders it anew."""
    from pools.selectors.pools import ordered_baseline, quota_usage

    reconcile(ready_pool, LEASE_END)
    assert ordered_baseline(pool=ready_pool) == 0
    assert quota_usage(region=ready_pool.zone.region, gpu_model_id=ready_pool.gpu_model_id) == 0
    ready_pool.refresh_from_db()
    assert "BaselineNotOrdered" in ready_pool.pending_reason
    services.pool_update(user=actors["lead"], pool=ready_pool, document=ready_pool.document, now=LEASE_END)
    assert ready_pool.orders.filter(status="Pending", node_count=2).exists()


def test_a_drain_spends_the_teams_disruption_budget_one_pod_at_a_time(actors, ready_pool):
    """A PodDisruptionBudget allowing one disruption lets the drain evict one of its two pods;
    the other waits (its evicted sibling is not running again), until the drain's deadline."""
    node = live_nodes(ready_pool)[0]
    for name in ("trainer-0", "trainer-1"):
        simulated.pod_run(node_name=node.name, name=name, namespace="algorithm")
    Pod.objects.filter(name__startswith="trainer-").update(labels={"app": "trainer"})
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainers"},
              "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}}  # fmt: skip
    budget_create(user=actors["member"], document=budget)
    later = T0 + timedelta(days=2)
    services.pool_delete(user=actors["lead"], pool=ready_pool, now=later)
    assert reconcile(ready_pool, later).phase == "Deleting"
    assert "Evicted 1 pod(s)" in PoolEvent.objects.get(reason="NodeDraining").message
    assert sorted(Pod.objects.values_list("name", "phase")) == [("trainer-0", "Pending"), ("trainer-1", "Running")]
    assert "algorithm/trainer-1" in PoolEvent.objects.get(reason="DrainWaiting").message
    assert reconcile(ready_pool, later + timedelta(minutes=10)).phase == "Deleted"
    assert "algorithm/trainer-1" in PoolEvent.objects.get(reason="DrainTimeout").message
