"""A Pending pod whose pool's Ready nodes are busy while more of its nodes are still starting is
told it waits for those, named with their phase (Cluster Autoscaler's "waiting for node being
provisioned"), instead of being told to grow the pool (seed T2)."""

from __future__ import annotations

from datetime import timedelta

from pools.controllers.scheduler import scheduler_pass
from pools.core.scheduling.nodes import NodeState
from pools.core.scheduling.waiting import PoolProspect, starting_hint
from pools.models import Node
from pools.models.pods import Pod
from tests.pools.pod_helpers import T0, pool_with_nodes, submit


def busy_pool(actors, starting=()):
    """train-pool-a: one Ready node (8 GPUs) that a first pod fills, and nodes still starting."""
    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"}, nodeCount={"min": 0, "max": 4})
    for i, phase in enumerate(starting):
        node = Node.objects.create(pool=pool, name=f"train-pool-a-new-{i}", phase=phase, zone=pool.zone, gpu_count=8)
        Node.objects.filter(pk=node.pk).update(created_at=T0 + timedelta(minutes=i))
    submit(actors["member"], "first", gpus=8)
    return pool


def hints_of_second(actors) -> list[str]:
    second = submit(actors["member"], "second", gpus=8)
    scheduler_pass(now=T0)
    second.refresh_from_db()
    assert second.phase == "Pending"
    return second.hints


def test_the_pod_waits_for_the_node_that_is_starting_and_is_not_told_to_grow_the_pool(actors):
    busy_pool(actors, starting=[Node.Phase.PROVISIONING])
    hints = hints_of_second(actors)
    (hint,) = [h for h in hints if h.startswith("pool train-pool-a: ")]
    assert hint == ("pool train-pool-a: its 1 Ready node is busy and 1 more node is starting: train-pool-a-new-0 (Provisioning). "
                    "This pod waits for it: a new node is usually Ready within 5–10 minutes (`ebcloud node-pool events train-pool-a` "
                    "shows each step); no need to grow the pool or order another.")  # fmt: skip
    assert not any("does not burst" in h or "a new node would fit the pod" in h for h in hints), hints


def test_several_starting_nodes_are_named_with_their_phases_oldest_first(actors):
    busy_pool(actors, starting=[Node.Phase.REGISTERING, Node.Phase.ORDERING])
    (hint,) = [h for h in hints_of_second(actors) if h.startswith("pool train-pool-a: ")]
    assert "2 more nodes are starting: train-pool-a-new-0 (Registering), train-pool-a-new-1 (Ordering). This pod waits for one of them" in hint


def test_without_a_starting_node_the_pool_growth_hint_stays(actors):
    busy_pool(actors)
    hints = hints_of_second(actors)
    assert any(h.startswith("pool train-pool-a has 1 Ready node(s) of at most 4: a new node would fit the pod, but the pool does not burst") for h in hints)
    assert not any("starting" in h for h in hints)


def test_a_node_being_released_is_not_waited_for(actors):
    pool = busy_pool(actors, starting=[Node.Phase.PROVISIONING])
    Node.objects.filter(pool=pool, phase=Node.Phase.PROVISIONING).update(release_reason="scale-in")
    assert not any("starting" in h for h in hints_of_second(actors))


def test_more_than_three_starting_nodes_are_counted_not_all_named():
    template = NodeState(name="t", cpu_milli=1000, memory_mib=1024, gpu_count=8, pool="p")
    nodes = tuple((f"p-{i}", "Initializing") for i in range(5))
    hint = starting_hint(PoolProspect(template=template, min_nodes=0, max_nodes=9, live=2, starting_nodes=nodes), 2)
    assert hint.startswith("pool p: its 2 Ready nodes are busy and 5 more nodes are starting: p-0 (Initializing), p-1 (Initializing), p-2 (Initializing) and 2 more. ")


def test_only_the_pods_the_starting_nodes_hold_are_told_to_wait_for_them(actors):
    """One node starting, three Pending pods that each need a whole node: the first in the
    queue waits for it; the other two are told what the pool's size says (here: it is at its
    nodeCount.max of 2), not that a node is coming for them too."""
    pool = busy_pool(actors, starting=[Node.Phase.PROVISIONING])
    pool.max_nodes = 2
    pool.save(update_fields=["max_nodes"])
    for name in ("second", "third", "fourth"):
        submit(actors["member"], name, gpus=8)
    scheduler_pass(now=T0)
    told = {name: [h for h in Pod.objects.get(name=name).hints if h.startswith("pool train-pool-a")] for name in ("second", "third", "fourth")}
    assert [name for name, hints in told.items() if any("This pod waits for it" in h for h in hints)] == ["second"]
    assert all(any("at its nodeCount.max (2 nodes)" in h for h in told[name]) for name in ("third", "fourth")), told


def test_a_guest_of_a_busy_lent_pool_is_told_whom_to_ask_not_its_owners_commands(actors):
    """A borrower's pod was told to `ebcloud node-pool scale train-pool-a --min N` or to enable
    burst: commands its lead gets a 404 for, and that would not help (a guest's pods never grow
    a lent pool). Found by a hostile-input probe."""
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"}, nodeCount={"min": 0, "max": 4}, sharedWith=["inference"])
    submit(actors["member"], "first", gpus=8)
    guest = submit(actors["other_lead"], "guest", gpus=8, namespace="inference")
    scheduler_pass(now=T0)
    guest.refresh_from_db()
    assert guest.phase == "Pending"
    assert ("pool train-pool-a (busy): it is lent to your team, and a lent pool grows only for its own team's pods, "
            "so this pod waits for room on it: ask the lead of team algorithm for more.") in guest.hints
    assert not any("node-pool scale" in h or "enable burst" in h for h in guest.hints), guest.hints


def test_a_pool_whose_last_scale_up_a_gpu_quota_held_back_says_so_instead_of_promising_a_burst_node(actors):
    """The lead was told "the autoscaler adds a burst node when the pool's scaling policy asks"
    while its team's GPU quota held every scale-up back (found by a QA sweep): the hint names
    the quota and who raises it, once the autoscaler's last decision says so."""
    from pools.models import ScalingActivity
    from tests.pools.autoscaler_helpers import SCALING

    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"}, nodeCount={"min": 0, "max": 4}, scaling=SCALING,
                           burst={"enabled": True, "maxNodes": 3})  # fmt: skip
    submit(actors["member"], "first", gpus=8)
    (promised,) = [h for h in hints_of_second(actors) if "a new node would fit the pod" in h]
    assert "the autoscaler adds a burst node" in promised
    held = "Scale-up to 2 not done: 1 on-demand node(s) of 8 GPU(s) would pass the cn-north-1 A100_80G quota for team algorithm"
    ScalingActivity.objects.create(pool=pool, at=T0, from_nodes=1, to_nodes=1, reason="QuotaExceeded", message=held, blocked=True)
    scheduler_pass(now=T0 + timedelta(minutes=1))
    hints = Pod.objects.get(name="second").hints
    assert not any("a new node would fit the pod" in h for h in hints), hints
    (hint,) = [h for h in hints if h.startswith("pool train-pool-a's")]
    assert hint == (f"pool train-pool-a's nodes are busy, and the autoscaler's last scale-up was held back by a GPU quota ({held}): "
                    "a platform admin raises that quota (Admin → Quotas); until then this pod waits for room.")
