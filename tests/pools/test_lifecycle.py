"""The lifecycle controller on the simulated cloud: order -> pay -> initialise -> driver -> kubelet
-> register -> labels/taints -> Ready (seed G1, O2), stalls explained with numbers (T1),
idempotent and crash-safe passes (design §5)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import Schedule

from billing.models import Account
from pools.controllers import lifecycle
from pools.core.spec import effective_node_labels, parse_document
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder, Quota
from pools.models.cloud import SimClusterNode, SimMachine, SimPayment, SimStock
from pools.providers import simulated
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from pools.tasks import reconcile_all
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import (
    T0,
    approved_pool,
    crash_before_events,
    live_nodes,
    passes_are_idempotent,
    reasons,
    reconcile,
    run_until,
)

NODE_STEPS = [
    "OrderPlaced",
    "NodeInitializing",
    "ImagePulled",
    "DriverInstalled",
    "KubeletInstalled",
    "NodeRegistered",
    "NodeLabeled",
    "NodeTainted",
    "NodeReady",
]


def test_an_approved_order_is_paid_and_each_node_walks_every_step_to_ready(actors, train_document):
    """G1/O2: the user only declares the pool; the controller buys, boots, joins, labels, taints."""
    pool = approved_pool(actors, train_document)
    ready_at = run_until(pool, T0)
    # Defaults: a node is Ready in 3-5 minutes (issue 3 §1).
    assert timedelta(minutes=3) <= ready_at - T0 <= timedelta(minutes=5)
    pool.refresh_from_db()
    assert (pool.phase, pool.pending_reason, pool.observed_generation) == ("Ready", "", pool.generation)
    order = pool.orders.get()
    assert order.status == "Paid"
    assert Account.objects.get(name="default").balance == Decimal("1000000.00") - Decimal("40000.00")
    nodes = live_nodes(pool)
    assert [n.phase for n in nodes] == ["Ready", "Ready"]
    spec = parse_document(pool.document, catalog_current())
    for node in nodes:
        assert reasons(pool, node) == NODE_STEPS
        assert node.labels == effective_node_labels(spec, zone="cn-east-2a", billing="monthly", team=pool.team.slug)
        assert node.labels["gpu-class"] == "a100" and node.labels["ebcloud.io/pool"] == "train-pool-a"
        assert node.taints == [{"key": "pool", "value": "train", "effect": "NoSchedule"}]
        assert node.lease_start == T0 and node.lease_end == T0.replace(month=1, year=2027)
        cluster_node = SimClusterNode.objects.get(name=node.name)
        assert cluster_node.labels == node.labels and cluster_node.taints == node.taints and not cluster_node.unschedulable
    pool_reasons = list(PoolEvent.objects.filter(pool=pool, node=None).order_by("id").values_list("reason", flat=True))
    # Approved -> Paying -> Paid: each state change of the order is an event (the quota is
    # validated again at the settle, just before the payment is recorded).
    assert pool_reasons == ["PoolCreated", "QuotaValidated", "OrderRequested", "OrderApproved", "OrderPaying", "QuotaValidated", "OrderPaid", "PoolReady"]
    assert "40000.00 CNY debited, balance 960000.00 CNY" in PoolEvent.objects.get(reason="OrderPaid").message


def test_reconciling_twice_is_the_same_as_reconciling_once(actors, train_document):
    pool = approved_pool(actors, train_document)
    passes_are_idempotent(pool, T0, ticks=24)
    assert GpuNodePool.objects.get(pk=pool.pk).phase == "Ready"
    assert SimPayment.objects.count() == 1 and SimMachine.objects.count() == 2


def test_a_pending_order_keeps_the_pool_pending_and_nothing_is_bought(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document, now=T0)
    result = reconcile(pool, T0)
    assert result.phase == "Pending" and result.pending_reason.startswith("OrderPending: order #")
    assert not Node.objects.exists() and not SimPayment.objects.exists()


def test_an_unpaid_order_says_how_much_is_missing(actors, train_document):
    """T1: order unpaid (balance)."""
    Account.objects.filter(name="default").update(balance=Decimal("1000.00"))
    pool = approved_pool(actors, train_document)
    result = reconcile(pool, T0)
    assert result.pending_reason == "InsufficientBalance: need 40000.00 CNY, balance 1000.00 CNY"
    assert result.phase == "Provisioning"
    assert pool.orders.get().status == "Approved" and not Node.objects.exists()
    reconcile(pool, T0 + timedelta(seconds=30))
    warning = PoolEvent.objects.get(reason="InsufficientBalance")
    assert warning.type == "Warning" and warning.count == 2
    Account.objects.filter(name="default").update(balance=Decimal("50000.00"))
    run_until(pool, T0 + timedelta(minutes=1))
    assert Account.objects.get(name="default").balance == Decimal("10000.00")


def test_a_declined_payment_is_a_warning_and_is_retried(actors, train_document):
    pool = approved_pool(actors, train_document)
    simulated.failure_inject(step="pay", times=1, message="card expired")
    assert reconcile(pool, T0).pending_reason == "PaymentDeclined: card expired"
    assert PoolEvent.objects.get(reason="PaymentDeclined").type == "Warning"
    run_until(pool, T0 + timedelta(seconds=30))
    assert SimPayment.objects.count() == 1


def test_out_of_stock_names_the_zone_and_the_stock_in_the_other_zones(actors, train_document):
    """T1: stock in the zone (add a fallback zone)."""
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=0)
    simulated.stock_set(zone="cn-east-2b", gpu_model="A100_80G", gpus=24)
    pool = approved_pool(actors, train_document)
    result = reconcile(pool, T0)
    assert result.pending_reason == "OutOfStock in cn-east-2a, 3 in cn-east-2b"
    nodes = live_nodes(pool)
    assert [n.phase for n in nodes] == ["Ordering", "Ordering"]
    # Exponential backoff: 30 s after the first failure, 60 s after the second.
    assert nodes[0].step_due_at == T0 + timedelta(seconds=30)
    reconcile(pool, T0 + timedelta(seconds=10))  # backing off: no new attempt
    assert Node.objects.get(pk=nodes[0].pk).attempts == 1
    reconcile(pool, T0 + timedelta(seconds=30))
    assert Node.objects.get(pk=nodes[0].pk).step_due_at == T0 + timedelta(seconds=90)
    warning = PoolEvent.objects.filter(reason="OutOfStock", node=nodes[0]).first()
    assert warning.type == "Warning" and "OutOfStock in cn-east-2a, 3 in cn-east-2b" in warning.message
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=16)
    run_until(pool, T0 + timedelta(seconds=90))
    assert SimStock.objects.get(zone__name="cn-east-2a").available_gpus == 0


def test_an_image_pull_failure_is_retried_with_backoff_and_named_in_pending_reason(actors, train_document):
    """T1: then image pull / init script."""
    pool = approved_pool(actors, train_document)
    simulated.failure_inject(step="image_pull", times=2)
    now = T0
    seen = set()
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        seen.add(reconcile(pool, now).pending_reason)
        now += timedelta(seconds=15)
    assert "ImagePullFailed: ubuntu-22.04-cuda-12.2" in seen
    warnings = PoolEvent.objects.filter(reason="ImagePullFailed", type="Warning")
    assert sum(w.count for w in warnings) == 2
    assert all("retrying in 30s" in w.message for w in warnings)


@pytest.mark.parametrize(
    ("step", "reason"),
    [("driver_install", "DriverInstallFailed"), ("kubelet_join", "KubeletJoinTimeout"), ("boot", "ProvisionFailed")],
)
def test_each_step_failure_surfaces_as_a_warning_and_recovers(actors, train_document, step, reason):
    pool = approved_pool(actors, train_document)
    simulated.failure_inject(step=step, times=1)
    run_until(pool, T0)
    warning = PoolEvent.objects.get(reason=reason)
    assert warning.type == "Warning" and warning.node is not None
    assert len(live_nodes(pool)) == 2


def test_a_machine_that_keeps_failing_is_released_and_replaced(actors, train_document, settings):
    settings.EBCLOUD_PROVISION_MAX_ATTEMPTS = 3
    pool = approved_pool(actors, train_document)
    reconcile(pool, T0)
    first = live_nodes(pool)[0]
    simulated.failure_inject(step="driver_install", times=None, token_prefix=first.name)
    now = T0
    while Node.objects.get(pk=first.pk).phase != "Terminated":
        now += timedelta(seconds=15)
        reconcile(pool, now)
        assert now < T0 + timedelta(hours=1)
    first.refresh_from_db()
    assert first.release_reason == "ProvisioningFailed" and first.attempts == 3
    assert SimMachine.objects.get(client_token=first.name).status == "Released"
    assert PoolEvent.objects.get(reason="ProvisioningFailed").type == "Warning"
    run_until(pool, now)
    nodes = live_nodes(pool)
    assert len(nodes) == 2 and first not in nodes
    assert all(n.order_id == first.order_id and n.lease_end == first.lease_end for n in nodes)


def test_a_prewarmed_image_skips_the_driver_install_and_is_ready_sooner(actors, train_document):
    """D4: custom system image with CUDA preinstalled; O4: trigger -> Ready well under 15 min."""
    train_document["spec"]["systemImage"] = "ubuntu-22.04-cuda-12.2-prewarmed"
    pool = approved_pool(actors, train_document)
    ready_at = run_until(pool, T0)
    assert ready_at - T0 < timedelta(minutes=3)
    node = live_nodes(pool)[0]
    assert "prewarmed" in PoolEvent.objects.get(node=node, reason="DriverInstalled").message
    assert SimMachine.objects.get(client_token=node.name).step == "kubelet_join"


def test_capacity_slower_than_fifteen_minutes_raises_a_warning_with_the_likely_cause(actors, train_document):
    """O4: over 15 min points at image prewarming or stock."""
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=0)
    pool = approved_pool(actors, train_document)
    reconcile(pool, T0)
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=16)
    run_until(pool, T0 + timedelta(minutes=14), tick=timedelta(seconds=30))
    warning = PoolEvent.objects.filter(reason="SlowCapacity").first()
    assert warning is not None and "not prewarmed" in warning.message


def test_a_pass_that_crashes_after_paying_converges_without_paying_twice(actors, train_document, monkeypatch):
    """A reconcile killed mid-step and rerun converges to the same state (issue 3 §3)."""
    pool = approved_pool(actors, train_document)
    crash_before_events(monkeypatch, OrderPaid=1, OrderPlaced=1, KubeletInstalled=1)
    now, crashed = T0, 0
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        try:
            reconcile(pool, now)
        except RuntimeError:
            crashed += 1
        now += timedelta(seconds=15)
    assert crashed == 3
    assert Account.objects.get(name="default").balance == Decimal("960000.00")
    assert SimPayment.objects.count() == 1 and SimMachine.objects.count() == 2
    assert PoolEvent.objects.filter(reason="OrderPaid").count() == 1
    assert SimStock.objects.get(zone__name="cn-east-2a").available_gpus == 256 - 16
    assert [n.phase for n in live_nodes(pool)] == ["Ready", "Ready"]


def test_a_claimed_pool_is_skipped_by_a_second_worker(actors, train_document):
    pool = approved_pool(actors, train_document)
    version = lifecycle.claim_acquire(pool_id=pool.pk, owner="worker-a")
    assert version is not None
    assert lifecycle.claim_acquire(pool_id=pool.pk, owner="worker-b") is None
    assert reconcile(pool, T0).claimed is False and not Node.objects.exists()
    lifecycle.claim_release(pool_id=pool.pk, version=version)
    assert reconcile(pool, T0).claimed is True


def test_an_expired_claim_of_a_dead_worker_can_be_taken_over(actors, train_document, settings):
    pool = approved_pool(actors, train_document)
    assert lifecycle.claim_acquire(pool_id=pool.pk, owner="dead-worker") is not None
    from pools.models.cloud import PoolClaim

    PoolClaim.objects.filter(pk=pool.pk).update(claimed_until=timezone.now() - timedelta(minutes=1))  # expired (wall clock)
    assert reconcile(pool, T0).claimed is True


def test_manage_py_reconcile_once_runs_one_pass(actors, train_document, capsys):
    pool = approved_pool(actors, train_document)
    call_command("reconcile", "--once", "--now", T0.isoformat())
    assert pool.orders.get().status == "Paid" and len(live_nodes(pool)) == 2
    assert f"{pool.pk}\tProvisioning" in capsys.readouterr().out


def test_the_task_reconciles_every_pool_and_is_scheduled_every_minute(actors, train_document):
    approved_pool(actors, train_document)
    assert reconcile_all() == {"pools": 1, "claimed": 1, "errors": 0}
    # The boot step ends within the minute: a one-off schedule wakes the controller then.
    soon = Schedule.objects.get(name="pools.reconcile_soon")
    assert (soon.schedule_type, soon.repeats) == ("O", 1)
    assert soon.next_run == Node.objects.order_by("step_due_at").first().step_due_at
    schedule = Schedule.objects.get(name="pools.reconcile_all")
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == ("pools.tasks.reconcile_all", "I", 1, -1)


def test_a_spec_update_is_observed_by_the_next_pass(actors, train_document):
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    services.pool_resize(user=actors["lead"], pool=pool, max_nodes=5, now=T0 + timedelta(hours=1))
    pool.refresh_from_db()
    assert pool.observed_generation == pool.generation - 1
    reconcile(pool, T0 + timedelta(hours=1))
    pool.refresh_from_db()
    assert pool.observed_generation == pool.generation


def test_a_grow_order_adds_nodes_once_paid(actors, train_document):
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    later = T0 + timedelta(hours=1)
    services.pool_resize(user=actors["lead"], pool=pool, min_nodes=3, now=later)
    grow = pool.orders.get(kind="grow")
    result = reconcile(pool, later)
    assert (result.phase, result.pending_reason.split(":")[0]) == ("Scaling", "OrderPending")  # not Ready while its growth awaits approval
    pool.refresh_from_db()
    assert {c["type"]: c for c in pool.conditions}["Ready"]["reason"] == "OrderPending"
    services.order_approve(user=actors["admin"], order=grow, now=later)
    run_until(pool, later)
    assert len(live_nodes(pool)) == 3
    assert PoolOrder.objects.filter(status="Paid").count() == 2


def test_a_quota_lowered_after_approval_stops_payment_with_the_numbers(actors, train_document):
    """T1: quota (per region and per GPU model)."""
    pool = approved_pool(actors, train_document)
    Quota.objects.filter(region="cn-east-2", gpu_model__name="A100_80G", team=None).update(limit_gpus=8)
    result = reconcile(pool, T0)
    assert result.pending_reason == "QuotaExceeded: cn-east-2 A100_80G requested 16, in use 0, limit 8"
    assert pool.orders.get().status == "Approved" and not SimPayment.objects.exists()
    assert PoolEvent.objects.get(reason="QuotaExceeded").type == "Warning"
    Quota.objects.filter(region="cn-east-2", gpu_model__name="A100_80G", team=None).update(limit_gpus=48)
    reconcile(pool, T0 + timedelta(seconds=15))
    paid = reasons(pool)
    assert paid.index("QuotaValidated", 3) == paid.index("OrderPaid") - 1
    assert pool.orders.get().status == "Paid"


def test_a_pool_whose_baseline_awaits_approval_is_not_ready(actors, train_document):
    """0 of 0 nodes Ready is not Ready while the order waits (phase Pending): the condition
    carries the pendingReason's reason, as `kubectl describe` readers expect."""
    pool = services.pool_create(user=actors["lead"], document=train_document)
    reconcile(pool, T0)
    pool.refresh_from_db()
    ready = {c["type"]: c for c in pool.conditions}["Ready"]
    order = pool.orders.get()
    assert (pool.phase, ready["status"], ready["reason"]) == ("Pending", "False", "OrderPending")
    assert ready["message"] == f"0/0 node(s) Ready; OrderPending: order #{order.pk} awaits approval by a platform admin"


