"""Workloads for :mod:`pools.simulation.model`: the Alibaba trace, a diurnal pattern, the article's
worked example (seed O1) and the T6 overnight dip. Pure and deterministic (seeded).

All pods are shaped for the product's GPU_8_CARD A100_80G pool node (8 GPUs, 128 cores,
1 TiB): :data:`NODE_GPUS`, :data:`NODE_CPU_MILLI`, :data:`NODE_MEMORY_MIB`.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from pools.core.scheduling.nodes import MILLI, Pod
from pools.simulation.model import DAY, HOUR, SimPod

NODE_GPUS, NODE_CPU_MILLI, NODE_MEMORY_MIB = 8, 128_000, 1024 * 1024
TRACE_FILE = "openb_pod_list_default.csv"


# ------------------------------------------------------------------------------- the trace


def trace_workload(
    data: Path,
    *,
    days: int = 30,
    sample: float = 1.0,
    seed: int = 0,
    span_quantile: float = 0.01,
    file: str = TRACE_FILE,
) -> list[SimPod]:
    """Pods of the Alibaba cluster-trace-gpu-v2023 (Weng et al., "Beware of Fragmentation",
    USENIX ATC 2023) as arrivals to ONE 8 x A100 80G pool.

    - Shapes: ``num_gpu``/``gpu_milli`` (a share of one GPU for sharing pods), ``cpu_milli``,
      ``memory_mib`` as they are. The trace's GPU models (undisclosed G1-G3, T4, P100, V100,
      A10) are mapped away: ``gpu_spec`` is empty in this file, and one pool has one model, so
      every pod may run on the pool's A100s (no ``gpu_models`` constraint).
    - Filtered: CPU-only pods (``num_gpu == 0``) are dropped (a tainted GPU pool does not take
      them); so is any pod that would not fit an empty pool node (none in ``default``).
    - Durations: ``deletion_time - creation_time`` (at least 1 s), as recorded; the replay
      cuts them at its end. Every pod is kept whatever its ``pod_phase``: the trace records a
      request that held resources from creation to deletion.
    - Arrivals: almost all GPU pods were created in the trace's last ~6 weeks (a handful
      earlier). The span from the ``span_quantile`` quantile of creation times to the last
      creation is rescaled linearly onto ``days`` days (order and burstiness kept, ~0.7x
      time compression for 30 days); the few pods created before it arrive at 0.
    - ``sample`` < 1 keeps each pod with that probability (seeded), to shrink the pool.
    """
    rows = []
    with open(Path(data) / file, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"])
            if gpus == 0:
                continue
            rows.append(row)
    rng = random.Random(seed)
    created = sorted(int(r["creation_time"]) for r in rows)
    t0 = created[min(int(span_quantile * len(created)), len(created) - 1)]
    t1 = created[-1]
    window = days * DAY
    scale = window / max(t1 - t0, 1)
    out = []
    for row in rows:
        if sample < 1.0 and rng.random() >= sample:
            continue
        gpus = int(row["num_gpu"])
        pod = Pod(
            name=f"trace/{row['name']}",
            cpu_milli=int(row["cpu_milli"]),
            memory_mib=int(row["memory_mib"]),
            gpu_count=gpus,
            gpu_milli=min(int(row["gpu_milli"]), MILLI) if gpus == 1 else MILLI,
        )
        if (
            pod.gpu_count > NODE_GPUS
            or pod.cpu_milli > NODE_CPU_MILLI
            or pod.memory_mib > NODE_MEMORY_MIB
        ):
            continue
        created_at = int(row["creation_time"])
        arrival = min(int(max(created_at - t0, 0) * scale), window - 1)
        duration = max(int(row["deletion_time"]) - created_at, 1)
        out.append(SimPod(pod, arrival, duration))
    return sorted(out, key=lambda w: (w.arrival, w.pod.name))


# ------------------------------------------------------------------------------- diurnal

DIURNAL_SHAPES = ((1, 0.5), (2, 0.2), (4, 0.15), (8, 0.15))  # (GPUs, probability)


def diurnal_level(
    t: float, *, trough_share: float, peak_hour: float = 15.0, weekend_factor: float = 0.5
) -> float:
    """Share of the peak demanded at ``t`` seconds: a cosine day (lowest 12 h before the
    peak hour), the part above the trough halved on days 6 and 7 of every week."""
    hour = (t % DAY) / HOUR
    bump = 0.5 * (1 + math.cos(2 * math.pi * (hour - peak_hour) / 24))
    if int(t // DAY) % 7 in (5, 6):
        bump *= weekend_factor
    return trough_share + (1 - trough_share) * bump


def diurnal_workload(
    *,
    seed: int = 0,
    days: int = 30,
    peak_gpus: int = 48,
    trough_share: float = 0.25,
    mean_duration: int = HOUR,
    shapes: tuple[tuple[int, float], ...] = DIURNAL_SHAPES,
    memory_use: float = 1.0,
) -> list[SimPod]:
    """A synthetic diurnal workload, deterministic for a seed.

    Arrivals are a non-homogeneous Poisson process (thinning) whose rate makes the expected
    number of GPUs in use follow ``peak_gpus x diurnal_level(t)`` (Little's law:
    rate = level / (E[GPUs per pod] x mean duration)); pod sizes from ``shapes`` (whole GPUs,
    12 cores and 96 GiB per GPU), durations exponential with ``mean_duration`` (>= 60 s).
    """
    rng = random.Random(seed)
    mean_gpus = sum(g * p for g, p in shapes)
    max_rate = peak_gpus / (mean_gpus * mean_duration)
    sizes, weights = [g for g, _ in shapes], [p for _, p in shapes]
    out, t, i = [], 0.0, 0
    end = days * DAY
    while True:
        t += rng.expovariate(max_rate)
        if t >= end:
            break
        if rng.random() > diurnal_level(t, trough_share=trough_share):
            continue
        gpus = rng.choices(sizes, weights)[0]
        duration = max(60, int(rng.expovariate(1 / mean_duration)))
        pod = Pod(
            name=f"diurnal/pod-{i:06d}",
            cpu_milli=12_000 * gpus,
            memory_mib=96 * 1024 * gpus,
            gpu_count=gpus,
        )
        out.append(SimPod(pod, int(t), duration, memory_use))
        i += 1
    return out


# ------------------------------------------------------------------------------- article O1


def article_workload(
    *, days: int = 30, peak_start_hour: int = 10, peak_hours: int = 4
) -> list[SimPod]:
    """The article's worked example (seed O1): three 8-GPU jobs at peak, two off-peak.

    Exact profile: two 8-GPU jobs run around the clock (each a 24-hour job, resubmitted at
    00:00 every day), and a third 8-GPU job arrives every day at ``peak_start_hour`` (10:00)
    and runs ``peak_hours`` (4 h, the profile billing.advisor costed at 13.3 % saving).
    Each job asks 64 cores and 512 GiB: one job fills one node's GPUs.
    """

    def job(name: str, arrival: int, duration: int) -> SimPod:
        pod = Pod(name=name, cpu_milli=64_000, memory_mib=512 * 1024, gpu_count=8)
        return SimPod(pod, arrival, duration)

    out = []
    for day in range(days):
        for k in range(2):
            out.append(job(f"o1/base-{k}-day{day:02d}", day * DAY, DAY))
        out.append(
            job(f"o1/peak-day{day:02d}", day * DAY + peak_start_hour * HOUR, peak_hours * HOUR)
        )
    return out


# ------------------------------------------------------------------------------- T6


def t6_workload(
    *,
    hours: float = 6,
    busy_gpus: int = 32,
    dip_start_hour: float = 3.0,
    dip_minutes: int = 20,
    job_minutes: int = 10,
) -> list[SimPod]:
    """The article's incident (seed T6): steady load, a short overnight dip, load back.

    Every ``job_minutes`` a wave of ``busy_gpus`` one-GPU pods (8 cores, 64 GiB each) arrives
    and runs ``job_minutes``, from 0 to ``hours``, except during the dip (``dip_start_hour``
    for ``dip_minutes``): no pod arrives then, so the pool drains and sits idle, and when the
    dip ends ``busy_gpus`` pods arrive at once. (A wave that would run into the dip is cut
    short to end when it starts.)
    """
    end = int(hours * HOUR)
    job, dip_start = job_minutes * 60, int(dip_start_hour * HOUR)
    dip_end = dip_start + dip_minutes * 60
    waves, t = [], 0  # (start, length)
    while t < end:
        if t < dip_start < t + job:  # the wave running into the dip ends when the dip starts
            waves.append((t, dip_start - t))
            t = dip_end
        elif t == dip_start:
            t = dip_end
        else:
            waves.append((t, job))
            t += job
    out = []
    for wave, (s, length) in enumerate(waves):
        for k in range(busy_gpus):
            pod = Pod(
                name=f"t6/w{wave:03d}-{k:03d}",
                cpu_milli=8_000,
                memory_mib=64 * 1024,
                gpu_count=1,
            )
            out.append(SimPod(pod, s, length))
    return out
