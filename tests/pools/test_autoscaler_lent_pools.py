"""A pool lent to a team (`spec.sharedWith`) is room for that team's Pending pods, as the
scheduler sees it: a guest's pod that fits the free room of a lent pool's Ready node, or an
upcoming node of it, buys no burst node on the guest's own pool (CA's filter-out-schedulable
and upcoming nodes run the scheduler's filters, the pool's teams among them). A pool of another
team that is not lent to it is no room for it."""

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
    if not lent:
        assert result.reason == "ScaledUp" and burst_nodes(own).count() == 1
        return
    assert result.reason == "PodsFitUpcomingOrFreeCapacity" and not burst_nodes().exists(), result
    if phase == Node.Phase.READY:  # where the autoscaler counted it, the scheduler places it
        scheduler_pass(now=T0 + timedelta(seconds=30))
        assert Pod.objects.get(name="queued-0").node.pool == theirs
