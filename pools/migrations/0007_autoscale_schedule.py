"""Schedule the autoscaler: django-q2 runs `pools.tasks.autoscale_all` every minute
(`update_or_create(name=...)`, idempotent; catch-up is off cluster-wide)."""

from django.db import migrations

NAME = "pools.autoscale_all"


def schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.update_or_create(
        name=NAME,
        defaults={"func": "pools.tasks.autoscale_all", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("pools", "0006_autoscaler")]

    operations = [migrations.RunPython(schedule, unschedule)]
