"""Node-freeing repack as an integer program (seed C3, P3; issue 22 item 2).

The greedy planner of :mod:`pools.core.scheduling.repack` drains nodes emptiest first and
keeps a drain only if every pod finds room; one early drain can take the room two later ones
needed. Here the choice of nodes and of every pod's new place is one integer program, solved
by HiGHS (``scipy.optimize.milp``):

    z[n]        node n (runs pods, all of them movable) is drained
    x[p, m]     pod p moves to node m (a share: to GPU g of m, x[p, m, g])
    u[m, g]     idle GPU g of m is taken by a whole-GPU pod that moves there

    max  sum_n z[n] * (GPUs of n * W - pods on n)      W = 1 + pods: freed GPUs come first
    s.t. sum of p's x = z[n(p)]                        every pod of a drained node moves
         CPU, memory of m: incoming <= free            per target node
         share GPU g of m: incoming milli <= free milli, and <= 0 if a whole pod takes it
         whole GPUs of m:  sum_g u[m, g] = incoming whole GPUs
         x[p, m] + z[m] <= 1                              no move onto a drained node
         sum_n z[n] <= the disruption budget
         sum_n z[n] * (b's pods on n) <= what b allows   per PodDisruptionBudget b

A pod only considers targets that run pods already (moving onto an empty node frees nothing)
and pass every scheduler filter for it; the plan is then replayed with real binds on copies,
so whatever comes back fits. The program grows with pods x targets x GPUs, so it is built only
"where the size allows" (``max_columns``); the caller keeps the greedy plan otherwise, and
whenever the greedy plan frees as much. scipy is imported here only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pools.core.scheduling.nodes import MILLI, NodeState, Pod, filter_node

MAX_COLUMNS = 5_000  # about 10-20 nodes of 8 GPUs: HiGHS answers in seconds
TIME_LIMIT_S = 2.0  # the fragmentation page waits for it (kept short); the best plan so far counts


class OptimiserMissing(RuntimeError):
    """scipy (HiGHS) is not installed, so the repack's integer program cannot be solved."""


@dataclass(frozen=True)
class Drain:
    """The program's answer: nodes to drain and, per pod, its target node and GPUs."""

    nodes: tuple[str, ...]
    targets: dict[str, tuple[str, tuple[int, ...]]]  # pod name -> (node, GPU indices)
    optimal: bool


class _Program:
    """Rows and columns of the integer program, kept as sparse triplets."""

    def __init__(self) -> None:
        self.objective: list[float] = []  # every column is a 0/1 variable
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.low: list[float] = []
        self.high: list[float] = []

    def column(self, cost: float = 0.0) -> int:
        self.objective.append(cost)
        return len(self.objective) - 1

    def row(self, entries, low: float, high: float) -> None:
        r = len(self.low)
        for c, v in entries:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.low.append(low)
        self.high.append(high)


