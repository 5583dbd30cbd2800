"""`manage.py demo_fleet`: the living demo behind `make run` (issue 8 §1).

Node agents reporting over HTTP to the running web server, a workload replayed from the Alibaba
trace's pod shapes and durations (a synthetic diurnal pattern without ../shared/data), a GPU
fault now and then, and the control loops ticking at demo speed. See pools/demo/fleet.py.
Ctrl-C (SIGINT) or SIGTERM stops the agents and exits 0.
"""

from __future__ import annotations

import logging
import math
import random
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import tasks as billing_tasks
from monitoring import tasks as monitoring_tasks
from pools import tasks
from pools.demo import fleet as demo_fleet
from pools.demo import workload as demo_workload
from pools.management.arguments import (
    MAX_SECONDS,
    demo_speed,
    positive_seconds,
    seconds_or_zero,
    whole_number,
)
from pools.models import GpuNodePool, Node
from pools.providers.faults import gpu_fault_inject
from pools.simulation.workloads import TRACE_FILE, diurnal_workload, trace_workload

logger = logging.getLogger("ebcloud.demo")
# GPUs asked for at once, as a share of each pool's baseline: the inference pool is asked for
# 2.5x its two nodes, so it bursts (ScaledUp) and settles at about five nodes.
DEMO_LOADS = {"train-pool-demo": 0.9, "infer-pool-l40s": 2.5, "batch-spot-t4": 0.8}
SHARED_GPU_POOLS = {"infer-pool-l40s"}
# Xid 79 (fell off the bus) is replaced at once; the reset class needs the fault to persist
# (pools/core/repair.py), which a demo shows later. The admin guide's drill pool gets none
# (pools/demo/fleet.py: DRILL_POOLS).
FAULT_XIDS = (79, 48)
TRACE_WINDOW_S = 24 * 3600


