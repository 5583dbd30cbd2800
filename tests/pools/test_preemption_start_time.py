"""Preemption weighs when victims started, as kube-scheduler 1.37 does (util.GetPodStartTime,
GetEarliestPodStartTime, MoreImportantPod): among nodes equal on every earlier criterion, the
one whose highest-priority victims started latest loses the least work; on a node the older of
two pods of equal priority is the more important (reprieved first); a pod without a start time
counts as started now. Our rule that checkpointable pods go first stays ahead of both.

The core first (no database), then the start time as the read model and the mirror carry it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pools.core.scheduling.nodes import NodeState, Pod
from pools.core.scheduling.preempt import preempt, victims_on

NS = "algorithm"
T = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def node(name: str, *pods: tuple[Pod, tuple[int, ...]]) -> NodeState:
    state = NodeState(name=name, cpu_milli=64_000, memory_mib=512_000, gpu_count=8, gpu_model="A100")
    for running, indices in pods:
        state.bind(running, indices)
    return state


def pod(name: str, gpus: int = 8, priority: int = 0, started: timedelta | None = None, **kw) -> Pod:
    """A pod started `started` after T (None: no start time)."""
    return Pod(f"{NS}/{name}", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=priority,
               started_at=None if started is None else T + started, **kw)  # fmt: skip


def vip(gpus: int = 8) -> Pod:
    return Pod(f"{NS}/vip", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=100)


HALF, OTHER_HALF = (0, 1, 2, 3), (4, 5, 6, 7)


# --- among nodes: the latest start of the highest-priority victims -------------------------------


def test_of_two_nodes_equal_on_every_other_criterion_the_one_whose_victims_started_latest_is_chosen():
    """Same violations, priorities, sum and count: node "b" (started an hour later) wins, where
    the name alone would give "a"."""
    a = node("a", (pod("old", started=timedelta(0)), tuple(range(8))))
    b = node("b", (pod("new", started=timedelta(hours=1)), tuple(range(8))))
    plan = preempt(vip(), [a, b])
    assert (plan.node, plan.victim_names) == ("b", (f"{NS}/new",))
    assert preempt(vip(), [b, a]).node == "b"  # not the order they are tried in


def test_only_the_victims_of_the_highest_priority_count_for_the_start_time():
    """GetEarliestPodStartTime looks at the highest-priority victims only: "z"'s priority-5
    victim started later than "a"'s, whatever their priority-1 victims' starts (z's started
    long before any of a's); by the name, or by the earliest of all victims, "a" would win."""
    z = node("z", (pod("z-high", gpus=4, priority=5, started=timedelta(hours=2)), HALF),
             (pod("z-low", gpus=4, priority=1, started=timedelta(hours=-10)), OTHER_HALF))  # fmt: skip
    a = node("a", (pod("a-high", gpus=4, priority=5, started=timedelta(hours=1)), HALF),
             (pod("a-low", gpus=4, priority=1, started=timedelta(hours=3)), OTHER_HALF))  # fmt: skip
    assert preempt(vip(), [a, z]).node == "z"
    assert preempt(vip(), [z, a]).node == "z"


def test_the_earliest_of_the_highest_priority_victims_decides():
    """Two victims of the top priority on "a": the earlier of them (T) is a's start, earlier
    than "b"'s only one (T+1h); a's later victim (T+5h) does not make "a" the later node."""
    a = node("a", (pod("a1", gpus=4, started=timedelta(0)), HALF), (pod("a2", gpus=4, started=timedelta(hours=5)), OTHER_HALF))
    b = node("b", (pod("b1", gpus=4, started=timedelta(hours=1)), HALF), (pod("b2", gpus=4, started=timedelta(hours=1)), OTHER_HALF))
    assert preempt(vip(), [a, b]).node == "b"


def test_a_victim_without_a_start_time_counts_as_started_now():
    """GetPodStartTime: no status.startTime is time.Now(), later than every recorded start, so
    the node whose top victim has none wins; where a top victim has one, the earliest recorded
    start decides (the unstarted pod is not earlier than it)."""
    a = node("a", (pod("started", started=timedelta(hours=1)), tuple(range(8))))
    b = node("b", (pod("unstarted"), tuple(range(8))))
    assert preempt(vip(), [a, b]).node == "b"
    mixed = node("a", (pod("a-unstarted", gpus=4), HALF), (pod("a-started", gpus=4, started=timedelta(0)), OTHER_HALF))
    later = node("b", (pod("b1", gpus=4, started=timedelta(hours=1)), HALF), (pod("b2", gpus=4, started=timedelta(hours=1)), OTHER_HALF))
    assert preempt(vip(), [mixed, later]).node == "b"


def test_two_nodes_without_start_times_tie_to_the_smaller_name():
    a = node("a", (pod("x"), tuple(range(8))))
    b = node("b", (pod("y"), tuple(range(8))))
    assert preempt(vip(), [b, a]).node == "a"


def test_the_start_time_comes_after_the_earlier_criteria():
    """Fewer victims beats a later start: "b" started later but needs two victims."""
    a = node("a", (pod("one", started=timedelta(0)), tuple(range(8))))
    b = node("b", (pod("b1", gpus=4, started=timedelta(hours=1)), HALF), (pod("b2", gpus=4, started=timedelta(hours=1)), OTHER_HALF))
    assert preempt(vip(), [a, b]).node == "a"


def test_fewer_non_checkpointable_victims_still_comes_before_the_start_time():
    """Our rule (+): the node whose victim is checkpointable wins over the later-started one."""
    a = node("a", (pod("ckpt", started=timedelta(0), checkpointable=True), tuple(range(8))))
    b = node("b", (pod("keep", started=timedelta(hours=1)), tuple(range(8))))
    assert preempt(vip(), [a, b]).node == "a"


# --- on a node: the older of two pods of equal priority is reprieved first -----------------------


def test_on_a_node_the_older_of_two_equal_priority_pods_stays_and_the_newer_goes():
    """MoreImportantPod: equal priority, the earlier start is more important, so it is
    reprieved first and the newer pod is the victim (by name the older would go)."""
    state = node("n", (pod("a-new", gpus=4, started=timedelta(hours=1)), HALF), (pod("b-old", gpus=4, started=timedelta(0)), OTHER_HALF))
    found = victims_on(vip(gpus=4), state)
    assert [v.name for v in found.victims] == [f"{NS}/a-new"]
    assert found.gpu_indices == HALF


def test_on_a_node_a_pod_without_a_start_time_is_less_important_than_a_started_one():
    state = node("n", (pod("a-unstarted", gpus=4), HALF), (pod("b-started", gpus=4, started=timedelta(hours=5)), OTHER_HALF))
    assert preempt(vip(gpus=4), [state]).victim_names == (f"{NS}/a-unstarted",)


def test_on_a_node_priority_comes_before_the_start_time():
    state = node("n", (pod("new-high", gpus=4, priority=5, started=timedelta(hours=1)), HALF),
                 (pod("old-low", gpus=4, priority=1, started=timedelta(0)), OTHER_HALF))  # fmt: skip
    assert preempt(vip(gpus=4), [state]).victim_names == (f"{NS}/old-low",)


def test_on_a_node_a_checkpointable_pod_still_goes_before_a_newer_one():
    """Our rule (+) stays first: the checkpointable pod goes though it is the older."""
    state = node("n", (pod("a-new", gpus=4, started=timedelta(hours=1)), HALF),
                 (pod("b-old-ckpt", gpus=4, started=timedelta(0), checkpointable=True), OTHER_HALF))  # fmt: skip
    assert preempt(vip(gpus=4), [state]).victim_names == (f"{NS}/b-old-ckpt",)


def test_the_victims_are_listed_by_the_node_most_important_first_and_by_the_plan_least_important_first():
    """Four equal-priority pods of 2 GPUs, all needed: the node lists them as kube-scheduler does
    (oldest first, the unstarted one last); the plan the other way round (the newest first)."""
    pods = [pod("p-unstarted", gpus=2), pod("q-mid", gpus=2, started=timedelta(hours=1)),
            pod("r-old", gpus=2, started=timedelta(0)), pod("s-new", gpus=2, started=timedelta(hours=2))]  # fmt: skip
    state = node("n", *((p, (2 * i, 2 * i + 1)) for i, p in enumerate(pods)))
    found = victims_on(vip(), state)
    assert [v.name.split("/")[1] for v in found.victims] == ["r-old", "q-mid", "s-new", "p-unstarted"]
    plan = preempt(vip(), [state])
    assert [name.split("/")[1] for name in plan.victim_names] == ["p-unstarted", "s-new", "q-mid", "r-old"]


def test_the_start_time_changes_neither_equality_nor_the_shape_the_schedulers_cache_on():
    started, unstarted = pod("x", started=timedelta(0)), pod("x")
    assert started == unstarted and started.shape_key == unstarted.shape_key


# --- the start time as the read model and the mirror carry it -----------------------------------


def test_the_mirror_carries_status_start_time_into_the_cores_pod():
    """A real API server's pod: its status.startTime (Running) reaches the core's pod through the
    read model's fields; a Pending pod's does not (it is not running yet)."""
    from pools.models.pods import Pod as PodRow
    from pools.providers.kubernetes_pods import pod_fields
    from pools.selectors.cluster import core_pod_of

    def core_of(phase: str):
        document = {
            "metadata": {"name": "train", "namespace": NS, "uid": "u-1", "creationTimestamp": "2026-12-01T07:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase, "startTime": "2026-12-01T08:30:00Z"},
        }
        fields = pod_fields(document, now=T)
        fields.pop("node_name")
        return core_pod_of(PodRow(**fields))

    assert core_of("Running").started_at == datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    assert core_of("Pending").started_at is None


@pytest.mark.django_db
def test_the_scheduler_pass_preempts_on_the_node_whose_pod_started_latest(actors):
    """Two equal pods on two nodes; the one on -1 started later (its row's `started_at`): the
    pass evicts it, where the node name alone would pick -0."""
    from pools.controllers.scheduler import scheduler_pass
    from pools.models.pods import Pod as PodRow
    from tests.pools.pod_helpers import T0, pool_with_nodes, submit

    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    submit(actors["member"], "first", gpus=8, cpu="1", memory="1Gi")
    submit(actors["member"], "second", gpus=8, cpu="1", memory="1Gi")
    scheduler_pass(now=T0)
    on = dict(PodRow.objects.values_list("node__name", "name"))
    assert set(on) == {"train-pool-a-0", "train-pool-a-1"}
    PodRow.objects.filter(name=on["train-pool-a-1"]).update(started_at=T0 + timedelta(minutes=30))
    submit(actors["member"], "vip", gpus=8, cpu="1", memory="1Gi", priority=100)
    result = scheduler_pass(now=T0 + timedelta(hours=1))
    assert result.preempted == [f"{NS}/{on['train-pool-a-1']}"]
    assert PodRow.objects.get(name="vip").node.name == "train-pool-a-1"
    assert PodRow.objects.get(name=on["train-pool-a-0"]).phase == "Running"
