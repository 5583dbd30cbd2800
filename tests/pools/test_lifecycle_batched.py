"""The batched pass over all pools (issue 9) does exactly what reconciling each pool on its own
does: `reconcile_all` skips the per-pool pass for pools where `lifecycle_rules.work_needed`
finds nothing to do, so a step it forgot would show up here as a difference. The same fleet
(provisioning with a failed step, a machine given up on and replaced, heartbeats that stop, a
lease that nears its end, a reclaimed preemptible node, a lowered `nodeCount.max`, a pool being
deleted, pods that refuse eviction) is driven tick by tick
once with `reconcile_all` and once with `pool_reconcile` per pool, and every tick's state is
compared."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import transaction

from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine
from pools.providers import simulated, simulated_cluster
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool

TICK = timedelta(seconds=30)
MACHINE_ID = re.compile(r"sim-[a-z0-9-]+-[0-9a-f]{12}")  # the cloud's ids are random
NODE_POOL_ID = re.compile(r"(?<=-)\d+(?=-\d{3}\b)")


def norm(text: str | None) -> str | None:
    """Ids that differ between two runs (PostgreSQL does not roll sequences back): the cloud's
    machine ids, and the pool id inside node names (`<pool>-<pool id>-<seq>`)."""
    return text if text is None else NODE_POOL_ID.sub("#", MACHINE_ID.sub("sim-…", text))


def state() -> tuple:
    """What a pass may change, without ids that differ from run to run."""
    return (
        [(norm(name), *rest) for name, *rest in Node.objects.order_by("name").values_list(
            "name", "phase", "step", "step_due_at", "attempts", "release_reason", "lease_end", "lease_notified_at", "drain_deadline"
        )],  # fmt: skip
        sorted(((pool, norm(node), *rest) for pool, node, *rest in PoolEvent.objects.values_list("pool__name", "node__name", "type", "reason", "count")), key=repr),
        list(PoolOrder.objects.order_by("pk").values_list("pool__name", "kind", "status")),
        [
            (name, phase, norm(reason), generation, [{**c, "message": norm(c["message"])} for c in conditions], *rest)
            for name, phase, reason, generation, conditions, *rest in GpuNodePool.objects.order_by("pk").values_list(
                "name", "phase", "pending_reason", "observed_generation", "conditions", "node_counts", "deleted_at"
            )
        ],
    )


def drive(actors, step) -> list[tuple]:
    """Build the fleet, then tick `step(now)` for 16 minutes with changes along the way."""
    train = approved_pool(actors, make_document("train", nodeCount={"min": 2, "max": 3}))
    approved_pool(actors, make_document("small", nodeCount={"min": 1, "max": 1}))
    spot = approved_pool(actors, make_document("spot", nodeCount={"min": 1, "max": 2}, preemptible=True))
    doomed = approved_pool(actors, make_document("doomed", nodeCount={"min": 1, "max": 1}, region="cn-north-1a", gpuModel="T4", nodeType="GPU_2_CARD"))
    shrink = approved_pool(actors, make_document("shrink", nodeCount={"min": 2, "max": 2}, region="cn-north-1a", gpuModel="T4", nodeType="GPU_2_CARD"))
    approved_pool(actors, make_document("flaky", nodeCount={"min": 1, "max": 1}, region="cn-north-1a", gpuModel="T4", nodeType="GPU_2_CARD"))
    simulated.failure_inject(step="image_pull", times=1, token_prefix="train-")
    simulated.failure_inject(step="boot", times=2, token_prefix="flaky-")  # given up on, then replaced
    states, now = [], T0
    while now <= T0 + timedelta(minutes=16):
        if now == T0 + timedelta(minutes=5):  # lower nodeCount.max: one node is surplus, its pod holds the drain
            first = Node.objects.filter(pool=shrink, phase="Ready").order_by("name").first()
            simulated.pod_run(node_name=first.name, name="holdout", eviction_blocked=True, now=now)
            pool = GpuNodePool.objects.get(pk=shrink.pk)
            services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": {**pool.document["spec"], "nodeCount": {"min": 1, "max": 1}}}, now=now)
        if now == T0 + timedelta(minutes=6):  # agents report once, then go silent
            Node.objects.filter(pool=train, phase="Ready").update(last_heartbeat=now)
            first = Node.objects.filter(pool=train, phase="Ready").order_by("name").first()
            Node.objects.filter(pk=first.pk).update(lease_end=now + timedelta(days=2))  # inside the 3-day notice
        if now == T0 + timedelta(minutes=7):
            machine = Node.objects.filter(pool=spot, phase="Ready").order_by("name").first()
            simulated.reclaim_inject(provider_id=machine.provider_id, now=now, notice=timedelta(minutes=2))
            busy = Node.objects.filter(pool=doomed, phase="Ready").first()
            simulated.pod_run(node_name=busy.name, name="stubborn", eviction_blocked=True, now=now)
            simulated.pod_run(node_name=busy.name, name="willing", now=now)
            services.pool_delete(user=actors["lead"], pool=GpuNodePool.objects.get(pk=doomed.pk), now=now)
        step(now)
        states.append(state())
        now += TICK
    assert SimMachine.objects.exists()
    return states


def run(actors, step, scenario=None) -> list[tuple]:
    with transaction.atomic():
        states = (scenario or drive)(actors, step)
        transaction.set_rollback(True)
    return states


def per_pool(now):
    for pool_id in GpuNodePool.objects.filter(deleted_at__isnull=True).order_by("pk").values_list("pk", flat=True):
        assert lifecycle.pool_reconcile(pool_id=pool_id, now=now).claimed


def batched(now):
    assert all(r.claimed and not r.error for r in lifecycle.reconcile_all(now=now))


@pytest.mark.django_db
def test_the_batched_pass_does_what_reconciling_each_pool_does(actors, settings):
    settings.EBCLOUD_PROVISION_MAX_ATTEMPTS = 2
    one_by_one = run(actors, per_pool)
    together = run(actors, batched)
    assert len(together) == len(one_by_one)
    for tick, (a, b) in enumerate(zip(one_by_one, together, strict=True)):
        assert a == b, f"tick {tick}: the batched pass differs: " + "; ".join(
            f"{x} != {y}" for part_a, part_b in zip(a, b, strict=True) for x, y in zip(part_a, part_b, strict=False) if x != y
        )
    final_reasons = {reason for _, _, _, reason, _ in together[-1][1]}
    # The fleet went through what the test means to cover.
    assert {"NodeReady", "ImagePullFailed", "ProvisioningFailed", "NodeStatusUnknown", "LeaseExpiring", "ReclaimNotice", "ScaledIn", "DrainWaiting", "PoolReady"} <= final_reasons
    assert ("doomed", "Deleting") in {(name, phase) for name, phase, *_ in together[-1][3]}


def slow(actors, step) -> list[tuple]:
    """A node whose image pull runs 20 minutes: past 15 minutes it is slow to capacity (O4)
    while its step is still running, so only the slow-capacity check has work to do."""
    approved_pool(actors, make_document("slow", nodeCount={"min": 1, "max": 1}))
    states, now = [], T0
    while now <= T0 + timedelta(minutes=17):
        step(now)
        states.append(state())
        now += TICK
    return states


@pytest.mark.django_db
def test_a_node_slow_to_capacity_is_reported_by_the_batched_pass_too(actors, settings):
    settings.EBCLOUD_SIM_STEP_SECONDS = {**settings.SIM_STEP_SECONDS_REALISTIC, "image_pull": 1200}
    one_by_one = run(actors, per_pool, slow)
    together = run(actors, batched, slow)
    assert together == one_by_one
    assert [reason for _, _, _, reason, _ in together[-1][1]].count("SlowCapacity") == 1


@pytest.mark.django_db
def test_the_batched_pass_runs_only_the_steps_a_pool_calls_for(actors, monkeypatch):
    """Issue 9: within `reconcile_all`, a pool runs the steps its rows call for
    (`lifecycle_rules.steps_needed`), asked again after each step that ran; `pool_reconcile`
    runs them all (the test above shows both leave the same state at every tick)."""
    from pools.core import lifecycle as lifecycle_rules

    assert tuple(name for name, _ in lifecycle._STEPS) == lifecycle_rules.PASS_STEPS
    ran: list[str] = []

    def spy(name, step):
        def run_step(p):
            ran.append(name)
            step(p)

        return run_step

    monkeypatch.setattr(lifecycle, "_STEPS", tuple((name, spy(name, step)) for name, step in lifecycle._STEPS))
    pool = approved_pool(actors, make_document("train", nodeCount={"min": 2, "max": 2}))
    batched(T0)
    assert ran == ["OrderApproved", "NodesMissing", "StepDue"]  # paid, so nodes are missing; created, so their steps are due
    now = T0
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        now += TICK
        assert now < T0 + timedelta(hours=1)
        ran.clear()
        batched(now)
        assert set(ran) <= {"StepDue", "SlowCapacity"}
    ran.clear()
    batched(now + TICK)
    assert ran == []  # quiet: not even claimed
    node = Node.objects.filter(pool=pool).order_by("name").first()
    simulated.pod_run(node_name=node.name, name="holdout", eviction_blocked=True, now=now)
    Node.objects.filter(pk=node.pk).update(release_reason=lifecycle_rules.SCALED_IN, phase="Draining", drain_deadline=now + timedelta(hours=1))
    simulated_cluster.SimulatedCluster().cordon(name=node.name)  # as a drain's start does (else the pass cordons it: NodeDrift)
    batched(now + 2 * TICK)
    assert ran == ["Draining"]  # its pod refuses eviction: the drain waits, and nothing else has work
    ran.clear()
    Node.objects.filter(pk=node.pk).update(release_reason=lifecycle_rules.RECLAIMED)  # a slot to refill
    batched(now + 3 * TICK)
    assert ran == ["Draining", "NodesMissing", "StepDue"]