def optimal_drain(
    nodes: Sequence[NodeState],
    candidates: Sequence[NodeState],
    *,
    max_drained_nodes: int,
    limits: Sequence[tuple[Mapping[str, int], int]] = (),
    max_columns: int = MAX_COLUMNS,
    time_limit_s: float = TIME_LIMIT_S,
) -> Drain | None:
    """The drain that frees the most GPUs (then moves the fewest pods) among ``candidates``,
    or None when the program would exceed ``max_columns`` or HiGHS finds no plan in time.
    ``limits``: per disruption budget, its pods on each candidate node and how many it lets go."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError as error:  # pragma: no cover - scipy is a dependency of the product
        raise OptimiserMissing("the repack optimiser needs scipy (pip install scipy)") from error
    targets = [n for n in nodes if n.bound]
    pods = [(b.pod, n) for n in candidates for b in sorted(n.bound.values(), key=lambda b: b.pod.name)]
    if not pods or max_drained_nodes < 1:
        return None
    weight = 1.0 + len(pods)
    program = _Program()
    drain = {n.name: program.column(-(n.gpu_count * weight - len(n.bound))) for n in candidates}
    moves: list[tuple[int, Pod, NodeState, int | None]] = []  # (column, pod, target, GPU or None)
    for pod, origin in pods:
        for target in targets:
            if target is origin or filter_node(pod, target) is not None:
                continue
            if pod.is_sharing:
                moves += [(program.column(), pod, target, g) for g, free in enumerate(target.gpu_free) if free >= pod.gpu_milli]
            else:
                moves.append((program.column(), pod, target, None))
            if len(program.objective) > max_columns:
                return None
    idle = {(t.name, g): program.column() for t in targets for g, free in enumerate(t.gpu_free) if free == MILLI}
    by_pod: dict[str, list[int]] = {}
    into: dict[str, list[tuple[int, Pod, int | None]]] = {}
    for column, pod, target, g in moves:
        by_pod.setdefault(pod.name, []).append(column)
        into.setdefault(target.name, []).append((column, pod, g))
    for pod, origin in pods:  # every pod of a drained node moves, once
        program.row([(c, 1.0) for c in by_pod.get(pod.name, [])] + [(drain[origin.name], -1.0)], 0.0, 0.0)
    for target in targets:
        incoming = into.get(target.name, [])
        if not incoming:
            continue
        program.row([(c, p.cpu_milli) for c, p, _ in incoming], -np.inf, target.cpu_free)
        program.row([(c, p.memory_mib) for c, p, _ in incoming], -np.inf, target.memory_free)
        whole = [(c, float(p.gpu_count)) for c, p, g in incoming if p.gpu_count and g is None]
        taken = [(idle[target.name, g], 1.0) for g in range(target.gpu_count) if (target.name, g) in idle]
        program.row(whole + [(c, -1.0) for c, _ in taken], 0.0, 0.0)
        for g, free in enumerate(target.gpu_free):
            shares = [(c, float(p.gpu_milli)) for c, p, gg in incoming if gg == g]
            if shares and (target.name, g) in idle:
                program.row(shares + [(idle[target.name, g], float(MILLI))], -np.inf, float(MILLI))
            elif shares:
                program.row(shares, -np.inf, float(free))
        if target.name in drain:  # one row per move (not one big-M row): a far tighter LP
            for c, _, _ in incoming:
                program.row([(c, 1.0), (drain[target.name], 1.0)], -np.inf, 1.0)
    program.row([(c, 1.0) for c in drain.values()], -np.inf, float(max_drained_nodes))
    for on, allowed in limits:
        program.row([(drain[name], float(count)) for name, count in on.items() if count and name in drain], -np.inf, float(allowed))
    count = len(program.objective)
    matrix = coo_array((program.vals, (program.rows, program.cols)), shape=(len(program.low), count))
    result = milp(
        np.array(program.objective),
        constraints=LinearConstraint(matrix, program.low, program.high),
        integrality=np.ones(count),
        bounds=Bounds(np.zeros(count), np.ones(count)),
        options={"time_limit": time_limit_s},
    )
    if result.x is None:
        return None
    chosen = {c for c in range(count) if result.x[c] > 0.5}
    drained = tuple(name for name, c in drain.items() if c in chosen)
    return Drain(drained, _targets(moves, idle, chosen), result.status == 0)


def _targets(moves, idle, chosen) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each moving pod's node and GPUs: shares their GPU; whole-GPU pods share out, by name,
    the idle GPUs the program reserved on their target."""
    targets: dict[str, tuple[str, tuple[int, ...]]] = {}
    whole: dict[str, list[Pod]] = {}
    for column, pod, target, g in moves:
        if column not in chosen:
            continue
        if g is not None:
            targets[pod.name] = (target.name, (g,))
        elif pod.gpu_count:
            whole.setdefault(target.name, []).append(pod)
        else:
            targets[pod.name] = (target.name, ())
    for name, movers in whole.items():
        free = sorted(g for (node, g), c in idle.items() if node == name and c in chosen)
        for pod in sorted(movers, key=lambda p: p.name):
            targets[pod.name] = (name, tuple(free[: pod.gpu_count]))
            free = free[pod.gpu_count :]
    return targets
