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

Moves are evictions and rebinds. Patterns swap shares between GPUs, so the plan's moves are
applied by unbinding every moved pod before binding any (the database has no order to keep).
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.nodes import MILLI, Binding, NodeState, Pod, filter_node

ENUMERATE_UP_TO = 20_000  # patterns: the trace's 20 share sizes make 5,384
ENUMERATE_SIZES = 60  # distinct share sizes beyond which patterns are never enumerated
REASSIGN_ROUNDS = 4  # fills tried, each moving the patterns a fill starved to roomier GPUs
TIME_LIMIT_S = 10.0  # for the pricing and for each program; the trace's 1,948 open GPUs take 0.5 s in all


@dataclass(frozen=True)
class ShareRepack:
    """Where every moved share goes, and how many GPUs the repack frees."""

    moves: tuple[tuple[str, str, str, tuple[int, ...]], ...]  # (pod, from node, to node, GPUs)
    gpus_freed: int


def best_pattern(sizes: Sequence[int], values, bounds: Sequence[int]) -> tuple[float, tuple[int, ...]]:
    """The pattern of largest total value (a bounded knapsack over 0-1000 milli: at most
    ``bounds[i]`` shares of ``sizes[i]``, each worth ``values[i]``), with its value; the
    pricing step of column generation here and in bench/offline_floor.py's bound."""
    import numpy as np

    items = []  # (size index, how many, milli, value): each bound split in powers of two
    for i, (size, value, bound) in enumerate(zip(sizes, values, bounds, strict=True)):
        step = 1
        while bound > 0:
            count = min(step, bound)
            items.append((i, count, size * count, value * count))
            bound, step = bound - count, step * 2
    best, taken = np.zeros(MILLI + 1), []
    for _, _, milli, value in items:
        with_it = np.full(MILLI + 1, -np.inf)
        with_it[milli:] = best[: MILLI + 1 - milli] + value
        better = with_it > best + 1e-12
        taken.append(better)
        best = np.where(better, with_it, best)
    room = int(np.argmax(best))
    value, counts = float(best[room]), [0] * len(sizes)
    for (i, count, milli, _), took in zip(reversed(items), reversed(taken), strict=True):
        if took[room]:
            counts[i] += count
            room -= milli
    return value, tuple(counts)


