"""The scheduler pass and the weekly fragmentation point moved from `pools.tasks_pods` into
`pools.tasks` (one tasks module per app): rewrite the `func` of schedules that existing
databases already hold (0004 created them under the old path)."""

from django.db import migrations

MOVED = {
    "pools.tasks_pods.scheduler_pass_task": "pools.tasks.scheduler_pass_task",
    "pools.tasks_pods.fragmentation_record_task": "pools.tasks.fragmentation_record_task",
}


def forward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for old, new in MOVED.items():
        Schedule.objects.filter(func=old).update(func=new)


def backward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for old, new in MOVED.items():
        Schedule.objects.filter(func=new).update(func=old)


class Migration(migrations.Migration):
    dependencies = [
        ("pools", "0009_repair_approval_sim_gpu_fault"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(forward, backward)]
