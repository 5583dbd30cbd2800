"""What the offline replay works with and reports: the pool and price model it replays, the pods,
per-tick samples, scaling activities and the result with its cost and wait statistics, plus the
sizing helpers (peak nodes and GPUs) the what-if planner uses. How the replay runs is in
:mod:`pools.simulation.replay`. Pure: standard library plus the pools/billing cores."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from pools.core.autoscaling import (
    DEFAULT_SCALING_SPEC,
    ScalingSpec,
)
from pools.core.scheduling.nodes import MILLI, NodeState, Pod, Taint

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400
HOUR = 3600
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
NO_PENDING_FIT = "NoNewNodeNeeded"
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
MONTHLY, ON_DEMAND = "monthly", "on_demand"


@dataclass(frozen=True)
class PriceModel:
    """Node prices (seed C2: 20,000 a month or 100 an hour for an 8-card A100_80G node)."""

    monthly_price: Decimal = Decimal("20000")
    hourly_price: Decimal = Decimal("100")
    hours_per_month: int = 730
    on_demand_billing: str = "second"  # "second" | "hour" (each node lifetime, started hours)

    def __post_init__(self) -> None:
        if self.on_demand_billing not in ("second", "hour"):
            raise ValueError("on_demand_billing must be 'second' or 'hour'")

    @property
    def monthly_hourly_rate(self) -> Fraction:
        """The lease amortised per hour: M / 730."""
        return Fraction(self.monthly_price) / self.hours_per_month


@dataclass(frozen=True)
class PoolConfig:
    """One pool: node shape, baseline, ceiling, scaling spec and timings.

    The node shape defaults to the product's GPU_8_CARD A100_80G node (8 GPUs, 128 cores,
    1 TiB memory). ``labels``/``taints`` go on every node (template nodes included).
    """

    monthly_nodes: int
    max_nodes: int
    spec: ScalingSpec = DEFAULT_SCALING_SPEC
    gpus_per_node: int = 8
    cpu_milli: int = 128_000
    memory_mib: int = 1024 * 1024
    gpu_model: str = "A100_80G"
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    provisioning_seconds: int = 300
    tick_seconds: int = 30
    policy: str = "bestfit"
    remove_unneeded: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.monthly_nodes <= self.max_nodes:
            raise ValueError("need 0 <= monthly_nodes <= max_nodes")
        if self.tick_seconds <= 0 or self.provisioning_seconds < 0:
            raise ValueError("tick_seconds must be > 0 and provisioning_seconds >= 0")

    @property
    def burst_slots(self) -> int:
        return self.max_nodes - self.monthly_nodes

    def node(self, name: str) -> NodeState:
        return NodeState(
            name=name,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_count=self.gpus_per_node,
            gpu_model=self.gpu_model,
            pool="sim",
            labels=dict(self.labels),
            taints=self.taints,
        )


@dataclass(frozen=True)
class SimPod:
    """One workload item: a pod arriving at ``arrival`` s that runs ``duration`` s once bound."""

    pod: Pod
    arrival: int
    duration: int
    memory_use: float = 1.0  # share of its allocated GPU memory the pod actually uses

    @property
    def gpu_milli(self) -> int:
        return self.pod.gpu_request_milli


@dataclass(frozen=True)
class Sample:
    """One timeline point (a step function: valid until the next sample)."""

    t: int  # seconds from the start
    desired: int  # nodes the pool holds: monthly + burst (provisioning included)
    ready: int  # Ready nodes
    monthly: int
    burst_ready: int
    provisioning: int
    gpu_memory_pct: float | None
    queued: int
    running: int


@dataclass(frozen=True)
class Activity:
    """An autoscaler tick that changed the size or was blocked (ScalingActivity's shape).

    A blocked outcome identical to the previous activity is not repeated (``blocked`` counts
    every tick)."""

    t: int
    from_nodes: int
    to_nodes: int
    reason: str
    message: str


@dataclass
class SimResult:
    duration_seconds: int
    pods_total: int
    pods_finished: int
    pods_running_at_end: int
    pods_waiting_at_end: int
    gpu_hours_demanded: float
    gpu_hours_served: float
    waits: list[int]  # seconds from arrival to Running, one per started pod
    start_times: dict[str, int]  # pod name -> when it started Running (started pods only)
    wait_p50: float | None
    wait_p95: float | None
    max_wait_of_waiting: int  # how long the oldest still-pending pod has waited at the end
    monthly_node_seconds: int
    on_demand_node_seconds: int  # requested -> removed (or end), summed over burst nodes
    on_demand_billed_seconds: int  # the same, rounded per node when billing by the hour
    cost_exact: Fraction
    total_cost: Decimal
    prices: PriceModel
    scale_ups: int
    scale_downs: int
    nodes_added: int
    nodes_removed: int
    pods_moved: int
    max_nodes_seen: int
    blocked: Counter
    timeline: list[Sample]
    hourly_busy_nodes: list[int]  # per hour, the most nodes holding at least one pod
    activities: list[Activity] = field(default_factory=list)

    @property
    def scale_events(self) -> int:
        return self.scale_ups + self.scale_downs

    @property
    def monthly_node_hours(self) -> Fraction:
        return Fraction(self.monthly_node_seconds, HOUR)

    @property
    def on_demand_node_hours(self) -> Fraction:
        return Fraction(self.on_demand_node_seconds, HOUR)

    @property
    def on_demand_billed_hours(self) -> Fraction:
        return Fraction(self.on_demand_billed_seconds, HOUR)

    def node_hours(self) -> dict[str, Fraction]:
        return {MONTHLY: self.monthly_node_hours, ON_DEMAND: self.on_demand_node_hours}

    def timeline_series(self) -> dict[str, list]:
        """The timeline as columns (a step function per field), ready for a plotly chart:
        ``t`` (seconds), ``desired``, ``ready``, ``monthly``, ``burst_ready``,
        ``provisioning``, ``gpu_memory_pct``, ``queued``, ``running``."""
        names = [f.name for f in fields(Sample)]
        return {name: [getattr(s, name) for s in self.timeline] for name in names}


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (the smallest value with at least pct% of values <= it)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[rank - 1])


def cost_of(
    monthly_node_seconds: int, on_demand_billed_seconds: int, prices: PriceModel
) -> Fraction:
    """Exact cost: monthly node-hours x M/730 + billed on-demand node-hours x P."""
    return Fraction(monthly_node_seconds, HOUR) * prices.monthly_hourly_rate + Fraction(
        on_demand_billed_seconds, HOUR
    ) * Fraction(prices.hourly_price)


def peak_nodes(workload: Sequence[SimPod], pool: PoolConfig, duration_seconds: int) -> int:
    """Nodes needed at the busiest instant if every pod ran on arrival: the largest of the
    GPU, CPU and memory demand divided by one node's (a lower bound that ignores packing)."""
    events = []
    for item in workload:
        if item.arrival >= duration_seconds:
            continue
        p = item.pod
        end = min(item.arrival + item.duration, duration_seconds)
        req = (p.gpu_request_milli, p.cpu_milli, p.memory_mib)
        events.append((end, 0, tuple(-x for x in req)))  # departures first at equal times
        events.append((item.arrival, 1, req))
    events.sort()
    cur, best = [0, 0, 0], 0
    caps = (pool.gpus_per_node * MILLI, pool.cpu_milli, pool.memory_mib)
    for _, _, delta in events:
        cur = [a + b for a, b in zip(cur, delta, strict=True)]
        best = max(best, *(math.ceil(c / cap) for c, cap in zip(cur, caps, strict=True)))
    return best


def peak_gpus(workload: Sequence[SimPod], duration_seconds: int) -> int:
    """Most GPUs requested at once if every pod ran on arrival (shares rounded up)."""
    events = []
    for item in workload:
        if item.arrival < duration_seconds:
            events.append((min(item.arrival + item.duration, duration_seconds), -item.gpu_milli))
            events.append((item.arrival, item.gpu_milli))
    events.sort()
    cur = best = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return math.ceil(best / MILLI)
