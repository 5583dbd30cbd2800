"""Schedule metering and budget checks: django-q2 runs `billing.tasks.meter_pending` hourly.

`update_or_create(name=...)` keeps the migration idempotent. django-q2's Schedule has no
per-schedule catch-up field; catch-up is off cluster-wide (`Q_CLUSTER["catch_up"] = False`)
and the task itself meters every complete hour not yet metered (up to a bounded look-back),
so a skipped tick loses nothing. The cluster's `timeout` (60 s) is below its `retry` (120 s).
"""

from django.db import migrations

NAME = "billing.meter_pending"


def schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "billing.tasks.meter_pending", "schedule_type": "H", "repeats": -1},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0002_metering_chargeback_budgets"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
