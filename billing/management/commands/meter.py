"""`manage.py meter --once`: meter the last complete hour (or `--hour ISO`, an hour that is
over), like the schedule.

Without `--once` or `--hour` it meters every pending hour (the hourly task's catch-up). Each
hour is claimed once, so running it next to the worker never double counts.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import metering, services
from billing.hours import last_complete_hour
from pools.claims import Part
from pools.management.arguments import moment_utc


def whole_hour(text: str) -> datetime:
    """`--hour`: a `moment_utc` (no offset means UTC; the years the costs API keeps, so no hour
    is metered that the costs could never show) that starts an hour, in UTC. An argparse type,
    so a bad value is refused before any part is metered; one not over yet needs `now`, which
    `handle` checks."""
    moment = moment_utc(text)
    try:
        return metering._check_hour(moment)
    except ValueError as exc:  # not the start of an hour (05:00+05:30 is 23:30 UTC)
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = "Meter usage and allocate costs for complete hours (idempotent per hour)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Meter the last complete hour only")
        parser.add_argument(
            "--hour", type=whole_hour, help="Meter this hour once it is over (ISO 8601, UTC if no offset), e.g. 2026-11-30T05:00"
        )

    def handle(self, *args, once: bool = False, hour: datetime | str | None = None, **options):
        now = timezone.now()
        parts = Part.all_of(settings.EBCLOUD_METER_PARTS)  # the workers' split, in turn
        if isinstance(hour, str):  # `call_command("meter", hour=...)` skips the parser's type
            try:
                hour = whole_hour(hour)
            except argparse.ArgumentTypeError as exc:
                raise CommandError(f"Error: argument --hour: {exc}") from None
        if hour is not None:  # `--hour ""` (an unset variable in a script) metered every pending hour
            try:
                # `now`: an hour not over yet is refused, before any part is metered.
                results = [services.meter_hour(hour=hour, part=part, now=now) for part in parts]
            except (ValueError, OverflowError) as exc:  # the last hour of 2999 ends past the calendar
                raise CommandError(f"--hour: {exc}") from exc
        elif once:
            try:
                results = [services.meter_hour(hour=last_complete_hour(now), part=part, now=now) for part in parts]
            except (ValueError, OverflowError) as exc:
                raise CommandError(str(exc)) from exc
        else:
            results = services.meter_pending(now=now, parts=settings.EBCLOUD_METER_PARTS)
        for result in results:
            label = result.label
            if result.error:
                self.stderr.write(f"{label} failed: {result.error}")
                continue
            if not result.metered:
                self.stdout.write(f"{label} already metered")
                continue
            self.stdout.write(
                f"{label} metered: {result.usage_records} usage records, "
                f"{result.cost_records} cost records, total {result.total}"
            )
            for line in result.skipped:
                self.stderr.write(f"{label} skipped {line}")
        failed = sum(1 for result in results if result.error)
        if failed:
            raise CommandError(f"{failed} hour part(s) failed and stay pending; the later hours were metered")
