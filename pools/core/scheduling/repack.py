"""Repack plan: which pods to move so that whole nodes become free (seed C3, P3).

A pure planner over copies of the nodes; nothing is evicted here. The services turn the plan
into drains, one disruption-budget wave at a time, and write an event per move.

How it decides, and why:

* Nodes are drained emptiest first (GPU allocation, then CPU), since they free a node for the
  fewest moves. Nodes with no pods are already free and never count as freed.
* A drained node's pods are re-placed largest first (GPUs, then CPU) onto nodes that already
  run pods: moving onto an empty node frees nothing. Every target must pass every scheduler
  filter for that pod (taints, affinity, cordon, model, CPU, memory, GPUs).
* Targets are scored with CPU and GPU together: the FGD score (which counts GPUs stranded by
  exhausted CPU as fragmented) and then BestFit on CPU and GPU. The FGD paper's README notes
  that re-placing offline by GPU size alone ends worse than online FGD because CPU runs out
  first on the nodes that sharing pods need.
* A node is drained only if all its pods find a place; otherwise nothing moves off it.
* Priority: pods are only moved into free capacity, never displacing anyone; pods above
  ``max_priority`` (e.g. the priority of the pending pod the room is for) are never moved, so
  their nodes are not drained.
* The disruption budget ``max_drained_nodes`` caps the nodes drained by one plan (one wave).
  A move is an eviction, so the plan spends the PodDisruptionBudgets (``budgets``): a pod
  whose budget allows no eviction now stays where it runs (its node is not drained, its GPU's
  shares not repacked), and of a budget that allows N, at most N pods move.
* The plan's second part packs the GPU shares into the fewest GPUs
  (:mod:`pools.core.scheduling.repack_shares`): on a packing as good as FGD's no node drains,
  but recombining shares frees whole GPUs for the pods that need them. It is planned on the
  nodes as they are and applied on its own (it touches many nodes, so no node-count budget
  describes it).
* Where the size allows, an integer program (:mod:`pools.core.scheduling.repack_milp`) chooses
  the nodes and every pod's place at once, under the same rules; it replaces the greedy plan
  when it frees more GPUs, or as many with fewer moves (greedy drains can block each other).

:func:`make_room_plan` is the other direction: it moves a few pods so that Pending pods fit,
never moving a pod of higher priority than the one it makes room for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pools.core.disruption import DisruptionBudget, refused
from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.fragmentation import FragmentationModel, Workload, workload_from_pods
from pools.core.scheduling.nodes import (
    MAX_NODE_SCORE,
    MILLI,
    Binding,
    NodeState,
    Pod,
    filter_node,
    static_filter_reason,
)
from pools.core.scheduling.policies import BestFitPolicy
from pools.core.scheduling.repack_milp import TIME_LIMIT_S, optimal_drain
from pools.core.scheduling.repack_shares import repack_shares

HOURS_PER_WEEK = 168


@dataclass(frozen=True)
class Move:
    pod: str
    from_node: str
    to_node: str
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    pod: str
    node: str
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class RepackPlan:
    moves: tuple[Move, ...]
    freed_nodes: tuple[str, ...]
    gpu_hours_saved_per_week: int
    fragmentation_before_milli: float
    fragmentation_after_milli: float
    skipped: dict[str, str] = field(default_factory=dict)
    empty_nodes: tuple[str, ...] = ()  # GPU nodes that run no pod already: free without a move
    share_moves: tuple[Move, ...] = ()  # then, GPU shares packed into fewer GPUs (repack_shares)
    share_gpus_freed: int = 0  # whole GPUs those moves free, for pods that need whole GPUs (none when waiting shares took more)
    share_placements: tuple[Placement, ...] = ()  # waiting shares the packing makes room for, bound with it

    @property
    def free_nodes(self) -> tuple[str, ...]:
        """Every node free once the plan is applied: empty already, then freed by moves."""
        return self.empty_nodes + self.freed_nodes


class _RepackScore:
    """FGD first, BestFit (CPU and GPU) second, folded into one integer score."""

    name = "repack"

    def __init__(self, model: FragmentationModel) -> None:
        self.model, self.bestfit = model, BestFitPolicy()

    def score(self, pod: Pod, node: NodeState) -> tuple[int, tuple[int, ...]]:
        fgd, gpus = self.model.placement_score(pod, node)
        tie, _ = self.bestfit.score(pod, node)
        return fgd * (MAX_NODE_SCORE + 1) + max(0, min(tie, MAX_NODE_SCORE)), gpus


def _drain_order(node: NodeState) -> tuple:
    gpu = node.gpu_used_milli / (node.gpu_count * 1000) if node.gpu_count else 1.0
    cpu = node.cpu_used / node.cpu_milli if node.cpu_milli else 1.0
    return (gpu, cpu, node.name)


def _pinned(pod: Pod, max_priority: int | None, only_checkpointable: bool, refused: Mapping[str, str], kept: Mapping[str, str]) -> str | None:
    """Why ``pod`` may not move, or None (``refused``: pod -> the budget that allows it no move;
    ``kept``: pod -> why its own annotations keep it)."""
    if pod.name in kept:
        return kept[pod.name]
    if pod.name in refused:
        return f"{refused[pod.name]} keeps pod {pod.name} in place"
    if (max_priority is not None and pod.priority > max_priority) or (only_checkpointable and not pod.checkpointable):
        return f"pod {pod.name} may not be moved"
    return None


def _freed_gpus(plan: RepackPlan, gpu_of: dict[str, int]) -> int:
    return sum(gpu_of[name] for name in plan.freed_nodes)


def repack_plan(
    nodes: Sequence[NodeState],
    *,
    workload: Workload | None = None,
    max_drained_nodes: int = 1,
    max_priority: int | None = None,
    only_checkpointable: bool = False,
    optimise: bool = True,
    pack_shares: bool = True,
    waiting: Sequence[Pod] = (),
    budgets: Sequence[DisruptionBudget] = (),
    kept: Mapping[str, str] | None = None,
) -> RepackPlan:
    """Plan moves that empty up to ``max_drained_nodes`` nodes (see the module docstring).

    The greedy plan always; with ``optimise``, also the integer program of
    :mod:`pools.core.scheduling.repack_milp` where the size allows, and the one that frees more
    GPUs (then moves fewer pods) wins; on a tie the greedy plan stays.

    ``gpu_hours_saved_per_week`` is freed nodes x their GPUs x 168: the GPU-hours a week that
    no longer need to be paid for once those nodes are released (or that pending pods get).
    ``empty_nodes`` are the ready GPU nodes that run no pod already: part of what the plan
    leaves free, though no move is needed for them. ``waiting``: the pods waiting for a place,
    in the order they wait; the shares among them join the share packing where room allows.
    ``budgets``: the disruption budgets over the running pods (a move is an eviction): a pod
    whose budget allows none stays where it runs, and so does its node; of a budget that
    allows N, at most N pods move (counted per part: each is applied on its own). ``kept``: the
    pods that stay where they run whatever the plan, with why (`disruption.eviction_opted_out`)."""
    refused = {key: budget.named for budget in budgets if budget.allowed <= 0 for key in budget.pods}
    if workload is None:
        workload = workload_from_pods([b.pod for n in nodes for b in n.bound.values()])
    model = FragmentationModel(workload)

    def why_pinned(pod: Pod) -> str | None:
        return _pinned(pod, max_priority, only_checkpointable, refused, kept or {})

    plan = _greedy_plan(nodes, model, max_drained_nodes, why_pinned, budgets)
    optimal = _optimal_plan(nodes, model, max_drained_nodes, why_pinned, budgets) if optimise else None
    if optimal is not None:
        gpu_of = {n.name: n.gpu_count for n in nodes}
        if (-_freed_gpus(optimal, gpu_of), len(optimal.moves)) < (-_freed_gpus(plan, gpu_of), len(plan.moves)):
            plan = optimal
    if not pack_shares:
        return plan
    return _with_shares(nodes, plan, model, lambda pod: why_pinned(pod) is None, waiting, budgets)


def _with_shares(nodes, plan: RepackPlan, model: FragmentationModel, movable, waiting: Sequence[Pod], budgets) -> RepackPlan:
    """The plan with its second part, planned on the nodes as they are (it is applied on its
    own): the shares (and the waiting shares that fit with them) packed into the fewest GPUs,
    no share landing on a node that runs none. Where it moves more of a disruption budget's
    pods than the budget allows, the budget's other pods stay (only the first it may move
    still may) and it is planned again, until no budget is overspent."""
    kept: set[str] = set()
    while True:
        sims = sorted((n.clone() for n in nodes), key=lambda n: n.name)
        for node in sims:
            node.unschedulable = node.unschedulable or not node.bound
        scheduler = ClusterScheduler(sims, _RepackScore(model))
        shares = repack_shares(scheduler, lambda pod, kept=frozenset(kept): movable(pod) and pod.name not in kept, waiting=waiting, time_limit_s=TIME_LIMIT_S)
        moved = [name for name, *_ in shares.moves]
        excess = _past_budget(moved, budgets)
        if excess is None:
            break
        budget = _budget_of(excess, budgets)
        kept |= budget.pods.difference([name for name in moved if name in budget.pods][: budget.allowed])
    return replace(
        plan, share_moves=tuple(Move(*move) for move in shares.moves), share_gpus_freed=max(shares.gpus_freed, 0),
        share_placements=tuple(Placement(*placed) for placed in shares.placed),
    )  # fmt: skip


def _budget_of(pod: str, budgets: Sequence[DisruptionBudget]) -> DisruptionBudget:
    return next(budget for budget in budgets if pod in budget.pods)


def _past_budget(moved: Sequence[str], budgets: Sequence[DisruptionBudget]) -> str | None:
    """The first of the ``moved`` pods that its disruption budget no longer lets go (each
    budget lets ``allowed`` of its pods go), or None."""
    return next(iter(refused(moved, budgets)), None)


def _greedy_plan(nodes, model: FragmentationModel, max_drained_nodes, why_pinned, budgets) -> RepackPlan:
    sims = sorted((n.clone() for n in nodes), key=lambda n: n.name)
    before = sum(model.node_fragmentation(n) for n in sims)
    closed = {n.name: n.unschedulable for n in sims}  # to restore after planning
    for node in sims:
        if not node.bound:
            node.unschedulable = True  # never move pods onto empty nodes
    scheduler = ClusterScheduler(sims, _RepackScore(model))
    moves: list[Move] = []
    freed: list[str] = []
    skipped: dict[str, str] = {}
    candidates = [n for n in sims if n.bound and n.ready and n.gpu_count]
    for node in sorted(candidates, key=_drain_order):
        if len(freed) >= max_drained_nodes:
            break
        pods = sorted(
            (b.pod for b in node.bound.values()),
            key=lambda p: (-p.gpu_request_milli, -p.cpu_milli, p.name),
        )
        pinned = next(filter(None, map(why_pinned, pods)), None)
        excess = _past_budget([m.pod for m in moves] + [p.name for p in pods], budgets) if budgets else None
        if pinned is not None or excess is not None:
            skipped[node.name] = pinned or f"{_budget_of(excess, budgets).named} lets no more of its pods move now ({excess})"
            continue
        node.unschedulable = True
        scheduler.touch(node.name)
        planned: list[tuple[Move, tuple[int, ...]]] = []
        for pod in pods:
            decision = scheduler.schedule(pod, explain_failure=False)
            if decision.node is None:
                skipped[node.name] = f"pod {pod.name} fits on no other running node"
                break
            origin = scheduler.unbind(pod.name, node.name).gpu_indices
            scheduler.bind(pod, decision.node, decision.gpu_indices)
            planned.append((Move(pod.name, node.name, decision.node, decision.gpu_indices), origin))
        if len(planned) < len(pods):  # roll back: this node stays as it is
            for move, origin in reversed(planned):
                binding = scheduler.unbind(move.pod, move.to_node)
                scheduler.bind(binding.pod, node.name, origin)
            node.unschedulable = closed[node.name]
            scheduler.touch(node.name)
            continue
        moves += [move for move, _ in planned]
        freed.append(node.name)
    return _plan(nodes, model, before, sims, moves, freed, skipped)


def _plan(nodes, model, before: float, after_nodes, moves, freed, skipped) -> RepackPlan:
    gpu_of = {n.name: n.gpu_count for n in nodes}
    empty = tuple(n.name for n in sorted(nodes, key=lambda n: n.name) if n.gpu_count and n.ready and not n.bound)
    return RepackPlan(
        moves=tuple(moves),
        freed_nodes=tuple(freed),
        gpu_hours_saved_per_week=sum(gpu_of[name] for name in freed) * HOURS_PER_WEEK,
        fragmentation_before_milli=before,
        fragmentation_after_milli=sum(model.node_fragmentation(n) for n in after_nodes),
        skipped=skipped,
        empty_nodes=empty,
    )


def _optimal_plan(nodes, model: FragmentationModel, max_drained_nodes, why_pinned, budgets) -> RepackPlan | None:
    """The integer program's drain, replayed with real binds on copies (so it surely fits),
    in drain order; None where the program is too big or finds nothing in time."""
    sims = sorted((n.clone() for n in nodes), key=lambda n: n.name)
    skipped: dict[str, str] = {}
    candidates = []
    for node in sorted((n for n in sims if n.bound and n.ready and n.gpu_count), key=_drain_order):
        pinned = next(filter(None, (why_pinned(b.pod) for b in node.bound.values())), None)
        if pinned is None:
            candidates.append(node)
        else:
            skipped[node.name] = pinned
    limits = [({n.name: len(budget.pods & n.bound.keys()) for n in candidates}, budget.allowed) for budget in budgets if budget.allowed > 0]
    drain = optimal_drain(sims, candidates, max_drained_nodes=max_drained_nodes, limits=limits)
    if drain is None:
        return None
    before = sum(model.node_fragmentation(n) for n in sims)
    by_name = {n.name: n for n in sims}
    freed = [n.name for n in candidates if n.name in drain.nodes]
    moves: list[Move] = []
    for name in freed:
        node = by_name[name]
        for binding in sorted(node.bound.values(), key=lambda b: b.pod.name):
            to_node, gpus = drain.targets[binding.pod.name]
            node.unbind(binding.pod.name)
            if filter_node(binding.pod, by_name[to_node]) is not None:
                return None
            try:
                by_name[to_node].bind(binding.pod, gpus)
            except ValueError:  # GPUs taken after all (OversubscribedError is a ValueError)
                return None
            moves.append(Move(binding.pod.name, name, to_node, gpus))
    return _plan(nodes, model, before, sims, moves, freed, skipped)


# --- making room for pending pods ------------------------------------------------------------


@dataclass(frozen=True)
class RoomPlan:
    """Moves that make room, then where each pending pod goes; the rest stay ``unplaced``."""

    moves: tuple[Move, ...]
    placements: dict[str, tuple[str, tuple[int, ...]]]
    unplaced: tuple[str, ...]


def _movers_for(pending: Pod, node: NodeState, max_moves: int, fixed: set[str]) -> list[Pod] | None:
    """Few pods of at most ``pending``'s priority whose departure lets it fit on ``node``:
    the GPUs cheapest to clear first, then CPU-only pods for missing CPU or memory. Pods in
    ``fixed`` (placed by this plan) stay, so that the plan only moves running pods."""
    movable = {
        b.pod.name
        for b in node.bound.values()
        if b.pod.priority <= pending.priority and b.pod.name not in fixed
    }
    chosen: dict[str, Pod] = {}
    if pending.gpu_count:
        residents: list[list[Binding]] = [[] for _ in range(node.gpu_count)]
        for binding in node.bound.values():
            for i in binding.gpu_indices:
                residents[i].append(binding)
        if pending.gpu_milli == MILLI:
            options = sorted(
                (len(on), MILLI - node.gpu_free[i], i)
                for i, on in enumerate(residents)
                if all(b.pod.name in movable for b in on)
            )
            if len(options) < pending.gpu_count:
                return None
            for _, _, i in options[: pending.gpu_count]:
                chosen.update((b.pod.name, b.pod) for b in residents[i])
        else:
            best = None
            for i, on in enumerate(residents):
                free, picked = node.gpu_free[i], []
                for b in sorted(
                    (b for b in on if b.pod.name in movable), key=lambda b: -b.pod.gpu_milli
                ):
                    if free >= pending.gpu_milli:
                        break
                    free, picked = free + b.pod.gpu_milli, [*picked, b.pod]
                if free >= pending.gpu_milli and (best is None or len(picked) < len(best)):
                    best = picked
            if best is None:
                return None
            chosen.update((p.name, p) for p in best)
    cpu_short = pending.cpu_milli - node.cpu_free - sum(p.cpu_milli for p in chosen.values())
    mem_short = pending.memory_mib - node.memory_free - sum(p.memory_mib for p in chosen.values())
    extra = sorted(
        (b.pod for b in node.bound.values() if b.pod.name in movable and b.pod.name not in chosen),
        key=lambda p: (p.gpu_count > 0, -p.cpu_milli, -p.memory_mib, p.name),
    )
    for p in extra:
        if cpu_short <= 0 and mem_short <= 0:
            break
        chosen[p.name] = p
        cpu_short, mem_short = cpu_short - p.cpu_milli, mem_short - p.memory_mib
    if cpu_short > 0 or mem_short > 0 or not chosen or len(chosen) > max_moves:
        return None
    return list(chosen.values())


def _try_room(scheduler: ClusterScheduler, pending: Pod, name: str, movers: list[Pod]):
    """Move ``movers`` off node ``name`` and bind ``pending`` there, or undo everything."""
    node = scheduler.node(name)
    was_unschedulable, node.unschedulable = node.unschedulable, True
    scheduler.touch(name)
    planned: list[tuple[Move, tuple[int, ...]]] = []
    for mover in sorted(movers, key=lambda p: (-p.gpu_request_milli, -p.cpu_milli, p.name)):
        origin = scheduler.unbind(mover.name, name).gpu_indices
        decision = scheduler.schedule(mover, explain_failure=False)
        if decision.node is None:
            scheduler.bind(mover, name, origin)
            break
        scheduler.bind(mover, decision.node, decision.gpu_indices)
        planned.append((Move(mover.name, name, decision.node, decision.gpu_indices), origin))
    node.unschedulable = was_unschedulable
    scheduler.touch(name)
    if len(planned) == len(movers) and filter_node(pending, node) is None:
        gpus = scheduler.policy.score(pending, node)[1]
        scheduler.bind(pending, name, gpus)
        return [move for move, _ in planned], gpus
    for move, origin in reversed(planned):
        binding = scheduler.unbind(move.pod, move.to_node)
        scheduler.bind(binding.pod, name, origin)
    return None


def make_room_plan(
    pending: Sequence[Pod],
    nodes: Sequence[NodeState],
    *,
    workload: Workload | None = None,
    max_moves_per_pod: int = 3,
    max_nodes_tried: int = 8,
) -> RoomPlan:
    """Place Pending pods, moving a few running pods out of the way where that is needed.

    Highest priority first, each pending pod goes where it fits; if it fits nowhere, the
    nodes whose filters it passes are ranked by how few pods (of at most its priority: never
    a higher-priority pod for a lower one) would have to move, and the moves are tried until
    every mover finds a place elsewhere (all filters checked) and the pod fits. Apply the
    ``moves`` in order, then bind the ``placements``; every intermediate state fits.
    """
    sims = sorted((n.clone() for n in nodes), key=lambda n: n.name)
    if workload is None:
        bound = [b.pod for n in sims for b in n.bound.values()]
        workload = workload_from_pods(bound + list(pending))
    scheduler = ClusterScheduler(sims, _RepackScore(FragmentationModel(workload)))
    moves: list[Move] = []
    placements: dict[str, tuple[str, tuple[int, ...]]] = {}
    unplaced: list[str] = []
    for pod in sorted(pending, key=lambda p: -p.priority):
        decision = scheduler.place(pod, explain_failure=False)
        if decision.node is not None:
            placements[pod.name] = (decision.node, decision.gpu_indices)
            continue
        options = []
        for node in sims:
            if static_filter_reason(pod, node) is None:
                movers = _movers_for(pod, node, max_moves_per_pod, set(placements))
                if movers:
                    weight = sum(p.gpu_request_milli for p in movers)
                    options.append((len(movers), weight, node.name, movers))
        options.sort(key=lambda o: o[:3])
        for _, _, name, movers in options[:max_nodes_tried]:
            done = _try_room(scheduler, pod, name, movers)
            if done is not None:
                moves += done[0]
                placements[pod.name] = (name, done[1])
                break
        else:
            unplaced.append(pod.name)
    return RoomPlan(tuple(moves), placements, tuple(unplaced))
