"""Why a pod is Pending, in kube-scheduler's words, and what to change (seed T2).

The message is the one ``kubectl describe pod`` shows (over the nodes the pod's team may use), e.g.
``0/12 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) had untolerated taint(s),
6 node(s) didn't match Pod's node affinity/selector. preemption: 0/12 nodes are available:
2 No preemption victims found for incoming pod, 10 Preemption is not helpful for scheduling.``
(kube-scheduler 1.37's wording, :func:`explain`), the entries sorted the way kube-scheduler
sorts them (as "<count> <reason>" strings). The hints are ours:
per pool, every check that keeps the pod off it and the one change that answers them all
(pools/core/scheduling/pod_fixes.py), the request that can never fit, or the resource taken.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pools.core.scheduling.nodes import (
    MILLI,
    REASON_CPU,
    REASON_GPU,
    REASON_MEMORY,
    NodeState,
    Pod,
    insufficient_resources,
    may_use,
    static_filter_reason,
)
from pools.core.scheduling.pod_fixes import fix_text, pool_fixes
from pools.core.scheduling.preempt import victims_on

NO_POOL = "(no pool)"


@dataclass(frozen=True)
class Explanation:
    """The scheduler's answer for one pod: per-reason node counts, the kube-scheduler message
    and plain-language hints. ``available`` nodes passed every filter."""

    pod: str
    node_count: int
    available: int
    reasons: dict[str, int] = field(default_factory=dict)
    node_reasons: dict[str, str] = field(default_factory=dict)
    message: str = ""
    hints: tuple[str, ...] = ()


NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def kube_message(node_count: int, available: int, reasons: dict[str, int], preemption: str = "") -> str:
    """kube-scheduler's FitError text: entries "<count> <reason>" sorted as strings, then what
    its preemption (the PostFilter) found, when it ran and failed."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    entries = sorted(f"{count} {reason}" for reason, count in reasons.items())
    head = f"{available}/{node_count} nodes are available"
    message = f"{head}: {', '.join(entries)}." if entries else f"{head}."
    return f"{message} preemption: {preemption}" if preemption else message


def explain(pod: Pod, nodes: Sequence[NodeState]) -> Explanation:
    """Run every filter on every node the pod's team may use and explain the outcome for
    ``pod``. Other teams' nodes are neither counted nor named: a lead's "0/N nodes" and the
    hints speak of the team's own pools only, and never suggest another team's pool as a fix.

    As kube-scheduler 1.37 counts: a node is counted under the first filter plugin it fails,
    and under every resource NodeResourcesFit finds short (so the counts may add up to more
    than the nodes); where no node fits and no preemption could help, the message ends with
    its preemption's verdict per node."""
    nodes = [node for node in nodes if may_use(pod, node)]
    node_reasons: dict[str, str] = {}
    reasons: Counter[str] = Counter()
    resolvable: list[NodeState] = []  # short only of what evicting pods could free
    for node in nodes:
        if (reason := static_filter_reason(pod, node)) is not None:
            node_reasons[node.name] = reason
            reasons[reason] += 1
        elif short := insufficient_resources(pod, node):
            node_reasons[node.name] = short[0][0]
            reasons.update(reason for reason, _ in short)
            if not any(unresolvable for _, unresolvable in short):
                resolvable.append(node)
    available = len(nodes) - len(node_reasons)
    return Explanation(
        pod=pod.name,
        node_count=len(nodes),
        available=available,
        reasons=dict(reasons),
        node_reasons=node_reasons,
        message=kube_message(len(nodes), available, dict(reasons), _preemption(pod, len(nodes), available, resolvable)),
        hints=tuple(_hints(pod, nodes, node_reasons)) if node_reasons else (),
    )


def _preemption(pod: Pod, node_count: int, available: int, resolvable: Sequence[NodeState]) -> str:
    """What kube-scheduler's DefaultPreemption says when it runs (no node fits) and fails: the
    pod may not preempt, or no node has victims whose eviction would make room (each node is
    either "not helpful", where evicting cannot fix what keeps the pod off, or has none). Empty
    where it would find victims (the scheduler then preempts) or did not run. The victims are
    looked for only here, and only until a node has some."""
    if available or not node_count:
        return ""
    if not pod.may_preempt:
        return "not eligible due to preemptionPolicy=Never."
    if any(victims_on(pod, node) for node in resolvable):
        return ""
    verdicts = {NO_VICTIMS: len(resolvable), NOT_HELPFUL: node_count - len(resolvable)}
    return kube_message(node_count, 0, {reason: count for reason, count in verdicts.items() if count})


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _pools(nodes: Sequence[NodeState]) -> str:
    counts = Counter(n.pool or NO_POOL for n in nodes)
    return ", ".join(f"pool {p} ({plural(c, 'node')})" for p, c in sorted(counts.items()))


