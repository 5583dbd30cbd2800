"""The integer programs of the share repack (:mod:`pools.core.scheduling.repack_shares`) and
of the bench's floor (bench/offline_floor.py): GPUs as bins, each running a *pattern*, a
multiset of share sizes summing to at most 1000 milli (a cutting-stock problem; issue 22
items 2 and 3).

Patterns come by column generation: an LP over the patterns found so far, then a bounded
knapsack on its duals (:func:`best_pattern`) for a pattern worth more than the GPU it takes,
until none is; the integer program (HiGHS, ``scipy.optimize.milp``) then runs over them.
:func:`solve` finds the fewest GPUs that hold the shares, then the most GPUs kept as they are;
:func:`admit` decides which waiting shares to pack in with the running ones.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial

from pools.core.scheduling.nodes import MILLI

ENUMERATE_UP_TO = 20_000  # patterns: the trace's 20 share sizes make 5,384
ENUMERATE_SIZES = 60  # distinct share sizes beyond which patterns are never enumerated


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


def _patterns(sizes: Sequence[int], demand: Sequence[int], current: list[tuple[int, ...]], seconds: float, lp_duals=None) -> tuple[list[tuple[int, ...]], float]:
    """The patterns worth considering: the GPUs' current contents, then, by column generation,
    each pattern a knapsack on an LP's duals finds worth more than one GPU, until none is (the
    LP over these patterns is then the LP over all of them) or ``seconds`` run out. The LP is
    the covering one (the fewest GPUs that hold ``demand``) unless ``lp_duals`` is given:
    patterns -> (what one more share of each size is worth, what one more GPU is worth, the
    LP's value), or None. The trace's 20 share sizes take 3 rounds and 75 patterns, where
    enumerating every pattern gives 5,384; hundreds of distinct sizes take a round per
    pattern, hence the time limit. Also returns the LP's value once it converged, else 0."""
    patterns = list(dict.fromkeys(current))
    bounds = [min(d, MILLI // size) for size, d in zip(sizes, demand, strict=True)]
    deadline, lower = time.monotonic() + seconds, 0.0
    while time.monotonic() < deadline:
        duals = (lp_duals or partial(_covering_duals, demand))(patterns)
        if duals is None:
            break
        values, gpu_worth, value = duals
        worth, pattern = best_pattern(sizes, values, bounds)
        if worth <= gpu_worth + 1e-9 or pattern in patterns:
            lower = value  # converged: for the covering LP, no fewer GPUs can hold every share
            break
        patterns.append(pattern)
    return patterns, lower


def _covering_duals(demand: Sequence[int], patterns: list[tuple[int, ...]]):
    """The covering LP (fewest GPUs, fractional, that hold ``demand``): its share duals, the
    worth of a GPU (one) and its value."""
    import numpy as np
    from scipy.optimize import linprog

    lp = linprog(np.ones(len(patterns)), A_ub=-np.array(patterns, dtype=float).T, b_ub=-np.array(demand, dtype=float), method="highs")
    return None if lp.status != 0 else (-lp.ineqlin.marginals, 1.0, lp.fun)


def admit(sizes, running, waiting, whole_gpus: int, gpus: int, current, time_limit_s: float) -> list[int]:
    """How many waiting shares of each size to pack in with the running ones, so that the GPUs
    hold the most: an integer program over patterns (generated on its own LP's duals) that
    places every running share (``running``, per size) and some waiting ones (at most
    ``waiting``) on at most ``gpus`` GPUs, each GPU it leaves empty worth a whole GPU while
    whole-GPU pods wait for ``whole_gpus`` of them. So a waiting share takes a GPU only if no
    whole-GPU pod would have filled it, and fills the room other shares leave where it can.
    Rows: the shares of each size in the patterns = running + admitted; patterns + GPUs left
    for whole-GPU pods <= ``gpus``."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp
    from scipy.sparse import csr_matrix, eye, hstack, vstack

    m = len(sizes)
    worth = np.concatenate([np.array(sizes, dtype=float), [float(MILLI)]])  # per admitted share, per GPU left
    upper = np.concatenate([np.array(waiting, dtype=float), [float(whole_gpus)]])

    def rows(patterns):
        shares = csr_matrix(np.array(patterns, dtype=float).T)
        takes = hstack([shares, -eye(m), csr_matrix((m, 1))])
        budget = csr_matrix(np.concatenate([np.ones(len(patterns)), np.zeros(m), [1.0]])[None, :])
        return takes, budget

    def lp_duals(patterns):
        takes, budget = rows(patterns)
        lp = linprog(
            np.concatenate([np.zeros(len(patterns)), -worth]), A_ub=vstack([-takes, budget]),
            b_ub=np.concatenate([-np.array(running, dtype=float), [gpus]]),
            bounds=[(0, None)] * len(patterns) + [(0, u) for u in upper], method="highs",
        )  # fmt: skip
        return None if lp.status != 0 else (-lp.ineqlin.marginals[:m], -lp.ineqlin.marginals[m], lp.fun)

    demand = [r + w for r, w in zip(running, waiting, strict=True)]
    patterns, _ = _patterns(sizes, demand, current, time_limit_s, lp_duals)
    takes, budget = rows(patterns)
    n = len(patterns)
    chosen = milp(
        c=np.concatenate([np.zeros(n), -worth]),
        constraints=[LinearConstraint(takes, lb=running, ub=running), LinearConstraint(budget, lb=0, ub=gpus)],
        integrality=np.ones(n + m + 1), bounds=Bounds(0, np.concatenate([np.full(n, np.inf), upper])),
        options={"time_limit": time_limit_s},
    )  # fmt: skip
    return [0] * m if chosen.x is None else [int(v) for v in np.rint(chosen.x[n : n + m])]


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


def solve(sizes, demand, keepable: Counter, time_limit_s: float) -> dict[tuple[int, ...], tuple[int, int]] | None:
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

    held = [sum(pattern[i] * count for pattern, count in keepable.items()) for i in range(len(sizes))]
    singles = [tuple(int(i == j) for j in range(len(sizes))) for i in range(len(sizes)) if demand[i] > held[i]]  # shares with no GPU yet
    patterns, lower = _patterns(sizes, demand, [*keepable, *singles], time_limit_s)
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
