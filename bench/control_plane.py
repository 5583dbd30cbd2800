"""Control plane at 1,000 pools (issue 9 item 1): one full pass of the background loops —
reconcile every pool (`manage.py reconcile --once`), autoscale every pool (`manage.py autoscale
--once`) and meter one hour (`manage.py meter --once`) — over a fleet of 1,000 pools, 20,000
nodes and 200,000 pods in PostgreSQL, timed and with its SQL statements counted; then the pool
list and a pool's page, p50/p95 over N requests through Django's test client.

The same pass runs at each `--sizes` (same per-pool shape, see bench/control_plane_fleet.py),
so the table shows whether the number of queries grows with the number of pools (it must not:
the loops load every pool's state in a fixed number of queries, decide in pure functions and
write in bulk; only pools where something happens cost statements of their own).

Each size gets its own database, built once (COPY) and kept as a template
(`<database>_p<pools>_v<version>_tpl`); every run starts from a fresh copy of it, so a pass always meets
the same state. Targets: < 5 s per pass, pool list and pool page p95 < 150 ms. A second pass
30 s later (reconcile + autoscale) shows the loops as a running worker sees them.

Usage: python bench/control_plane.py [--sizes 100,1000] [--requests 30] [--repeat 3] [--regenerate] [--draining 20]
                                     [--database postgres://postgres@127.0.0.1:5432/ebcloud_bench_control_plane]
                                     [--profile DIR]   (a cProfile dump per step and size)
                                     [--workers N]   (N queue workers: the two loops at once, each in N parts, then metering in N parts at once)
                                     [--tick-parts P]   (with --workers: the loops in P parts instead; 1: each loop whole)
                                     [--no-instructions]   (skip the callgrind counts per pool and per node-hour)
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import multiprocessing
import os
import queue
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/ebcloud_bench_control_plane"
# Bumped when the fleet a template holds changes (2: ten days of metered costs before the hour).
FLEET_VERSION = 2


@dataclass
class Step:
    name: str
    seconds: float
    queries: int
    note: str = ""


@dataclass
class PageTiming:
    name: str
    p50_ms: float
    p95_ms: float
    queries: int
    status: int


@dataclass
class SizeResult:
    shape: object
    build_s: float
    steps: list[Step] = field(default_factory=list)
    second: list[Step] = field(default_factory=list)
    pages: list[PageTiming] = field(default_factory=list)


class QueryCounter:
    """`connection.execute_wrapper` hook: counts every statement sent to the database."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def counted(name: str, fn, *, profile_to: Path | None = None) -> tuple[Step, object]:
    """Run `fn` once, timed, counting its statements (and profiling it when asked)."""
    from django.db import connection

    counter = QueryCounter()
    profiler = cProfile.Profile() if profile_to else None
    with connection.execute_wrapper(counter):
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        result = fn()
        if profiler:
            profiler.disable()
        seconds = time.perf_counter() - started
    if profiler:
        profile_to.parent.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile_to)
    return Step(name, seconds, counter.count), result


