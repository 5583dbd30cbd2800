"""The simulated fleet behind `make run` (issue 8 §1): node agents over HTTP, a replayed
workload, GPU faults, and a fast clock for the control loops.

What is simulated here is only what a real site has outside the control plane:
- the machines' agents: one :class:`monitoring.agent.Agent` thread per live node, joining with
  a join token minted for it (as cloud-init would hand it over) and reporting through the real
  agent API over HTTP; its GPUs are a simulated source whose utilisation follows the pods
  bound to the node, and which raises the Xids the fault plan injects. When a person joins an
  agent of their own as a demo node (the admin guide's section 3), the demo's agent is refused
  (its credential is revoked) and stops: the fleet says so once and stands aside while that
  agent reports, then joins again with a new join token once the node has been silent for
  `take_back_after` seconds (`AgentFleet._refused`);
- the users: pods submitted by the teams' members through the same service as the API, from
  :mod:`pools.demo.workload`'s plan;
- faults: now and then an Xid on a GPU of a node, through the simulated cloud, never in the
  admin guide's drill pool and never one that would pause a pool's auto repair
  (`fault_candidates`);
- time: at demo speed the minute-granular worker schedules are too slow to watch, so each tick
  runs the worker's own tasks (reconcile, schedule, autoscale, repair, rollup, metering). They
  are idempotent and safe beside the worker, which keeps running its schedules.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.db.models import Sum

from monitoring.agent import Agent
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import ControlPlaneFaults, SimulatedSource
from monitoring.models import NodeAgentState
from monitoring.services import join_token_create
from pools.core.errors import ConflictError
from pools.core.spec import parse_document
from pools.demo.workload import DemoPod, Route
from pools.models import GpuNodePool, Membership, Node, Pod, PriorityClass
from pools.selectors.pools import catalog_current
from pools.selectors.repair_health import repair_states, watched_nodes
from pools.services import pods as pod_services

logger = logging.getLogger("ebcloud.demo")
AGENT_PHASES = (Node.Phase.REGISTERING, Node.Phase.READY, Node.Phase.CORDONED, Node.Phase.DRAINING,
                Node.Phase.REPAIRING, Node.Phase.UNKNOWN)
MILLI = 1000
BATCH_CLASS = "batch"


# ----------------------------------------------------------------------------------- routes


def routes_for(pools: list[GpuNodePool], *, loads: dict[str, float], shared: set[str]) -> list[Route]:
    """A workload route per demo pool: its team, its node's shape, tolerations for its taints
    and a selector on its labels, so the replayed pods land where a real user's would. Pools
    named in `shared` also take the pods that ask for a share of one GPU (inference serving);
    whole-GPU pods go to any pool whose node holds them, by weight. A preemptible pool's pods
    are batch work: PriorityClass `batch` (examples/priorityclasses.yaml) when it exists."""
    routes = []
    catalog = catalog_current()
    batch = PriorityClass.objects.filter(name=BATCH_CLASS).exists()
    for pool in pools:
        spec = parse_document(pool.document, catalog)
        gpus = pool.node_type.gpu_count
        routes.append(Route(
            pool=pool.name, team=pool.team.slug, node_gpus=gpus,
            cpu_milli_per_gpu=pool.node_type.cpu_milli // gpus, memory_mib_per_gpu=pool.node_type.memory_mib // gpus,
            baseline_nodes=max(1, spec.min_nodes), load=loads.get(pool.name, 1.0),
            shared=pool.name in shared, whole=True,
            tolerations=tuple({"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in spec.node_taints),
            node_selector=dict(spec.node_labels),
            labels={k: v for k, v in pool.labels.items() if k == "project"},
            checkpointable=spec.preemptible,
            priority_class=BATCH_CLASS if spec.preemptible and batch else "",
        ))
    return routes


# ----------------------------------------------------------------------------------- agents


class FleetGpus(SimulatedSource):
    """A node's simulated GPUs whose load follows the pods bound to it: `busy` holds each
    GPU's allocated share (0..1), set by the fleet every tick from the scheduler's bindings."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.busy: list[float] = [0.0] * self.gpus

    def sample(self) -> list[dict]:
        out = super().sample()
        for gpu, row in zip(out, self.busy, strict=False):
            util = round(row * self.rng.uniform(55, 98)) if row else self.rng.randint(0, 3)
            used = int(self.memory_mib * (row * self.rng.uniform(0.5, 0.9) if row else 0.01))
            gpu.update({"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": used,
                        "DCGM_FI_DEV_FB_FREE": self.memory_mib - used,
                        "DCGM_FI_DEV_GPU_TEMP": 35 + util // 3, "DCGM_FI_DEV_POWER_USAGE": round(60 + util * 3.2, 1)})
        return out


@dataclass
class RunningAgent:
    agent: Agent
    source: FleetGpus
    stop: threading.Event
    thread: threading.Thread
    handed_over: bool = False  # refused, and the fleet said so


@dataclass
class AgentFleet:
    """One agent thread per live node, started when the machine is up, stopped when it goes."""

    server: str
    root: Path
    admin: object
    interval: float
    # Seconds a node whose demo agent was refused must go without reports before the demo joins
    # it again: several of a real agent's 15 s intervals, so a live agent is never displaced
    # (no ping-pong), and well within the 5 minutes after which a silent node turns Unknown.
    take_back_after: float = 60.0
    agents: dict[str, RunningAgent] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)  # for the demo's log, once each

    def sync(self, nodes: list[Node], *, busy: dict[int, list[float]], now: datetime) -> list[str]:
        """Start agents for new machines, stop those of machines gone, take back nodes whose
        agent was refused once they are silent; returns started names."""
        started = []
        live = {n.name: n for n in nodes if n.phase in AGENT_PHASES}
        for name in [n for n in self.agents if n not in live]:
            self._stop(name)
        for name, node in live.items():
            running = self.agents.get(name)
            if running is not None and running.agent.refused and not running.thread.is_alive():
                running = self._refused(name, node, now=now)
            if running is None:
                running = self._start(node)
                started.append(name)
            shares = busy.get(node.pk, [])
            running.source.busy = (shares + [0.0] * running.source.gpus)[: running.source.gpus]
        return started

    def reporting(self) -> set[str]:
        """The nodes whose demo agent still reports (not refused)."""
        return {name for name, running in self.agents.items() if not running.agent.refused}

    def _refused(self, name: str, node: Node, *, now: datetime) -> RunningAgent | None:
        """The control plane refused this node's demo agent: someone joined another agent as
        the node (or revoked the credential). Stand aside while the node reports, saying so
        once; after `take_back_after` seconds of silence stop it and return None, so that
        `sync` starts a fresh agent with a new join token, as the demo's supervisor may."""
        running = self.agents[name]
        last = NodeAgentState.objects.filter(node=node).values_list("last_report_at", flat=True).first()
        if last is not None and now - last < timedelta(seconds=self.take_back_after):
            if not running.handed_over:
                running.handed_over = True
                self.notices.append(f"{name}: the demo's agent was refused (another agent joined as this node, or its "
                                    f"credential was revoked); it stands aside and joins again once the node has sent "
                                    f"no report for {self.take_back_after:g}s")
            return running
        self._stop(name)
        (self.root / name / "credential.json").unlink(missing_ok=True)
        self.notices.append(f"{name}: no report for {self.take_back_after:g}s; the demo's agent joins again with a new join token")
        return None

    def close(self) -> None:
        for name in list(self.agents):
            self._stop(name)

    def _start(self, node: Node) -> RunningAgent:
        directory = self.root / node.name
        directory.mkdir(parents=True, exist_ok=True)
        credential = directory / "credential.json"
        token = None
        if not credential.exists():
            _, token = join_token_create(user=self.admin, node=node)
        gpus = node.pool.node_type.gpu_count
        source = FleetGpus(gpus=gpus, memory_mib=node.pool.gpu_model.memory_gib * 1024, seed=node.pk)
        agent = Agent(server=self.server, source=source, buffer=DiskBuffer(directory / "buffer.sqlite3"),
                      credential_file=credential, node=node.name, join_token=token,
                      interval=self.interval, backoff_cap=10.0, seed=node.pk)
        source.fault_feed = ControlPlaneFaults.of(agent)
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), name=f"agent-{node.name}", daemon=True)
        thread.start()
        self.agents[node.name] = RunningAgent(agent, source, stop, thread)
        return self.agents[node.name]

    def _stop(self, name: str) -> None:
        running = self.agents.pop(name)
        running.stop.set()
        running.thread.join(timeout=5)
        running.agent.close()


