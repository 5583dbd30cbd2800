"""A Pending pod's hints offer only levers that can work (seed T2, O3, O4).

The reviewer's repro on a fresh demo: a 2-GPU pod aimed at a pool of 1-GPU nodes was told both
that it can never fit there and to "wait, preempt lower-priority pods, repack, or raise the
pool's nodeCount.max"; and a busy pool at 2 nodes of max 6 without burst was told to raise its
max while the next hint rightly said nodeCount.min. Here, through the pure core: a pool too small
for the pod gets only the "can never fit" hint; a busy pool's hint names waiting always (what is
taken there is held by pods), preemption only where lower-priority pods the pod may evict would
make room (as kube-scheduler's own preemption, whose verdict the message ends with), a higher
PriorityClass only where the pods there would then make room, and a repack only where the pool's
free capacity put together holds the pod; never a node lever (the pool's own hint says that).
"""

from __future__ import annotations

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, Taint, Toleration

FH = ((NodeSelectorRequirement("pool", "In", ("fh",)),),)
TRAIN_TAINT = Taint("pool", "train", "NoSchedule")
TOLERATE_TRAIN = (Toleration("pool", "Equal", "train", "NoSchedule"),)


def fh_big() -> Pod:
    """The repro's pod: examples/pods/train-pod.yaml as fh-big-0, `pool In [fh]`, 2 GPUs, cpu 4, 16Gi."""
    return Pod("algorithm/fh-big-0", cpu_milli=4000, memory_mib=16 * 1024, gpu_count=2, priority=100, checkpointable=True,
               affinity_terms=FH, tolerations=TOLERATE_TRAIN)  # fmt: skip


def l40s(name: str) -> NodeState:
    """A node of fh-l40s: GPU_1_CARD, L40S, labelled pool=fh."""
    return NodeState(name, 16000, 128 * 1024, 1, "L40S", pool="fh-l40s", labels={"pool": "fh"})


def a100(name: str, pool: str = "p", **kw) -> NodeState:
    return NodeState(name, 128000, 1024 * 1024, 8, "A100_80G", pool=pool, **kw)


def busy(node: NodeState, *pods: tuple[str, int, int]) -> NodeState:
    """`node` running (name, GPUs, priority) pods of team algorithm, on its first free GPUs."""
    for name, gpus, priority in pods:
        first = node.gpu_free.index(1000)
        node.bind(Pod(f"algorithm/{name}", cpu_milli=1000, memory_mib=1024, gpu_count=gpus, priority=priority, team="algorithm"),
                  tuple(range(first, first + gpus)))  # fmt: skip
    return node


def wants(gpus: int = 2, priority: int = 100, **kw) -> Pod:
    return Pod("algorithm/w", cpu_milli=4000, memory_mib=16 * 1024, gpu_count=gpus, priority=priority, team="algorithm", **kw)


def test_a_pool_whose_nodes_can_never_hold_the_pod_gets_only_that_hint():
    """The repro: fh-l40s (two idle 1-GPU nodes) and train-pool-demo (8-GPU nodes the pod's
    affinity does not select). No wait, preemption, repack or nodeCount.max can fit a 2-GPU pod
    on a 1-GPU node, and kube-scheduler's preemption says as much."""
    nodes = [l40s("fh-l40s-0"), l40s("fh-l40s-1"),
             a100("train-pool-demo-0", "train-pool-demo", labels={"pool": "train"}, taints=(TRAIN_TAINT,)),
             a100("train-pool-demo-1", "train-pool-demo", labels={"pool": "train"}, taints=(TRAIN_TAINT,))]  # fmt: skip
    explanation = explain(fh_big(), nodes)
    assert explanation.message == ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. "
                                   "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")  # fmt: skip
    assert explanation.hints == (
        "pool fh-l40s (2 nodes): the pod requests 2 GPUs and a node has 1. To run there, ask for at most 1 GPU per pod "
        "(split the job, e.g. into data-parallel workers).",
        "pool train-pool-demo (2 nodes): required node affinity not met, failing (pool In [fh]). To run there, change the "
        "required node affinity to (pool In [fh, train]). (Or, instead of changing the pod's node selection, add nodeLabels: "
        "{pool: fh} to the pool spec.)",
    )


def test_the_same_pool_busy_with_one_gpu_pods_still_gets_only_the_never_fits_hint():
    """Busy or idle, a 1-GPU node never holds 2 GPUs: no "idle GPUs" hint for it either. With no
    larger node in reach the fleet-wide "largest node" hint says the same."""
    nodes = [busy(l40s("fh-l40s-0"), ("small", 1, 10)), l40s("fh-l40s-1")]
    assert explain(fh_big(), nodes).hints == (
        "pool fh-l40s (2 nodes): the pod requests 2 GPUs and a node has 1. To run there, ask for at most 1 GPU per pod "
        "(split the job, e.g. into data-parallel workers).",
        "The pod requests 2 GPUs but the largest node has 1: no node can ever fit it. Split the job into pods of at most 1 GPU "
        "(e.g. data-parallel workers), or add a pool of larger nodes.",
    )


def test_pods_of_its_own_priority_leave_waiting_and_a_higher_priority_class():
    """The demo's second case: train-pool-demo full with pods of the pod's priority. Preempting
    finds no victims (the message says so), a repack finds no room (no idle GPU), and growing is
    the pool's own hint, never this one's."""
    nodes = [busy(a100("a"), ("x", 8, 100)), busy(a100("b"), ("y", 7, 100))]
    explanation = explain(wants(), nodes)
    assert explanation.message == ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
                                   "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")  # fmt: skip
    assert explanation.hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish or give the pod a "
        "PriorityClass above theirs (spec.priorityClassName) to preempt pods there.",
    )


