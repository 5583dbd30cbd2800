"""Agent ingest benchmark (issue 6 §8; seed D1): N simulated node agents over HTTP on loopback
against the web server of docs/operator.md (granian) + PostgreSQL, each sending one report every
15 s.

1. Creates (or reuses) a PostgreSQL database, migrates it, and makes the nodes and their agent
   credentials directly in the database (the join handshake is not what is measured), then
   VACUUM ANALYZEs those tables as autovacuum would.
2. Starts the web server on 127.0.0.1 with that DATABASE_URL (granian's workers of blocking
   threads as docs/operator.md runs them, or `--server gunicorn` for gthread workers; persistent
   database connections) and waits until it answers.
3. Sends every node's first report, untimed (it records the node's driver, as each node does
   once in its life). Then for each node count runs for `--duration` seconds: every node sends
   one report (8 GPUs, DCGM fields, the agent's real body shape) every `--interval` seconds,
   the nodes' phases spread evenly over the interval. A small asyncio HTTP/1.1 client with
   keep-alive connections keeps the load generator cheap, so the machine's CPUs go to the server.
4. Prints a table: offered and sustained reports/s, p50/p99/max latency, errors, CPU ms per
   report of the server, the database and the load generator, and the share of the machine
   that other work used meanwhile (on a shared machine that decides the p99). Latency is
   measured from the moment a report was *due*, not from when it was sent, so a server that
   falls behind shows up in the numbers instead of silently slowing the load (no coordinated
   omission).

Usage: .venv/bin/python bench/agent_ingest.py --workers 2 --threads 2 (the defaults, docs/operator.md's
command; the docs/benchmarks.md table), [--server gunicorn] [--nodes 500,2000,10000] [--duration 60]
       [--database-url postgres://...] [--no-instructions] (skip the callgrind count of instructions per report)
On a slow VM emulated: bench/slow_machine.py --probe-ms 200 -- .venv/bin/python bench/agent_ingest.py ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/ebcloud_bench"
POOL = "bench-ingest"
WARM_UP_RATE = 600  # reports/s of the untimed first round


def database_prepare(url: str, nodes: int) -> list[str]:
    """Create the database if needed, migrate, and return `nodes` agent credentials."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from monitoring import tokens
    from monitoring.models import AgentCredential, NodeAgentState, NodeReport
    from pools.demo.seed import load_catalog
    from pools.models import GpuNodePool, Membership, Node, Team
    from pools.services import pools as services
    from tests.conftest import make_document

    call_command("migrate", verbosity=0)
    load_catalog()
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    user, _ = get_user_model().objects.get_or_create(username="bench-lead")
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": "lead"})
    old = GpuNodePool.objects.filter(name=POOL).first()
    if old is not None:  # start clean: nodes, reports and credentials go with the pool
        old.delete()
    pool = services.pool_create(user=user, document=make_document(POOL, nodeCount={"min": 0, "max": 4}))
    created = Node.objects.bulk_create(
        [Node(pool=pool, name=f"{POOL}-{i:05d}", zone=pool.zone, gpu_count=8, phase="Ready", billing="monthly") for i in range(nodes)],
        batch_size=2000,
    )
    secrets = [tokens.credential_new() for _ in created]
    AgentCredential.objects.bulk_create(
        [AgentCredential(node=n, key_prefix=s[:12], key_hash=tokens.digest(s)) for n, s in zip(created, secrets, strict=True)],
        batch_size=2000,
    )
    NodeAgentState.objects.bulk_create([NodeAgentState(node=n) for n in created], batch_size=2000)  # as a join does
    # Planner statistics and a clean heap for the tables just filled and emptied, as autovacuum
    # would leave them in production (this machine's PostgreSQL runs with autovacuum off).
    with psycopg.connect(url, autocommit=True) as conn:
        for model in (Node, AgentCredential, NodeAgentState, NodeReport):
            conn.execute(f"VACUUM (ANALYZE) {model._meta.db_table}")
    return secrets


