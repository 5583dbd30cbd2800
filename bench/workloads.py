"""The units of work whose instructions bench/instructions.py counts (issue 23 items 1 and 4):
one agent report through Django's WSGI handler, one pool in a reconcile + autoscale pass, one
metered node-hour. Each runs in process on SQLite (so the database's work is in the count too),
on a small fleet of the control-plane benchmark's shape (bench/control_plane_fleet.py), because
callgrind runs ~50x slower than the machine: the benchmarks time the big fleets, these count
instructions on small ones, and the per-pool and per-node-hour counts are the difference
between two fleet sizes, so that a pass's fixed cost (its few statements) is not spread over
the pools.

Each factory gets a copy of a migrated SQLite file (`sqlite_migrated`, made natively: migrating
under valgrind would take minutes) and returns a `Workload` for bench/instructions.py's child.
"""

from __future__ import annotations

import io
import itertools
import os
import random
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from bench.instructions import Count, Workload, count, marginal, prepare_natively

ROOT = Path(__file__).resolve().parents[1]
AGENT_POOL = "bench-ingest"
REPORTS_PATH = "/api/agent/v1/reports/"


def child_environment(database: Path) -> dict[str, str]:
    """Production-like settings for a counted run: DEBUG off (no query log), SQLite `database`,
    the simulated cluster whatever the calling bench exported (a workload that drives a real API
    server sets its own kubeconfig once it has started one)."""
    return {
        "DATABASE_URL": f"sqlite:///{database}", "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "false",
        "SECRET_KEY": "bench-only", "SECURE_SSL_REDIRECT": "false", "ALLOWED_HOSTS": "127.0.0.1",
        "EBCLOUD_CLUSTER": "simulated", "EBCLOUD_KUBECONFIG": "",
    }  # fmt: skip


def sqlite_migrated(path: Path) -> Path:
    """A migrated SQLite file at `path`, made by `manage.py migrate` in a native subprocess."""
    path.unlink(missing_ok=True)
    env = {**os.environ, **child_environment(path)}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=600)
    return path


def django_ready(database: str) -> None:
    """Set Django up on the first call; point the default connection at `database` (a copy of
    the migrated file) on every call, so each workload of one child starts from a clean fleet."""
    import django
    from django.apps import apps

    if not apps.ready:
        for key, value in child_environment(Path(database)).items():
            os.environ[key] = value
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        django.setup()
    from django.db import connections

    connection = connections["default"]
    connection.close()
    connection.settings_dict["NAME"] = database


# ---------------------------------------------------------------------------------------------
# One agent report


def agents_make(nodes: int) -> list[str]:
    """`nodes` Ready nodes in one pool with agent credentials (made directly: the join is not
    what is counted); their credentials."""
    from django.contrib.auth import get_user_model

    from monitoring import tokens
    from monitoring.models import AgentCredential, NodeAgentState
    from pools.demo.seed import load_catalog
    from pools.models import Membership, Node, Team
    from pools.services import pools as pool_services
    from tests.conftest import make_document

    load_catalog()
    team = Team.objects.create(slug="bench", name="Bench")
    user = get_user_model().objects.create(username="bench-lead")
    Membership.objects.create(user=user, team=team, role="lead")
    pool = pool_services.pool_create(user=user, document=make_document(AGENT_POOL, nodeCount={"min": 0, "max": 4}))
    created = Node.objects.bulk_create(
        [Node(pool=pool, name=f"{AGENT_POOL}-{i:05d}", zone=pool.zone, gpu_count=8, phase="Ready", billing="monthly") for i in range(nodes)]
    )
    secrets = [tokens.credential_new() for _ in created]
    AgentCredential.objects.bulk_create(
        [AgentCredential(node=n, key_prefix=s[:12], key_hash=tokens.digest(s)) for n, s in zip(created, secrets, strict=True)]
    )
    NodeAgentState.objects.bulk_create([NodeAgentState(node=n) for n in created])
    return secrets