def test_lower_priority_pods_that_would_make_room_are_offered_for_preemption():
    nodes = [busy(a100("a"), ("low", 7, 10)), busy(a100("b"), ("y", 8, 100))]
    explanation = explain(wants(), nodes)
    assert "preemption" not in explanation.message  # kube-scheduler finds victims: it preempts
    assert explanation.hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish or preempt "
        "lower-priority pods.",
    )


def test_a_pod_whose_class_says_never_is_told_it_preempts_nobody_only_where_it_could_have():
    nodes = [busy(a100("a"), ("low", 7, 10)), busy(a100("b"), ("y", 8, 100))]
    assert explain(wants(preemption_policy="Never"), nodes).hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish (its "
        "preemptionPolicy is Never: it preempts nobody).",
    )


def test_a_repack_is_offered_only_where_the_pools_free_gpus_together_hold_the_pod():
    """One idle GPU on each of two nodes: moving a 1-GPU pod frees two on one node. With the
    pods there above any PriorityClass a team may use (system-critical), no preemption lever."""
    critical = 2_000_000_000
    apart = [busy(a100("a"), ("x", 6, critical), ("x1", 1, critical)), busy(a100("b"), ("y", 7, critical))]
    assert explain(wants(), apart).hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish or repack the "
        "pool (`ebcloud node-pool fragmentation p --plan`).",
    )
    one_idle = [busy(a100("a"), ("x", 8, critical)), busy(a100("b"), ("y", 7, critical))]
    assert explain(wants(), one_idle).hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish.",
    )


def test_every_lever_that_applies_is_named_once_per_pool():
    nodes = [busy(a100("a"), ("low-a", 7, 10)), busy(a100("b"), ("low-b", 7, 10)), busy(a100("c", "q"), ("z", 8, 100))]
    assert explain(wants(), nodes).hints == (
        "pool p (2 nodes): no node has 2 idle GPUs (at most 1 on any one). Wait for the pods there to finish, preempt "
        "lower-priority pods, or repack the pool (`ebcloud node-pool fragmentation p --plan`).",
        "pool q (1 node): no node has 2 idle GPUs (at most 0 on any one). Wait for the pods there to finish or give the pod a "
        "PriorityClass above theirs (spec.priorityClassName) to preempt pods there.",
    )


def test_a_guest_never_preempts_the_owners_pods_so_it_is_not_told_to():
    """A team a pool is lent to runs on its free room only: whatever its priority, the owner's
    pods are no victims (`nodes.may_preempt`)."""
    lent = dict(teams=frozenset({"owner", "guest"}), owner="owner")
    node = a100("a", **lent)
    node.bind(Pod("owner/x", cpu_milli=1000, gpu_count=8, priority=0, team="owner"), tuple(range(8)))
    guest = Pod("guest/w", cpu_milli=4000, gpu_count=2, priority=1000, team="guest")
    assert explain(guest, [node]).hints == ("pool p (1 node): no node has 2 idle GPUs (at most 0 on any one). Wait for the pods there to finish.",)


def test_each_resource_taken_is_said_of_the_nodes_it_is_short_on():
    """Node a lacks cpu, node b idle GPUs: neither statement is made of both. Moving a's CPU-bound
    pod to b (which has the CPU) leaves a with 8 idle GPUs and the CPU: a repack can do it."""
    cpu_bound = a100("a")
    cpu_bound.bind(Pod("algorithm/cpu", cpu_milli=126_000, priority=100, team="algorithm"), ())
    nodes = [cpu_bound, busy(a100("b"), ("y", 7, 100))]
    assert explain(wants(), nodes).hints == (
        "pool p (2 nodes): 1 node has less than 4000 milli-CPU of cpu free; 1 node has fewer than 2 idle GPUs. Wait for the "
        "pods there to finish, give the pod a PriorityClass above theirs (spec.priorityClassName) to preempt pods there, or "
        "repack the pool (`ebcloud node-pool fragmentation p --plan`).",
    )


def test_one_gpu_is_said_as_one():
    """A one-GPU pod's hints speak of one idle GPU, on every node or some, and a pod that needs a
    GPU where a node has none is told to ask for none (not to split the job into pods of 0 GPUs)."""
    full = busy(a100("a"), ("x", 8, 100))
    assert explain(wants(gpus=1), [full]).hints[0].startswith("pool p (1 node): no node has 1 idle GPU (at most 0 on any one). ")
    cpu_bound = a100("b")
    cpu_bound.bind(Pod("algorithm/cpu", cpu_milli=126_000, priority=100, team="algorithm"), ())
    assert explain(wants(gpus=1), [full, cpu_bound]).hints[0].startswith(
        "pool p (2 nodes): 1 node has less than 4000 milli-CPU of cpu free; 1 node has no idle GPU. "
    )
    cpu_node = NodeState("c-0", 16000, 64 * 1024, 0, "", pool="cpu")
    assert explain(wants(gpus=1), [cpu_node]).hints == (
        "pool cpu (1 node): the pod requests 1 GPU and a node has 0. To run there, ask for no GPU.",
        "The pod requests 1 GPU but no node has a GPU: ask for no GPU, or add a pool of GPU nodes.",
    )
