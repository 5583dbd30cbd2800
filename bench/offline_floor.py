"""The offline floor of the trace experiment: the least unallocated GPU % any placement could
reach if every arrived pod were known in advance (issue 4 §6b, issue 22 item 3).

An LP relaxation, aggregated per node type (nodes with the same CPU, memory, GPU count and
model): x[s, t] = how many pods of shape s go to nodes of type t, fractional. Each node type's
total CPU, memory and GPU milli bound what it takes; a pod never goes to a type with fewer GPUs
than it asks for, or of a model its gpuSpec excludes; at most the arrived count of each shape is
placed. Maximising the GPU placed gives an upper bound on any real (integral, per-node)
placement, so 100 − that is a floor no scheduler can beat.

The plain aggregate (``gpu_cuts=False``) lets two 800-milli shares fill one GPU, which is why
it sits at 0%. With ``gpu_cuts`` (the default) each node type also gets one row per
dual-feasible function of bin packing (Fekete and Schepers' u_ε): a share of more than
(1 − ε)·1000 milli counts as a whole GPU, one of less than ε·1000 as nothing, the rest by its
size, and a whole GPU as one. Whatever sits on one GPU sums to at most one under each such
function, so every row holds for any real per-GPU placement: the bound stays valid and no
longer packs large shares together. ε runs over the cut points that the arrived share sizes
make distinct. ``required`` pods (the running ones, for the floor of a repack) must all be
placed; the others may be left out.

:func:`pattern_floor` is tighter still: a configuration LP solved by column generation. Each
GPU of a node type runs one *pattern*, a multiset of share sizes that sums to at most 1000
milli (or one whole-GPU pod's slot); the LP chooses how many GPUs of each type run each pattern,
so it never counts the milli that no combination of the arrived share sizes can fill (three
340-milli shares on one GPU, two 470s with nothing small enough to fill the 60 left). Patterns
are priced by an exact knapsack over the share sizes, so the LP is solved over all patterns;
every real placement is a feasible point, so the bound stays valid. What the u_ε rows allow is
also a pattern mix, so this bound is never below :func:`offline_floor`'s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from pools.core.scheduling.nodes import MILLI, NodeState, Pod
from pools.core.scheduling.share_patterns import best_pattern

try:  # scipy is a dependency (the repack plan solves with HiGHS); report its absence clearly
    from scipy.optimize import linprog
except ImportError:  # pragma: no cover - reported by the caller
    linprog = None


def _shape(pod: Pod) -> tuple:
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_request_milli, tuple(sorted(pod.gpu_models)))


def _epsilons(shares: set[int]) -> list[float]:
    """The ε (in milli) at which u_ε treats some arrived share differently: just above
    1000 − s (s counts as a whole GPU) and just above s (s counts as nothing), up to 500."""
    cuts = {MILLI - s + 1 for s in shares if s > MILLI // 2} | {s + 1 for s in shares if s < MILLI // 2}
    return sorted(e for e in cuts if 0 < e <= MILLI // 2)


def _gpu_weight(gpus: int, request: int, epsilon: int) -> float:
    """u_ε of a pod's GPU use, in GPUs: whole GPUs count one each."""
    if gpus != 1 or request >= MILLI:
        return float(gpus)
    if request > MILLI - epsilon:
        return 1.0
    return 0.0 if request < epsilon else request / MILLI


