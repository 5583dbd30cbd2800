"""`manage.py autoscale`: the autoscaler's loop, runnable without a worker (issue 5 §7).

`--once` evaluates every pool once and exits; without it the command loops every `--interval`
seconds (default 30, the article's evaluation period) until interrupted.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.core.management.base import BaseCommand

from pools.controllers.autoscaler import autoscale_all
from pools.management.arguments import moment, positive_seconds


class Command(BaseCommand):
    help = "Autoscale node pools: monthly baseline plus on-demand burst nodes."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass over all pools, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=30.0, help="Seconds between passes in loop mode (above 0, at most a day)")
        parser.add_argument("--now", type=moment, help="Moment of the pass, ISO 8601 with a time zone, 2000 to 2999 (default: the clock)")

    def handle(self, *args, once: bool = False, interval: float = 30.0, now: datetime | None = None, **options):
        while True:
            for result in autoscale_all(now=now):
                if result.claimed:
                    self.stdout.write(f"{result.pool}\t{result.current} -> {result.desired}\t{result.reason}")
                else:
                    self.stdout.write(f"{result.pool}\tskipped: claimed by another worker")
            if once:
                return
            time.sleep(interval)
