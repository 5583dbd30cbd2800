"""A node holds at most its allocatable pod count, whatever the pods ask: kubelet's default
`--max-pods` of 110, which the fake kubelet advertises and kube-scheduler's NodeResourcesFit
counts before any resource ("Too many pods", noderesources/fit.go). Pods of no GPU and a few
milli-CPU fit a node's resources hundreds of times over; the 111th stays Pending with
kube-scheduler's reason, and evicting a lower-priority pod makes room for a higher one."""

from __future__ import annotations

import pytest

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import (
    MAX_PODS,
    REASON_PODS,
    NodeState,
    OversubscribedError,
    Pod,
    filter_node,
)
from pools.core.scheduling.preempt import preempt


def tiny(name: str, priority: int = 0) -> Pod:
    return Pod(name=name, cpu_milli=10, memory_mib=10, priority=priority)


def full_node() -> NodeState:
    node = NodeState(name="n-0", cpu_milli=96_000, memory_mib=393_216, gpu_count=8)
    for i in range(MAX_PODS):
        node.bind(tiny(f"p-{i}"))
    return node


def test_the_node_takes_110_pods_and_refuses_the_next_naming_kube_scheduler_s_reason():
    node = full_node()
    assert MAX_PODS == 110 and len(node.bound) == 110 and node.cpu_free > 90_000
    assert filter_node(tiny("late"), node) == REASON_PODS == "Too many pods"
    with pytest.raises(OversubscribedError, match="Too many pods"):
        node.bind(tiny("late"))
    verdict = explain(tiny("late"), [node])
    assert verdict.message.startswith("0/1 nodes are available: 1 Too many pods."), verdict.message
    assert any("every node has reached the pod limit (110 pods)" in hint for hint in verdict.hints), verdict.hints


def test_a_pod_leaving_makes_room_and_preemption_counts_the_pods_it_evicts():
    node = full_node()
    node.unbind("p-0")
    assert filter_node(tiny("late"), node) is None
    node.bind(tiny("p-0"))
    plan = preempt(tiny("urgent", priority=1000), [node])
    assert plan is not None and plan.node == "n-0" and len(plan.victims) == 1