def offline_floor(
    nodes: Sequence[NodeState], pods: Sequence[Pod], *, required: Sequence[Pod] = (), gpu_cuts: bool = True
) -> float:
    """Unallocated GPU % (of the nodes' capacity) that the best offline placement cannot go
    below, placing any of ``pods`` and all of ``required``."""
    if linprog is None:
        raise RuntimeError("the offline floor needs scipy (pip install scipy)")
    types, shapes, must, type_list, shape_list, variables = _fits(nodes, pods, required)
    if not variables:  # no pod fits any node type
        return 100.0 if not must else _infeasible()
    objective = [-shape_list[s][3] for s, _ in variables]  # maximise placed GPU milli
    rows, bounds = [], []
    epsilons = _epsilons({shape[3] for shape in shape_list if shape[2] == 1 and shape[3] < MILLI}) if gpu_cuts else []
    for t, (tcpu, tmem, tgpus, _) in enumerate(type_list):
        count = types[type_list[t]]
        for index, capacity in ((0, tcpu), (1, tmem), (3, tgpus * MILLI)):
            rows.append([shape_list[s][index] if tt == t else 0 for s, tt in variables])
            bounds.append(count * capacity)
        for epsilon in epsilons:
            rows.append([_gpu_weight(shape_list[s][2], shape_list[s][3], epsilon) if tt == t else 0 for s, tt in variables])
            bounds.append(count * tgpus)
    for s in range(len(shape_list)):
        rows.append([1 if ss == s else 0 for ss, _ in variables])
        bounds.append(shapes[shape_list[s]])
        if must[shape_list[s]]:
            rows.append([-1 if ss == s else 0 for ss, _ in variables])
            bounds.append(-must[shape_list[s]])
    result = linprog(objective, A_ub=rows, b_ub=bounds, bounds=(0, None), method="highs")
    if result.status == 2:
        return _infeasible()
    if not result.success:
        raise RuntimeError(f"LP failed: {result.message}")
    capacity = sum(n.gpu_count for n in nodes) * MILLI
    return max(0.0, 100.0 - 100.0 * (-result.fun) / capacity)


def _infeasible() -> float:
    raise ValueError("the required pods cannot all be placed, even fractionally")


MAX_PRICING_ROUNDS = 500  # column generation ends well before (15-30 rounds on the trace)
_MUST_PENALTY = 1e9  # per unit of a required pod left out: any real answer pays none


def _node_type(node: NodeState) -> tuple:
    return (node.cpu_milli, node.memory_mib, node.gpu_count, node.gpu_model)


def _fits(nodes: Sequence[NodeState], pods: Sequence[Pod], required: Sequence[Pod]) -> tuple:
    """Both LPs' inputs: node types and pod shapes with their counts (and the required pods'),
    in a fixed order, and every (shape, type) pair where the shape fits the type."""
    types = Counter(_node_type(n) for n in nodes)
    shapes = Counter(_shape(p) for p in [*pods, *required])
    must = Counter(_shape(p) for p in required)
    type_list, shape_list = list(types), list(shapes)
    fits = [
        (s, t)
        for s, (cpu, mem, gpus, request, models) in enumerate(shape_list)
        for t, (tcpu, tmem, tgpus, model) in enumerate(type_list)
        if gpus <= tgpus and cpu <= tcpu and mem <= tmem and (not models or model in models)
    ]
    return types, shapes, must, type_list, shape_list, fits