def measure_pass(*, now, hour=None, profile_dir: Path | None = None, tag: str = "") -> list[Step]:
    """Reconcile every pool, autoscale every pool, meter `hour` (skipped when None)."""
    from billing import services
    from pools.controllers import autoscaler as autoscaler_service
    from pools.controllers import lifecycle
    from pools.models import PoolEvent

    def where(step: str) -> Path | None:
        return profile_dir / f"{tag}{step}.prof" if profile_dir else None

    steps = []
    events = PoolEvent.objects.count()
    step, results = counted("reconcile", lambda: lifecycle.reconcile_all(now=now), profile_to=where("reconcile"))
    claimed = sum(1 for r in results if r.claimed)
    errors = [r.error for r in results if r.error]
    written = PoolEvent.objects.count() - events
    step.note = f"{claimed} pools claimed, {written} events" + (f", {len(errors)} errors: {errors[0]}" if errors else "")
    steps.append(step)
    events = PoolEvent.objects.count()
    step, results = counted("autoscale", lambda: autoscaler_service.autoscale_all(now=now), profile_to=where("autoscale"))
    reasons = Counter(r.reason for r in results)
    step.note = ", ".join(f"{n} {reason}" for reason, n in reasons.most_common(3)) + f"; {PoolEvent.objects.count() - events} events"
    steps.append(step)
    steps.append(Step("reconcile + autoscale", steps[0].seconds + steps[1].seconds, steps[0].queries + steps[1].queries, "the per-minute loops"))
    if hour is not None:
        cpu = time.process_time()  # the machine is shared: CPU time says what is ours, the rest is waiting
        step, result = counted("meter", lambda: services.meter_hour(hour=hour), profile_to=where("meter"))
        cpu = time.process_time() - cpu
        step.note = f"{result.usage_records:,} usage, {result.cost_records:,} cost records" if result.metered else "already metered"
        step.note += f"; {cpu:.1f} s CPU in this process, the rest waiting on PostgreSQL (or the machine)"
        steps.append(step)
    loops = [s for s in steps if s.name != "reconcile + autoscale"]
    if hour is not None:
        steps.append(Step("pass total", sum(s.seconds for s in loops), sum(s.queries for s in loops), "reconcile + autoscale + meter"))
    return steps


# How long a round may wait for a worker (to start, to reach the round, to finish a job) before
# the bench fails instead of hanging: minutes more than any job takes at 1,000 pools.
WORKER_TIMEOUT_S = 600


