"""Schedule the lifecycle controller: django-q2 runs `pools.tasks.reconcile_all` every minute.

`update_or_create(name=...)` keeps the migration idempotent; catch-up is off cluster-wide
(`Q_CLUSTER["catch_up"] = False`, django-q2 has no per-schedule field) and the cluster's
`timeout` (60 s) is below its `retry` (120 s), as design §5 requires.
"""

from django.db import migrations

NAME = "pools.reconcile_all"


def schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "pools.tasks.reconcile_all", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("pools", "0002_lifecycle_simulated_cloud"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