def _best_pattern(values: dict[int, float]) -> tuple[float, tuple[int, ...]]:
    """The multiset of share sizes (repeats allowed) of largest total value that fits in one
    GPU, as sorted sizes; ``values`` maps size to value (> 0). The product's knapsack, with
    each size bounded only by what fits in one GPU."""
    sizes = sorted(values)
    worth, counts = best_pattern(sizes, [values[v] for v in sizes], [MILLI // v for v in sizes])
    return worth, tuple(sorted(v for v, k in zip(sizes, counts, strict=True) for _ in range(k)))


def pattern_floor(nodes: Sequence[NodeState], pods: Sequence[Pod], *, required: Sequence[Pod] = ()) -> float:
    """Unallocated GPU % that no placement of any of ``pods`` and all of ``required`` on
    ``nodes`` can go below, by the configuration LP of the module docstring.

    Columns: x[s, t] pods of shape s on node type t (CPU, memory, whole GPUs of t as in
    :func:`offline_floor`), and y[t, P] GPUs of type t that run share pattern P. Rows per type:
    CPU and memory totals, whole GPUs + GPUs with a pattern <= the type's GPUs, and per share
    size v: the shares of size v placed there <= the copies of v in its patterns. The patterns
    to start with are the GPUs' current ones (so the running pods fit) and one per size; then,
    while the knapsack finds a pattern whose share values (the duals) beat a GPU's, it joins.
    """
    if linprog is None:
        raise RuntimeError("the floor needs scipy (pip install scipy)")
    from scipy.sparse import coo_array

    types, shapes, must, type_list, shape_list, columns = _fits(nodes, pods, required)
    if not columns:
        return 100.0 if not must else _infeasible()
    sizes = sorted({shape[3] for shape in shape_list if shape[2] == 1 and shape[3] < MILLI})
    rows = {}  # label -> row index
    bounds: list[float] = []

    def row(label, bound: float) -> int:
        rows[label] = len(bounds)
        bounds.append(bound)
        return rows[label]

    for t, (tcpu, tmem, tgpus, _) in enumerate(type_list):
        row(("cpu", t), types[type_list[t]] * tcpu)
        row(("mem", t), types[type_list[t]] * tmem)
        row(("gpus", t), types[type_list[t]] * tgpus)
        for size in sizes:
            row(("share", t, size), 0.0)
    for s, shape in enumerate(shape_list):
        row(("avail", s), shapes[shape])
        if must[shape]:
            row(("must", s), -must[shape])
    entries: tuple[list[int], list[int], list[float]] = ([], [], [])
    cost: list[float] = []

    def column(value: float, cells) -> None:
        for r, v in cells:
            entries[0].append(r)
            entries[1].append(len(cost))
            entries[2].append(v)
        cost.append(value)

    for s, t in columns:
        cpu, mem, gpus, request, _ = shape_list[s]
        gpu_row = ("share", t, request) if gpus == 1 and request < MILLI else ("gpus", t)
        cells = [(rows["cpu", t], cpu), (rows["mem", t], mem), (rows["avail", s], 1.0), (rows[gpu_row], 1.0 if gpu_row[0] == "share" else gpus)]
        if must[shape_list[s]]:
            cells.append((rows["must", s], -1.0))
        column(-request, cells)
    for s, shape in enumerate(shape_list):  # a required pod left out: allowed, at a price no answer pays
        if must[shape]:
            column(_MUST_PENALTY, [(rows["must", s], -1.0)])
    artificial = len(cost)
    patterns: set[tuple[int, tuple[int, ...]]] = set()

    def add_pattern(t: int, pattern: tuple[int, ...]) -> None:
        if pattern and (t, pattern) not in patterns:
            patterns.add((t, pattern))
            column(0.0, [(rows["gpus", t], 1.0)] + [(rows["share", t, v], -float(k)) for v, k in Counter(pattern).items()])

    type_index = {key: t for t, key in enumerate(type_list)}
    for node in nodes:
        per_gpu = defaultdict(list)
        for binding in node.bound.values():
            if binding.pod.is_sharing:
                per_gpu[binding.gpu_indices[0]].append(binding.pod.gpu_milli)
        for shares in per_gpu.values():
            if all(v in sizes for v in shares):
                add_pattern(type_index[_node_type(node)], tuple(sorted(shares)))
    for t in range(len(type_list)):
        for size in sizes:
            add_pattern(t, (size,) * (MILLI // size))
    for _ in range(MAX_PRICING_ROUNDS):
        matrix = coo_array((entries[2], (entries[0], entries[1])), shape=(len(bounds), len(cost))).tocsr()
        result = linprog(cost, A_ub=matrix, b_ub=bounds, bounds=(0, None), method="highs")
        if not result.success:
            raise RuntimeError(f"LP failed: {result.message}")
        duals = -result.ineqlin.marginals  # >= 0: what one more unit of each row is worth
        before = len(patterns)
        for t in range(len(type_list)):
            values = {v: duals[rows["share", t, v]] for v in sizes if duals[rows["share", t, v]] > 1e-9}
            if values:
                worth, pattern = _best_pattern(values)
                if worth > duals[rows["gpus", t]] + 1e-6:
                    add_pattern(t, pattern)
        if len(patterns) == before:
            break
    if any(result.x[c] > 1e-6 for c in range(len(columns), artificial)):
        return _infeasible()
    placed = sum(shape_list[s][3] * result.x[c] for c, (s, _) in enumerate(columns))
    capacity = sum(n.gpu_count for n in nodes) * MILLI
    return max(0.0, 100.0 - 100.0 * placed / capacity)
