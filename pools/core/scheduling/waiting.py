"""The pools a Pending pod waits for (seed T2): pools its team may use that have no node the
scheduler sees yet (their order awaits approval or payment, their nodes are still starting, or
they sit at nodeCount.min 0) and whose nodes would take the pod once one is Ready; and, for a
pool whose Ready nodes are busy, the nodes it is still starting (`starting_hint`).

kube-scheduler's explanation counts nodes, not pools: a pool with no Ready node is invisible to
it, so without these hints a lead whose matching pool is on its way would be told to order
another one, paying twice for the same capacity. `could_take` is also what decides that no
pool of the team could ever take the pod, the only case in which an order is suggested.
Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pools.core.isolation import TEAM_LABEL
from pools.core.scheduling.nodes import NodeState, Pod, may_use
from pools.core.scheduling.pod_fixes import fix_text, node_checks
from pools.core.words import plural

# How long a new node usually takes from order to Ready (docs/guide-team-lead.md, O4).
USUAL_START = "5–10 minutes"


@dataclass(frozen=True)
class PoolProspect:
    """A live pool as a Pending pod's hints see it: an empty node as it will register (labels,
    taints, the teams that may use it) and what its capacity waits for."""

    template: NodeState
    min_nodes: int
    max_nodes: int
    live: int = 0  # nodes the scheduler sees (Ready, cordoned, draining, Unknown)
    starting_nodes: tuple[tuple[str, str], ...] = ()  # (name, phase) of its nodes bought and being provisioned, oldest first
    awaiting_approval: tuple[int, ...] = ()  # ids of its orders a platform admin has not decided
    awaiting_payment: tuple[int, ...] = ()  # ids of its approved orders not paid yet
    bursts: bool = False  # the autoscaler may add burst nodes
    pending_reason: str = ""  # the pool's status line, when it has one

    @property
    def starting(self) -> int:
        return len(self.starting_nodes)

    @property
    def name(self) -> str:
        return self.template.pool


def fits_empty(pod: Pod, node: NodeState) -> bool:
    """Whether an empty node like this one holds the pod's requests and offers a GPU model the
    pod allows: what the pod cannot change about a pool. Labels and taints are left aside (the
    pool's spec or the pod's tolerations can give those)."""
    if pod.cpu_milli > node.cpu_milli or pod.memory_mib > node.memory_mib or pod.gpu_count > node.gpu_count:
        return False  # NodeResourcesFit on an empty node: a share of one GPU needs one GPU
    return not (pod.gpu_count and pod.gpu_models and node.gpu_model not in pod.gpu_models)


def could_take(pod: Pod, prospect: PoolProspect) -> bool:
    """Whether the pool could ever run the pod: its team may use it and its nodes hold it."""
    return may_use(pod, prospect.template) and fits_empty(pod, prospect.template)


def waiting_hints(pod: Pod, prospects: Sequence[PoolProspect]) -> list[str]:
    """One hint per pool of the pod's team with no node yet that could take it: what the pool
    waits for and, where its labels or taints keep the pod off, the change (pod_fixes). Pools
    with nodes are left to the scheduler's own hints."""
    return [_hint(pod, p) for p in sorted(prospects, key=lambda p: p.name) if not p.live and could_take(pod, p)]


def waits_for(p: PoolProspect, *, guest: bool = False) -> str:
    """What the pool's first node waits for, and who or what can move it. A `guest` (the pool
    is lent to the pod's team) is shown no command on the pool: each is a 404 to its team."""
    if p.awaiting_approval:
        order = p.awaiting_approval[0]
        return f"its order #{order} awaits approval by a platform admin (ask one to run `ebcloud order approve {order}`)"
    if p.awaiting_payment:
        why = "" if guest else f" (`ebcloud node-pool describe {p.name}` says why if the account balance is too low)"
        return f"its order #{p.awaiting_payment[0]} is approved and waits to be paid{why}"
    if p.starting:
        verb = "is" if p.starting == 1 else "are"
        steps = "" if guest else f"; `ebcloud node-pool events {p.name}` shows each step"
        return f"{plural(p.starting, 'node')} {verb} starting (a new node is usually Ready within {USUAL_START}{steps})"
    if p.pending_reason:
        return f"its status says {p.pending_reason} (`ebcloud node-pool describe {p.name}` shows its orders and events)"
    if p.bursts:
        return (f"it keeps no node at nodeCount.min {p.min_nodes}; the autoscaler adds a burst node when the pool's scaling "
                f"policy asks (`ebcloud node-pool diagnose {p.name}` says when it will not)")  # fmt: skip
    return (f"it keeps no node (nodeCount.min {p.min_nodes}) and does not burst (no spec.scaling block, or spec.burst.enabled: "
            f"false): raise nodeCount.min (`ebcloud node-pool scale {p.name} --min 1`) or enable burst")  # fmt: skip


MAX_NAMED = 3  # starting nodes named in a hint; more are counted


def starting_hint(p: PoolProspect, ready: int, *, guest: bool = False) -> str:
    """For a pod whose pool has `ready` nodes, all too busy for it, and nodes still starting
    that will take it: it waits for those (Cluster Autoscaler's "waiting for node being
    provisioned"), named with their phase, so the lead neither grows the pool nor orders another
    (a `guest`, on a pool lent to its team, is shown no command on it: a 404 to its team)."""
    named = ", ".join(f"{name} ({phase})" for name, phase in p.starting_nodes[:MAX_NAMED])
    named += f" and {len(p.starting_nodes) - MAX_NAMED} more" if len(p.starting_nodes) > MAX_NAMED else ""
    one = p.starting == 1
    return (f"pool {p.name}: its {plural(ready, 'Ready node')} {'is' if ready == 1 else 'are'} busy and {plural(p.starting, 'more node')} "
            f"{'is' if one else 'are'} starting" + (f": {named}" if named else "") + f". This pod waits for {'it' if one else 'one of them'}: "
            f"a new node is usually Ready within {USUAL_START}" + ("" if guest else f" (`ebcloud node-pool events {p.name}` shows each step)")
            + "; no need to grow the pool or order another.")  # fmt: skip


def is_guest(pod: Pod, owner: str | None) -> bool:
    """The pod's team uses a pool lent to it (`owner`: the pool's team identity, None when the
    pool is not one team's)."""
    return owner is not None and pod.team != owner


def lent_hint(pool: str, owner_slug: str | None, *, state: str) -> str:
    """For a guest's pod on a lent pool in `state` ("busy", "no Ready node yet"): a lent pool
    grows only for its own team's pods, and its lead's commands (nodeCount, burst) are a 404 to
    the guest, so the guest is told whom to ask, not what to run."""
    owner = f"team {owner_slug}" if owner_slug else "the team that owns it"
    return (f"pool {pool} ({state}): it is lent to your team, and a lent pool grows only for its own team's pods, "
            f"so this pod waits for room on it: ask the lead of {owner} for more.")


def _hint(pod: Pod, p: PoolProspect) -> str:
    guest = is_guest(pod, p.template.owner)
    if guest and not (p.awaiting_approval or p.awaiting_payment or p.starting):
        head = lent_hint(p.name, p.template.labels.get(TEAM_LABEL), state="no Ready node yet")
    else:
        head = f"pool {p.name} (no Ready node yet): {waits_for(p, guest=guest)}."
    fix = node_checks(pod, p.template)
    if fix is None:
        return f"{head} Its nodes will take this pod once one is Ready: no need to order another pool."
    return fix_text(fix, where=f"{head} Its nodes will not take this pod as it is", lent=guest)
