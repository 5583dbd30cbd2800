"""The scheduler extender's state, kept between requests and updated from what changed, is always
the state the scheduler pass builds from scratch (`cluster_state`) on the same read model."""

from __future__ import annotations

from collections import Counter

from pools.core.scheduling.fragmentation import PodShape
from pools.models import Node, Team
from pools.models.pods import Pod
from pools.selectors.cluster import cluster_state, live_nodes
from pools.selectors.extender_state import ExtenderState
from tests.pools.pod_helpers import pool_with_nodes, submit


def from_scratch() -> dict:
    nodes = live_nodes()
    return cluster_state(nodes, list(Pod.objects.live().filter(phase=Pod.Phase.RUNNING).order_by("-priority", "submitted_at", "id")))


def assert_same(state: ExtenderState) -> None:
    kept, fresh = state.refresh(), from_scratch()
    assert kept.keys() == fresh.keys()
    for name, node in fresh.items():
        mine = kept[name]
        assert (mine.cpu_used, mine.memory_used, mine.gpu_free, set(mine.bound)) == (node.cpu_used, node.memory_used, node.gpu_free, set(node.bound)), name
        assert (mine.labels, mine.taints, mine.unschedulable, mine.ready, mine.pool, mine.teams) == (node.labels, node.taints, node.unschedulable, node.ready, node.pool, node.teams), name
    assert +state.shapes == Counter(PodShape.of(b.pod) for node in fresh.values() for b in node.bound.values())


def run(pod: Pod, node: str, gpus=()) -> None:
    Pod.objects.filter(pk=pod.pk).update(phase=Pod.Phase.RUNNING, node=Node.objects.get(name=node), gpu_indices=list(gpus))


def test_the_kept_state_follows_every_change_of_the_read_model(actors):
    pool_with_nodes(actors["lead"], nodes=3, node_labels={"pool": "train"})
    member = actors["member"]
    pods = [submit(member, f"p{i}", gpus=1 + i % 2) for i in range(6)]
    for i, pod in enumerate(pods[:4]):
        run(pod, f"train-pool-a-{i % 2}")
    state = ExtenderState()
    assert_same(state)

    run(pods[4], "train-pool-a-2")  # a pod starts
    assert_same(state)
    Pod.objects.filter(pk=pods[0].pk).update(phase=Pod.Phase.SUCCEEDED)  # one ends, one starts on its node
    run(pods[5], "train-pool-a-0")
    assert_same(state)
    run(pods[1], "train-pool-a-2")  # a pod moves (requeued and bound elsewhere)
    assert_same(state)
    share = submit(member, "share", gpus=1, milli=300, priority=5)
    run(share, "train-pool-a-1")  # a higher-priority share: the node is counted in the pass's order
    assert_same(state)

    Node.objects.filter(name="train-pool-a-1").update(labels={"pool": "other"}, unschedulable=True)  # relabelled, cordoned
    assert_same(state)
    Node.objects.filter(name="train-pool-a-2").update(phase=Node.Phase.TERMINATED)  # gone with its pods
    assert_same(state)
    Node.objects.filter(name="train-pool-a-2").update(phase=Node.Phase.READY)  # back
    assert_same(state)
    Pod.objects.filter(pk=pods[2].pk).update(deleted_at=pods[2].submitted_at)  # deleted in the cluster
    assert_same(state)


def test_a_pool_that_changes_rebuilds_its_nodes(actors, teams):
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    state = ExtenderState()
    assert_same(state)
    pool.document["spec"]["schedulingPolicy"] = "spread"
    pool.document["spec"]["sharedWith"] = ["inference", "research"]  # lent to a team, and to one that does not exist yet
    pool.save(update_fields=["document"])
    assert_same(state)
    assert state.pools[pool.name].document["spec"]["schedulingPolicy"] == "spread"
    Team.objects.create(name="Research", slug="research")  # now it does: the pool's nodes take its pods
    assert_same(state)
    assert len(next(iter(state.states.values())).teams) == 3
