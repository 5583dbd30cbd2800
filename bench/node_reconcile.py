"""Level-triggered node labels at 1,000 Nodes on a real kube-apiserver: one lifecycle pass
(`reconcile_all`) with `EBCLOUD_CLUSTER=kubernetes` over pools whose nodes are
registered in a real API server (etcd + kube-apiserver from k8s/build.sh, started here with
tests/k8s/control_plane.py; the Nodes are created by the fake kubelet and labelled as the
lifecycle labels them at registration).

Timed, with the Kubernetes API calls and the SQL statements of each pass counted:
- a quiet pass (nothing drifted): one list of the Nodes, whatever their number;
- a pass after a spec edit of every pool (a new `nodeLabels` entry): every node relabelled
  by server-side apply (one call per node: the apply starts from the listed Node), its row
  updated, one event per node;
- a pass after someone else removed one of our labels from some nodes: only those are patched;
- a quiet pass again.

The database is SQLite in a temporary folder (migrated here); the fleet is
bench/control_plane_fleet.py's shape without pods: `--pools` pools of 20 Ready nodes each
(18 monthly, 2 on demand).

Usage: python bench/node_reconcile.py [--pools 50] [--drifted 10] [--threads 8] [--repeat 3] [--no-instructions]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PassResult:
    name: str
    seconds: float
    api_calls: int
    statements: int
    note: str = ""


class ApiCounter:
    """Counts every request of the Kubernetes client (all ApiClients of the process)."""

    def __init__(self):
        from kubernetes.client import ApiClient

        self.count = 0
        send = ApiClient.call_api
        counter = self

        def counted(client, *args, **kwargs):
            counter.count += 1
            return send(client, *args, **kwargs)

        ApiClient.call_api = counted


def setup_django(work: Path, kubeconfig: Path) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'bench.sqlite3'}"
    os.environ["EBCLOUD_CLUSTER"] = "kubernetes"
    os.environ["EBCLOUD_KUBECONFIG"] = str(kubeconfig)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    assert settings.EBCLOUD_CLUSTER_BACKEND == "kubernetes", "the bench must drive the real API server"

    call_command("migrate", verbosity=0, interactive=False)


def register(kubeconfig: Path, *, threads: int) -> tuple[int, float]:
    """Every Ready Node row joins the API server (fake kubelet) and gets the labels and taints
    its row says we applied. Returns (nodes, seconds)."""
    import threading

    from pools.models import Node
    from pools.providers.fake_kubelet import FakeKubelet
    from pools.providers.kubernetes import KubernetesCluster, api_client

    rows = list(Node.objects.filter(phase=Node.Phase.READY).select_related("pool__node_type").values_list(
        "name", "labels", "taints", "gpu_count", "pool__node_type__cpu_milli", "pool__node_type__memory_mib"
    ))  # fmt: skip
    local = threading.local()
    from bench.control_plane_fleet import NOW

    def join(row) -> None:
        name, labels, taints, gpus, cpu, memory = row
        if not hasattr(local, "api"):
            local.api = api_client(str(kubeconfig))
        FakeKubelet(local.api).join(name=name, cpu_milli=cpu, memory_mib=memory, gpus=gpus, now=NOW)
        KubernetesCluster(local.api).node_apply(name=name, labels=labels, taints=taints)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(join, rows))
    return len(rows), time.perf_counter() - started


def measured(name: str, now, api: ApiCounter) -> PassResult:
    from django.db import connection

    from bench.control_plane import QueryCounter
    from pools.controllers import lifecycle
    from pools.models import PoolEvent

    events = PoolEvent.objects.count()
    counter, calls = QueryCounter(), api.count
    with connection.execute_wrapper(counter):
        started = time.perf_counter()
        results = lifecycle.reconcile_all(now=now)
        seconds = time.perf_counter() - started
    errors = [r.error for r in results if r.error]
    claimed = sum(1 for r in results if r.claimed and r.phase)
    note = f"{len(results)} pools ({claimed} with a status), {PoolEvent.objects.count() - events} events" + (f", {len(errors)} errors: {errors[0]}" if errors else "")
    return PassResult(name, seconds, api.count - calls, counter.count, note)


def edit_every_pool(label: str, value: str) -> int:
    """A new `nodeLabels` entry in every pool's spec, as `pool_update` writes it (document,
    generation + 1); returns the pools edited."""
    from django.db import transaction
    from django.db.models import F

    from pools.models import GpuNodePool

    with transaction.atomic():
        pools = list(GpuNodePool.objects.filter(deleted_at__isnull=True))
        for pool in pools:
            pool.document["spec"].setdefault("nodeLabels", {})[label] = value
            GpuNodePool.objects.filter(pk=pool.pk).update(document=pool.document, generation=F("generation") + 1)
    return len(pools)


def cluster_check(kubeconfig: Path, label: str, value: str) -> tuple[int, int]:
    """(Nodes carrying label=value, Nodes of the fleet) as the API server has them now."""
    from kubernetes import client

    from pools.providers.kubernetes import api_client

    nodes = client.CoreV1Api(api_client(str(kubeconfig))).list_node().items
    ours = [n for n in nodes if "ebcloud.io/pool" in (n.metadata.labels or {})]
    return sum(1 for n in ours if n.metadata.labels.get(label) == value), len(ours)


def drift(kubeconfig: Path, count: int, label: str) -> list[str]:
    """Someone else removes one of our labels from `count` Nodes (a merge patch)."""
    from kubernetes import client

    from pools.models import Node
    from pools.providers.kubernetes import api_client

    core = client.CoreV1Api(api_client(str(kubeconfig)))
    names = list(Node.objects.filter(phase=Node.Phase.READY).order_by("name").values_list("name", flat=True)[:count])
    for name in names:
        core.patch_node(name, {"metadata": {"labels": {label: None}}})
    return names


def fleet_shape(pools: int):
    from bench.control_plane_fleet import Shape

    return Shape(pools=pools, teams=min(5, pools), monthly_ready=18, provisioning=0, burst_ready=2, pods_per_node=0,
                 pending_per_pool=0, draining=0, events_per_pool=0, sample_minutes=0)  # fmt: skip


def prepare_relabel(*, database: str, pools: int) -> None:
    """The fleet's rows in `database` (natively, before bench/instructions.py's counted child)."""
    from bench.workloads import django_ready

    django_ready(database)
    from django.db import transaction

    from bench.control_plane_fleet import build

    with transaction.atomic():
        build(fleet_shape(pools))


def relabel(*, database: str, pools: int):
    """bench/instructions.py's workload: the pass after a spec edit of every pool, which applies
    the new label to every Node of a real kube-apiserver (started here with the fake kubelet's
    Nodes, outside the count): instructions per Node relabelled, on this side."""
    import itertools

    from bench.instructions import Workload
    from bench.workloads import django_ready

    django_ready(database)
    from django.conf import settings

    from bench.control_plane_fleet import NOW
    from pools.controllers import lifecycle
    from tests.k8s.control_plane import ControlPlane

    plane = ControlPlane().start(scheduler=False)
    try:
        settings.EBCLOUD_CLUSTER_BACKEND, settings.EBCLOUD_KUBECONFIG = "kubernetes", str(plane.kubeconfig)
        nodes, _ = register(plane.kubeconfig, threads=4)
    except BaseException:
        plane.stop()
        raise
    values, passes, edits = itertools.count(), itertools.count(1), []

    def reset() -> None:
        edits.append(f"r{next(values)}")
        edit_every_pool("rack", edits[-1])

    def run() -> None:
        lifecycle.reconcile_all(now=NOW + timedelta(seconds=30 * next(passes)))

    def relabelled() -> int:
        """The Nodes that carry the last edit's label, as the API server has them."""
        carrying, total = cluster_check(plane.kubeconfig, "rack", edits[-1])
        if carrying != total or total != nodes:
            raise RuntimeError(f"{carrying} of {total} Nodes relabelled, {nodes} registered")
        return carrying

    return Workload(f"pass after a spec edit of {pools} pools", "Node relabelled", run, relabelled, reset=reset, close=plane.stop)


