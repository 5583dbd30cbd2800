"""A pool lent to a team (`spec.sharedWith`) is room for that team's Pending pods, as the
scheduler sees it: a guest's pod that fits the free room of a lent pool's Ready node buys no
burst node on the guest's own pool (CA's filter-out-schedulable runs the scheduler's filters,
the pool's teams among them). A lent pool's upcoming node is not: it was bought for its owner's
Pending pods, which take it first. A pool of another team that is not lent to it is no room
for it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.controllers.autoscaler import pool_autoscale
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node
from pools.models.pods import Pod
from tests.pools.autoscaler_helpers import memory_used
from tests.pools.pod_helpers import T0, pool_with_nodes, submit
from tests.pools.test_autoscaler_ca_rules import burst_nodes, fill, train_pool


@pytest.mark.parametrize("phase", [Node.Phase.READY, Node.Phase.PROVISIONING])
@pytest.mark.parametrize("lent", [True, False])
def test_a_guests_pod_that_fits_a_lent_pool_buys_no_node_on_its_own_pool(actors, lent, phase):
    own = train_pool(actors)
    fill(actors)  # the team's own nodes are full
    memory_used(own, 95)
    theirs = pool_with_nodes(actors["other_lead"], name="their-pool", nodes=1, phase=phase, node_labels={"gpu-class": "a100", "pool": "train"},
                             **({"sharedWith": ["algorithm"]} if lent else {}))  # fmt: skip
    submit(actors["member"], "queued-0", gpus=8)
    result = pool_autoscale(pool_id=own.pk, now=T0)
    if not lent or phase != Node.Phase.READY:
        assert result.reason == "ScaledUp" and burst_nodes(own).count() == 1, result
        return
    assert result.reason == "PodsFitUpcomingOrFreeCapacity" and not burst_nodes().exists(), result
    scheduler_pass(now=T0 + timedelta(seconds=30))  # where the autoscaler counted it, the scheduler places it
    assert Pod.objects.get(name="queued-0").node.pool == theirs


def test_a_lent_pools_upcoming_node_is_its_owners_first(actors):
    """The owner's Pending pod waits for the lent pool's one starting node: the guest's pod
    is not counted onto it too (two 8-GPU pods on one 8-GPU node), its own pool scales up."""
    own = train_pool(actors)
    fill(actors)
    memory_used(own, 95)
    pool_with_nodes(actors["other_lead"], name="their-pool", nodes=1, phase=Node.Phase.PROVISIONING,
                    node_labels={"gpu-class": "a100", "pool": "train"}, sharedWith=["algorithm"])  # fmt: skip
    submit(actors["other_lead"], "owner-pod", gpus=8, namespace="inference")
    submit(actors["member"], "guest-pod", gpus=8)
    assert pool_autoscale(pool_id=own.pk, now=T0).reason == "ScaledUp" and burst_nodes(own).count() == 1
