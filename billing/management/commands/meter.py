"""`manage.py meter --once`: meter the last complete hour (or `--hour ISO`, an hour that is
over), like the schedule.

Without `--once` or `--hour` it meters every pending hour (the hourly task's catch-up). Each
hour is claimed once, so running it next to the worker never double counts.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import metering, services
from billing.hours import last_complete_hour
from billing.selectors import FIRST_DAY, LAST_DAY
from pools.claims import Part


class Command(BaseCommand):
    help = "Meter usage and allocate costs for complete hours (idempotent per hour)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Meter the last complete hour only")
        parser.add_argument(
            "--hour", help="Meter this hour once it is over (ISO 8601, UTC if no offset), e.g. 2026-11-30T05:00"
        )

    def handle(self, *args, once: bool = False, hour: str | None = None, **options):
        now = timezone.now()
        parts = Part.all_of(settings.EBCLOUD_METER_PARTS)  # the workers' split, in turn
        if hour is not None:  # `--hour ""` (an unset variable in a script) metered every pending hour
            try:
                moment = datetime.fromisoformat(hour)
                if moment.tzinfo is None:
                    moment = moment.replace(tzinfo=UTC)
                # `now`: an hour not over yet is refused, before any part is metered.
                hour_utc = metering._check_hour(moment)
                if not FIRST_DAY <= hour_utc.date() <= LAST_DAY:  # the days the costs API takes: none kept outside
                    raise ValueError(f"must be between {FIRST_DAY} and {LAST_DAY}: no costs are kept outside those years")
                results = [services.meter_hour(hour=hour_utc, part=part, now=now) for part in parts]
            except (ValueError, OverflowError) as exc:  # an hour at the calendar's ends overflows in UTC
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
