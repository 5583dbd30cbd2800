"""`manage.py reconcile`: the lifecycle controller's loop, runnable without a worker (design §5).

`--once` runs one pass over every live pool and exits (what the scheduled task does); without it
the command loops every `--interval` seconds until interrupted. `--now` replays a pass at a
given moment (ISO 8601) against the simulated cloud's virtual clock.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from pools.controllers.lifecycle import pool_reconcile, reconcile_all
from pools.management.arguments import moment_utc, positive_seconds
from pools.models import GpuNodePool


class Command(BaseCommand):
    help = "Reconcile node pools: orders -> nodes -> Ready; leases; graceful exit."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass over all pools, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=30.0, help="Seconds between passes in loop mode (above 0, at most a day)")
        parser.add_argument("--pool", default="", help="Only this pool (by name)")
        parser.add_argument("--now", type=moment_utc, help="Moment of the pass, ISO 8601 (UTC if no offset), 2000 to 2999 (default: the clock)")

    def handle(self, *args, once: bool = False, interval: float = 30.0, pool: str = "", now: datetime | None = None, **options):
        while True:
            results = self._pass(pool, now)
            for result in results:
                if result.error:
                    line = f"{result.pool_id}\terror: {result.error}"
                elif result.claimed:
                    line = f"{result.pool_id}\t{result.phase}\t{result.pending_reason}"
                else:
                    line = f"{result.pool_id}\tskipped: claimed by another worker"
                self.stdout.write(line)
            if once:
                return
            time.sleep(interval)

    def _pass(self, name: str, moment: datetime | None):
        if not name:
            return reconcile_all(now=moment)
        pool = GpuNodePool.objects.active().filter(name=name).first()
        if pool is None:
            raise CommandError(f"no live pool named {name!r}")
        return [pool_reconcile(pool_id=pool.pk, now=moment)]