def instruction_lines(*, pools: int = 2) -> list[str]:
    import tempfile

    from bench.instructions import unavailable
    from bench.workloads import counts, prepared

    if unavailable():
        return [f"instructions: {unavailable()}"]
    with tempfile.TemporaryDirectory(prefix="ebcloud-nodes-") as work:
        found = counts(prepared(Path(work), {"relabel": ("bench.node_reconcile:relabel", {"pools": pools, "database": None})}))["relabel"]
    return [f"instructions (callgrind, this process only, SQLite; the API server's work is outside): "
            f"{found.per_unit / 1e6:.2f} M per Node relabelled in a {found.name} ({found.statements / found.units:.2f} statements per Node)"]


def run(args) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.k8s.control_plane import ControlPlane, binaries_dir, missing_binaries

    if missing := missing_binaries():
        raise SystemExit(f"{', '.join(missing)} missing in {binaries_dir()}: run k8s/build.sh")
    work = Path(tempfile.mkdtemp(prefix="ebcloud-bench-nodes-"))
    plane = ControlPlane().start()
    try:
        setup_django(work, plane.kubeconfig)
        from django.db import transaction

        from bench.control_plane import machine_speed
        from bench.control_plane_fleet import NOW, build

        before = machine_speed()
        shape = fleet_shape(args.pools)
        started = time.perf_counter()
        with transaction.atomic():
            fleet = build(shape)
        built = time.perf_counter() - started
        nodes, joined = register(plane.kubeconfig, threads=args.threads)
        api = ApiCounter()
        now, tick = NOW, timedelta(seconds=30)
        rows: list[PassResult] = []
        quiet = []
        for _ in range(args.repeat):
            quiet.append(measured("quiet pass (nothing drifted)", now, api))
            now += tick
        rows.append(_median(quiet))
        edited = edit_every_pool("rack", "r1")
        rows.append(measured(f"after a spec edit of all {edited} pools (+rack=r1 on every node)", now, api))
        carrying, total = cluster_check(plane.kubeconfig, "rack", "r1")
        rows[-1].note += f"; {carrying:,} of {total:,} Nodes carry rack=r1 after the pass"
        now += tick
        drifted = drift(plane.kubeconfig, args.drifted, "rack")
        rows.append(measured(f"after someone removed rack from {len(drifted)} Nodes", now, api))
        carrying, total = cluster_check(plane.kubeconfig, "rack", "r1")
        rows[-1].note += f"; {carrying:,} of {total:,} carry it again"
        now += tick
        quiet = []
        for _ in range(args.repeat):
            quiet.append(measured("quiet pass again", now, api))
            now += tick
        rows.append(_median(quiet))
        report(rows, fleet=fleet, nodes=nodes, built=built, joined=joined, threads=args.threads, speeds=(before, machine_speed()))
    finally:
        plane.stop()


