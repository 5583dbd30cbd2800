"""`manage.py repair --once`: one auto-repair pass over every pool, without a worker (issue 6 §5)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from pools.controllers.repair import repair_all
from pools.management.arguments import positive_seconds


class Command(BaseCommand):
    help = "Auto-repair GPU nodes from their Xid reports (reset, reboot, replace)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit")
        parser.add_argument("--interval", type=positive_seconds, default=60.0, help="Seconds between passes in loop mode (above 0, at most a day)")

    def handle(self, *args, once: bool = False, interval: float = 60.0, **options):
        while True:
            self.stdout.write(f"repairs started: {repair_all()}")
            if once:
                return
            time.sleep(interval)
