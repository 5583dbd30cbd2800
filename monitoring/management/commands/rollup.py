"""`manage.py rollup`: the per-minute pool watermark rollup, runnable without a worker.

`--once` samples every live pool for the current minute and exits (what the scheduled task
does); without it the command loops every `--interval` seconds until interrupted.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from monitoring import alerts, services
from pools.management.arguments import positive_seconds


class Command(BaseCommand):
    help = "Roll up per-minute pool samples (capacity, GPU memory used, nodes by phase)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One rollup, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=60.0, help="Seconds between rollups in loop mode (above 0, at most a day)")

    def handle(self, *args, once: bool = False, interval: float = 60.0, **options):
        while True:
            count = services.pool_samples_rollup()
            fired = alerts.alerts_evaluate()
            for event in fired:
                self.stdout.write(f"{event.pool.name}\t{event.reason}\t{event.message}")
            pruned = services.node_reports_prune()
            self.stdout.write(f"sampled {count} pool(s), pruned {pruned} old report(s)")
            if once:
                return
            time.sleep(interval)