def test_conditions_follow_the_nodes_and_keep_their_transition_time(actors, train_document):
    pool = approved_pool(actors, train_document)
    reconcile(pool, T0)
    pool.refresh_from_db()
    ready = {c["type"]: c for c in pool.conditions}["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "WaitingForNodes", "0/2 node(s) Ready; WaitingForNodes: 0/2 Ready, 2 provisioning")
    done = run_until(pool, T0)
    reconcile(pool, done + timedelta(minutes=10))
    pool.refresh_from_db()
    ready = {c["type"]: c for c in pool.conditions}["Ready"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", done.isoformat())


def test_a_node_stuck_on_stock_for_fifteen_minutes_raises_one_warning_naming_stock(actors, train_document):
    """O4: over 15 min points at image prewarming or stock."""
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=0)
    simulated.stock_set(zone="cn-east-2b", gpu_model="A100_80G", gpus=8)
    pool = approved_pool(actors, train_document)
    now = T0
    while now <= T0 + timedelta(minutes=20):
        reconcile(pool, now)
        now += timedelta(minutes=1)
    warnings = PoolEvent.objects.filter(reason="SlowCapacity")
    assert warnings.count() == 2  # one per node, not one per pass
    assert all("likely cause: stock: OutOfStock in cn-east-2a, 1 in cn-east-2b (add a fallback zone to spec.zones)" in w.message for w in warnings)


def test_one_broken_pool_does_not_stop_the_pass_over_the_others(actors, train_document, monkeypatch):
    broken = approved_pool(actors, train_document)
    healthy = approved_pool(actors, make_document("healthy", nodeCount={"min": 1, "max": 1}))
    real = lifecycle._reconcile

    def fail_one(pool_id, *args):
        if pool_id == broken.pk:
            raise RuntimeError("provider unreachable")
        return real(pool_id, *args)

    monkeypatch.setattr(lifecycle, "_reconcile", fail_one)
    results = {r.pool_id: r for r in lifecycle.reconcile_all(now=T0)}
    assert results[broken.pk].error == "RuntimeError: provider unreachable"
    assert results[healthy.pk].phase == "Provisioning" and len(live_nodes(healthy)) == 1
    assert lifecycle.claim_acquire(pool_id=broken.pk) is not None  # the claim was released


def test_a_rejected_baseline_order_keeps_the_pool_pending_with_the_rejection(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document, now=T0)
    order = pool.orders.get()
    services.order_reject(user=actors["admin"], order=order, reason="budget freeze", now=T0)
    result = reconcile(pool, T0)
    assert result.phase == "Pending"
    assert result.pending_reason == f"BaselineNotOrdered: nodeCount.min is 2 but 0 monthly node(s) are ordered; order #{order.pk} Rejected: budget freeze"


def test_manage_py_reconcile_loops_until_stopped_and_can_target_one_pool(actors, train_document, monkeypatch, capsys):
    from pools.management.commands import reconcile as command

    pool = approved_pool(actors, train_document)
    other = approved_pool(actors, make_document("other", nodeCount={"min": 1, "max": 1}))
    sleeps = []

    def stop_after_two(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(command.time, "sleep", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        call_command("reconcile", "--pool", pool.name, "--interval", "5", "--now", T0.isoformat())
    assert sleeps == [5.0, 5.0]
    assert len(live_nodes(pool)) == 2 and live_nodes(other) == []
    assert capsys.readouterr().out.count(f"{pool.pk}\t") == 2


def test_time_to_capacity_is_measured_per_node_and_per_pool(actors, train_document):
    """Issue 3 §8 / O4: trigger -> node Ready -> first pod Running."""
    pool = approved_pool(actors, train_document)
    ready_at = run_until(pool, T0)
    node = live_nodes(pool)[0]
    simulated.pod_run(node_name=node.name, name="first", now=ready_at + timedelta(minutes=1))
    times = lifecycle.pool_capacity_times(pool=pool)
    assert times.nodes == 2 and times.slow == 0
    assert times.median_ready == times.max_ready == times.last_ready == ready_at - T0
    assert times.median_first_pod == ready_at - T0 + timedelta(minutes=1)


def test_a_one_off_wakeup_booked_twice_by_racing_workers_is_kept_once(db):
    """django-q2 schedule names are not unique: two workers booking the first wake-up at once
    insert two rows; the next booking keeps one (update_or_create would fail from then on)."""
    from pools.tasks import SOON, schedule_once

    for _ in range(2):
        Schedule.objects.create(name=SOON, func="pools.tasks.reconcile_all", schedule_type=Schedule.ONCE, repeats=1, next_run=T0)
    schedule_once(name=SOON, func="pools.tasks.reconcile_all", next_run=T0 + timedelta(seconds=30))
    assert list(Schedule.objects.filter(name=SOON).values_list("next_run", flat=True)) == [T0 + timedelta(seconds=30)]


def test_node_names_continue_after_the_highest_ever_taken_in_one_query(actors, train_document, django_assert_num_queries):
    """A pool's node names are `<pool>-<id>-<seq>`; a name is never reused (a terminated node
    keeps its name in the timeline), names of another shape do not count, and
    the next name costs one query however long the pool's history."""
    pool = approved_pool(actors, train_document)
    prefix = f"{pool.name}-{pool.pk}-"
    with django_assert_num_queries(1):
        assert lifecycle.node_name_next(pool) == f"{prefix}001"
    for name, phase in ((f"{prefix}001", "Ready"), (f"{prefix}007", "Terminated"), (f"{prefix}1000", "Ready"), (f"{prefix}x", "Ready")):
        Node.objects.create(pool=pool, name=name, phase=phase, zone=pool.zone, gpu_count=8, billing="monthly")
    assert lifecycle.node_name_next(pool) == f"{prefix}1001"
    assert lifecycle.node_names_next(pool, 3) == [f"{prefix}1001", f"{prefix}1002", f"{prefix}1003"]
    Node.objects.filter(name=f"{prefix}1000").delete()
    assert lifecycle.node_name_next(pool) == f"{prefix}008"  # the terminated 007 still counts


def test_a_repeated_event_is_counted_on_its_row_like_the_kubernetes_recorder(actors, train_document, django_assert_num_queries):
    """The same (object, type, reason, message) within the window bumps `count` and
    `lastTimestamp` (two statements, the row is not read back); a different message or a
    repeat after the window is a new row."""
    from pools.services.events import AGGREGATION_WINDOW, event_record

    pool = approved_pool(actors, train_document)
    first = event_record(pool=pool, reason="DrainWaiting", message="1 pod refuses eviction", type="Warning", now=T0)
    with django_assert_num_queries(2):
        again = event_record(pool=pool, reason="DrainWaiting", message="1 pod refuses eviction", type="Warning", now=T0 + timedelta(minutes=1))
    assert (again.pk, again.count, again.last_timestamp) == (first.pk, 2, T0 + timedelta(minutes=1))
    stored = PoolEvent.objects.get(pk=first.pk)
    assert (stored.count, stored.first_timestamp, stored.last_timestamp) == (2, T0, T0 + timedelta(minutes=1))
    other = event_record(pool=pool, reason="DrainWaiting", message="2 pods refuse eviction", type="Warning", now=T0 + timedelta(minutes=1))
    later = event_record(pool=pool, reason="DrainWaiting", message="1 pod refuses eviction", type="Warning", now=T0 + timedelta(minutes=1) + AGGREGATION_WINDOW + timedelta(seconds=1))
    assert len({first.pk, other.pk, later.pk}) == 3 and other.count == later.count == 1