class Command(BaseCommand):
    help = "Run the simulated fleet for the demo: agents over HTTP, a replayed workload, GPU faults."

    def add_arguments(self, parser):
        parser.add_argument("--server", default=settings.EBCLOUD_DEMO_SERVER, help="the web server the agents report to")
        parser.add_argument("--speed", type=demo_speed, default=settings.EBCLOUD_DEMO_SPEED,
                            help="trace seconds per wall second, 1 to 86400 (default %(default)s)")
        parser.add_argument("--tick", type=positive_seconds, default=settings.EBCLOUD_DEMO_TICK_SECONDS,
                            help="seconds between control-loop passes (default %(default)s)")
        parser.add_argument("--report-interval", type=positive_seconds, default=5.0, help="agent report interval, seconds")
        parser.add_argument("--fault-after", type=seconds_or_zero, default=settings.EBCLOUD_DEMO_FAULT_AFTER_SECONDS,
                            help="seconds after the first agent joins until the first GPU fault, at most a day; 0: none")
        parser.add_argument("--fault-every", type=positive_seconds, default=600.0, help="seconds between later faults")
        parser.add_argument("--data", default=str(settings.EBCLOUD_TRACE_DIR), help="the Alibaba trace directory")
        parser.add_argument("--seconds", type=seconds_or_zero, default=0,
                            help="stop after this many seconds, at most a day (0: until interrupted)")
        parser.add_argument("--no-clock", action="store_true", help="leave the control loops to the worker's schedules")
        parser.add_argument("--max-run", type=whole_number(1, MAX_SECONDS), default=180, help="longest pod run, wall seconds (1 to 86400)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--summary-every", type=positive_seconds, default=60.0,
                            help="seconds between summary lines while the nodes stay the same (default %(default)s)")

    def handle(self, *args, **o):
        if not all(0 < o[name] < math.inf for name in ("speed", "tick")):  # nan compares False
            raise CommandError("--speed and --tick must be positive")
        admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if admin is None:
            raise CommandError("no platform admin to mint join tokens: run `manage.py seed_demo` first")
        pools = list(GpuNodePool.objects.active().filter(name__in=DEMO_LOADS).select_related("team", "node_type"))
        if not pools:
            raise CommandError(f"none of the demo pools {sorted(DEMO_LOADS)} exists: run `manage.py seed_demo` first")
        routes = demo_fleet.routes_for(pools, loads=DEMO_LOADS, shared=SHARED_GPU_POOLS)
        source, origin = self._source(Path(o["data"]), seed=o["seed"], peak_gpus=3 * sum(r.load * r.baseline_nodes * r.node_gpus for r in routes))
        run_id = f"{int(time.time()) % 100000:05d}"

        def replay(cycle: int) -> demo_fleet.Replay:
            """The plan, again and again: each cycle's pods are named apart."""
            pods = demo_workload.plan(source, routes, speed=o["speed"], window_seconds=TRACE_WINDOW_S,
                                      max_run=o["max_run"], seed=o["seed"] + cycle, run_id=f"{run_id}{cycle}")
            return demo_fleet.Replay(pods, time.monotonic())

        first = replay(0)
        self.stdout.write(f"demo fleet: {len(first.pods)} pods from {origin} over {TRACE_WINDOW_S / o['speed'] / 60:.0f} min "
                          f"(speed {o['speed']:g}), agents -> {o['server']}")
        fleet = demo_fleet.AgentFleet(server=o["server"], root=Path(settings.VAR_DIR) / "demo-fleet" / run_id,
                                      admin=admin, interval=o["report_interval"])
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            self._loop(o, fleet, first, replay, stop)
        finally:
            fleet.close()
            self.stdout.write("demo fleet stopped")

    def _source(self, data: Path, *, seed: int, peak_gpus: float):
        """The trace when it is there; else a diurnal pattern whose peak asks three times what the
        routes want (the plan thins each route down to its load)."""
        if (data / TRACE_FILE).exists():
            return trace_workload(data, seed=seed), f"the Alibaba trace ({data / TRACE_FILE})"
        return diurnal_workload(seed=seed, days=2, peak_gpus=round(peak_gpus)), "a synthetic diurnal pattern (no trace data found)"

    def _loop(self, o, fleet: demo_fleet.AgentFleet, replay: demo_fleet.Replay, replan, stop: threading.Event) -> None:
        began = time.monotonic()
        rng = random.Random(o["seed"])
        first_agent_at = next_fault_at = None
        faults = cycles = 0
        last_said: tuple[tuple, float] | None = None
        while not stop.is_set():
            tick_start = time.monotonic()
            now = timezone.now()
            demo_fleet.submit(replay.due(tick_start - replay.started), now=now)
            if not o["no_clock"]:
                self._clock()
            nodes = list(Node.objects.exclude(phase=Node.Phase.TERMINATED).select_related("pool__node_type", "pool__gpu_model"))
            started = fleet.sync(nodes, busy=demo_fleet.gpu_shares(nodes), now=now)
            for notice in fleet.notices:
                self.stdout.write(self.style.WARNING(notice))
            fleet.notices.clear()
            if started and first_agent_at is None:
                first_agent_at = tick_start
                next_fault_at = tick_start + o["fault_after"] if o["fault_after"] > 0 else None
            if next_fault_at is not None and tick_start >= next_fault_at:
                faults += self._fault(fleet, nodes, rng, xid=FAULT_XIDS[faults % len(FAULT_XIDS)])
                next_fault_at = tick_start + o["fault_every"]
            summary = demo_fleet.fleet_summary()
            # A line when the nodes change, else one a --summary-every: the pod counts change
            # every tick, and a line every few seconds would drown what matters.
            nodes_now = (summary["ready"], summary["nodes"], len(fleet.agents))
            if last_said is None or last_said[0] != nodes_now or tick_start - last_said[1] >= o["summary_every"]:
                self.stdout.write(f"[{tick_start - began:6.0f}s] nodes {summary['ready']}/{summary['nodes']} Ready, "
                                  f"pods {summary['running']} running / {summary['pending']} pending, "
                                  f"{summary['gpus_allocated']} GPUs allocated, {len(fleet.agents)} agents")
                last_said = (nodes_now, tick_start)
            if replay.submitted >= len(replay.pods) and time.monotonic() - replay.started >= TRACE_WINDOW_S / o["speed"]:
                cycles += 1
                replay = replan(cycles)
            if o["seconds"] and time.monotonic() - began >= o["seconds"]:
                return
            stop.wait(max(0.0, o["tick"] - (time.monotonic() - tick_start)))

    def _clock(self) -> None:
        """The worker's own tasks, at demo speed (each is idempotent and multi-worker safe)."""
        for task in (tasks.reconcile_all, tasks.scheduler_pass_task, tasks.autoscale_all,
                     tasks.repair_all, monitoring_tasks.rollup_pool_samples, billing_tasks.meter_pending):
            try:
                task()
            except Exception:  # noqa: BLE001 - one failing loop must not stop the demo; it retries next tick
                logger.exception("%s failed; retrying next tick", task.__name__)

    def _fault(self, fleet: demo_fleet.AgentFleet, nodes: list[Node], rng: random.Random, *, xid: int) -> int:
        """Make the simulated cloud raise an Xid on a GPU of a Ready node of a pool with
        autoRepair, outside the admin guide's drill pool and never one that would pause its pool
        (`demo_fleet.fault_candidates`); the node's agent fetches and reports it
        (pools/providers/faults.py). None fits: no fault this time, the same Xid next time."""
        candidates = demo_fleet.fault_candidates(nodes, agents=fleet.reporting(), now=timezone.now())
        if not candidates:
            return 0
        node = rng.choice(candidates)
        gpu = rng.randrange(node.pool.node_type.gpu_count)
        gpu_fault_inject(user=None, node=node, gpu=gpu, xid=xid)
        self.stdout.write(self.style.WARNING(f"injected Xid {xid} on GPU {gpu} of {node.name} ({node.pool.name})"))
        return 1
