"""`manage.py schedule`: the scheduler's loop, runnable without a worker (design §5).

`--once` runs one pass (bind Pending pods, preempt, finish pods whose duration elapsed) and
exits; without it the command loops every `--interval` seconds until interrupted.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from pools.controllers.scheduler import scheduler_pass
from pools.management.arguments import positive_seconds


class Command(BaseCommand):
    help = "Schedule pods of the simulated cluster: bind Pending pods, preempt, finish pods."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=5.0, help="Seconds between passes in loop mode (above 0, at most a day)")
        parser.add_argument("--now", default="", help="Moment of the pass, ISO 8601 (default: the clock)")

    def handle(self, *args, once: bool = False, interval: float = 5.0, now: str = "", **options):
        moment = None
        if now:
            try:
                moment = datetime.fromisoformat(now.replace("Z", "+00:00"))
            except ValueError as exc:
                raise CommandError(f"--now must be ISO 8601, got {now!r}") from exc
            if moment.tzinfo is None:
                raise CommandError("--now needs a time zone, e.g. 2026-01-01T00:00:00Z")
        while True:
            result = scheduler_pass(now=moment)
            self.stdout.write(
                f"scheduled {len(result.scheduled)}, unschedulable {len(result.unschedulable)}, "
                f"preempted {len(result.preempted)}, succeeded {len(result.succeeded)}, requeued {len(result.requeued)}"
            )
            if once:
                return
            time.sleep(interval)