def gpu_shares(nodes: list[Node]) -> dict[int, list[float]]:
    """Each node's GPUs' allocated share, packed from its running pods' requests (whole GPUs
    first, then shares), in one query."""
    rows = (Pod.objects.filter(node__in=[n.pk for n in nodes], phase=Pod.Phase.RUNNING)
            .values("node_id", "gpu_count", "gpu_milli"))
    totals: dict[int, float] = {}
    for row in rows:
        share = row["gpu_count"] if row["gpu_milli"] >= MILLI else row["gpu_milli"] / MILLI
        totals[row["node_id"]] = totals.get(row["node_id"], 0.0) + share
    out = {}
    for node in nodes:
        total, gpus = totals.get(node.pk, 0.0), node.pool.node_type.gpu_count
        whole = min(gpus, math.floor(total))
        out[node.pk] = [1.0] * whole + ([round(total - whole, 3)] if whole < gpus and total > whole else [])
    return out


# ----------------------------------------------------------------------------------- faults


# The pool the admin guide's repair drill uses (docs/guide-admin.md: `inject_fault
# train-pool-demo-1-001 --xid 79`). The demo's own faults leave it alone: a two-node pool
# tolerates one unhealthy node, and an Xid 48 the demo had put on its other node turned the
# drill into a paused pool (2 of 2 unhealthy) instead of the replacement the guide promises.
DRILL_POOLS = frozenset({"train-pool-demo"})


