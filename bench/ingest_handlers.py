"""Instructions per agent report through each WSGI handler (issue 23 item 2): Django's full
handler with the site's middleware, the agents' handler `config.wsgi` serves the reports path
with (config/lean_handler.py: 3 middleware, a steady report answered before them), and
Django's handler with no middleware at all (the floor of a middleware list alone).

The unit is bench/workloads.py's steady-state report (8 GPUs, the agent's body, each node's next
sequence number), counted by callgrind in a child (bench/instructions.py). By default on SQLite
in process, as the suite's guards count it (the database's work is in the count); with
`--database-url postgres://...` on PostgreSQL, where the count is this process's Python and
psycopg only, the part a gunicorn worker spends (the database server's work is outside it).
The PostgreSQL database is created and migrated if needed, and its bench pool is remade.

Usage:
    python bench/ingest_handlers.py [--reports 20] [--database-url postgres://postgres@127.0.0.1:5432/ebcloud_count]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import workloads  # noqa: E402  (after the path above, when run as a script)
from bench.instructions import Workload, count, unavailable  # noqa: E402

HANDLERS = ("full", "lean", "none")
NAMES = {"full": "full chain (13 middleware)", "lean": "agents' handler (3 middleware)", "none": "no middleware"}


def _application(handler: str):
    import config.wsgi
    from config.lean_handler import LeanHandler

    if handler == "full":
        return config.wsgi.full_application
    if handler == "lean":
        return config.wsgi.agent_reports_application
    return LeanHandler(())


def prepare_ingest(*, handler: str, reports: int, seqs: list[int], database: str | None = None, credentials: str | None = None) -> None:
    """SQLite: the pool, nodes and credentials in this workload's copy (PostgreSQL: made once
    by `main`)."""
    if database is not None:
        workloads.prepare_ingest(database=database, reports=reports)


def ingest(*, handler: str, reports: int, seqs: list[int], database: str | None = None, credentials: str | None = None) -> Workload:
    """`reports` steady-state reports through `handler`: a warm-up batch at `seqs[0]`, the
    counted one at `seqs[1]` (on PostgreSQL the handlers share one database, so each gets its
    own sequence numbers)."""
    if database is not None:
        workloads.django_ready(database)
        credentials = f"{database}.credentials"
    else:
        import django

        django.setup()
    from bench.agent_ingest import report_body

    application = _application(handler)
    secrets = Path(credentials).read_text().split()[:reports]
    rng = random.Random(0)
    batches = iter([[report_body(seq, rng) for _ in secrets] for seq in seqs])

    def run() -> None:
        for secret, body in zip(secrets, next(batches), strict=True):
            status = workloads.report_post(application, secret, body)
            if not status.startswith("200"):
                raise RuntimeError(f"a report was answered {status}")

    return Workload(NAMES[handler], "report", run, lambda: len(secrets))


def _counts_sqlite(reports: int) -> list:
    plan = {h: ("bench.ingest_handlers:ingest", {"handler": h, "reports": reports, "seqs": [1, 2], "database": None}) for h in HANDLERS}
    with tempfile.TemporaryDirectory(prefix="ebcloud-handlers-") as work:
        return list(workloads.counts(workloads.prepared(Path(work), plan)).values())


def _counts_postgresql(reports: int, url: str) -> list:
    from bench.agent_ingest import database_prepare

    secrets = database_prepare(url, reports)  # Django is set up here on `url`; the child sets it up again
    env = {**workloads.child_environment(Path("unused")), "DATABASE_URL": url, "DATABASE_CONN_MAX_AGE": "600"}
    with tempfile.TemporaryDirectory(prefix="ebcloud-handlers-") as work:
        credentials = Path(work) / "credentials"
        credentials.write_text("\n".join(secrets))
        plan = [("bench.ingest_handlers:ingest", {"handler": h, "reports": reports, "seqs": [2 * i + 1, 2 * i + 2],
                                                   "credentials": str(credentials)}) for i, h in enumerate(HANDLERS)]
        return count(plan, env={**os.environ, **env}, prepared=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=20, help="reports (one per node) in the counted run")
    parser.add_argument("--database-url", help="count on PostgreSQL (this process's side only) instead of SQLite in process")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(f"instructions: {reason}")
        return 1
    url = args.database_url
    if url and not url.startswith("postgres"):
        raise SystemExit("--database-url takes a postgres:// URL")
    found = _counts_postgresql(args.reports, url) if url else _counts_sqlite(args.reports)
    where = "PostgreSQL, this process's side" if url else "SQLite in process, the database's work included"
    print(f"instructions per agent report by WSGI handler (callgrind, {where}):")
    for c in found:
        print(f"  {c.name:<28} {c.per_unit / 1e6:6.3f} M  ({c.statements / c.units:g} statements per report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
