"""Scheduler extender latency at 1,000 nodes: p50 and p99 of `filter` and `prioritize`.

The fleet is bench/control_plane_fleet.py's shape at 50 pools of 20 Ready 8-GPU nodes (1,000
nodes) of one team, each node running `--pods-per-node` pods (default 8: six whole GPUs and two halves of a
seventh, one GPU left free) and 10 Pending pods per pool: 8,000 bound pods and 500 waiting. The
pools name no policy, so every node is scored with the product's default, fgd-cpu (FGD's score
and a tie-break: the costliest).

Each round posts what kube-scheduler posts for one pod (`nodeCacheCapable`): `filter` with all
1,000 node names, then `prioritize` with the nodes the filter passed (the pod asks for one GPU
and tolerates every pool; with `--cpu-only`, none: kube-scheduler sends every pod, CPU-only
ones too, so that the team rule holds for them). Two scenarios, in Kubernetes mode (the only one kube-scheduler
calls): `steady`, nothing changes between rounds; `busy`, before each round one more pod
becomes Running on a node as the pod mirror records a binding (the pod rows and the mirror's
cursor change), which is what the read model sees while kube-scheduler binds pod after pod.
Requests go through Django's whole stack (middleware, authentication, JSON) in this process,
as the web tier would serve them; the network between kube-scheduler and the web tier is not
included. Besides the wall time, the CPU time of the request's thread: on a shared machine the
wall time includes waiting for a core, the CPU time is what the request costs on an idle one
(the database is SQLite in this process, so its work is in it; PostgreSQL's is not).

Usage: python bench/extender.py [--rounds 200] [--cpu-only] [--database postgres://...] [--no-instructions]
       (default database: a new SQLite file in var/)
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # allow `python bench/extender.py` from the project root
    sys.path.insert(0, str(ROOT))

from bench.pod_mirror import django_setup, speed_probe  # noqa: E402

SECRET = "bench-scheduler-secret"
TEAM = "bench-team-0"  # the fleet's one team: its namespace (named like it) may use every pool


def benchmark_pod(index: int, *, cpu_only: bool = False) -> dict:
    """One GPU (none when `cpu_only`), 4 cores and 32 GiB, of the team that owns every pool,
    tolerating every pool's taint (as kube-scheduler's own filters have already passed every node)."""
    limits = {} if cpu_only else {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"bench-{index}", "namespace": TEAM, "uid": str(uuid.uuid4())},
        "spec": {
            "tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "registry.invalid/x:1",
                            "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": limits}}],
        },
    }  # fmt: skip


def fleet_shape(pods_per_node: int):
    from bench.control_plane_fleet import Shape

    return Shape(pools=50, teams=1, monthly_ready=18, provisioning=0, burst_ready=2, pods_per_node=pods_per_node,
                 draining=0, events_per_pool=0, sample_minutes=0)  # fmt: skip


def prepare_rounds(*, database: str, rounds: int, pods_per_node: int = 8) -> None:
    """The bench's fleet in `database` (natively, before bench/instructions.py's counted child)."""
    from bench.workloads import django_ready

    django_ready(database)
    from bench.control_plane_fleet import NOW, build
    from pools.services.pod_mirror import cursor_save

    build(fleet_shape(pods_per_node), prefix="bench")
    cursor_save("1", now=NOW)


def rounds(*, database: str, rounds: int, pods_per_node: int = 8):
    """bench/instructions.py's workload: `rounds` steady rounds of filter (all 1,000 nodes) and
    prioritize (those it passed) through Django's whole stack: instructions per round."""
    import itertools

    from bench.instructions import Workload
    from bench.workloads import django_ready

    django_ready(database)
    from django.conf import settings
    from django.test import Client

    from pools.models import Node

    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = SECRET
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"
    settings.ALLOWED_HOSTS = ["testserver"]
    names = list(Node.objects.filter(phase=Node.Phase.READY).order_by("name").values_list("name", flat=True))
    client = Client(HTTP_AUTHORIZATION="Basic " + base64.b64encode(f"kube-scheduler:{SECRET}".encode()).decode())
    indexes = itertools.count()

    def run() -> None:
        for _ in range(rounds):
            pod = benchmark_pod(next(indexes))
            body = {"Pod": pod, "Nodes": None, "NodeNames": names}
            for verb in ("filter", "prioritize"):
                response = client.post(f"/api/scheduler/v1/{verb}", body, content_type="application/json")
                if response.status_code != 200:
                    raise RuntimeError(f"{verb}: {response.status_code}")
                if verb == "filter":
                    body = {"Pod": pod, "Nodes": None, "NodeNames": response.json()["NodeNames"]}

    return Workload(f"filter + prioritize at {len(names):,} nodes", "round", run, lambda: rounds)


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--cpu-only", action="store_true", help="the pod asks for no GPU")
    parser.add_argument("--database", default="")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="also count instructions per round with callgrind (bench/instructions.py)")
    args = parser.parse_args(argv)
    database = args.database or f"sqlite:///{tempfile.mkdtemp(dir=ROOT / 'var', prefix='bench-extender-')}/db.sqlite3"
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "60")  # docs/operator.md's production value
    django_setup(database)

    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from bench.control_plane_fleet import NOW, build
    from pools.models import Node
    from pools.models.pods import Pod
    from pools.services.pod_mirror import cursor_save

    settings.EBCLOUD_SCHEDULER_EXTENDER_TOKEN = SECRET
    settings.EBCLOUD_CLUSTER_BACKEND = "kubernetes"  # the extender serves a real cluster's scheduler
    settings.ALLOWED_HOSTS = ["testserver"]
    shape = fleet_shape(args.pods_per_node)
    started = time.perf_counter()
    fleet = build(shape, prefix="bench")
    built = time.perf_counter() - started
    cursor_save("1", now=NOW)
    names = list(Node.objects.filter(phase=Node.Phase.READY).order_by("name").values_list("name", flat=True))
    client = Client(HTTP_AUTHORIZATION="Basic " + base64.b64encode(f"kube-scheduler:{SECRET}".encode()).decode())
    waiting = list(Pod.objects.filter(phase=Pod.Phase.PENDING).order_by("id").values_list("id", "name"))

    def bind_one(round_: int) -> None:
        """What the pod mirror writes when kube-scheduler has bound a pod: a Pending pod of the
        fleet Running on a node of its pool, and the mirror's cursor moved."""
        pk, name = waiting[round_ % len(waiting)]
        node = Node.objects.filter(pool__name=name.rsplit("-pending-", 1)[0], phase=Node.Phase.READY).order_by("name")[round_ // len(waiting) % 20]
        Pod.objects.filter(pk=pk).update(phase=Pod.Phase.RUNNING, node=node, started_at=NOW)
        cursor_save(str(round_ + 2), now=NOW)

    rss_before = resident_mib()
    start = time.perf_counter()
    client.post("/api/scheduler/v1/filter", {"Pod": benchmark_pod(-1), "Nodes": None, "NodeNames": names}, content_type="application/json")
    cold = time.perf_counter() - start
    state_mib = resident_mib() - rss_before
    rows = []
    for scenario in ("steady", "busy"):
        timings: dict[str, list[float]] = {"filter": [], "prioritize": []}
        cpu: dict[str, list[float]] = {"filter": [], "prioritize": []}
        queries: dict[str, list[int]] = {"filter": [], "prioritize": []}
        for index in range(args.rounds + 5):  # the first 5 warm up
            if scenario == "busy":
                bind_one(index)
            pod = benchmark_pod(index, cpu_only=args.cpu_only)
            body = {"Pod": pod, "Nodes": None, "NodeNames": names}
            for verb in ("filter", "prioritize"):
                with CaptureQueriesContext(connection) as captured:
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    response = client.post(f"/api/scheduler/v1/{verb}", body, content_type="application/json")
                    elapsed, used = (time.perf_counter() - start) * 1000, (time.thread_time() - start_cpu) * 1000
                if response.status_code != 200:
                    raise SystemExit(f"{verb}: {response.status_code} {response.content[:300]!r}")
                if verb == "filter":
                    body = {"Pod": pod, "Nodes": None, "NodeNames": response.json()["NodeNames"]}
                if index >= 5:
                    timings[verb].append(elapsed)
                    cpu[verb].append(used)
                    queries[verb].append(len(captured))
            if len(body["NodeNames"]) < len(names) // 2:
                raise SystemExit(f"the filter passed only {len(body['NodeNames'])} nodes")
        for verb, samples in timings.items():
            rows.append((scenario, verb, len(body["NodeNames"]) if verb == "prioritize" else len(names), samples, cpu[verb], max(queries[verb])))

    print(f"fleet: {len(names):,} nodes, {fleet.pods:,} pods ({shape.pods_per_node} per node), built in {built:.1f} s; "
          f"database {connection.vendor}; {args.rounds} rounds per scenario of a {'CPU-only' if args.cpu_only else 'one-GPU'} pod; speed probe (5 M additions) {speed_probe():.0f} ms")  # fmt: skip
    print(f"first call (the state read whole): {cold:.2f} s; the state's memory: {state_mib:.0f} MiB")
    print()
    print("| state between rounds | verb | nodes sent | p50 ms | p99 ms | max ms | CPU p50 ms | CPU p99 ms | SQL statements |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scenario, verb, sent, samples, used, statements in rows:
        print(f"| {scenario} | {verb} | {sent:,} | {statistics.median(samples):.1f} | {percentile(samples, 0.99):.1f} | {max(samples):.1f} "
              f"| {statistics.median(used):.1f} | {percentile(used, 0.99):.1f} | {statements} |")  # fmt: skip
    if args.instructions:
        print("\n".join(instruction_lines(pods_per_node=args.pods_per_node)))
    return 0


def instruction_lines(*, pods_per_node: int, rounds: int = 3) -> list[str]:
    """Instructions per steady round (filter + prioritize), counted in process on SQLite."""
    import tempfile

    from bench.instructions import unavailable
    from bench.workloads import counts, prepared

    if unavailable():
        return [f"instructions: {unavailable()}"]
    with tempfile.TemporaryDirectory(prefix="ebcloud-extender-") as work:
        plan = {"rounds": ("bench.extender:rounds", {"rounds": rounds, "pods_per_node": pods_per_node, "database": None})}
        found = counts(prepared(Path(work), plan))["rounds"]
    return [f"instructions (callgrind, in process on SQLite, the same on any machine): {found.per_unit / 1e6:.1f} M per steady round "
            f"of {found.name} ({found.statements / found.units:g} statements per round)"]


if __name__ == "__main__":
    raise SystemExit(main())