def fault_candidates(nodes: list[Node], *, agents: Collection[str], now: datetime) -> list[Node]:
    """The nodes the demo may make fail now, by name: Ready, with a running agent, in a pool
    that repairs itself, not the guide's drill pool (`DRILL_POOLS`), and in a pool that one more
    unhealthy node keeps within its limit (its `maxUnhealthy`: `PoolRepairState.limit`). A demo fault
    shows a repair; one that paused its pool (`RepairPaused`) would show auto repair stopping
    for a cause the demo made up, and hold back the repairs of the faults before it."""
    ready = [n for n in nodes if n.phase == Node.Phase.READY and n.name in agents and n.pool.name not in DRILL_POOLS
             and n.pool.document.get("spec", {}).get("autoRepair", True)]  # fmt: skip
    states = repair_states(nodes=watched_nodes({n.pool_id for n in ready}), now=now)
    room = {pool_id: state.unhealthy + 1 <= state.limit for pool_id, state in states.items()}
    unhealthy = {h.name for state in states.values() for h in state.health if not h.healthy}
    return sorted((n for n in ready if room.get(n.pool_id) and n.name not in unhealthy), key=lambda n: n.name)


# --------------------------------------------------------------------------------- workload


@dataclass
class Replay:
    """Submits the planned pods when their time comes, as their team's member or lead."""

    pods: list[DemoPod]
    started: float
    submitted: int = 0

    def due(self, elapsed: float) -> list[DemoPod]:
        out = []
        while self.submitted < len(self.pods) and self.pods[self.submitted].at <= elapsed:
            out.append(self.pods[self.submitted])
            self.submitted += 1
        return out


def submitter_for(team_slug: str):
    """A member of the team who may submit pods (its lead in the demo data)."""
    membership = (Membership.objects.filter(team__slug=team_slug).select_related("user")
                  .order_by("role", "pk").first())  # "lead" sorts before "member"
    return membership.user if membership else None


def submit(pods: list[DemoPod], *, now: datetime) -> int:
    done = 0
    people: dict[str, object] = {}
    for pod in pods:
        user = people.setdefault(pod.route.team, submitter_for(pod.route.team))
        if user is None:
            continue
        try:
            pod_services.pod_create(user=user, document=pod.document(), team_slug=pod.route.team, now=now)
            done += 1
        except ConflictError:  # already submitted by an earlier run with the same id
            continue
    return done


def fleet_summary() -> dict[str, int]:
    """What the dashboard shows, for the fleet's one-line progress log."""
    nodes = Node.objects.exclude(phase=Node.Phase.TERMINATED)
    return {
        "ready": nodes.filter(phase=Node.Phase.READY).count(),
        "nodes": nodes.count(),
        "running": Pod.objects.filter(phase=Pod.Phase.RUNNING).count(),
        "pending": Pod.objects.filter(phase=Pod.Phase.PENDING).count(),
        "gpus_allocated": Pod.objects.filter(phase=Pod.Phase.RUNNING).aggregate(n=Sum("gpu_count"))["n"] or 0,
    }
