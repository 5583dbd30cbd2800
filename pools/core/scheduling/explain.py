"""Why a pod is Pending, in kube-scheduler's words, and what to change (seed T2).

The message is the one ``kubectl describe pod`` shows (over the nodes the pod's team may use), e.g.
``0/12 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) had untolerated taint(s),
6 node(s) didn't match Pod's node affinity/selector. preemption: 0/12 nodes are available:
1 Insufficient nvidia.com/gpu, 1 No preemption victims found for incoming pod, 10 Preemption is
not helpful for scheduling.``
(kube-scheduler 1.37's wording, :func:`explain`), the entries sorted the way kube-scheduler
sorts them (as "<count> <reason>" strings). The hints are ours:
per pool, every check that keeps the pod off it and the one change that answers them all
(pools/core/scheduling/pod_fixes.py), the request that can never fit, or the resource taken
with only the levers that can make room (waiting, preemption, a higher PriorityClass, a
repack): a hint never offers what cannot work, so a pool too small for the pod is never told
to wait, and nothing here says to grow a pool (its nodeCount and burst settings decide that).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pools.core.priority import HIGHEST_USER_DEFINABLE_PRIORITY
from pools.core.scheduling.extender import Victim, preemption_nodes
from pools.core.scheduling.nodes import (
    MILLI,
    REASON_CPU,
    REASON_GPU,
    REASON_GPU_SHARE,
    REASON_PODS,
    REASONS_INSUFFICIENT,
    NodeState,
    Pod,
    builtin_filter_reason,
    gpu_model_reason,
    insufficient_resources,
    may_use,
)
from pools.core.scheduling.pod_fixes import fix_text, pool_fixes
from pools.core.scheduling.preempt import KubeCount, NodeVictims, victims_on
from pools.core.scheduling.waiting import is_guest
from pools.core.words import plural

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


def kube_message(node_count: int, available: int, reasons: dict[str, int], preemption: str = "") -> str:
    """kube-scheduler's FitError text: entries "<count> <reason>" sorted as strings, then what
    its preemption (the PostFilter) found, when it ran and failed."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    entries = sorted(f"{count} {reason}" for reason, count in reasons.items())
    head = f"{available}/{node_count} nodes are available"
    message = f"{head}: {', '.join(entries)}." if entries else f"{head}."
    return f"{message} preemption: {preemption}" if preemption else message


REASON_NOT_NAMED = "node(s) didn't satisfy plugin(s) [NodeAffinity]"  # kube-scheduler's, for a node its PreFilter left out


def named_nodes(pod: Pod) -> frozenset[str] | None:
    """NodeAffinity's PreFilter: the nodes a pod's required affinity names, when every term
    names some (`matchFields metadata.name In`, intersected within a term, united across
    terms); None when a term names none (any node may match it). kube-scheduler runs the
    filters on these nodes only: the others fail NodeAffinity before any filter, cordon
    included, which is what its message counts them under."""
    names: set[str] = set()
    for term in pod.affinity_terms or ((),):
        named = None
        for requirement in term:
            if requirement.field and requirement.operator == "In":
                named = set(requirement.values) if named is None else named & set(requirement.values)
        if named is None:
            return None
        names |= named
    return frozenset(names) or None  # terms naming no node in common: the filters say why, node by node