def report_post(application, credential: str, body: bytes) -> str:
    """One POST through the WSGI application, as gunicorn hands it a request."""
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": REPORTS_PATH, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr, "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)), "HTTP_AUTHORIZATION": f"Bearer {credential}", "REMOTE_ADDR": "127.0.0.1",
    }  # fmt: skip
    status = []
    response = application(environ, lambda s, headers, exc_info=None: status.append(s))
    try:
        b"".join(response)
    finally:
        getattr(response, "close", lambda: None)()
    return status[0]


def prepare_ingest(*, database: str, reports: int) -> None:
    """The pool, nodes and credentials (kept beside the database for the counted child)."""
    django_ready(database)
    Path(f"{database}.credentials").write_text("\n".join(agents_make(reports)))


def ingest(*, database: str, reports: int) -> Workload:
    """`reports` steady-state reports (8 GPUs, the agent's body shape from bench/agent_ingest.py),
    one from each of `reports` nodes, each node's next sequence number."""
    django_ready(database)
    from bench.agent_ingest import report_body
    from config.wsgi import application

    credentials = Path(f"{database}.credentials").read_text().split()
    rng = random.Random(0)
    # The bodies are made before: encoding them is the agent's work, not the server's.
    batches = iter([[report_body(seq, rng) for _ in credentials] for seq in (1, 2)])

    def run() -> None:
        for credential, body in zip(credentials, next(batches), strict=True):
            status = report_post(application, credential, body)
            if not status.startswith("200"):
                raise RuntimeError(f"a report was answered {status}")

    return Workload(f"agent ingest, {reports} reports", "report", run, lambda: len(credentials))


# ---------------------------------------------------------------------------------------------
# One pool in the per-minute pass; one metered node-hour


def fleet_shape(pools: int, shape: str):
    """`bench`: bench/control_plane.py's pool (20 nodes, 200 pods running, 10 pending), without
    its draining pools, so that a pool's count is comparable with that bench's 1,000 pools;
    `small`: the same shape scaled down (5 nodes, 16 pods; tests/bench/test_control_plane.py's),
    for the suite's guards, where every second of callgrind counts."""
    from bench.control_plane_fleet import Shape

    if shape == "bench":
        return Shape(pools=pools, teams=2, draining=0)
    return Shape(pools=pools, teams=2, monthly_ready=3, provisioning=1, burst_ready=1, pods_per_node=4,
                 pending_per_pool=2, draining=0, events_per_pool=2, sample_minutes=3)  # fmt: skip


def _fleet(*, database: str, pools: int, shape: str = "bench") -> None:
    """Build the fleet (natively, before the counted child starts)."""
    django_ready(database)
    from django.db import transaction

    from bench.control_plane_fleet import build

    with transaction.atomic():
        build(fleet_shape(pools, shape))


prepare_tick = prepare_meter = _fleet


def tick(*, database: str, pools: int, shape: str = "bench") -> Workload:
    """Reconcile + autoscale every pool of a steady fleet: the first pass (warm-up) at the fleet's
    `NOW`, the counted one 30 s later, as a worker that keeps running sees it (the fleet's
    provisioning nodes have nothing due then: bench/control_plane.py's "again 30 s later")."""
    django_ready(database)
    from bench.control_plane_fleet import NOW
    from pools.controllers import autoscaler, lifecycle

    passes = itertools.count()

    def run() -> None:
        now = NOW + timedelta(seconds=30 * next(passes))
        lifecycle.reconcile_all(now=now)
        autoscaler.autoscale_all(now=now)

    return Workload(f"reconcile + autoscale, {pools} pools", "pool", run, lambda: pools)


def meter(*, database: str, pools: int, shape: str = "bench") -> Workload:
    """Meter one hour of the fleet (the warm-up meters the hour before)."""
    django_ready(database)
    from bench.control_plane_fleet import NOW
    from billing import services
    from billing.hours import last_complete_hour
    from billing.models import UsageRecord

    last = last_complete_hour(NOW)
    hours = iter([last - timedelta(hours=1), last])

    def run() -> None:
        if not services.meter_hour(hour=next(hours)).metered:
            raise RuntimeError("the hour was already metered")

    def node_hours() -> int:
        records = UsageRecord.objects.filter(hour=last, kind=UsageRecord.Kind.NODE).only("node_name", "node_names")
        return sum(len(r.nodes_billed) for r in records)

    return Workload(f"metering one hour, {pools} pools", "node-hour", run, node_hours)


