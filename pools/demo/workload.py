"""The demo's workload plan (issue 8 §1): real pod shapes and durations, compressed in time and
routed to the demo pools. Pure: no Django import, deterministic for a seed.

Where the pods come from:
- the Alibaba cluster trace (``openb_pod_list_default.csv`` under ``../shared/data``) when it is
  there: each pod's GPU request (whole GPUs or a share of one), CPU, memory and run time as
  recorded, arrivals in the trace's order;
- otherwise the synthetic diurnal pattern of :mod:`pools.simulation.workloads`.

How they become demo pods: a window of the source (``window_seconds`` of trace time starting
at its busiest hour, so the demo does not open on a lull) is compressed ``speed`` times: a pod
that arrived 10 min after the window start and ran 1 h arrives 10 s after the demo starts and
runs 60 s at ``speed=60``. Run times are clamped to ``[min_run, max_run]`` wall seconds so the
dashboard keeps moving. Each pod goes to one of the routes that take its shape (a route is a
demo pool with its team, node shape, tolerations, the shapes it takes and a weight), and pods are
thinned per route so that the GPUs the route asks for at once average ``load`` x the pool's
baseline: above 1 the pool must burst, which is the scale-up the demo is meant to show.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from pools.simulation.model import SimPod

MILLI = 1000


@dataclass(frozen=True)
class Route:
    """A demo pool the workload feeds, and how hard."""

    pool: str
    team: str
    node_gpus: int
    cpu_milli_per_gpu: int
    memory_mib_per_gpu: int
    baseline_nodes: int
    load: float  # GPUs asked for at once, as a share of the baseline's GPUs
    shared: bool = False  # takes pods asking for a share of one GPU
    whole: bool = True  # takes pods asking for whole GPUs (up to its node's)
    weight: float = 1.0  # share of the pods it takes when several routes could
    tolerations: tuple[dict, ...] = ()
    node_selector: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    checkpointable: bool = False
    priority_class: str = ""  # its pods' spec.priorityClassName (empty: priority 0)


@dataclass(frozen=True)
class DemoPod:
    """One pod to submit ``at`` wall seconds after the demo starts; it runs ``run`` seconds."""

    at: float
    run: int
    route: Route
    name: str
    gpu_count: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int

    def document(self) -> dict:
        """The Pod document a team member would submit (docs/pods.md)."""
        gpus = {"ebcloud.io/gpu-milli": str(self.gpu_milli)} if self.gpu_milli < MILLI else {"nvidia.com/gpu": str(self.gpu_count)}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.route.team,
                "labels": {"app": "demo-replay", **self.route.labels},
                "annotations": {
                    "ebcloud.io/duration": f"{self.run}s",
                    **({"ebcloud.io/checkpointable": "true"} if self.route.checkpointable else {}),
                },
            },
            "spec": {
                **({"priorityClassName": self.route.priority_class} if self.route.priority_class else {}),
                "nodeSelector": dict(self.route.node_selector),
                "tolerations": [dict(t) for t in self.route.tolerations],
                "containers": [{
                    "name": "main",
                    "image": "registry.local/demo/replay:1",
                    "resources": {
                        "requests": {"cpu": f"{self.cpu_milli}m", "memory": f"{self.memory_mib}Mi"},
                        "limits": gpus,  # the request defaults to it
                    },
                }],
            },
        }


def busiest_start(source: Sequence[SimPod], *, window_seconds: int, step: int = 3600) -> int:
    """The start (a multiple of ``step``) of the window with the most GPU-seconds arriving."""
    if not source:
        return 0
    buckets: dict[int, float] = {}
    for item in source:
        buckets[item.arrival // step] = buckets.get(item.arrival // step, 0.0) + _gpus(item) * item.duration
    span = max(1, window_seconds // step)
    best, best_load = 0, -1.0
    for first in sorted(buckets):
        load = sum(buckets.get(first + k, 0.0) for k in range(span))
        if load > best_load:
            best, best_load = first, load
    return best * step


def _gpus(item: SimPod) -> float:
    return item.pod.gpu_count if item.pod.gpu_milli >= MILLI else item.pod.gpu_milli / MILLI


def route_for(item: SimPod, routes: Sequence[Route], rng: random.Random) -> Route | None:
    """One of the routes that take this pod's shape and whose node holds it, by weight."""
    shared = item.pod.gpu_milli < MILLI
    fits = [r for r in routes if (r.shared if shared else r.whole) and math.ceil(_gpus(item)) <= r.node_gpus]
    if not fits:
        return None
    return rng.choices(fits, [r.weight for r in fits])[0]


def plan(
    source: Sequence[SimPod],
    routes: Sequence[Route],
    *,
    speed: float,
    window_seconds: int,
    min_run: int = 20,
    max_run: int = 600,
    seed: int = 0,
    run_id: str = "r0",
) -> list[DemoPod]:
    """The demo pods, by submission time. See the module docstring. Pod names carry
    ``run_id`` so that a restarted demo never collides with the pods of an earlier run."""
    if speed <= 0:
        raise ValueError("speed must be positive")
    # Open on the busiest hour, so the demo starts busy whatever the window's length.
    start = busiest_start(source, window_seconds=min(window_seconds, 3600))
    window = [s for s in source if start <= s.arrival < start + window_seconds]
    by_route: dict[str, list[SimPod]] = {r.pool: [] for r in routes}
    routes_by_pool = {r.pool: r for r in routes}
    rng = random.Random(seed)
    for item in window:
        route = route_for(item, routes, rng)
        if route is not None:
            by_route[route.pool].append(item)
    out: list[DemoPod] = []
    for pool, items in by_route.items():
        route = routes_by_pool[pool]
        runs = {id(i): min(max_run, max(min_run, round(i.duration / speed))) for i in items}
        # Mean GPUs in use over the compressed window (Little's law), to thin to the target.
        demand = sum(_gpus(i) * runs[id(i)] for i in items) / (window_seconds / speed)
        target = route.load * route.baseline_nodes * route.node_gpus
        keep = 1.0 if demand <= target else target / demand
        for n, item in enumerate(items):
            if keep < 1.0 and rng.random() >= keep:
                continue
            out.append(_demo_pod(item, route, at=(item.arrival - start) / speed, run=runs[id(item)], name=f"{route.pool}-{run_id}-{n:05d}"))
    return sorted(out, key=lambda p: (p.at, p.name))


def _demo_pod(item: SimPod, route: Route, *, at: float, run: int, name: str) -> DemoPod:
    whole = item.pod.gpu_milli >= MILLI
    gpus = item.pod.gpu_count if whole else 1
    share = gpus if whole else item.pod.gpu_milli / MILLI
    # The trace's CPU and memory were sized for its own machines: cap them at the GPU's share
    # of the route's node, the way a pod sized for that node type would ask.
    cpu = max(100, min(item.pod.cpu_milli, math.ceil(route.cpu_milli_per_gpu * max(share, 0.25))))
    memory = max(256, min(item.pod.memory_mib, math.ceil(route.memory_mib_per_gpu * max(share, 0.25))))
    return DemoPod(
        at=round(at, 3), run=run, route=route, name=name,
        gpu_count=gpus, gpu_milli=MILLI if whole else item.pod.gpu_milli, cpu_milli=cpu, memory_mib=memory,
    )