def explain(pod: Pod, nodes: Sequence[NodeState], *, coming: Sequence[NodeState] = ()) -> Explanation:
    """Run every filter on every node the pod's team may use and explain the outcome for
    ``pod``. Other teams' nodes are neither counted nor named: a lead's "0/N nodes" and the
    hints speak of the team's own pools only, and never suggest another team's pool as a fix.

    As kube-scheduler 1.37 counts: a node is counted under the first filter plugin it fails,
    and under every resource NodeResourcesFit finds short by its own count (`_kube_short`; so
    the counts may add up to more than the nodes); the extender's checks, the GPU model and
    then the GPUs one by one, only where every plugin passed (the extender is asked about those
    nodes alone); where no node fits and no preemption could help, the message ends with its
    preemption's verdict per node. `coming`: empty copies of the nodes of pools with no Ready
    node yet, which a request larger than every node here may still fit ("no node can ever fit
    it" beside "its nodes will take this pod once one is Ready" was a QA sweep's finding)."""
    nodes = [node for node in nodes if may_use(pod, node)]
    node_reasons: dict[str, str] = {}
    reasons: Counter[str] = Counter()
    resolvable: list[NodeState] = []  # short, for kube-scheduler's filters, only of what evicting pods could free
    named = named_nodes(pod)
    for node in nodes:
        if (reason := REASON_NOT_NAMED if named is not None and node.name not in named else builtin_filter_reason(pod, node)) is not None:
            node_reasons[node.name] = reason
            reasons[reason] += 1
            continue
        short = insufficient_resources(pod, node)
        if kube := _kube_short(pod, node, short):
            node_reasons[node.name] = kube[0][0]
            reasons.update(reason for reason, _ in kube)
            if not any(unresolvable for _, unresolvable in kube):
                resolvable.append(node)
        elif (reason := gpu_model_reason(pod, node)) is not None:  # the extender's, which evicting pods cannot mend
            node_reasons[node.name] = reason
            reasons[reason] += 1
        elif short:  # the extender's count of the GPUs one by one: the one it finds short
            node_reasons[node.name] = short[0][0]
            reasons[short[0][0]] += 1
            resolvable.append(node)
    available = len(nodes) - len(node_reasons)
    return Explanation(
        pod=pod.name,
        node_count=len(nodes),
        available=available,
        reasons=dict(reasons),
        node_reasons=node_reasons,
        message=kube_message(len(nodes), available, dict(reasons), _preemption(pod, len(nodes), available, resolvable)),
        hints=tuple(_hints(pod, nodes, [node for node in resolvable if gpu_model_reason(pod, node) is None],
                           [node for node in coming if may_use(pod, node)])) if node_reasons else (),  # fmt: skip
    )


