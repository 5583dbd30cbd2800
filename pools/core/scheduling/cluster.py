"""Incremental scheduler for simulations and the trace benchmark (seed O3 placement).

:func:`pools.core.scheduling.schedule.schedule` filters and scores every node for every pod, which is right
for one pending pod but too slow to replay 10k pods on 1.2k nodes. :class:`ClusterScheduler`
returns the same decisions with the same filter and score functions, but remembers them: per
pod shape (resources plus constraints) it keeps a heap of (penalty, -score, node name)
entries. A node's score depends only on that node, and a bind or unbind changes one node, so
only that node is re-filtered and re-scored, lazily, the next time a pod of each shape comes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from pools.core.scheduling.explain import explain
from pools.core.scheduling.fragmentation import Workload
from pools.core.scheduling.nodes import (
    Binding,
    NodeState,
    Pod,
    Policy,
    filter_node,
    soft_penalty,
)
from pools.core.scheduling.policies import RandomPolicy, policy_for
from pools.core.scheduling.schedule import Decision

_REJECTION_TRIES = 32


class ClusterScheduler:
    """Online scheduler over a mutable node set; change nodes only through its methods
    (:meth:`bind`, :meth:`unbind`, :meth:`touch`) so that its caches stay exact."""

    def __init__(
        self,
        nodes: Iterable[NodeState],
        policy: str | Policy = "bestfit",
        *,
        workload: Workload | None = None,
        seed: int | None = 0,
    ) -> None:
        self.nodes: list[NodeState] = sorted(nodes, key=lambda n: n.name)
        self._index = {n.name: i for i, n in enumerate(self.nodes)}
        self.policy = policy_for(policy, nodes=self.nodes, workload=workload, seed=seed)
        self._heaps: dict[tuple, list] = {}
        self._cursor: dict[tuple, int] = {}
        self._changed: list[int] = []  # indices of nodes, in the order they changed
        # A policy whose score never rises as a node fills (spread) lets a bind leave the
        # node's old entries in place: a stale entry then over-rates its node, so it is
        # re-scored only when it reaches the top of a heap. Unbinds and touches still re-score.
        # Such a policy also scores without GPUs (node_score) and picks them for the winner.
        self._lazy = bool(getattr(self.policy, "score_falls_as_node_fills", False))
        self._pushed: dict[tuple, dict[int, int]] = {}  # per shape: node index -> version pushed

    def node(self, name: str) -> NodeState:
        return self.nodes[self._index[name]]

    def touch(self, node_name: str) -> None:
        """Tell the caches a node's attributes changed (cordon, taints, labels, readiness)."""
        i = self._index[node_name]
        self.nodes[i].touch()
        self._changed.append(i)

    def _entry(self, pod: Pod, i: int, node: NodeState) -> tuple | None:
        if filter_node(pod, node) is not None:
            return None
        if self._lazy:  # GPUs are picked for the winner only (see _best)
            score, gpus = self.policy.node_score(pod, node), None
        else:
            score, gpus = self.policy.score(pod, node)
        penalty = soft_penalty(pod, node) if node.taints or pod.preferred_terms else 0
        return (penalty, -score, node.name, i, node.version, gpus)

    def _push(self, heap: list, pushed: dict[int, int], pod: Pod, i: int, node: NodeState) -> None:
        pushed[i] = node.version
        entry = self._entry(pod, i, node)
        if entry is not None:
            heapq.heappush(heap, entry)

    def _best(self, pod: Pod):
        key, nodes = pod.shape_key, self.nodes
        heap, pushed = self._heaps.get(key), self._pushed.get(key)
        if heap is None:  # a new shape: score every node once, heapify in linear time
            entries = (self._entry(pod, i, node) for i, node in enumerate(nodes))
            heap = self._heaps[key] = [e for e in entries if e is not None]
            heapq.heapify(heap)
            pushed = self._pushed[key] = {i: node.version for i, node in enumerate(nodes)}
        elif self._cursor[key] < len(self._changed):
            for i in set(self._changed[self._cursor[key] :]):
                self._push(heap, pushed, pod, i, nodes[i])
            if len(heap) > 4 * len(nodes) + 64:  # drop stale entries now and then
                heap[:] = [e for e in heap if e[4] == nodes[e[3]].version]
                heapq.heapify(heap)
        self._cursor[key] = len(self._changed)
        while heap:  # entries of nodes that changed since they were pushed are stale
            entry = heap[0]
            i = entry[3]
            node = nodes[i]
            if entry[4] == node.version:
                return entry
            fresh = None
            if self._lazy and pushed.get(i) != node.version:
                pushed[i] = node.version
                fresh = self._entry(pod, i, node)
            if fresh is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, fresh)
        return None

    def _random_pick(self, pod: Pod) -> NodeState | None:
        rng, nodes = self.policy.rng, self.nodes
        for _ in range(_REJECTION_TRIES):  # rejection sampling: uniform over feasible nodes
            node = nodes[rng.randrange(len(nodes))]
            if filter_node(pod, node) is None:
                return node
        feasible = [n for n in nodes if filter_node(pod, n) is None]
        return rng.choice(feasible) if feasible else None

    def schedule(self, pod: Pod, *, explain_failure: bool = True) -> Decision:
        """Choose a node for ``pod`` without binding it. Explaining a failure scans every
        node; simulations that only count failures can skip it."""
        if isinstance(self.policy, RandomPolicy):
            node = self._random_pick(pod)
            if node is not None:
                return Decision(pod.name, node.name, self.policy.gpus(pod, node))
        else:
            entry = self._best(pod)
            if entry is not None:
                gpus = entry[5] if entry[5] is not None else self.policy.gpus(pod, self.nodes[entry[3]])
                return Decision(pod.name, entry[2], gpus)
        return Decision(pod.name, None, (), explain(pod, self.nodes) if explain_failure else None)

    def bind(self, pod: Pod, node_name: str, gpu_indices: Sequence[int] = ()) -> Binding:
        i = self._index[node_name]
        binding = self.nodes[i].bind(pod, gpu_indices)
        if not self._lazy:
            self._changed.append(i)
        return binding

    def unbind(self, pod_name: str, node_name: str) -> Binding:
        i = self._index[node_name]
        binding = self.nodes[i].unbind(pod_name)
        self._changed.append(i)
        return binding

    def place(self, pod: Pod, *, explain_failure: bool = True) -> Decision:
        """Schedule and bind in one step (the online benchmark's loop body)."""
        decision = self.schedule(pod, explain_failure=explain_failure)
        if decision.node is not None:
            self.bind(pod, decision.node, decision.gpu_indices)
        return decision
