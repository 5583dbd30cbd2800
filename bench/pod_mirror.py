"""Pod mirror throughput against a real kube-apiserver: how many pods a second the list + watch
of pools/controllers/pod_mirror.py brings into the read model.

A fresh control plane (etcd + kube-apiserver, from k8s/build.sh) is started; the mirror watches
while `--threads` clients create `--pods` pods as fast as the API server takes them (pods with
`spec.nodeName` set, so no scheduler is involved); the table shows the creation rate, the rate
the mirror stored them at (first create to last stored), the lag behind the last create, and
the statements per mirrored pod. Then the same events are replayed into an empty read model by a
mirror that resumes its watch from before the first create (a mirror that was down: the backlog
is applied as fast as the mirror can), and a fresh mirror lists them all (a relist: a first
start, or the answer to 410 Gone).

Usage: python bench/pod_mirror.py [--pods 5000] [--threads 8] [--database postgres://...] [--no-instructions]
       (default database: a new SQLite file in var/)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def django_setup(database: str) -> None:
    os.environ["DATABASE_URL"] = database
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def speed_probe() -> float:
    """Milliseconds for 5 M additions: how fast this machine is, beside the seconds."""
    start = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    return (time.perf_counter() - start) * 1000


class Statements:
    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def watching(mirror, statements: Statements, stop: threading.Event) -> threading.Thread:
    """The mirror watching on a thread of its own (its statements counted) until `stop`."""
    from django.db import connection

    def watch():
        with connection.execute_wrapper(statements):
            mirror.sync(seconds=3600, stop=stop)
        connection.close()

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


BENCH_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"namespace": "bench", "labels": {"project": "bench"}},
    "spec": {"nodeName": "bench-node", "automountServiceAccountToken": False, "containers": [
        {"name": "main", "image": "registry.invalid/x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}  # fmt: skip


def relist(*, database: str, pods: int):
    """bench/instructions.py's workload: a fresh mirror lists `pods` pods from a real
    kube-apiserver (started here, outside the count: valgrind does not follow its processes)
    and stores them in an empty read model: instructions per mirrored pod on this side."""
    from bench.instructions import Workload
    from bench.workloads import django_ready

    django_ready(database)
    from kubernetes import client, config

    from pools.controllers.pod_mirror import PodMirror
    from pools.models import Pod, WatchCursor
    from pools.providers.kubernetes_pods import ClusterPods
    from tests.k8s.control_plane import ControlPlane

    plane = ControlPlane().start(scheduler=False)
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        core.create_namespaced_service_account("bench", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
        for i in range(pods):
            core.create_namespaced_pod("bench", {**BENCH_POD, "metadata": {**BENCH_POD["metadata"], "name": f"pod-{i:06d}"}})
    except BaseException:
        plane.stop()
        raise

    def reset() -> None:
        WatchCursor.objects.all().delete()
        Pod.objects.filter(namespace="bench").delete()

    def run() -> None:
        PodMirror(ClusterPods(api)).relist()

    return Workload(f"relist of {pods} pods", "pod mirrored", run, lambda: Pod.objects.filter(namespace="bench").count(),
                    reset=reset, close=plane.stop)  # fmt: skip


def instruction_lines(*, pods: int = 200) -> list[str]:
    import tempfile

    from bench.instructions import unavailable
    from bench.workloads import counts, prepared

    if unavailable():
        return [f"instructions: {unavailable()}"]
    with tempfile.TemporaryDirectory(prefix="ebcloud-mirror-") as work:
        found = counts(prepared(Path(work), {"relist": ("bench.pod_mirror:relist", {"pods": pods, "database": None})}))["relist"]
    return [f"instructions (callgrind, this process only, SQLite; the API server's work is outside): "
            f"{found.per_unit / 1e6:.2f} M per pod in a {found.name} ({found.statements / found.units:.2f} statements per pod)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--database", default="")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="also count instructions per relisted pod with callgrind (bench/instructions.py)")
    args = parser.parse_args()
    database = args.database or f"sqlite:///{tempfile.mkdtemp(dir=ROOT / 'var', prefix='bench-mirror-')}/db.sqlite3"
    django_setup(database)

    from django.db import connection
    from kubernetes import client, config

    from pools.controllers.pod_mirror import PodMirror
    from pools.models import Pod, WatchCursor
    from pools.providers.kubernetes_pods import ClusterPods
    from tests.k8s.control_plane import ControlPlane

    probe = speed_probe()
    plane = ControlPlane().start(scheduler=False)
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        core.create_namespaced_service_account("bench", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
        mirror = PodMirror(ClusterPods(api))
        before = mirror.relist()
        statements, stop = Statements(), threading.Event()
        watcher = watching(mirror, statements, stop)
        body = BENCH_POD

        def create(i: int) -> None:
            client.CoreV1Api(api).create_namespaced_pod("bench", {**body, "metadata": {**body["metadata"], "name": f"pod-{i:06d}"}})

        started = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(create, range(args.pods)))
        created = time.perf_counter()
        while Pod.objects.filter(namespace="bench").count() < args.pods:
            time.sleep(0.05)
        stored = time.perf_counter()
        stop.set()
        watcher.join()

        # A backlog: the same events again, from the resourceVersion before the first create,
        # into an empty read model (a mirror that was down while they happened).
        Pod.objects.filter(namespace="bench").delete()
        WatchCursor.objects.update_or_create(resource="pods", defaults={"resource_version": before})
        replay_statements, stop = Statements(), threading.Event()
        replayer = PodMirror(ClusterPods(api))
        begin = time.perf_counter()
        watcher = watching(replayer, replay_statements, stop)
        while Pod.objects.filter(namespace="bench").count() < args.pods:
            time.sleep(0.02)
        replayed = time.perf_counter() - begin
        stop.set()
        watcher.join()

        WatchCursor.objects.all().delete()
        relist_statements = Statements()
        fresh = PodMirror(ClusterPods(api))
        Pod.objects.filter(namespace="bench").delete()
        begin = time.perf_counter()
        with connection.execute_wrapper(relist_statements):
            fresh.relist()
        listed = time.perf_counter() - begin
        assert Pod.objects.filter(namespace="bench").count() == args.pods
    finally:
        plane.stop()

    pods = args.pods
    print(f"speed probe: 5 M additions in {probe:.0f} ms; database {connection.vendor}; {pods} pods, {args.threads} creating threads\n")
    print("| step | pods | seconds | pods/s | lag after last create | statements/pod |")
    print("|---|---|---|---|---|---|")
    print(f"| create (API server) | {pods} | {created - started:.2f} | {pods / (created - started):.0f} | - | - |")
    print(f"| watch -> read model | {pods} | {stored - started:.2f} | {pods / (stored - started):.0f} | {stored - created:.2f} s | {statements.count / pods:.2f} |")
    how = "relisted: 410 Gone" if replayer.stats.relists else "watch replay"
    print(f"| backlog ({how}) -> read model | {pods} | {replayed:.2f} | {pods / replayed:.0f} | - | {replay_statements.count / pods:.2f} |")
    print(f"| relist -> read model | {pods} | {listed:.2f} | {pods / listed:.0f} | - | {relist_statements.count / pods:.2f} |")
    if args.instructions:
        print("\n" + "\n".join(instruction_lines()))


if __name__ == "__main__":
    main()