class QueueWorkers:
    """`count` queue workers: spawned interpreters with Django set up, kept for every pass of a
    size as a running qcluster keeps its workers (their caches warm after the first task).
    They take jobs from one shared first-in-first-out queue, as django-q2's workers take tasks
    from its broker: `at_once` puts the jobs and times them from a common barrier."""

    def __init__(self, count: int):
        from django.db import connection

        context = multiprocessing.get_context("spawn")
        self.barrier, self.results, self.jobs = context.Barrier(count + 1), context.Queue(), context.Queue()
        self.inboxes = [context.Queue() for _ in range(count)]
        database = {key: connection.settings_dict[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")}
        self.processes = [
            context.Process(target=_worker, args=(inbox, self.jobs, database, self.barrier, self.results), daemon=True)
            for inbox in self.inboxes
        ]
        for process in self.processes:
            process.start()

    def at_once(self, jobs: list[tuple[str, str, dict]]) -> tuple[float, list[Step]]:
        """Queue each (name, job, kwargs) — `job` a function of this module — in order; every
        worker takes the next one as soon as it is free. Returns the wall time from the
        barrier until the last one ended, and each one's own step (seconds, statements; its
        note is what the job returned)."""
        for i, job in enumerate(jobs):
            self.jobs.put((i, *job))
        for inbox in self.inboxes:
            self.jobs.put(None)  # one end of the round per worker, behind every job
            inbox.put("round")
        try:
            self.barrier.wait(timeout=WORKER_TIMEOUT_S)
            started = time.perf_counter()
            steps = dict(self.results.get(timeout=WORKER_TIMEOUT_S) for _ in jobs)
        except (threading.BrokenBarrierError, queue.Empty) as exc:  # a worker died: fail, never hang
            codes = [p.exitcode for p in self.processes]
            raise RuntimeError(f"a queue worker did not finish the round in {WORKER_TIMEOUT_S} s (exit codes {codes})") from exc
        wall = time.perf_counter() - started
        failed = [s.note for s in steps.values() if s.note.startswith("failed: ")]
        if failed:
            raise RuntimeError(f"a worker failed: {failed[0]}")
        return wall, [steps[i] for i in range(len(jobs))]

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put("stop")
        for process in self.processes:
            process.join(timeout=30)


def _worker(inbox, jobs, database: dict, barrier, results) -> None:
    """A `QueueWorkers` child: ready (Django set up, code imported), then for each round
    connected before the barrier (each pass's database is a fresh copy), the shared queue's
    jobs until the round's end."""
    setup_django("postgres://{USER}@{HOST}:{PORT}/{NAME}".format(**database))
    from django.db import connection

    connection.settings_dict.update(database)
    import billing.tasks  # noqa: F401 (imported before any job, as in a running worker)
    import pools.controllers.autoscaler  # noqa: F401
    import pools.controllers.lifecycle  # noqa: F401

    while inbox.get() != "stop":
        connection.close()
        connection.ensure_connection()
        barrier.wait()
        while (task := jobs.get()) is not None:
            index, name, job, kwargs = task
            try:
                step, note = counted(name, functools.partial(globals()[job], **kwargs))
                step.note = str(note)
            except Exception as exc:  # the parent waits for every result: say what failed instead
                step = Step(name, 0.0, 0, f"failed: {type(exc).__name__}: {exc}")
            results.put((index, step))
    connection.close()


def job_reconcile(*, now, index: int = 0, count: int = 1) -> str:
    from pools.claims import Part
    from pools.controllers import lifecycle

    return f"{sum(1 for r in lifecycle.reconcile_all(now=now, part=Part(index, count)) if r.claimed)} pools claimed"


def job_autoscale(*, now, index: int = 0, count: int = 1) -> str:
    from pools.claims import Part
    from pools.controllers import autoscaler

    results = autoscaler.autoscale_all(now=now, part=Part(index, count))
    return ", ".join(f"{n} {reason}" for reason, n in Counter(r.reason or "held by another loop" for r in results).most_common(2))


def job_meter_part(*, hour: str, index: int, count: int, now: str) -> str:
    from billing import tasks

    return str(tasks.meter_part(hour, index, count, now))


def tick_jobs(*, now, count: int) -> list[tuple[str, str, dict]]:
    """The per-minute loops split in `count` parts (`EBCLOUD_TICK_PARTS` = the workers), in the
    order the workers meet them: the two scheduled tasks, each running its first part and
    queueing the others (`pools.tasks.reconcile_all`, `autoscale_all`), then those parts."""
    jobs = []
    for index in range(count):
        for loop in ("reconcile", "autoscale"):
            jobs.append((f"{loop} part {index + 1}" if count > 1 else loop, f"job_{loop}", {"now": now, "index": index, "count": count}))
    return jobs


def measure_pass_workers(*, now, hour, workers: QueueWorkers, tick_parts: int | None = None) -> list[Step]:
    """The pass as `workers` (at least 2) run it: the two per-minute loops, separate schedules,
    at once, each split by pool into `tick_parts` parts (default: one per worker); then the
    hour's metering split into one part per worker, at once (`billing.tasks.meter_part`: each
    part checks its pools' budgets, the one that completes the hour the teams')."""
    count = len(workers.inboxes)
    ticks = tick_parts or count
    wall, loops = workers.at_once(tick_jobs(now=now, count=ticks))
    for loop in ("reconcile", "autoscale"):
        parts = [s for s in loops if s.name.startswith(loop)]
        steps_note = f"{ticks} part{'s' if ticks > 1 else ''}, took {', '.join(f'{p.seconds:.2f}' for p in parts)} s: {'; '.join(p.note for p in parts)}"
        loops.append(Step(loop, sum(p.seconds for p in parts), sum(p.queries for p in parts), steps_note))
    loops = loops[-2:]
    steps = [*loops, Step("reconcile + autoscale", wall, sum(s.queries for s in loops), f"the per-minute loops, at once, {f'each in {ticks} parts' if ticks > 1 else 'each whole'} over {count} worker processes")]
    if hour is None:
        return steps
    jobs = [(f"meter part {i + 1}", "job_meter_part", {"hour": hour.isoformat(), "index": i, "count": count, "now": now.isoformat()}) for i in range(count)]
    wall, parts = workers.at_once(jobs)
    # The part that completes the hour is whichever commits last, not the slowest to run:
    # with parts of equal length either can be it.
    completing = [p for p in parts if "'complete': 1" in p.note]
    ended = f"{completing[0].name} completed the hour: {completing[0].note}" if completing else f"no part completed the hour: {'; '.join(p.note for p in parts)}"
    note = f"{count} parts at once, one worker process each; parts took {', '.join(f'{p.seconds:.2f}' for p in parts)} s; {ended}"
    steps.append(Step("meter", wall, sum(s.queries for s in parts), note))
    steps.append(Step("pass total", steps[2].seconds + wall, steps[2].queries + steps[3].queries, "loops at once, then the hour's parts at once"))
    return steps


def median_steps(runs: list[list[Step]]) -> list[Step]:
    """Each step's median time over repeated runs (the machine is shared: one run can be slow),
    with the fastest and slowest in its note; statements are the same in every run."""
    if len(runs) == 1:
        return runs[0]
    out = []
    for i, step in enumerate(runs[0]):
        times = sorted(run[i].seconds for run in runs)
        note = f"{step.note}; {len(runs)} runs, {times[0]:.2f}–{times[-1]:.2f} s"
        out.append(Step(step.name, statistics.median(times), step.queries, note))
    return out


def page_timings(fleet, *, requests: int) -> list[PageTiming]:
    """The pool list (admin and finance see every pool, a lead their team's) and one pool's page."""
    from django.db import connection
    from django.test import Client

    pages = [
        ("pool list, admin (all pools)", "/pools/", fleet.admin),
        ("pool list, finance (all pools)", "/pools/", fleet.finance),
        ("pool list, team lead (own team)", "/pools/", fleet.lead),
        ("pool page, admin", f"/pools/{fleet.first_pool}/", fleet.admin),
        ("pool page, team lead", f"/pools/{fleet.first_pool}/", fleet.lead),
        ("pool page's charts (loaded after it), team lead", f"/pools/{fleet.first_pool}/charts/", fleet.lead),
    ]
    out = []
    for name, url, user in pages:
        client = Client()
        client.force_login(user)
        response = client.get(url)  # warm: templates compiled, session loaded once
        times = []
        counter = QueryCounter()
        for _ in range(requests):
            counter.count = 0
            with connection.execute_wrapper(counter):
                started = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
        p95 = statistics.quantiles(times, n=20, method="inclusive")[18] if len(times) > 1 else times[0]
        out.append(PageTiming(name, statistics.median(times), p95, counter.count, response.status_code))
    return out


# ---------------------------------------------------------------------------------------------
# Databases: one per size, built once and kept as a template


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def _exists(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _use(name: str) -> None:
    from django.db import connections

    conn = connections["default"]
    conn.close()
    conn.settings_dict["NAME"] = name


def _copy(conn, *, source: str, target: str) -> None:
    conn.execute(f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')
    # PostgreSQL 15's default (WAL_LOG) writes the whole copy (~1.5 GB at 1,000 pools) through the
    # WAL, and the checkpoints that follow fell in the measured steps: on a slow disk they took
    # the hour from 2.0 to 3.0 s. FILE_COPY writes the files and checkpoints before it returns.
    strategy = " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""
    conn.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}"{strategy}')


def prepare(url: str, shape, *, regenerate: bool) -> float:
    """Point Django at a fresh copy of this size's database; build the template first if needed.
    Returns the seconds the build took (0 when the template was reused)."""
    from django.core.management import call_command
    from django.db import connection, transaction

    from bench.control_plane_fleet import NOW, build, costs_history

    base = url.rsplit("/", 1)[1]
    name, blank = f"{base}_p{shape.pools}" + (f"_d{shape.draining}" if shape.draining != 20 else ""), f"{base}_blank"
    template = f"{name}_v{FLEET_VERSION}_tpl"
    seconds = 0.0
    with _admin(url) as admin:
        if not _exists(admin, blank):
            admin.execute(f'CREATE DATABASE "{blank}"')
        _use(blank)
        call_command("migrate", verbosity=0, interactive=False)
        _use("postgres")
        if regenerate or not _exists(admin, template):
            _copy(admin, source=blank, target=name)
            _use(name)
            started = time.perf_counter()
            with transaction.atomic():
                build(shape)
                costs_history(now=NOW)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            seconds = time.perf_counter() - started
            _use("postgres")
            _copy(admin, source=name, target=template)
        _copy(admin, source=template, target=name)
    _use(name)
    call_command("migrate", verbosity=0, interactive=False)  # a template older than the code
    from billing.budget_sync import budgets_sync

    budgets_sync(now=NOW)  # a running fleet has every pool's budget; a template older than budgets gets them here
    return seconds


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/postgres"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "false")  # templates and queries as in production
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _static_collected() -> None:
    """Collect the static files once (hashed names, as `make run` does), before any worker or
    page process starts: pages render as in production, and with DEBUG off they need the
    manifest (a fresh clone has none). Never in the workers: two collecting at once is a race."""
    from django.conf import settings
    from django.core.management import call_command

    if not (Path(settings.STATIC_ROOT) / "staticfiles.json").exists():
        call_command("collectstatic", interactive=False, verbosity=0)


def run_size(
    url: str, shape, *, requests: int, regenerate: bool, profile_dir: Path | None, repeat: int = 1, workers: int = 1, tick_parts: int | None = None
) -> SizeResult:
    from bench.control_plane_fleet import NOW
    from billing.hours import last_complete_hour

    result = SizeResult(shape=shape, build_s=prepare(url, shape, regenerate=regenerate))
    tag = f"p{shape.pools}-"
    firsts, seconds = [], []
    queue = QueueWorkers(workers) if workers > 1 else None
    if queue is not None:  # a running worker has done this before: the timed passes meet warm ones
        measure_pass_workers(now=NOW, hour=last_complete_hour(NOW), workers=queue, tick_parts=tick_parts)
    for run in range(repeat):
        if run or queue is not None:
            prepare(url, shape, regenerate=False)  # the same state again: a fresh copy of the template
        if queue is not None:
            firsts.append(measure_pass_workers(now=NOW, hour=last_complete_hour(NOW), workers=queue, tick_parts=tick_parts))
            seconds.append(measure_pass_workers(now=NOW + timedelta(seconds=30), hour=None, workers=queue, tick_parts=tick_parts))
            continue
        firsts.append(measure_pass(now=NOW, hour=last_complete_hour(NOW), profile_dir=profile_dir, tag=tag))
        seconds.append(measure_pass(now=NOW + timedelta(seconds=30), profile_dir=profile_dir, tag=tag + "again-"))
    if queue is not None:
        queue.close()
    result.steps, result.second = median_steps(firsts), median_steps(seconds)
    # Pages are served by web workers, not by the process that just ran the loops (whose heap
    # and caches slow every later request): time them in a fresh interpreter on the same data.
    from django.db import connection

    with multiprocessing.get_context("spawn").Pool(1) as child:
        result.pages = child.apply(pages_in_fresh_process, (url, connection.settings_dict["NAME"], requests))
    return result


def pages_in_fresh_process(url: str, name: str, requests: int) -> list[PageTiming]:
    """`page_timings` in a new interpreter, on database `name` (after the passes)."""
    setup_django(url)
    _use(name)
    from django.contrib.auth import get_user_model

    from bench.control_plane_fleet import Fleet
    from pools.models import GpuNodePool, Node, Pod

    users = get_user_model().objects
    fleet = Fleet(
        pools=GpuNodePool.objects.count(), nodes=Node.objects.count(), pods=Pod.objects.count(),
        admin=users.get(username="pool-admin"), finance=users.get(username="pool-finance"), lead=users.get(username="pool-lead"),
        first_pool="pool-0000",
    )  # fmt: skip
    return page_timings(fleet, requests=requests)


def machine_speed(*, adds: int = 5_000_000, trips: int = 200, times: int = 5) -> str:
    """How fast this machine is right now, so runs on different (or shared, busy) machines can be
    compared: a fixed pure-Python loop (the loops' work is mostly Python) and the round trip of
    a trivial statement. Best of `times`, each."""
    from django.db import connection

    def best(fn) -> float:
        out = []
        for _ in range(times):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
        return min(out)

    def loop():
        total = 0
        for i in range(adds):
            total += i

    def round_trips():
        with connection.cursor() as cursor:
            for _ in range(trips):
                cursor.execute("SELECT 1")

    python_s, trips_s = best(loop), best(round_trips)
    return (
        f"machine speed: {adds / 1e6:g} M-add Python loop {python_s * 1000:.0f} ms, "
        f"`SELECT 1` round trip {trips_s / trips * 1e6:.0f} µs ({os.cpu_count()} CPUs)"
    )


def report(results: list[SizeResult], *, requests: int, speeds: tuple[str, str] | None = None) -> None:
    print(f"control-plane benchmark, PostgreSQL, {date.today()}")
    if speeds:
        print(f"before the runs, {speeds[0]}\nafter the runs, {speeds[1]}")
    for r in results:
        print(f"\n### {r.shape.describe()}" + (f" (built in {r.build_s:.0f} s)" if r.build_s else ""))
        print("\n| step | seconds | queries | what happened |\n|---|---|---|---|")
        for s in r.steps:
            print(f"| {s.name} | {s.seconds:.2f} | {s.queries:,} | {s.note} |")
        for s in r.second:
            print(f"| again 30 s later: {s.name} | {s.seconds:.2f} | {s.queries:,} | {s.note} |")
        print(f"\n| page ({requests} requests) | p50 ms | p95 ms | queries | status |\n|---|---|---|---|---|")
        for p in r.pages:
            print(f"| {p.name} | {p.p50_ms:.1f} | {p.p95_ms:.1f} | {p.queries} | {p.status} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="Pool counts, comma-separated (same per-pool shape)")
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--draining", type=int, default=20, help="Pools with a draining node: the activity, the same at every size")
    parser.add_argument("--requests", type=int, default=30, help="Requests per page timing")
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--regenerate", action="store_true", help="Rebuild the fleets even if their templates exist")
    parser.add_argument("--profile", type=Path, default=None, help="Write a cProfile dump per step into this folder")
    parser.add_argument("--repeat", type=int, default=1, help="Passes per size, each from a fresh copy; the table shows medians")
    parser.add_argument("--workers", type=int, default=1, help="Queue workers: with 2 or more the two loops run at once and an hour is metered in that many parts at once")
    parser.add_argument("--tick-parts", type=int, default=None, help="Parts each per-minute loop is split into (EBCLOUD_TICK_PARTS; default: one per worker)")
    parser.add_argument("--instructions", action=argparse.BooleanOptionalAction, default=True,
                        help="Also count instructions per unit of work with callgrind (bench/instructions.py; about 2 minutes)")
    args = parser.parse_args(argv)
    setup_django(args.database)
    _static_collected()
    from bench.control_plane_fleet import Shape

    before = machine_speed()
    results = []
    for size in (int(s) for s in args.sizes.split(",") if s.strip()):
        shape = Shape(pools=size, teams=min(args.teams, size), draining=min(args.draining, size))
        results.append(run_size(
            args.database, shape, requests=args.requests, regenerate=args.regenerate, profile_dir=args.profile,
            repeat=max(args.repeat, 1), workers=args.workers, tick_parts=args.tick_parts,
        ))  # fmt: skip
    report(results, requests=args.requests, speeds=(before, machine_speed()))
    if args.instructions:  # beside the seconds, what does not move with the machine (issue 23)
        from bench.workloads import report_lines  # bench/ is importable once setup_django ran

        print("\n" + "\n".join(report_lines(units=("pool", "node-hour"))))


if __name__ == "__main__":
    main()
