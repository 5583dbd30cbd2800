"""A pod that leaves its node mid-hour (moved by a repack, evicted, requeued by the taint
manager) is charged on each node for the part of the hour it ran there (`PodPlacement`): its
time on the node it left is not that pool owner's idle, and the node it moves to is charged
only from the move."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import CostRecord, UsageRecord
from pools.controllers.scale_down import Move, repack
from pools.controllers.scheduler import scheduler_pass
from pools.models import Pod
from pools.models.pods import PodPlacement
from pools.providers.simulated_cluster import SimulatedCluster
from pools.services.pods import pods_bind
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def gpu_costs(hour=T0) -> dict[tuple[str, str], Decimal]:
    """The hour's GPU cost by (team, usage or idle)."""
    out: dict[tuple[str, str], Decimal] = {}
    for r in CostRecord.objects.filter(hour=hour, component="gpu").select_related("team"):
        out[r.team.slug, r.cost_kind] = out.get((r.team.slug, r.cost_kind), Decimal(0)) + r.amount
    return out


def pod_hours(hour=T0) -> dict[str, Decimal]:
    """The hour's pod GPU-hours by node."""
    return {r.node_name: r.quantity for r in UsageRecord.objects.filter(hour=hour, kind=UsageRecord.Kind.POD)}


def test_a_pod_repacked_mid_hour_is_charged_on_each_node_for_its_part(actors, teams):
    host = pool(actors["lead"], sharedWith=["inference"])
    n0 = node(host, "n-0")  # monthly: 26.88 an hour
    od = node(host, "od-0", billing="on_demand", created=T0 - HOUR, terminated=T0 + 31 * MINUTE)  # 51.67 for its 31 minutes
    job = pod(teams["inference"], od, "job", namespace="inference", gpus=8, started=T0 - HOUR)
    repack(host, od, [Move(pod=Pod.objects.get(pk=job.pk), node=n0, gpu_indices=tuple(range(8)))], T0 + 30 * MINUTE)
    meter()
    assert pod_hours() == {"od-0": Decimal(4), "n-0": Decimal(4)}
    # 30 of od-0's 31 minutes (50.00) and half of n-0's hour (13.44); the owner's idle is the rest.
    assert gpu_costs() == {("inference", "usage"): Decimal("63.44"), ("algorithm", "idle"): Decimal("15.11")}
    job.refresh_from_db()
    assert (job.node, job.placed_at, job.started_at) == (n0, T0 + 30 * MINUTE, T0 - HOUR)  # its run goes on


def test_a_pod_evicted_mid_hour_and_scheduled_again_is_charged_for_both_parts(actors, teams):
    host = pool(actors["lead"], sharedWith=["inference"])
    n0, n1 = node(host, "n-0"), node(host, "n-1")
    job = pod(teams["inference"], n0, "job", namespace="inference", gpus=8, started=T0 - HOUR)
    # At the drain's own clock (the lifecycle pass passes its `now`), not the wall clock.
    assert SimulatedCluster().evict_pods(pods=[("inference", "job")], reason="drain", now=T0 + 30 * MINUTE) == {("inference", "job")}
    assert pods_bind(binds={job.pk: (n1.pk, tuple(range(8)))}, now=T0 + 40 * MINUTE) == {job.pk}
    meter()
    assert pod_hours() == {"n-0": Decimal(4), "n-1": Decimal("2.666664")}
    # 50 minutes of a 26.88 node-hour, the 10 minutes it waited are idle (two nodes: 53.76).
    assert gpu_costs() == {("inference", "usage"): Decimal("22.40"), ("algorithm", "idle"): Decimal("31.36")}


def test_an_hour_metered_after_a_later_move_is_charged_where_the_pod_ran_then(actors, teams):
    host = pool(actors["lead"])
    n0, n1 = node(host, "n-0"), node(host, "n-1")
    job = pod(teams["algorithm"], n0, "job", gpus=8, started=T0 - HOUR)
    repack(host, n0, [Move(pod=Pod.objects.get(pk=job.pk), node=n1, gpu_indices=tuple(range(8)))], T0 + 90 * MINUTE)
    meter(hours=2)
    assert pod_hours(T0) == {"n-0": Decimal(8)}
    assert pod_hours(T0 + HOUR) == {"n-0": Decimal(4), "n-1": Decimal(4)}
    assert gpu_costs(T0 + HOUR) == {("algorithm", "usage"): Decimal("26.88"), ("algorithm", "idle"): Decimal("26.88")}


def test_a_pod_the_taint_manager_evicts_is_charged_until_it_left(actors, teams):
    host = pool(actors["lead"], sharedWith=["inference"])
    n0 = node(host, "n-0")
    job = pod(teams["inference"], n0, "job", namespace="inference", gpus=8, started=T0 - HOUR)
    n0.taints = [{"key": "maintenance", "value": "", "effect": "NoExecute"}]  # tolerated by no pod: evicts at once
    n0.save(update_fields=["taints"])
    scheduler_pass(now=T0 + 15 * MINUTE)
    job.refresh_from_db()
    assert (job.phase, job.node, job.started_at) == (Pod.Phase.PENDING, None, None)
    meter()
    assert pod_hours() == {"n-0": Decimal(2)}
    assert gpu_costs() == {("inference", "usage"): Decimal("6.72"), ("algorithm", "idle"): Decimal("20.16")}
    assert list(PodPlacement.objects.values_list("node_id", "started_at", "ended_at")) == [(n0.pk, T0 - HOUR, T0 + 15 * MINUTE)]
