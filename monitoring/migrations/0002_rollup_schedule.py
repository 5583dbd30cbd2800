"""Schedule the watermark rollup: django-q2 runs `monitoring.tasks.rollup_pool_samples` every
minute. `update_or_create(name=...)` keeps the migration idempotent (design §5)."""

from django.db import migrations

NAME = "monitoring.rollup_pool_samples"


def schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "monitoring.tasks.rollup_pool_samples", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
