"""Run metering at the top of each hour (issue 21 §3).

0003 created the hourly schedule with django-q2's default `next_run` (the moment of the
migration), so metering ran at whatever minute the product was installed: an hour completed at
11:00 could wait until 11:59 to be written. This moves `next_run` to the next top of the hour
plus `billing.hours.METER_RUN_OFFSET` (2 minutes, for the hour's late samples); django-q2 adds
whole hours to it from then on, so every later run keeps that minute. Idempotent
(`update_or_create` by name, as in 0003). Reversing leaves the schedule as it is: an earlier
minute is no worse a time to run.
"""

from django.db import migrations
from django.utils import timezone

from billing.hours import next_meter_run

NAME = "billing.meter_pending"


def align(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": "billing.tasks.meter_pending",
            "schedule_type": "H",
            "repeats": -1,
            "next_run": next_meter_run(timezone.now()),
        },
    )


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_budget_alerts_delivered_as_notifications"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(align, migrations.RunPython.noop)]
