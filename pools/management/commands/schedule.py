"""`manage.py schedule`: the scheduler's loop, runnable without a worker (design §5).

`--once` runs one pass (bind Pending pods, preempt, finish pods whose duration elapsed) and
exits; without it the command loops every `--interval` seconds until interrupted.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.core.management.base import BaseCommand

from pools.controllers.scheduler import scheduler_pass
from pools.management.arguments import moment, positive_seconds


class Command(BaseCommand):
    help = "Schedule pods of the simulated cluster: bind Pending pods, preempt, finish pods."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=5.0, help="Seconds between passes in loop mode (above 0, at most a day)")
        parser.add_argument("--now", type=moment, help="Moment of the pass, ISO 8601 with a time zone, 2000 to 2999 (default: the clock)")

    def handle(self, *args, once: bool = False, interval: float = 5.0, now: datetime | None = None, **options):
        while True:
            result = scheduler_pass(now=now)
            self.stdout.write(
                f"scheduled {len(result.scheduled)}, unschedulable {len(result.unschedulable)}, "
                f"preempted {len(result.preempted)}, succeeded {len(result.succeeded)}, requeued {len(result.requeued)}"
            )
            if once:
                return
            time.sleep(interval)