def _median(runs: list[PassResult]) -> PassResult:
    times = sorted(r.seconds for r in runs)
    first = runs[0]
    note = first.note + (f"; median of {len(runs)} passes, {times[0]:.2f}–{times[-1]:.2f} s" if len(runs) > 1 else "")
    return PassResult(first.name, statistics.median(times), first.api_calls, first.statements, note)


def report(rows: list[PassResult], *, fleet, nodes: int, built: float, joined: float, threads: int, speeds: tuple[str, str]) -> None:
    print(f"node reconcile benchmark, SQLite + kube-apiserver, {date.today()}")
    print(f"before the runs, {speeds[0]}\nafter the runs, {speeds[1]}")
    print(f"\n{fleet.pools:,} pools, {nodes:,} Ready Nodes (fleet written in {built:.1f} s; Nodes registered and labelled in the API server in {joined:.1f} s, {threads} threads)")
    print("\n| pass | seconds | API calls | SQL statements | what happened |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.name} | {r.seconds:.2f} | {r.api_calls:,} | {r.statements:,} | {r.note} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=50, help="Pools of 20 Ready nodes each (50: 1,000 Nodes)")
    parser.add_argument("--drifted", type=int, default=10, help="Nodes whose label someone else removes")
    parser.add_argument("--threads", type=int, default=8, help="Threads registering the Nodes")
    parser.add_argument("--repeat", type=int, default=3, help="Quiet passes; the table shows the median")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="also count instructions per Node relabelled with callgrind (bench/instructions.py)")
    args = parser.parse_args(argv)
    run(args)
    if args.instructions:  # after the run: its API server is stopped, the count starts its own
        print("\n" + "\n".join(instruction_lines()))


if __name__ == "__main__":
    main()