def server_start(url: str, port: int, workers: int, threads: int, server: str = "granian") -> subprocess.Popen:
    """The WSGI server on 127.0.0.1:`port`, `workers` processes of `threads` request threads each:
    granian with docs/operator.md's flags, or gunicorn's gthread workers (the server before)."""
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "false", "SECRET_KEY": "bench-only-secret-key-not-for-production",
           "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false", "DATABASE_CONN_MAX_AGE": "600", "LOG_LEVEL": "ERROR"}
    if server == "granian":
        command = [sys.executable, "-m", "granian", "--interface", "wsgi", "config.wsgi:application", "--host", "127.0.0.1",
                   "--port", str(port), "--workers", str(workers), "--blocking-threads", str(threads), "--backlog", "2048",
                   "--log-level", "warning"]
    else:
        command = [sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(workers), "-k", "gthread",
                   "--threads", str(threads), "--keep-alive", "75", "--backlog", "2048", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            import urllib.request

            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/agent/v1/reports/", data=b"{}", timeout=1)
        except Exception as exc:  # noqa: BLE001 - 401 means it is up
            if getattr(exc, "code", None) == 401:
                return process
        time.sleep(0.3)
    process.kill()
    raise SystemExit(f"{server} did not start")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pids(server_pid: int, url: str) -> tuple[list[int], list[int]]:
    """(the web server's main process and its workers, the PostgreSQL backends serving the bench
    database)."""
    import psycopg

    pids = [server_pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == server_pid:
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    with psycopg.connect(url, autocommit=True) as conn:
        backends = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    return pids, backends


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores; /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(groups: tuple[list[int], ...]) -> list[dict[int, float]]:
    return [{pid: _cpu_seconds(pid) for pid in pids} for pids in groups]


def report_body(seq: int, rng: random.Random) -> bytes:
    gpus = []
    for i in range(8):
        util = rng.randint(20, 100)
        used = rng.randint(16000, 78000)
        gpus.append({"index": i, "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": 81920 - used, "DCGM_FI_DEV_FB_TOTAL": 81920,
                     "DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_GPU_TEMP": 40 + util // 3, "DCGM_FI_DEV_POWER_USAGE": 80 + util * 3,
                     "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0})
    report = {"seq": seq, "at": datetime.now(UTC).isoformat(), "driverVersion": "535.104.05", "cudaVersion": "12.2", "gpus": gpus, "xids": []}
    return json.dumps({"reports": [report], "oldestSeq": seq}, separators=(",", ":")).encode()


def body_maker(rng: random.Random, variants: int = 256):
    """report_body's bodies at a tenth of its cost, for the load loop: the GPUs of `variants`
    reports are made and encoded once, and each body splices one of them between its own
    sequence number and time. The bytes have report_body's shape exactly (the same keys, order
    and separators); the load generator runs on the same two cores as the server, so what it
    spends per report is taken from the server."""
    fragments = []
    for _ in range(variants):
        report = json.loads(report_body(0, rng))["reports"][0]
        fragments.append(json.dumps(report["gpus"], separators=(",", ":")))

    def make(seq: int) -> bytes:
        at = datetime.now(UTC).isoformat()
        return (f'{{"reports":[{{"seq":{seq},"at":"{at}","driverVersion":"535.104.05","cudaVersion":"12.2",'
                f'"gpus":{fragments[seq % variants]},"xids":[]}}],"oldestSeq":{seq}}}').encode()

    return make


class Connection:
    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, credential: str, body: bytes) -> int:
        for attempt in (1, 2):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
                head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {credential}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                self.writer.write(head + body)
                status_line, *lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower().split("\r\n")
                length, closing = 0, False
                for line in lines:  # one read for the whole head: the generator shares the CPUs with the server
                    name, _, value = line.partition(":")
                    if name == "content-length":
                        length = int(value)
                    elif name == "connection" and value.strip() == "close":
                        closing = True
                await self.reader.readexactly(length)
                if closing:
                    self.close()
                return int(status_line.split()[1])
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run_load(*, port: int, credentials: list[str], seqs: list[int], duration: float, interval: float, connections: int) -> dict:
    body = body_maker(random.Random(len(credentials)))
    n = len(credentials)
    offsets = [interval * i / n for i in range(n)]
    queue: asyncio.Queue = asyncio.Queue()
    latencies: list[float] = []
    errors = 0
    start = time.monotonic() + 0.5

    async def dispatcher():
        # Due times in order: node i at start + offsets[i] + k * interval.
        k = 0
        while True:
            base = start + k * interval
            if base >= start + duration:
                break
            for i in range(n):
                due = base + offsets[i]
                if due >= start + duration:
                    break
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                queue.put_nowait((due, i))
            k += 1
        for _ in range(connections):
            queue.put_nowait(None)

    async def worker():
        nonlocal errors
        conn = Connection(port)
        while (job := await queue.get()) is not None:
            due, i = job
            seqs[i] += 1
            try:
                status = await conn.post("/api/agent/v1/reports/", credentials[i], body(seqs[i]))
            except OSError:
                status = 0
            if status != 200:
                errors += 1
            latencies.append(time.monotonic() - due)
        conn.close()

    await asyncio.gather(dispatcher(), *(worker() for _ in range(connections)))
    elapsed = time.monotonic() - start
    latencies.sort()
    return {
        "nodes": n,
        "offered": n / interval,
        "sent": len(latencies),
        "rate": (len(latencies) - errors) / elapsed,
        "p50": statistics.median(latencies) * 1000 if latencies else 0,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else 0,
        "max": latencies[-1] * 1000 if latencies else 0,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--nodes", default="500,2000,10000", help="comma-separated node counts")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per node count")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between one node's reports")
    parser.add_argument("--workers", type=int, default=2, help="web server worker processes")
    parser.add_argument("--threads", type=int, default=2, help="request threads per worker (granian's blocking threads)")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections of the load generator")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--server", choices=("granian", "gunicorn"), default="granian",
                        help="the WSGI server: granian (docs/operator.md) or gunicorn's gthread workers (before)")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="Also count instructions per unit of work with callgrind (bench/instructions.py; about 2 minutes)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.nodes.split(",")]
    if not args.database_url.startswith("postgres"):
        raise SystemExit("the benchmark runs against PostgreSQL: --database-url postgres://...")

    print(f"preparing {max(counts)} nodes in {args.database_url} ...", flush=True)
    credentials = database_prepare(args.database_url, max(counts))
    server = server_start(args.database_url, args.port, args.workers, args.threads, args.server)
    seqs = [0] * len(credentials)
    rows = []
    try:
        # Each node's first report, untimed: it records the node's driver and CUDA versions (a
        # condition and an event), which a fleet that has been running does not do again.
        warm_up = len(credentials) / WARM_UP_RATE
        print(f"warming up: one report from each of {len(credentials)} nodes in {warm_up:.0f} s (not timed) ...", flush=True)
        asyncio.run(run_load(port=args.port, credentials=credentials, seqs=seqs, duration=warm_up, interval=warm_up,
                             connections=args.connections))
        for count in counts:
            print(f"running {count} nodes for {args.duration:.0f} s ...", flush=True)
            before = cpu_snapshot(server_pids(server.pid, args.database_url))
            load_before, client_before = os.getloadavg()[0], time.process_time()
            busy_before, wall_before = machine_busy_seconds(), time.monotonic()
            row = asyncio.run(run_load(port=args.port, credentials=credentials[:count], seqs=seqs, duration=args.duration,
                                       interval=args.interval, connections=args.connections))
            busy, wall = machine_busy_seconds() - busy_before, time.monotonic() - wall_before
            after = cpu_snapshot(server_pids(server.pid, args.database_url))
            app_cpu, db_cpu = (sum(v - b.get(pid, 0.0) for pid, v in a.items()) for a, b in zip(after, before, strict=True))
            client_cpu = time.process_time() - client_before
            served = max(1, row["sent"] - row["errors"])
            row.update(app_ms=1000 * app_cpu / served, db_ms=1000 * db_cpu / served, client_ms=1000 * client_cpu / served,
                       load=max(load_before, os.getloadavg()[0]),
                       other=max(0.0, busy - app_cpu - db_cpu - client_cpu) / (wall * (os.cpu_count() or 1)) * 100)
            rows.append(row)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print()
    print(f"agent ingest: {args.server} {args.workers}x{args.threads} + PostgreSQL on loopback, {os.cpu_count()} CPUs, "
          f"one report (8 GPUs) per node every {args.interval:.0f} s, {args.duration:.0f} s per row")
    print("CPU ms per report: app = the web server's processes, db = PostgreSQL backends of the bench database, client = this"
          " load generator (2 idle cores serve about 2000 / (app + db + client) reports/s); other = CPU the rest of the"
          " machine used meanwhile, % of all cores (other work shares them); load = the 1-minute load average")
    print(f"{'nodes':>7} {'offered/s':>10} {'reports/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7}"
          f" {'app ms':>7} {'db ms':>7} {'client ms':>9} {'other %':>8} {'load':>5}")
    for r in rows:
        print(f"{r['nodes']:>7} {r['offered']:>10.1f} {r['rate']:>10.1f} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['max']:>8.1f} {r['errors']:>7}"
              f" {r['app_ms']:>7.2f} {r['db_ms']:>7.2f} {r['client_ms']:>9.2f} {r['other']:>8.0f} {r['load']:>5.1f}")
    # Django and bench/ on the path are set up by database_prepare
    from bench.control_plane import machine_speed
    from bench.workloads import report_lines

    print(machine_speed())
    if args.instructions:  # beside the seconds, what does not move with the machine (issue 23)
        print("\n".join(report_lines(units=("report",))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