def _patterns(sizes: Sequence[int], demand: Sequence[int], current: list[tuple[int, ...]], seconds: float) -> tuple[list[tuple[int, ...]], float]:
    """The patterns worth considering: the GPUs' current contents, then, by column generation,
    each pattern a knapsack on the covering LP's duals finds worth more than one GPU, until none
    is (the LP over these patterns is then the LP over all of them) or ``seconds`` run out.
    The trace's 20 share sizes take 3 rounds and 75 patterns, where enumerating every pattern
    gives 5,384; hundreds of distinct sizes take a round per pattern, hence the time limit.
    Also returns the LP's value once it converged (a lower bound on the GPUs), else 0."""
    import numpy as np
    from scipy.optimize import linprog

    patterns = list(dict.fromkeys(current))
    bounds = [min(d, MILLI // size) for size, d in zip(sizes, demand, strict=True)]
    deadline, lower = time.monotonic() + seconds, 0.0
    while time.monotonic() < deadline:
        lp = linprog(np.ones(len(patterns)), A_ub=-np.array(patterns, dtype=float).T, b_ub=-np.array(demand, dtype=float), method="highs")
        if lp.status != 0:
            break
        value, pattern = best_pattern(sizes, -lp.ineqlin.marginals, bounds)
        if value <= 1 + 1e-9 or pattern in patterns:
            lower = lp.fun  # converged: no GPU count below this LP's can hold every share
            break
        patterns.append(pattern)
    return patterns, lower


def _every_pattern(sizes: Sequence[int], demand: Sequence[int]) -> list[tuple[int, ...]] | None:
    """Every non-empty multiset of ``sizes`` (as counts, none above its demand) that fits one
    GPU; None past ENUMERATE_UP_TO."""
    found: list[tuple[int, ...]] = []

    def grow(i: int, room: int, counts: list[int]) -> bool:
        if i == len(sizes):
            if any(counts):
                found.append(tuple(counts))
            return len(found) <= ENUMERATE_UP_TO
        return all(grow(i + 1, room - k * sizes[i], [*counts, k]) for k in range(min(room // sizes[i], demand[i]), -1, -1))

    if len(sizes) > ENUMERATE_SIZES:  # past the recursion's depth; such sets exceed the limit anyway
        return None
    return found if grow(0, MILLI, []) else None


def _solve(sizes, demand, keepable: Counter, time_limit_s: float) -> dict[tuple[int, ...], tuple[int, int]] | None:
    """pattern -> (GPUs that run it, of which kept as they are), or None (no answer in time).

    Two integer programs over :func:`_patterns`: the fewest GPUs (x[p]: GPUs that run pattern
    p, every share placed), then, with that many, the most GPUs kept as they are (k[q] <= x[q]
    and <= the GPUs that hold exactly q now). One program weighing both proves its optimum far
    more slowly. Over the generated patterns only (price and branch) the first program can
    miss the optimum by a GPU; where it lands above the LP's bound, it runs again over every
    pattern if they are few enough (ENUMERATE_UP_TO)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix, hstack

    options = {"time_limit": time_limit_s}

    def fewest_gpus(patterns):
        shares = csr_matrix(np.array(patterns, dtype=float).T)
        return shares, milp(
            c=np.ones(len(patterns)), constraints=[LinearConstraint(shares, lb=demand, ub=demand)],
            integrality=np.ones(len(patterns)), bounds=Bounds(0, np.inf), options=options,
        )

    patterns, lower = _patterns(sizes, demand, list(keepable), time_limit_s)
    shares, fewest = fewest_gpus(patterns)
    if fewest.x is not None and fewest.fun > math.ceil(lower - 1e-6) + 0.5:  # a gap the patterns leave
        every = _every_pattern(sizes, demand)
        if every is not None:
            patterns = list(dict.fromkeys(patterns + every))
            shares, fewest = fewest_gpus(patterns)
    if fewest.x is None:
        return None
    n = len(patterns)
    gpus = round(fewest.fun)
    kept = [i for i, p in enumerate(patterns) if keepable.get(p)]
    k = len(kept)
    link = csr_matrix(
        (np.concatenate([-np.ones(k), np.ones(k)]), (np.tile(np.arange(k), 2), np.concatenate([kept, n + np.arange(k)]))),
        shape=(k, n + k),
    )
    most_kept = milp(
        c=np.concatenate([np.zeros(n), -np.ones(k)]),
        constraints=[
            LinearConstraint(hstack([shares, csr_matrix((len(sizes), k))]), lb=demand, ub=demand),
            LinearConstraint(csr_matrix(np.concatenate([np.ones(n), np.zeros(k)])), lb=gpus, ub=gpus),
            LinearConstraint(link, lb=-np.inf, ub=0),
        ],
        integrality=np.ones(n + k),
        bounds=Bounds(np.zeros(n + k), np.concatenate([np.full(n, np.inf), [keepable[patterns[i]] for i in kept]])),
        options=options,
    )
    if most_kept.x is None:
        counts, keeps = np.rint(fewest.x).astype(int), {}
    else:
        counts = np.rint(most_kept.x).astype(int)
        keeps = dict(zip(kept, counts[n:], strict=True))
    return {p: (int(counts[i]), int(keeps.get(i, 0))) for i, p in enumerate(patterns) if counts[i]}


def repack_shares(
    scheduler: ClusterScheduler,
    movable: Callable[[Pod], bool] = lambda pod: True,
    *,
    time_limit_s: float = TIME_LIMIT_S,
) -> ShareRepack:
    """Repack the shares on ``scheduler``'s nodes in place (they are the caller's copies).

    A GPU whose shares all accept any model joins one cluster-wide group; a GPU with a share
    bound to a model list is repacked with the other GPUs of its own model."""
    open_gpus = _open_gpus([n for n in scheduler.nodes if n.gpu_count and n.ready], movable)
    by_name = {n.name: n for n in scheduler.nodes}
    groups: dict[str, dict] = defaultdict(dict)
    for key, on in open_gpus.items():
        pinned = any(b.pod.gpu_models for b in on)
        groups[by_name[key[0]].gpu_model if pinned else ""][key] = on
    moves, freed = [], 0
    for group in sorted(groups):
        done = _repack_group(scheduler, by_name, groups[group], time_limit_s)
        if done is not None:
            moves += done[0]
            freed += done[1]
    return ShareRepack(tuple(moves), freed)


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


def _repack_group(scheduler: ClusterScheduler, by_name: dict[str, NodeState], open_gpus, time_limit_s: float):
    """One group's repack on the scheduler's nodes; None (nothing changed) if it frees nothing."""
    demand_by_size = Counter(b.pod.gpu_milli for on in open_gpus.values() for b in on)
    sizes = sorted(demand_by_size, reverse=True)
    index = {size: i for i, size in enumerate(sizes)}
    as_counts = {}  # each open GPU's content as the programs count it: shares per size
    for key, on in open_gpus.items():
        counts = [0] * len(sizes)
        for binding in on:
            counts[index[binding.pod.gpu_milli]] += 1
        as_counts[key] = tuple(counts)
    plan = _solve(sizes, [demand_by_size[s] for s in sizes], Counter(as_counts.values()), time_limit_s)
    if plan is None or sum(run for run, _ in plan.values()) >= len(open_gpus):
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
    for key in [key for key in order if key not in hosts][: len(to_place)]:
        have = Counter(b.pod.gpu_milli for b in open_gpus[key])
        best = max(range(len(to_place)), key=lambda i: sum(min(c, to_place[i].get(size, 0)) * size for size, c in have.items()))
        hosts[key] = to_place.pop(best)
    pods = {b.pod.name: b.pod for on in open_gpus.values() for b in on}
    origin = {b.pod.name: (key[0], b.gpu_indices) for key, on in open_gpus.items() for b in on}
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
    slots: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for key, pattern in hosts.items():
        for size, count in pattern.items():
            slots[size] += [key] * count
    placed: dict[str, tuple[str, tuple[int, ...]]] = {}

    def settle(pod: Pod, key: tuple[str, int]) -> None:
        scheduler.bind(pod, key[0], (key[1],))
        placed[pod.name] = (key[0], (key[1],))
        slots[pod.gpu_milli].remove(key)

    for same in (lambda key, home: key == home, lambda key, home: key[0] == home[0]):
        for name, pod in sorted(pods.items()):
            home = (origin[name][0], origin[name][1][0])
            if name not in placed:
                key = next((k for k in slots[pod.gpu_milli] if same(k, home)), None)
                if key is not None:
                    settle(pod, key)
    for pod in sorted((p for n, p in pods.items() if n not in placed), key=lambda p: (-p.cpu_milli, -p.memory_mib, p.name)):
        fits = [
            k for k in set(slots[pod.gpu_milli])
            if filter_node(pod, by_name[k[0]]) is None and by_name[k[0]].gpu_free[k[1]] >= pod.gpu_milli
        ]
        if fits:
            settle(pod, max(fits, key=lambda k: (by_name[k[0]].cpu_free, by_name[k[0]].memory_free, k)))
    return placed, sorted({k for keys in slots.values() for k in keys})


def _gpus_in_use(nodes: Sequence[NodeState]) -> int:
    return sum(1 for node in nodes for free in node.gpu_free if free < MILLI)


def _settle_rest(scheduler: ClusterScheduler, pods, origin, placed, in_use: int):
    """Place the shares no slot took (a partly used GPU first, so freed GPUs stay whole);
    undo the whole repack if one finds no place, or if in the end no fewer GPUs are in use
    than ``in_use`` before it."""
    for name, pod in sorted(pods.items()):
        if name not in placed:
            where = _sliver(scheduler.nodes, pod)
            if where is None:
                decision = scheduler.place(pod, explain_failure=False)
                if decision.node is None:
                    _undo(scheduler, origin, placed, pods)
                    return None
                where = (decision.node, decision.gpu_indices)
            else:
                scheduler.bind(pod, *where)
            placed[name] = where
    # Counted over every GPU: a share no slot took may have gone onto a GPU idle before.
    freed = in_use - _gpus_in_use(scheduler.nodes)
    if freed <= 0:  # the shares no slot took filled the GPUs the patterns freed: not worth a move
        _undo(scheduler, origin, placed, pods)
        return None
    moves = [(pod, origin[pod][0], to, gpus) for pod, (to, gpus) in sorted(placed.items()) if (to, gpus) != origin[pod]]
    return moves, freed


def _sliver(nodes: Sequence[NodeState], pod: Pod) -> tuple[str, tuple[int, ...]] | None:
    """The partly used GPU with the least room that still takes ``pod`` (best fit), so that a
    share no pattern slot could take leaves the freed GPUs whole."""
    best = None
    for node in nodes:
        for i, free in enumerate(node.gpu_free):
            if pod.gpu_milli <= free < MILLI and (best is None or free < best[0]) and filter_node(pod, node) is None:
                best = (free, node.name, i)
    return None if best is None else (best[1], (best[2],))


def _undo(scheduler: ClusterScheduler, origin, placed, pods: dict[str, Pod]) -> None:
    """Put every share back where it ran before the repack."""
    for name, (node, _) in placed.items():
        scheduler.unbind(name, node)
    for name, (node, gpus) in origin.items():
        scheduler.bind(pods[name], node, gpus)
