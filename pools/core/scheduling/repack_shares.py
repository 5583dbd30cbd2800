"""Share repack: pack the running GPU shares into the fewest GPUs, so whole GPUs come free
for the pods that need them (issue 22 item 2; seeds C3, P3).

Why a planner of its own: on a packing as good as FGD's, no GPU can be emptied by moving its
shares into other GPUs' free space (seed 42 of the Alibaba trace at 100% arrived: every GPU
holding shares holds one of 320 milli or more, and all but a few dozen have under 250 free),
and no node drains. What can still be won lies in the *combinations*: 500 | 300+300 |
700+200 need three GPUs as they are, 500+300+200 | 700+300 fill two. Which combinations free
the most GPUs is a cutting-stock problem over all the shares, so it is solved as one:

1. The *open* GPUs are those that hold movable shares only; their shares, counted by size, are
   the demand. GPUs whose shares accept any GPU model form one group across the cluster; a GPU
   with a share bound to a model list is repacked among its own model's GPUs.
2. An integer program (HiGHS) picks how many GPUs run each *pattern* (a multiset of share
   sizes summing to at most 1000 milli): the fewest GPUs, then, with that many, as many GPUs
   as possible kept exactly as they are (their pods do not move). The patterns are generated
   by pricing (a knapsack on the LP's duals) from the GPUs' current contents, so any number
   of share sizes will do; with hundreds, the time limit ends the pricing early.
3. The patterns go onto the open GPUs of the nodes with the least spare CPU, each onto the GPU
   whose content it overlaps most; the GPUs left over, on the nodes with the most spare CPU
   and memory, come free, where a whole-GPU pod also gets the CPU it needs.
4. Every share is bound again on the caller's copies of the nodes: on its own GPU, then its
   own node, then the node whose filters it passes with the most CPU and memory left. Where
   a slot's node lacks the CPU or memory for any share of its size, its pattern moves to a
   GPU left over on a roomier node, and the fill runs again. A share no slot takes goes onto
   the fullest partly used GPU that takes it, else wherever the scheduler puts it; if one
   finds no place at all, or no GPU comes free in the end, the group is put back as it was.
5. Shares that wait for a place (none fits as the GPUs are) may join: a second integer program
   chooses which, packing them in with the running ones where that holds the most GPU, each
   GPU left empty counting as a whole one while whole-GPU pods wait. It counts no CPU, so the
   repack is filled both ways, without and with them, and the better outcome stays; a running
   share left without a slot takes one a waiting share was given (running shares come first).

Moves are evictions and rebinds. Patterns swap shares between GPUs, so the plan's moves are
applied by unbinding every moved pod before binding any (the database has no order to keep).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.nodes import MILLI, Binding, NodeState, Pod, filter_node
from pools.core.scheduling.share_patterns import admit, solve

REASSIGN_ROUNDS = 4  # fills tried, each moving the patterns a fill starved to roomier GPUs
ADMIT_SPARE = 0.005  # of the open GPUs, kept out of the admission's budget: roomier GPUs for the patterns a fill starves of CPU
TIME_LIMIT_S = 10.0  # for the pricing and for each program; the trace's 1,948 open GPUs take 0.5 s in all


@dataclass(frozen=True)
class ShareRepack:
    """Where every moved share goes, which waiting shares it bound, and how many GPUs it frees."""

    moves: tuple[tuple[str, str, str, tuple[int, ...]], ...]  # (pod, from node, to node, GPUs)
    gpus_freed: int  # net: fewer GPUs in use than before, after the waiting shares it bound
    placed: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # waiting shares bound: (pod, node, GPUs)


def repack_shares(
    scheduler: ClusterScheduler,
    movable: Callable[[Pod], bool] = lambda pod: True,
    *,
    waiting: Sequence[Pod] = (),
    time_limit_s: float = TIME_LIMIT_S,
) -> ShareRepack:
    """Repack the shares on ``scheduler``'s nodes in place (they are the caller's copies).

    A GPU whose shares all accept any model joins one cluster-wide group; a GPU with a share
    bound to a model list is repacked with the other GPUs of its own model. ``waiting``: the
    pods that wait for a place, in the order they wait (the scheduler's queue). Waiting shares
    join the packing where the room others leave takes them (:func:`share_patterns.admit`)
    and are bound like the rest; waiting whole-GPU pods make each GPU it frees worth a whole
    GPU."""
    open_gpus = _open_gpus([n for n in scheduler.nodes if n.gpu_count and n.ready], movable)
    by_name = {n.name: n for n in scheduler.nodes}
    groups: dict[str, dict] = defaultdict(dict)
    for key, on in open_gpus.items():
        pinned = any(b.pod.gpu_models for b in on)
        groups[by_name[key[0]].gpu_model if pinned else ""][key] = on
    moves, placed, freed, started = [], [], 0, set()
    shares_waiting = [pod for pod in waiting if pod.is_sharing]
    for group in sorted(groups):
        mine = [pod for pod in shares_waiting if (pod.gpu_models and group in pod.gpu_models) or (not pod.gpu_models and not group)]
        whole = sum(pod.gpu_count for pod in waiting if not pod.is_sharing and (not group or not pod.gpu_models or group in pod.gpu_models))
        done = _repack_group(scheduler, by_name, groups[group], mine, whole, [p for p in waiting if p.name not in started], time_limit_s)
        if done is not None:
            moves += done[0]
            placed += done[1]
            freed += done[2]
            started |= {name for name, *_ in done[1]}
            shares_waiting = [pod for pod in shares_waiting if pod.name not in started]
    return ShareRepack(tuple(moves), freed, tuple(placed))


def _open_gpus(nodes: list[NodeState], movable) -> dict[tuple[str, int], list[Binding]]:
    """(node, GPU) -> its shares, for the GPUs that hold movable shares only."""
    residents: dict[tuple[str, int], list[Binding]] = defaultdict(list)
    blocked = set()
    for node in nodes:
        for binding in node.bound.values():
            for i in binding.gpu_indices:
                if binding.pod.is_sharing and movable(binding.pod):
                    residents[(node.name, i)].append(binding)
                else:
                    blocked.add((node.name, i))
    return {key: on for key, on in residents.items() if key not in blocked}


def _repack_group(scheduler: ClusterScheduler, by_name: dict[str, NodeState], open_gpus, waiting: list[Pod], whole_gpus: int, queue: list[Pod], time_limit_s: float):
    """One group's repack on the scheduler's nodes: (moves, waiting shares bound, GPUs freed),
    or None (nothing changed) if it neither frees a GPU nor binds a waiting share.

    With waiting shares it is tried twice, packing only the running shares and admitting
    waiting ones too (:func:`share_patterns.admit`), and the outcome after which more GPU runs
    stays: what it bound, and what the scheduler then places of the rest of ``queue`` (every
    pod that waits) in the GPUs it freed (:func:`_then_placed`). The program counts no CPU, so
    its fill may bind fewer than it admitted; and a GPU it gives a waiting share may have held
    more."""
    running = Counter(b.pod.gpu_milli for on in open_gpus.values() for b in on)
    sizes = sorted(running | Counter(pod.gpu_milli for pod in waiting), reverse=True)
    index = {size: i for i, size in enumerate(sizes)}
    as_counts = {}  # each open GPU's content as the programs count it: shares per size
    for key, on in open_gpus.items():
        counts = [0] * len(sizes)
        for binding in on:
            counts[index[binding.pod.gpu_milli]] += 1
        as_counts[key] = tuple(counts)
    demand = [running[s] for s in sizes]
    packed = _pack(scheduler, by_name, open_gpus, sizes, as_counts, demand, [], time_limit_s)
    if not waiting:
        return packed
    budget = len(open_gpus) - int(ADMIT_SPARE * len(open_gpus))
    per_size = admit(sizes, demand, [sum(p.gpu_milli == s for p in waiting) for s in sizes], whole_gpus, budget, list(as_counts.values()), time_limit_s)
    if not any(per_size):
        return packed
    admitted = [pod for size, count in zip(sizes, per_size, strict=True) for pod in [p for p in waiting if p.gpu_milli == size][:count]]
    pods, origin = _residents(open_gpus, admitted)

    def worth(outcome) -> tuple:  # GPU milli running after it, then GPUs freed, then fewer moves
        moves, bound, freed = outcome or ((), (), 0)
        started = {name for name, *_ in bound}
        return (sum(pods[name].gpu_milli for name in started) + _then_placed(scheduler, [p for p in queue if p.name not in started]), freed, -len(moves))

    def undone(outcome) -> None:
        if outcome is not None:
            before, after = _places(outcome, origin)
            _rebind(scheduler, pods, after, before)

    plain = worth(packed)
    undone(packed)
    both = _pack(scheduler, by_name, open_gpus, sizes, as_counts, [d + k for d, k in zip(demand, per_size, strict=True)], admitted, time_limit_s)
    if worth(both) > plain:
        return both
    undone(both)
    if packed is not None:  # done again
        _rebind(scheduler, pods, *_places(packed, origin))
    return packed


def _residents(open_gpus, admitted: list[Pod]) -> tuple[dict[str, Pod], dict[str, tuple[str, tuple[int, ...]]]]:
    """The shares a repack binds, by name (the open GPUs' and the admitted waiting ones), and
    where each running one runs now."""
    pods = {b.pod.name: b.pod for on in open_gpus.values() for b in on} | {pod.name: pod for pod in admitted}
    return pods, {b.pod.name: (key[0], b.gpu_indices) for key, on in open_gpus.items() for b in on}


def _then_placed(scheduler: ClusterScheduler, queue: list[Pod]) -> int:
    """The GPU milli of ``queue`` the scheduler places now, largest first (whole GPUs first);
    every pod it placed is unbound again."""
    placed = []
    for pod in sorted(queue, key=lambda p: (-p.gpu_request_milli, -p.cpu_milli, p.name)):
        decision = scheduler.place(pod, explain_failure=False)
        if decision.node is not None:
            placed.append((pod, decision.node))
    for pod, node in placed:
        scheduler.unbind(pod.name, node)
    return sum(pod.gpu_request_milli for pod, _ in placed)


def _places(outcome, origin) -> tuple[dict, dict]:
    """Where a repack's outcome found the shares it moved or bound, and where it put them."""
    moves, bound, _ = outcome
    before = {name: origin[name] for name, *_ in moves}
    return before, {name: (to, gpus) for name, _, to, gpus in moves} | {name: (node, gpus) for name, node, gpus in bound}


def _rebind(scheduler: ClusterScheduler, pods: dict[str, Pod], before: dict, after: dict) -> None:
    """Move shares from their places in ``before`` to those in ``after`` (name -> (node,
    GPUs)): one only in ``before`` is unbound (it waits again), one only in ``after`` bound.
    Every share leaving its place is unbound before any is bound: patterns swap shares
    between GPUs."""
    for name, (node, _) in before.items():
        if after.get(name) != before[name]:
            scheduler.unbind(name, node)
    for name, where in after.items():
        if before.get(name) != where:
            scheduler.bind(pods[name], *where)


def _pack(scheduler: ClusterScheduler, by_name, open_gpus, sizes, as_counts, demand, admitted: list[Pod], time_limit_s: float):
    """Pack the open GPUs' shares and the ``admitted`` waiting ones (``demand`` per size in
    all) into the fewest GPUs and bind them; (moves, waiting shares bound, GPUs freed), or
    None with nothing changed."""
    plan = solve(sizes, demand, Counter(as_counts.values()), time_limit_s)
    if plan is None or (not admitted and sum(run for run, _ in plan.values()) >= len(open_gpus)):
        return None
    leaving: dict[str, list[Pod]] = defaultdict(list)  # per node, the shares the repack unbinds
    for (name, _), on in open_gpus.items():
        leaving[name] += [b.pod for b in on]
    spares = {  # the CPU (then memory) each GPU's node has once its open shares leave
        key: (
            by_name[key[0]].cpu_free + sum(p.cpu_milli for p in leaving[key[0]]),
            by_name[key[0]].memory_free + sum(p.memory_mib for p in leaving[key[0]]),
        )
        for key in open_gpus
    }
    order = sorted(open_gpus, key=lambda key: (spares[key], key))
    holding = defaultdict(list)  # content -> the open GPUs that hold exactly it, least spare first
    for key in order:
        holding[as_counts[key]].append(key)
    hosts: dict[tuple[str, int], dict[int, int]] = {}  # host GPU -> its pattern, shares per size
    to_place: list[dict[int, int]] = []
    for pattern, (run, kept) in plan.items():
        slots = {sizes[i]: count for i, count in enumerate(pattern) if count}
        hosts.update((key, slots) for key in holding[pattern][:kept])
        to_place += [slots] * (run - min(kept, len(holding[pattern])))
    waiting_at: dict[tuple, deque[int]] = defaultdict(deque)  # each pattern to place -> its places in to_place
    for i, slots in enumerate(to_place):
        waiting_at[tuple(sorted(slots.items()))].append(i)
    for key in [key for key in order if key not in hosts][: len(to_place)]:
        have = Counter(b.pod.gpu_milli for b in open_gpus[key])
        # The pattern it overlaps most (in milli), the first in to_place on a tie.
        best = max((p for p, at in waiting_at.items() if at), key=lambda p: (sum(min(c, dict(p).get(size, 0)) * size for size, c in have.items()), -waiting_at[p][0]))
        hosts[key] = to_place[waiting_at[best].popleft()]
    pods, origin = _residents(open_gpus, admitted)
    in_use = _gpus_in_use(scheduler.nodes)
    for name, (node, _) in origin.items():
        scheduler.unbind(name, node)
    for round_ in range(REASSIGN_ROUNDS):
        placed, unfilled = _fill(scheduler, by_name, pods, origin, hosts)
        if len(placed) == len(pods) or round_ == REASSIGN_ROUNDS - 1:
            break
        idle = sorted((k for k in open_gpus if k not in hosts), key=lambda k: (-by_name[k[0]].cpu_free, -by_name[k[0]].memory_free, k))
        for name, (node, _) in placed.items():
            scheduler.unbind(name, node)
        for starved, roomy in zip(unfilled, idle, strict=False):  # as many as there are roomy GPUs
            hosts[roomy] = hosts.pop(starved)
    return _settle_rest(scheduler, pods, origin, placed, in_use)


def _fill(scheduler: ClusterScheduler, by_name, pods: dict[str, Pod], origin, hosts):
    """Bind the (unbound) shares into the slots of their sizes in the host GPUs' patterns;
    returns where each went and the hosts left with an empty slot, starved of CPU or memory.

    Three rounds: shares already on the slot's GPU stay, then those already on its node
    (neither needs CPU it did not have), then the rest, most CPU first, each onto the node with
    the most CPU and memory left, so that no node runs out while others idle."""
    slots: dict[int, Counter] = defaultdict(Counter)  # size -> host GPU -> its free slots of that size
    on_node: dict[tuple[int, str], Counter] = defaultdict(Counter)  # the same, per (size, node)
    for key, pattern in hosts.items():  # both in hosts' order: the first host with a free slot is taken
        for size, count in pattern.items():
            slots[size][key] += count
            on_node[size, key[0]][key] += count
    placed: dict[str, tuple[str, tuple[int, ...]]] = {}

    def settle(pod: Pod, key: tuple[str, int]) -> None:
        scheduler.bind(pod, key[0], (key[1],))
        placed[pod.name] = (key[0], (key[1],))
        slots[pod.gpu_milli][key] -= 1
        on_node[pod.gpu_milli, key[0]][key] -= 1

    for same_gpu in (True, False):
        for name, pod in sorted(pods.items()):
            if name not in placed and name in origin:
                home = (origin[name][0], origin[name][1][0])
                if same_gpu:
                    key = home if slots[pod.gpu_milli][home] > 0 else None
                else:
                    key = next((k for k, free in on_node[pod.gpu_milli, home[0]].items() if free > 0), None)
                if key is not None:
                    settle(pod, key)
    for pod in sorted((p for n, p in pods.items() if n not in placed), key=lambda p: (p.name not in origin, -p.cpu_milli, -p.memory_mib, p.name)):
        fits = [
            k for k, free in slots[pod.gpu_milli].items()
            if free > 0 and filter_node(pod, by_name[k[0]]) is None and by_name[k[0]].gpu_free[k[1]] >= pod.gpu_milli
        ]
        if fits:
            settle(pod, max(fits, key=lambda k: (by_name[k[0]].cpu_free, by_name[k[0]].memory_free, k)))
    return placed, sorted({k for free in slots.values() for k, n in free.items() if n > 0})


def _gpus_in_use(nodes: Sequence[NodeState]) -> int:
    return sum(1 for node in nodes for free in node.gpu_free if free < MILLI)


def _settle_rest(scheduler: ClusterScheduler, pods, origin, placed, in_use: int):
    """Place the running shares no slot took (a partly used GPU first, so freed GPUs stay
    whole; waiting ones no slot took wait on); undo the whole repack if one finds no place, or
    if in the end it neither binds a waiting share nor leaves fewer GPUs in use than
    ``in_use`` before it."""
    for name in sorted(origin):
        if name not in placed:
            pod = pods[name]
            where = _sliver(scheduler.nodes, pod) or _bump(scheduler, pods, origin, placed, pod)
            if where is None:
                decision = scheduler.place(pod, explain_failure=False)
                if decision.node is None:
                    _rebind(scheduler, pods, placed, origin)
                    return None
                where = (decision.node, decision.gpu_indices)
            else:
                scheduler.bind(pod, *where)
            placed[name] = where
    # Counted over every GPU: a share no slot took may have gone onto a GPU idle before.
    freed = in_use - _gpus_in_use(scheduler.nodes)
    bound = [(name, *where) for name, where in sorted(placed.items()) if name not in origin]
    if freed <= 0 and not bound:  # the shares no slot took filled the GPUs the patterns freed
        _rebind(scheduler, pods, placed, origin)
        return None
    moves = [(pod, origin[pod][0], to, gpus) for pod, (to, gpus) in sorted(placed.items()) if pod in origin and (to, gpus) != origin[pod]]
    return moves, bound, freed


def _bump(scheduler: ClusterScheduler, pods, origin, placed, pod: Pod) -> tuple[str, tuple[int, ...]] | None:
    """A place for running ``pod`` that a waiting share bound by this repack gives up (it waits
    again): the smallest such share whose GPU and node then take ``pod``. Running shares come
    first; the programs count no CPU, so a waiting share may take the CPU a running one needs."""
    by_name = {node.name: node for node in scheduler.nodes}
    for name in sorted((n for n in placed if n not in origin), key=lambda n: (pods[n].gpu_milli, pods[n].cpu_milli, n)):
        node, gpus = placed[name]
        scheduler.unbind(name, node)
        if by_name[node].gpu_free[gpus[0]] >= pod.gpu_milli and filter_node(pod, by_name[node]) is None:
            del placed[name]
            return node, gpus
        scheduler.bind(pods[name], node, gpus)
    return None


def _sliver(nodes: Sequence[NodeState], pod: Pod) -> tuple[str, tuple[int, ...]] | None:
    """The partly used GPU with the least room that still takes ``pod`` (best fit), so that a
    share no pattern slot could take leaves the freed GPUs whole."""
    best = None
    for node in nodes:
        for i, free in enumerate(node.gpu_free):
            if pod.gpu_milli <= free < MILLI and (best is None or free < best[0]) and filter_node(pod, node) is None:
                best = (free, node.name, i)
    return None if best is None else (best[1], (best[2],))