# ---------------------------------------------------------------------------------------------
# One first start of the demo's data (bench/make_run_*.sh)


def demo_start(*, database: str) -> Workload:
    """What `manage.py demo` does before it serves on a fresh database, in one process: the
    system checks, the migrations and the demo's data. Counted cold (`warm=False`): it is a new
    process's first work, and a warm-up would find the database made."""
    django_ready(database)
    from django.core.management import call_command

    def run() -> None:
        with open(os.devnull, "w") as quiet:
            call_command("check", stdout=quiet)
            call_command("migrate", interactive=False, verbosity=0)
            call_command("seed_demo", stdout=quiet)

    return Workload("the demo's checks, migrations and data on a fresh SQLite file", "start", run, lambda: 1, warm=False)


def password_hashes(*, database: str) -> Workload:
    """The demo's passwords hashed as `seed_demo` hashes them (Django's PBKDF2), one after the
    other: `seed_demo` hashes them side by side in threads, which a count of the calling thread
    leaves out."""
    django_ready(database)
    from django.contrib.auth.hashers import make_password

    from pools.demo.seed import USERS

    def run() -> None:
        for name in USERS:
            make_password(f"bench-{name}")

    return Workload("the demo's passwords hashed", "hash", run, lambda: len(USERS))


def demo_lines() -> list[str]:
    """The line the `make run` scripts (bench/make_run_*.sh) print under their times."""
    import tempfile

    from bench.instructions import unavailable

    reason = unavailable()
    if reason:
        return [f"instructions: {reason}"]
    with tempfile.TemporaryDirectory(prefix="ebcloud-demo-") as work:
        database = str(Path(work) / "demo.sqlite3")
        start, hashed = count([(f"bench.workloads:{unit}", {"database": database}) for unit in ("demo_start", "password_hashes")],
                              env=child_environment(Path(database)))  # fmt: skip
    return [f"instructions (callgrind, the same on any machine): {(start.instructions + hashed.instructions) / 1e9:.1f} G per first "
            f"start of the demo's data: checks, migrations and data {start.instructions / 1e9:.1f} G ({start.statements:,} SQL "
            f"statements), and {hashed.units} passwords hashed in threads, {hashed.per_unit / 1e9:.2f} G each (counted one after the other)"]


# ---------------------------------------------------------------------------------------------
# The counts the benchmarks print and the suite guards


def prepared(work: Path, plan: dict[str, tuple[str, dict]], *, template: Path | None = None) -> dict[str, tuple[str, dict]]:
    """The workloads of `plan`, each that names a `database` (None) given its own copy of a
    migrated SQLite file (`template`, made in `work` when not given) and all prepared natively
    (fleets built, agents made); the others (the probe's loop) as they are."""
    template = template or sqlite_migrated(work / "migrated.sqlite3")
    specs = {}
    for i, (name, (target, kwargs)) in enumerate(plan.items()):
        if "database" not in kwargs:
            specs[name] = (target, kwargs)
            continue
        copy = work / f"workload-{i}.sqlite3"
        shutil.copyfile(template, copy)
        specs[name] = (target, {**kwargs, "database": str(copy)})
    prepare_natively(list(specs.values()), env=child_environment(template))
    return specs


def counts(specs: dict[str, tuple[str, dict]]) -> dict[str, Count]:
    """Count prepared workloads (`prepared`) in one child."""
    databases = [Path(kwargs["database"]) for _, kwargs in specs.values() if "database" in kwargs]
    env = child_environment(databases[0]) if databases else None
    return dict(zip(specs, count(list(specs.values()), env=env, prepared=True), strict=True))


