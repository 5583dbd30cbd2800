"""Chargeback benchmark (issue 7 §9): a month of hourly cost records, one per pod-hour of
10,000 pods, in PostgreSQL (10,000 × 720 h = 7.2 M rows, plus idle rows per pool-hour; metering
writes far fewer, as it sums an hour's rows per pool, team, namespace and label set: this is a
worst case for the queries), then time

1. the grouped chargeback query (`billing.chargeback.chargeback`, by team,project,gpu-class and
   namespace over the month: what the /costs/ page, the CSV button and the API run);
2. the grouped CSV export (the same rows through `billing.focus.iter_csv_lines`);
3. the detailed CSV export of every cost record (`selectors.cost_detail_rows`: a server-side
   cursor, one reused line buffer), written to /dev/null, sampling the process's RSS as it goes
   to show that memory stays flat however many rows stream through;
4. the FOCUS 1.2 export of the month (`focus_selectors.focus_csv_for_user`, daily rows summed in the
   database from the cost records: what `?format=focus` streams), written to a temporary file
   while sampling RSS, then read back to check that its usage rows' EffectiveCost adds up to
   the cost records' total (the check is not timed).

Rows are generated inside PostgreSQL with `INSERT ... SELECT FROM generate_series` (no Python
loop), into their own database, which is reused when it already holds the requested rows.

With `--meter` it instead times `billing.services.meter_hour` on a live fleet (--pods pods, one
GPU each, on eight-GPU nodes) in its own database: the hourly metering cost itself.

Either way it then prints the speed probe and the instructions per unit of work (issue 23): per
metered node-hour, or per rollup row and per cost record of each report over a small month made
by `rows_made` on SQLite (`--no-instructions` skips them).

Usage: python bench/chargeback.py [--pods 10000] [--hours 720] [--pools 50] [--repeat 3]
                                  [--database postgres://postgres@127.0.0.1:5432/ebcloud_bench_chargeback]
                                  [--skip-detail] [--focus-granularity daily|hourly]
                                  [--meter [--meter-database URL]] [--no-instructions]
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/ebcloud_bench_chargeback"
START = datetime(2026, 11, 1, tzinfo=UTC)
TEAMS = 10


def rss_mib() -> float:
    """Current resident set size (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def setup_django(url: str) -> None:
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
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def owners(pools: int) -> tuple[list[int], list[int]]:
    """The finance user, the teams and the pools the cost rows name: (pool ids, team ids)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from pools import roles
    from pools.demo.seed import load_catalog
    from pools.models import GpuModel, GpuNodePool, NodeType, Team, Zone

    load_catalog()
    user = get_user_model().objects.get_or_create(username="bench-finance")[0]
    user.groups.add(Group.objects.get_or_create(name=roles.FINANCE)[0])
    teams = [
        Team.objects.get_or_create(slug=f"team-{i}", defaults={"name": f"Team {i}"})[0]
        for i in range(TEAMS)
    ]
    model, node_type, zone = (
        GpuModel.objects.get(name="A100_80G"),
        NodeType.objects.get(name="GPU_8_CARD"),
        Zone.objects.first(),
    )
    pool_ids = []
    for i in range(pools):
        pool, _ = GpuNodePool.objects.get_or_create(
            name=f"bench-pool-{i}",
            defaults=dict(team=teams[i % TEAMS], document={"metadata": {"labels": {"team": f"team-{i % TEAMS}"}}},
                          gpu_model=model, node_type=node_type, zone=zone, min_nodes=0, max_nodes=100,
                          lease_type="monthly", preemptible=i % 10 == 9),
        )  # fmt: skip
        pool_ids.append(pool.pk)
    return pool_ids, [t.pk for t in teams]


def generate(*, pods: int, hours: int, pools: int) -> tuple[int, float]:
    """Teams, pools and the cost rows; returns (rows, seconds). Reuses a database that has them."""
    from django.db import connection

    from billing.models import CostRecord

    expected = pods * hours + pools * hours
    existing = CostRecord.objects.count()
    if existing == expected:
        return existing, 0.0
    pool_ids, team_ids = owners(pools)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE billing_costrecord")
        cursor.execute(
            "DROP INDEX IF EXISTS billing_cos_hour_bc3e4c_idx, billing_cos_team_id_86904a_idx, billing_cos_pool_id_0d591a_idx"
        )
        # Usage rows, one per pod p: it runs all month in pool p % pools, team p % 10; one pod
        # in 20 has no project label (-> kind unallocated); gpu-class from the pool.
        cursor.execute(
            """
            INSERT INTO billing_costrecord (hour, pool_id, team_id, namespace, labels, gpu_class,
                billing_kind, cost_kind, component, gpu_hours, amount, currency)
            SELECT %(start)s::timestamptz + h * interval '1 hour',
                   (%(pools)s::bigint[])[1 + p %% %(npools)s],
                   (%(teams)s::bigint[])[1 + p %% %(nteams)s],
                   'ns-' || (p %% 40),
                   CASE WHEN p %% 20 = 0
                        THEN jsonb_build_object('team', 'team-' || (p %% %(nteams)s), 'gpu-class', 'a100')
                        ELSE jsonb_build_object('team', 'team-' || (p %% %(nteams)s), 'project', 'project-' || (p %% 37),
                                                'gpu-class', (ARRAY['a100','h100','l40s'])[1 + p %% 3]) END,
                   'A100_80G',
                   CASE WHEN (p %% %(npools)s) %% 10 = 9 THEN 'preemptible' ELSE 'monthly' END,
                   'usage', 'gpu', 1 + p %% 4, (3.36 * (1 + p %% 4))::numeric(14,2), 'CNY'
            FROM generate_series(0, %(hours)s - 1) AS h, generate_series(0, %(npods)s - 1) AS p
            """,
            {
                "start": START,
                "pools": pool_ids,
                "teams": team_ids,
                "npools": pools,
                "nteams": TEAMS,
                "hours": hours,
                "npods": pods,
            },
        )
        # Idle rows: each pool's unused GPUs, charged to its owner.
        cursor.execute(
            """
            INSERT INTO billing_costrecord (hour, pool_id, team_id, namespace, labels, gpu_class,
                billing_kind, cost_kind, component, gpu_hours, amount, currency)
            SELECT %(start)s::timestamptz + h * interval '1 hour', (%(pools)s::bigint[])[1 + k],
                   (%(teams)s::bigint[])[1 + k %% %(nteams)s], '',
                   jsonb_build_object('team', 'team-' || (k %% %(nteams)s), 'gpu-class', 'a100'), 'A100_80G',
                   CASE WHEN k %% 10 = 9 THEN 'preemptible' ELSE 'monthly' END, 'idle', 'gpu', 4, 13.44, 'CNY'
            FROM generate_series(0, %(hours)s - 1) AS h, generate_series(0, %(npools)s - 1) AS k
            """,
            {
                "start": START,
                "pools": pool_ids,
                "teams": team_ids,
                "npools": pools,
                "nteams": TEAMS,
                "hours": hours,
            },
        )
        cursor.execute('CREATE INDEX billing_cos_hour_bc3e4c_idx ON billing_costrecord ("hour")')
        cursor.execute(
            'CREATE INDEX billing_cos_team_id_86904a_idx ON billing_costrecord ("team_id", "hour")'
        )
        cursor.execute(
            'CREATE INDEX billing_cos_pool_id_0d591a_idx ON billing_costrecord ("pool_id", "hour")'
        )
        cursor.execute("ANALYZE billing_costrecord")
    return CostRecord.objects.count(), time.perf_counter() - started


def rollup(*, hours: int) -> tuple[int, float]:
    """Build the daily rollup the way metering does (`cost_day_rebuild` per day), timed."""
    from billing import services
    from billing.models import CostDay

    days = [START.date() + timedelta(days=d) for d in range(-(-hours // 24))]
    if CostDay.objects.filter(day=days[-1]).exists():
        return CostDay.objects.count(), 0.0
    started = time.perf_counter()
    for day in days:
        services.cost_day_rebuild(day=day)
    return CostDay.objects.count(), time.perf_counter() - started


def month_query(hours: int):
    """The reports' query: the month by team, project and GPU class (namespace included)."""
    from billing import selectors

    first = START.date()
    return selectors.CostQuery(by=("team", "project", "gpu-class"), start=first, end=first + timedelta(days=hours // 24 - 1))


# ---------------------------------------------------------------------------------------------
# Instructions per unit of work (issue 23 item 1): the same reports over a small month, in
# process on SQLite (the database's work in the count), counted by bench/instructions.py.

COUNTED_UNITS = {"grouped": "rollup row", "detail": "cost record", "focus": "cost record"}


def rows_made(*, pods: int, hours: int, pools: int) -> None:
    """`generate`'s rows made in Python, for any database (its SQL is PostgreSQL's)."""
    from billing.models import CostRecord

    pool_ids, team_ids = owners(pools)
    classes = ("a100", "h100", "l40s")
    rows = []
    for h in range(hours):
        hour = START + timedelta(hours=h)
        for p in range(pods):
            team = f"team-{p % TEAMS}"
            labels = {"team": team, "gpu-class": "a100"} if p % 20 == 0 else {"team": team, "project": f"project-{p % 37}", "gpu-class": classes[p % 3]}
            rows.append(CostRecord(hour=hour, pool_id=pool_ids[p % pools], team_id=team_ids[p % TEAMS], namespace=f"ns-{p % 40}", labels=labels,
                                   gpu_class="A100_80G", billing_kind="preemptible" if p % pools % 10 == 9 else "monthly", cost_kind="usage",
                                   component="gpu", gpu_hours=1 + p % 4, amount=Decimal("3.36") * (1 + p % 4), currency="CNY"))  # fmt: skip
        for k in range(pools):
            rows.append(CostRecord(hour=hour, pool_id=pool_ids[k], team_id=team_ids[k % TEAMS], namespace="", labels={"team": f"team-{k % TEAMS}", "gpu-class": "a100"},
                                   gpu_class="A100_80G", billing_kind="preemptible" if k % 10 == 9 else "monthly", cost_kind="idle", component="gpu",
                                   gpu_hours=4, amount=Decimal("13.44"), currency="CNY"))  # fmt: skip
    CostRecord.objects.bulk_create(rows, batch_size=5000)


def prepare_reports(*, database: str, pods: int, hours: int, pools: int, export: str) -> None:
    """The month's cost records and daily rollup in `database` (natively, before the count)."""
    from bench.workloads import django_ready

    django_ready(database)
    from django.db import transaction

    with transaction.atomic():
        rows_made(pods=pods, hours=hours, pools=pools)
        rollup(hours=hours)


def reports(*, database: str, pods: int, hours: int, pools: int, export: str):
    """bench/instructions.py's workload: one of the bench's reports over the month, read whole:
    the grouped CSV (per rollup row), the detail CSV or the daily FOCUS export (per cost record)."""
    from collections import deque

    from bench.instructions import Workload
    from bench.workloads import django_ready

    django_ready(database)
    from django.contrib.auth import get_user_model

    from billing import chargeback, focus_selectors, selectors
    from billing.focus import iter_csv_lines
    from billing.models import CostDay, CostRecord

    user = get_user_model().objects.get(username="bench-finance")
    query = month_query(hours)
    lines = {
        "grouped": lambda: iter_csv_lines(chargeback.group_dicts(chargeback.chargeback(user=user, query=query)), query.columns),
        "detail": lambda: iter_csv_lines(selectors.cost_detail_rows(user=user, query=query, chunk_size=5000), selectors.DETAIL_COLUMNS),
        "focus": lambda: focus_selectors.focus_csv_for_user(user=user, query=query, granularity="daily"),
    }[export]
    table = CostDay if export == "grouped" else CostRecord
    return Workload(f"the {export} report of {hours // 24} days", COUNTED_UNITS[export], lambda: deque(lines(), maxlen=0), table.objects.count)


def instruction_lines(*, pods: int = 300, pools: int = 10, days: tuple[int, int] = (2, 4)) -> list[str]:
    """Instructions per unit of each report: the difference between a month of `days[0]` and
    one of `days[1]` days (the same pods), so the reports' fixed costs are not spread over it."""
    import tempfile

    from bench.instructions import marginal, unavailable
    from bench.workloads import counts, prepared

    if unavailable():
        return [f"instructions: {unavailable()}"]
    plan = {
        f"{export} {d}": ("bench.chargeback:reports", {"pods": pods, "hours": 24 * d, "pools": pools, "export": export, "database": None})
        for export in COUNTED_UNITS
        for d in days
    }
    with tempfile.TemporaryDirectory(prefix="ebcloud-chargeback-") as work:
        found = counts(prepared(Path(work), plan))
    lines = [f"instructions per unit of work (callgrind, in process on SQLite, the same on any machine; {pods} pods, {pools} pools, {days[0]} → {days[1]} days):"]
    for export, unit in COUNTED_UNITS.items():
        small, large = found[f"{export} {days[0]}"], found[f"{export} {days[1]}"]
        lines.append(
            f"  {export} report: {marginal(small, large) / 1e3:,.1f} k per {unit} ({small.units:,} → {large.units:,} {unit}s: "
            f"{small.instructions / 1e6:.1f} → {large.instructions / 1e6:.1f} M, {small.statements} → {large.statements} statements)"
        )
    return lines


def meter_fleet(*, pods: int, hours: int = 3) -> list[tuple[float, int, int]]:
    """Meter `hours` hours of a live fleet (pods / 8 eight-GPU nodes, one GPU per pod, one node
    in five on demand) with `billing.services.meter_hour`; returns (seconds, usage, cost rows).

    Runs in the `--meter-database`, never in the chargeback one, and starts from no records."""
    from billing import services
    from billing.demo import load_prices
    from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
    from pools.demo.seed import load_catalog
    from pools.models import GpuModel, GpuNodePool, Node, NodeType, Pod, Team, Zone

    load_catalog()
    load_prices()
    t0 = START
    if Pod.objects.count() != pods:
        Pod.objects.all().delete()
        Node.objects.all().delete()
        teams = [
            Team.objects.get_or_create(slug=f"team-{i}", defaults={"name": f"Team {i}"})[0]
            for i in range(TEAMS)
        ]
        model, node_type = (
            GpuModel.objects.get(name="A100_80G"),
            NodeType.objects.get(name="GPU_8_CARD"),
        )
        zone = Zone.objects.first()
        pools = [
            GpuNodePool.objects.get_or_create(
                name=f"meter-pool-{i}",
                defaults=dict(team=teams[i % TEAMS], document={"metadata": {"labels": {"team": f"team-{i % TEAMS}"}}},
                              gpu_model=model, node_type=node_type, zone=zone, min_nodes=0, max_nodes=100, lease_type="monthly"),
            )[0]
            for i in range(50)
        ]  # fmt: skip
        count = -(-pods // 8)
        nodes = Node.objects.bulk_create(
            Node(pool=pools[i % 50], name=f"meter-node-{i}", billing="on_demand" if i % 5 == 0 else "monthly",
                 phase="Ready", zone=zone, gpu_count=8, labels={"gpu-class": "a100"},
                 lease_start=None if i % 5 == 0 else t0, lease_end=None if i % 5 == 0 else t0 + timedelta(days=30),
                 created_at=t0 - timedelta(hours=1), machine_at=t0 - timedelta(hours=1))
            for i in range(count)
        )  # fmt: skip
        Pod.objects.bulk_create(
            Pod(team=teams[i % TEAMS], namespace=f"ns-{i % 40}", name=f"pod-{i}", labels={"project": f"project-{i % 37}"},
                gpu_count=1, gpu_milli=1000, node=nodes[i // 8], phase="Running", started_at=t0 - timedelta(hours=1))
            for i in range(pods)
        )  # fmt: skip
    for model_ in (CostDay, CostRecord, UsageRecord, MeterRun):
        model_.objects.all().delete()
    out = []
    for h in range(hours):
        started = time.perf_counter()
        result = services.meter_hour(hour=t0 + timedelta(hours=h))
        out.append((time.perf_counter() - started, result.usage_records, result.cost_records))
    started = time.perf_counter()
    assert not services.meter_hour(hour=t0).metered
    out.append((time.perf_counter() - started, 0, 0))
    return out


def timed(fn, repeat: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=720)
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--skip-detail", action="store_true", help="Skip the detailed CSV export")
    parser.add_argument("--focus-granularity", choices=("daily", "hourly"), default="daily")
    parser.add_argument(
        "--meter", action="store_true", help="Only time meter_hour on a live fleet of --pods pods"
    )
    parser.add_argument("--meter-database", default=DEFAULT_DB + "_meter")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="Also count instructions per unit of work with callgrind (bench/instructions.py; about 2 minutes)")
    args = parser.parse_args(argv)
    if args.meter:
        setup_django(args.meter_database)
        runs = meter_fleet(pods=args.pods)
        print(
            f"meter_hour benchmark: {args.pods:,} pods on {-(-args.pods // 8):,} nodes, PostgreSQL, {date.today()}"
        )
        print(f"{'hour':<10} {'seconds':>8} {'usage rows':>11} {'cost rows':>10}")
        for i, (seconds, usage, costs) in enumerate(runs[:-1]):
            print(f"{i:<10} {seconds:>8.1f} {usage:>11,} {costs:>10,}")
        print(f"{'rerun':<10} {runs[-1][0]:>8.2f} {'(claimed: nothing written)':>22}")
        from bench.control_plane import machine_speed
        from bench.workloads import report_lines

        print(machine_speed())
        if args.instructions:  # beside the seconds, what does not move with the machine (issue 23)
            print("\n".join(report_lines(units=("node-hour",))))
        return
    setup_django(args.database)

    from django.contrib.auth import get_user_model
    from django.db.models import Sum

    from billing import chargeback, selectors
    from billing.focus import iter_csv_lines

    rows, gen_s = generate(pods=args.pods, hours=args.hours, pools=args.pools)
    rollup_rows, rollup_s = rollup(hours=args.hours)
    user = get_user_model().objects.get(username="bench-finance")
    query = month_query(args.hours)
    q_min, q_med, groups = timed(lambda: chargeback.chargeback(user=user, query=query), args.repeat)
    total = chargeback.summarize(groups).total

    def grouped_csv():
        size = 0
        for line in iter_csv_lines(
            chargeback.group_dicts(chargeback.chargeback(user=user, query=query)), query.columns
        ):
            size += len(line)
        return size

    c_min, c_med, csv_bytes = timed(grouped_csv, args.repeat)

    samples: list[tuple[int, float]] = []
    rss_before = rss_mib()
    started = time.perf_counter()
    count = 0
    with open(os.devnull, "w") as sink:
        detail = (
            ()
            if args.skip_detail
            else selectors.cost_detail_rows(user=user, query=query, chunk_size=5000)
        )
        for line in iter_csv_lines(detail, selectors.DETAIL_COLUMNS):
            sink.write(line)
            count += 1
            if count % 500_000 == 0:
                samples.append((count, rss_mib()))
    detail_s = max(time.perf_counter() - started, 1e-9)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    focus = focus_export(user, query, args.focus_granularity)
    records_total = selectors.costs_for_user(user=user, query=query).aggregate(t=Sum("amount"))["t"]

    print(
        f"chargeback benchmark: {args.pods:,} pods x {args.hours} h, {args.pools} pools, PostgreSQL ({args.database.rsplit('/', 1)[1]}), {date.today()}"
    )
    print(f"{'step':<44} {'result':>28}")
    print(f"{'cost records':<44} {rows:>28,}")
    print(f"{'generate rows (INSERT ... SELECT, 0 = reused)':<44} {gen_s:>27.1f}s")
    print(
        f"{'daily rollup rows, build time (0 = reused)':<44} {f'{rollup_rows:,}, {rollup_s:.1f}s':>28}"
    )
    print(
        f"{'grouped query (team,project,gpu-class,ns)':<44} {f'min {q_min:.2f}s / median {q_med:.2f}s':>28}"
    )
    print(f"{'  groups, grand total':<44} {f'{len(groups)}, {total}':>28}")
    print(f"{'grouped CSV export':<44} {f'min {c_min:.2f}s / median {c_med:.2f}s':>28}")
    print(f"{'  CSV bytes':<44} {csv_bytes:>28,}")
    print(
        f"{'detail CSV export (every record, streamed)':<44} {f'{detail_s:.1f}s, {max(count - 1, 0):,} rows':>28}"
    )
    print(f"{'  rows/s':<44} {max(count - 1, 0) / detail_s:>28,.0f}")
    print(f"{'  RSS before / peak (MiB)':<44} {f'{rss_before:.0f} / {peak:.0f}':>28}")
    for n, mib in samples[:: max(1, len(samples) // 6)]:
        print(f"{f'  RSS after {n:,} rows (MiB)':<44} {mib:>28.0f}")
    label = f"FOCUS export of the month ({args.focus_granularity})"
    print(f"{label:<44} {f'{focus.seconds:.1f}s, {focus.rows:,} rows':>28}")
    print(f"{'  rows/s, MiB written':<44} {f'{focus.rows / focus.seconds:,.0f}, {focus.bytes / 2**20:,.0f}':>28}")
    print(f"{'  RSS before / peak while streaming (MiB)':<44} {f'{focus.rss_before:.0f} / {focus.rss_peak:.0f}':>28}")
    print(f"{'  usage EffectiveCost, cost records total':<44} {f'{focus.usage_total}, {records_total}':>28}")
    print(f"{'  equal':<44} {str(focus.usage_total == records_total):>28}")
    from bench.control_plane import machine_speed

    print(machine_speed())
    if args.instructions:  # beside the seconds, what does not move with the machine (issue 23)
        print("\n".join(instruction_lines()))


@dataclass
class FocusRun:
    seconds: float
    rows: int
    bytes: int
    rss_before: float
    rss_peak: float
    usage_total: Decimal


def focus_export(user, query, granularity: str) -> FocusRun:
    """Stream the FOCUS export to a temporary file (timed, RSS sampled every 100 chunks), then
    sum its usage rows' EffectiveCost (not timed)."""
    from billing import focus_selectors

    rss_before, rss_peak, rows, size = rss_mib(), rss_mib(), 0, 0
    with tempfile.TemporaryFile("w+", newline="") as sink:
        started = time.perf_counter()
        chunks = focus_selectors.focus_csv_for_user(user=user, query=query, granularity=granularity)
        for i, chunk in enumerate(chunks):
            sink.write(chunk)
            rows += chunk.count("\n")
            size += len(chunk)
            if i % 100 == 0:
                rss_peak = max(rss_peak, rss_mib())
        seconds = max(time.perf_counter() - started, 1e-9)
        rss_peak = max(rss_peak, rss_mib())
        sink.seek(0)
        total = sum(
            (Decimal(r["EffectiveCost"]) for r in csv.DictReader(sink) if r["ChargeCategory"] == "Usage"),
            Decimal(0),
        )
    return FocusRun(seconds, rows - 1, size, rss_before, rss_peak, total)


if __name__ == "__main__":
    main()