def _never_fits_hints(pod: Pod, nodes: Sequence[NodeState]) -> list[str]:
    """Requests larger than the largest node: no wait or repack can help, whatever filter
    each node failed first."""
    hints = []
    largest_gpus = max((n.gpu_count for n in nodes), default=0)
    if pod.gpu_count > largest_gpus:
        hints.append(
            f"The pod requests {pod.gpu_count} GPUs but the largest node has {largest_gpus}: no "
            f"node can ever fit it. Split the job into pods of at most {largest_gpus} GPUs "
            "(e.g. data-parallel workers), or add a pool of larger nodes."
        )
    for resource, unit, request, largest in (
        ("cpu", "milli-CPU", pod.cpu_milli, max((n.cpu_milli for n in nodes), default=0)),
        ("memory", "MiB", pod.memory_mib, max((n.memory_mib for n in nodes), default=0)),
    ):
        if request > largest:
            hints.append(
                f"The pod requests {request} {unit} of {resource} but the largest node has "
                f"{largest}: no node can ever fit it. Lower the request or add larger nodes."
            )
    return hints


def _in_use_hint(pod: Pod, reason: str, nodes: list[NodeState]) -> str:
    """The resource exists on these nodes but is taken right now."""
    where = _pools(nodes)
    if reason == REASON_GPU and pod.is_sharing:
        best = max((f for n in nodes for f in n.gpu_free), default=0)
        return (
            f"{where}: no GPU has {pod.gpu_milli} milli free (the largest free share is {best} "
            "milli). Wait for shares to free up, repack the pool, or add nodes."
        )
    if reason == REASON_GPU:
        idle = max((sum(1 for f in n.gpu_free if f == MILLI) for n in nodes), default=0)
        return (
            f"{where}: no node has {pod.gpu_count} idle GPUs (at most {idle} on any one). "
            f"{_wait_or_preempt(pod)}repack, or raise the pool's nodeCount.max."
        )
    resource, request, unit = (
        ("cpu", pod.cpu_milli, "milli-CPU")
        if reason == REASON_CPU
        else ("memory", pod.memory_mib, "MiB")
    )
    return f"{where}: no node has {request} {unit} of {resource} free. {_wait_or_preempt(pod)}or grow the pool."


def _wait_or_preempt(pod: Pod) -> str:
    """A pod whose PriorityClass says preemptionPolicy Never preempts nobody: no such advice."""
    return "Wait, preempt lower-priority pods, " if pod.may_preempt else "Wait (its preemptionPolicy is Never: it preempts nobody), "


def _hints(pod: Pod, nodes: Sequence[NodeState], node_reasons: dict[str, str]) -> list[str]:
    """Per pool of the team that cannot take the pod whatever room frees up, every failing check
    and the change that answers all of them (`pod_fixes`); then requests no node can hold; then,
    where the pod only waits for room, which resource is taken."""
    hints: list[str] = []
    by_pool: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        by_pool[node.pool or NO_POOL].append(node)
    for fix in pool_fixes(pod, nodes):
        members = by_pool[fix.pool or NO_POOL]
        if not fix.by_pod:
            hints += _node_problem_hints(members)
        if fix.checks:
            hints.append(fix_text(fix, where=_pools(members)))
    never = _never_fits_hints(pod, nodes)
    hints += never
    if not never:
        by_reason: dict[str, list[NodeState]] = defaultdict(list)
        for node in nodes:
            if (reason := node_reasons.get(node.name)) in (REASON_CPU, REASON_MEMORY, REASON_GPU):
                by_reason[reason].append(node)
        for reason in (REASON_CPU, REASON_MEMORY, REASON_GPU):
            if members := by_reason.get(reason):
                hints.append(_in_use_hint(pod, reason, members))
    return hints


def _node_problem_hints(members: Sequence[NodeState]) -> list[str]:
    """A pool none of whose nodes the pod can be changed for: they are cordoned or not Ready."""
    hints = []
    if cordoned := [n for n in members if n.unschedulable]:
        hints.append(f"{_pools(cordoned)}: {plural(len(cordoned), 'node')} cordoned. Uncordon them or wait for the drain or repair to finish.")
    if not_ready := [n for n in members if not n.ready]:
        hints.append(f"{_pools(not_ready)}: {plural(len(not_ready), 'node')} not Ready. Wait for them to become Ready "
                     "or let auto-repair replace them; do not tolerate not-ready.")  # fmt: skip
    return hints