def _kube_short(pod: Pod, node: NodeState, short: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Of what our filter finds short on the node (`short`, GPUs one by one), what kube-scheduler's
    own NodeResourcesFit finds short: the same pods, cpu and memory, GPUs by its own count
    (`KubeCount`), which never finds them short where ours does not."""
    if not short or short[-1][0] not in (REASON_GPU, REASON_GPU_SHARE):
        return short
    counted = [reason for reason in KubeCount.of(node).short(pod) if reason in (REASON_GPU, REASON_GPU_SHARE)]
    return short[:-1] + [(reason, pod.gpu_count > node.gpu_count) for reason in counted]


NO_CANDIDATE = "no candidate node for preemption"  # kube-scheduler's, when the extender dropped every candidate


def _preemption(pod: Pod, node_count: int, available: int, resolvable: Sequence[NodeState]) -> str:
    """What kube-scheduler's DefaultPreemption says when it runs (no node fits) and fails: the
    pod may not preempt, or no node has victims whose eviction would make room. Its FitError
    counts each node's reasons: "not helpful" where evicting cannot fix what keeps the pod off,
    "No preemption victims found" on a node without a lower-priority pod, and the filters' own
    reasons ("Insufficient nvidia.com/gpu") where even evicting every such pod leaves it short.
    It looks for victims by its own filters (`victims_on(ours=False)`): a node of another GPU
    model, or one whose victims include pods the pod may not evict (`may_preempt`), is a
    candidate until the scheduler extender's `preempt` drops it, and when it drops every one the
    message is NO_CANDIDATE; so is one whose victims, chosen by its own count of GPUs
    (`KubeCount`), would not make room on the GPUs one by one. A node it finds no victim on
    though it has lower-priority pods (by its count the pod fits there with all of them) is an
    error it says instead, when no node is a candidate. Empty where a candidate is left (the
    scheduler then preempts) or preemption did not run."""
    if available or not node_count:
        return ""
    if not pod.may_preempt:
        return "not eligible due to preemptionPolicy=Never."
    verdicts: Counter[str] = Counter({NOT_HELPFUL: node_count - len(resolvable)})
    candidates, errors = False, set()
    for node in resolvable:
        found, preempts = _candidate(pod, node)
        if preempts:
            return ""
        if found is None:  # not reached: a resolvable node passes every filter preemption cannot mend
            verdicts[NOT_HELPFUL] += 1
        elif found.error:
            errors.add(found.error)
        elif not found.victims:
            verdicts.update(found.reasons)
        else:  # a candidate the extender drops
            candidates = True
    if candidates:
        return NO_CANDIDATE
    if errors:  # its errors aggregated (kube-scheduler lists several in the order its workers met them; here by node)
        return errors.pop() if len(errors) == 1 else f"[{', '.join(sorted(errors))}]"
    return kube_message(node_count, 0, {reason: count for reason, count in verdicts.items() if count})


def _candidate(pod: Pod, node: NodeState) -> tuple[NodeVictims | None, bool]:
    """kube-scheduler's victims on `node` for `pod` by its own filters (None where evicting cannot
    help), and whether a real cluster's preemption evicts them (whatever the pod's
    preemptionPolicy): there are some and the scheduler extender's `preempt`, the very function
    that answers it on a real cluster, keeps the node."""
    found = victims_on(pod, node, ours=False)
    if found is None or not found.victims:
        return found, False
    return found, bool(preemption_nodes(pod, {node.name: node}, {node.name: [Victim(victim.name, victim.team) for victim in found.victims]}))


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
            f"The pod requests {plural(pod.gpu_count, 'GPU')} but the largest node has {largest_gpus}: no "
            f"node can ever fit it. Split the job into pods of at most {plural(largest_gpus, 'GPU')} "
            "(e.g. data-parallel workers), or add a pool of larger nodes."
            if largest_gpus else
            f"The pod requests {plural(pod.gpu_count, 'GPU')} but no node has a GPU: ask for no GPU, or add a pool of GPU nodes."
        )  # fmt: skip
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


def _hints(pod: Pod, nodes: Sequence[NodeState], resolvable: Sequence[NodeState], coming: Sequence[NodeState]) -> list[str]:
    """Per pool of the team that cannot take the pod whatever room frees up, every failing check
    and the change that answers them all (`pod_fixes`); then requests no node can hold; then,
    per pool whose nodes would hold the pod once room frees, which resource is taken and what
    makes room (`_in_use_hints`). A pool gets one kind or the other, never both."""
    hints: list[str] = []
    by_pool: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        by_pool[node.pool or NO_POOL].append(node)
    for fix in pool_fixes(pod, nodes):
        members = by_pool[fix.pool or NO_POOL]
        if not fix.by_pod:
            hints += _node_problem_hints(members)
        if fix.checks:
            hints.append(fix_text(fix, where=_pools(members), lent=is_guest(pod, members[0].owner)))
    return hints + _never_fits_hints(pod, [*nodes, *coming]) + _in_use_hints(pod, resolvable)


def _in_use_hints(pod: Pod, resolvable: Sequence[NodeState]) -> list[str]:
    """Per pool, the nodes that would hold the pod once room frees (every resource they lack is
    taken, none is missing: kube-scheduler's preemption counts them as resolvable): what is
    taken, and only the levers that make room there. A node too small for the pod is never one
    of them (its pool's hint says it can never fit: `pool_fixes`, `_never_fits_hints`). What
    brings a new node depends on the pool's nodeCount and burst settings, which its nodes do
    not know: the pool's own hint says it (pools/controllers/pending_hints.py)."""
    by_pool: dict[str, list[NodeState]] = defaultdict(list)
    for node in resolvable:
        by_pool[node.pool or NO_POOL].append(node)
    return [f"{_pools(members)}: {'; '.join(_taken(pod, members))}. {_levers(pod, pool, members)}." for pool, members in sorted(by_pool.items())]


def _taken(pod: Pod, members: Sequence[NodeState]) -> list[str]:
    """What is taken, per resource NodeResourcesFit finds short on some of `members`: "no node"
    where it is short on all of them."""
    short = [{reason for reason, _ in insufficient_resources(pod, node)} for node in members]
    found = []
    for reason in REASONS_INSUFFICIENT:
        lacking = sum(1 for reasons in short if reason in reasons)
        if not lacking:
            continue
        some = "" if lacking == len(members) else f"{plural(lacking, 'node')} {'has' if lacking == 1 else 'have'}"
        if reason == REASON_GPU_SHARE:
            best = max((f for n in members for f in n.gpu_free), default=0)
            found.append(f"{some} no GPU with {pod.gpu_milli} milli free" if some else
                         f"no GPU has {pod.gpu_milli} milli free (the largest free share is {best} milli)")  # fmt: skip
        elif reason == REASON_PODS:
            found.append(f"{some} reached the pod limit" if some else f"every node has reached the pod limit ({plural(members[0].max_pods, 'pod')})")
        elif reason == REASON_GPU:
            idle = max((n.gpu_free.count(MILLI) for n in members), default=0)
            lacks = "no idle GPU" if pod.gpu_count == 1 else f"fewer than {pod.gpu_count} idle GPUs"
            found.append(f"{some} {lacks}" if some else f"no node has {plural(pod.gpu_count, 'idle GPU')} (at most {idle} on any one)")
        else:
            request, what = (pod.cpu_milli, "milli-CPU of cpu") if reason == REASON_CPU else (pod.memory_mib, "MiB of memory")
            found.append(f"{some} less than {request} {what} free" if some else f"no node has {request} {what} free")
    return found


def _levers(pod: Pod, pool: str, members: Sequence[NodeState]) -> str:
    """What makes room on these nodes, each only where it can: waiting (what is taken there is
    held by pods, which end, and an empty node holds the pod); preemption where a real cluster's
    preempts on one of them (`_candidate`, as `_preemption` judges it: its message then has no
    "preemption:" verdict), else a higher PriorityClass where that one would then preempt; a
    repack where the free capacity of the pool's nodes, put together, holds the pod."""
    levers = ["wait for shares to free up" if pod.is_sharing else "wait for the pods there to finish"]
    if any(_candidate(pod, node)[1] for node in members):
        if pod.may_preempt:
            levers.append("preempt lower-priority pods")
        else:
            levers[0] += " (its preemptionPolicy is Never: it preempts nobody)"
    elif any(_candidate(replace(pod, priority=HIGHEST_USER_DEFINABLE_PRIORITY), node)[1] for node in members):
        levers.append("give the pod a PriorityClass above theirs (spec.priorityClassName) to preempt pods there")
    if _repack_holds(pod, members):
        levers.append("repack the pool" + (f" (`ebcloud node-pool fragmentation {pool} --plan`)" if pool != NO_POOL else ""))
    text = levers[0] if len(levers) == 1 else ", ".join(levers[:-1]) + (", or " if len(levers) > 2 else " or ") + levers[-1]
    return text[0].upper() + text[1:]


def _repack_holds(pod: Pod, members: Sequence[NodeState]) -> bool:
    """Whether the free capacity of the nodes, put together, holds the pod: the most that moving
    pods between them (or shares between GPUs) could gather on one node."""
    return (
        sum(n.cpu_free for n in members) >= pod.cpu_milli
        and sum(n.memory_free for n in members) >= pod.memory_mib
        and sum(n.gpu_free_milli for n in members) >= pod.gpu_request_milli
    )


def _node_problem_hints(members: Sequence[NodeState]) -> list[str]:
    """A pool none of whose nodes the pod can be changed for: they are cordoned or not Ready."""
    hints = []
    if cordoned := [n for n in members if n.unschedulable]:
        hints.append(f"{_pools(cordoned)}: {plural(len(cordoned), 'node')} cordoned (a GPU fault waiting for its repair, a repair or a "
                     "drain under way, or a cordon by hand): the node's page says which; wait for it, or ask a platform admin.")  # fmt: skip
    if not_ready := [n for n in members if not n.ready]:
        hints.append(f"{_pools(not_ready)}: {plural(len(not_ready), 'node')} not Ready. Their events say why (the node agent silent, "
                     "the Node deleted or not Ready in the cluster, no GPU served); wait for them to become Ready, do not tolerate not-ready.")  # fmt: skip
    return hints
