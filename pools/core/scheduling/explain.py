"""Why a pod is Pending, in kube-scheduler's words, and what to change (seed T2).

The message is the one ``kubectl describe pod`` shows (over the nodes the pod's team may use), e.g.
``0/12 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) had untolerated taint
{pool: train}, 6 node(s) didn't match Pod's node affinity/selector.`` Each node is counted
under the first filter it fails, so the counts add up to the node count, and the entries are
sorted the way kube-scheduler sorts them (as "<count> <reason>" strings). The hints are ours:
they name the pool, the label or toleration to add, or the request that can never fit.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pools.core.scheduling.nodes import (
    MILLI,
    NOT_READY_TAINT_KEY,
    REASON_AFFINITY,
    REASON_CPU,
    REASON_GPU,
    REASON_GPU_MODEL,
    REASON_MEMORY,
    REASON_UNSCHEDULABLE,
    NodeSelectorRequirement,
    NodeState,
    Pod,
    Taint,
    effective_taints,
    filter_node,
    first_untolerated_taint,
    may_use,
)

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


def kube_message(node_count: int, available: int, reasons: dict[str, int]) -> str:
    """kube-scheduler's FitError text: entries "<count> <reason>" sorted as strings."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    entries = sorted(f"{count} {reason}" for reason, count in reasons.items())
    head = f"{available}/{node_count} nodes are available"
    return f"{head}: {', '.join(entries)}." if entries else f"{head}."


def explain(pod: Pod, nodes: Sequence[NodeState]) -> Explanation:
    """Run every filter on every node the pod's team may use and explain the outcome for
    ``pod``. Other teams' nodes are neither counted nor named: a lead's "0/N nodes" and the
    hints speak of the team's own pools only, and never suggest another team's pool as a fix."""
    nodes = [node for node in nodes if may_use(pod, node)]
    node_reasons: dict[str, str] = {}
    for node in nodes:
        reason = filter_node(pod, node)
        if reason is not None:
            node_reasons[node.name] = reason
    reasons = dict(Counter(node_reasons.values()))
    available = len(nodes) - len(node_reasons)
    return Explanation(
        pod=pod.name,
        node_count=len(nodes),
        available=available,
        reasons=reasons,
        node_reasons=node_reasons,
        message=kube_message(len(nodes), available, reasons),
        hints=tuple(_hints(pod, nodes, node_reasons)) if node_reasons else (),
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _pools(nodes: Sequence[NodeState]) -> str:
    counts = Counter(n.pool or NO_POOL for n in nodes)
    return ", ".join(f"pool {p} ({_plural(c, 'node')})" for p, c in sorted(counts.items()))


def toleration_yaml(taint: Taint) -> str:
    """The toleration that tolerates exactly ``taint``, as pod-spec YAML."""
    lines = ["tolerations:", f'- key: "{taint.key}"']
    if taint.value:
        lines += ['  operator: "Equal"', f'  value: "{taint.value}"']
    else:
        lines.append('  operator: "Exists"')
    lines.append(f'  effect: "{taint.effect}"')
    return "\n".join(lines)


def _describe_requirement(req: NodeSelectorRequirement) -> str:
    values = f" [{', '.join(req.values)}]" if req.values else ""
    return f"{req.key} {req.operator}{values}"


def _suggested_label(req: NodeSelectorRequirement) -> str | None:
    """A node label that would satisfy ``req``, when adding one can (In, Exists, Gt, Lt)."""
    if req.operator == "In" and req.values:
        return f"{req.key}: {req.values[0]}"
    if req.operator == "Exists":
        return f'{req.key}: ""'
    if req.operator in ("Gt", "Lt") and req.values:
        try:
            bound = int(req.values[0])
        except ValueError:
            return None
        return f'{req.key}: "{bound + 1 if req.operator == "Gt" else bound - 1}"'
    return None


def _affinity_hints(pod: Pod, nodes: list[NodeState]) -> list[str]:
    hints = []
    by_pool: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        by_pool[node.pool or NO_POOL].append(node)
    for pool, members in sorted(by_pool.items()):
        missing = {}
        for key, value in sorted(pod.node_selector.items()):
            have = {n.labels.get(key) for n in members}
            if have != {value}:
                missing[key] = (value, sorted(v for v in have if v is not None))
        where = f"pool {pool} ({_plural(len(members), 'node')})"
        for key, (value, have) in missing.items():
            seen = (
                f"its nodes have {key}={', '.join(have)}"
                if have
                else f"its nodes have no {key} label"
            )
            hints.append(
                f"{where}: the pod's nodeSelector needs {key}={value} but {seen}. "
                f"Add nodeLabels: {{{key}: {value}}} to the pool spec, or change the nodeSelector."
            )
        if not missing and pod.affinity_terms:
            node = members[0]
            failing = [
                [r for r in term if not r.matches(node.labels)] for term in pod.affinity_terms
            ]
            described = " OR ".join(
                "(" + " AND ".join(_describe_requirement(r) for r in reqs) + ")"
                for reqs in failing
                if reqs
            )
            labels = [s for reqs in failing[:1] for r in reqs if (s := _suggested_label(r))]
            fix = (
                f"Add nodeLabels: {{{', '.join(labels)}}} to the pool spec, or relax the affinity."
                if labels
                else "Relax the pod's required node affinity."
            )
            hints.append(f"{where}: required node affinity not met, failing {described}. {fix}")
    return hints


def _taint_hints(pod: Pod, nodes: list[NodeState]) -> list[str]:
    hints = []
    groups: dict[Taint, list[NodeState]] = defaultdict(list)
    for node in nodes:
        taint = first_untolerated_taint(effective_taints(node), pod.tolerations)
        if taint is not None:
            groups[taint].append(node)
    for taint, members in sorted(groups.items(), key=lambda kv: (kv[0].key, kv[0].value)):
        if taint.key == NOT_READY_TAINT_KEY:
            hints.append(
                f"{_pools(members)}: {_plural(len(members), 'node')} not Ready. Wait for them "
                "to become Ready or let auto-repair replace them; do not tolerate not-ready."
            )
            continue
        hints.append(
            f"{_pools(members)}: tainted {taint.key}={taint.value}:{taint.effect}. To run "
            f"there, add to the pod spec:\n{toleration_yaml(taint)}"
        )
    return hints


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
    by_reason: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        reason = node_reasons.get(node.name)
        if reason is not None:
            by_reason[reason].append(node)
    hints: list[str] = []
    if members := by_reason.get(REASON_UNSCHEDULABLE):
        hints.append(
            f"{_pools(members)}: {_plural(len(members), 'node')} cordoned. Uncordon them or "
            "wait for the drain or repair to finish."
        )
    tainted = [
        n for r, ms in by_reason.items() if r.startswith("node(s) had untolerated") for n in ms
    ]
    hints += _taint_hints(pod, tainted)
    if members := by_reason.get(REASON_AFFINITY):
        hints += _affinity_hints(pod, members)
    if members := by_reason.get(REASON_GPU_MODEL):
        offered = Counter(n.gpu_model or "no GPU" for n in members)
        models = ", ".join(f"{m} ({_plural(c, 'node')})" for m, c in sorted(offered.items()))
        hints.append(
            f"The pod allows GPU models {', '.join(pod.gpu_models)} but these nodes offer "
            f"{models}. Widen the pod's gpuSpec or use a pool of an allowed model."
        )
    never = _never_fits_hints(pod, nodes)
    hints += never
    if not never:
        for reason in (REASON_CPU, REASON_MEMORY, REASON_GPU):
            if members := by_reason.get(reason):
                hints.append(_in_use_hint(pod, reason, members))
    return hints