UNITS = ("report", "pool", "node-hour")
PROBE_ADDS = 5_000_000  # the speed probe's loop in bench/control_plane.py (machine_speed)
SLOW_PROBE_S = 0.2  # the slow VMs: the probe's loop takes >= 200 ms there


def plan_of(*, units=UNITS, small: int, large: int, reports: int) -> dict[str, tuple[str, dict]]:
    """The benchmarks' units: ingest, the tick and metering at two fleet sizes, and the speed
    probe's loop (to turn instructions into seconds on a VM of known probe speed)."""
    plan = {"probe": ("bench.instructions:additions", {"n": 200_000})}
    if "report" in units:
        plan["ingest"] = ("bench.workloads:ingest", {"reports": reports, "database": None})
    for unit, function in (("pool", "tick"), ("node-hour", "meter")):
        if unit in units:
            plan[f"{function} small"] = (f"bench.workloads:{function}", {"pools": small, "database": None})
            plan[f"{function} large"] = (f"bench.workloads:{function}", {"pools": large, "database": None})
    return plan


def seconds_at_slow_probe(instructions: float, probe: Count) -> float:
    """Seconds `instructions` take on a VM whose speed probe (5 M additions) takes 200 ms."""
    return instructions / (probe.per_unit * PROBE_ADDS / SLOW_PROBE_S)


def report_lines(*, units=UNITS, small: int = 2, large: int = 4, reports: int = 20) -> list[str]:
    """The lines the benchmarks print under their tables: instructions per unit of work, and
    what they would take in seconds on a slow VM (probe loop 200 ms), CPU in this process only."""
    import tempfile

    from bench.instructions import unavailable

    reason = unavailable()
    if reason:
        return [f"instructions: {reason}"]
    with tempfile.TemporaryDirectory(prefix="ebcloud-workloads-") as work:
        found = counts(prepared(Path(work), plan_of(units=units, small=small, large=large, reports=reports)))
    probe = found["probe"]
    lines = [
        "instructions per unit of work (callgrind, in process on SQLite: the same on any machine); "
        f"the speed probe's loop is {probe.per_unit:.0f} per addition, {probe.per_unit * PROBE_ADDS / 1e6:,.0f} M for its 5 M, "
        f"so a VM whose probe takes {SLOW_PROBE_S * 1000:.0f} ms runs {probe.per_unit * PROBE_ADDS / SLOW_PROBE_S / 1e9:.2f} G a second of this work:",
    ]
    if "ingest" in found:
        ingest = found["ingest"]
        lines.append(
            f"  per agent report: {ingest.per_unit / 1e6:.2f} M ({seconds_at_slow_probe(ingest.per_unit, probe) * 1000:.1f} ms "
            f"at the slow probe speed; {ingest.statements / ingest.units:g} statements per report)"
        )
    if "tick small" in found:
        tick_s, tick_l = found["tick small"], found["tick large"]
        per_pool = marginal(tick_s, tick_l)
        lines.append(
            f"  per pool (20 nodes, 210 pods) per reconcile + autoscale pass: {per_pool / 1e6:.2f} M ({seconds_at_slow_probe(per_pool, probe) * 1000:.1f} ms "
            f"at the slow probe speed; {small} → {large} pools: {tick_s.instructions / 1e6:.1f} → {tick_l.instructions / 1e6:.1f} M, "
            f"{tick_s.statements} → {tick_l.statements} statements)"
        )
    if "meter small" in found:
        meter_s, meter_l = found["meter small"], found["meter large"]
        per_hour = marginal(meter_s, meter_l)
        lines.append(
            f"  per metered node-hour: {per_hour / 1e6:.3f} M ({seconds_at_slow_probe(per_hour, probe) * 1000:.2f} ms at the slow "
            f"probe speed; {meter_s.units} → {meter_l.units} node-hours: {meter_s.instructions / 1e6:.1f} → "
            f"{meter_l.instructions / 1e6:.1f} M, {meter_s.statements} → {meter_l.statements} statements)"
        )
    return lines
