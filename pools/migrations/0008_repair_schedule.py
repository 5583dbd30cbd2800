"""Schedule auto-repair: django-q2 runs `pools.tasks.repair_all` every minute (idempotent
`update_or_create(name=...)`; catch-up is off cluster-wide)."""

from django.db import migrations

NAME = "pools.repair_all"


def schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.update_or_create(
        name=NAME,
        defaults={"func": "pools.tasks.repair_all", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("pools", "0007_autoscale_schedule")]

    operations = [migrations.RunPython(schedule, unschedule)]
