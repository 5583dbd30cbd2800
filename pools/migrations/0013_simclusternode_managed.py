from django.db import migrations, models


def managed_from_current(apps, schema_editor):
    """Until now the control plane replaced a simulated node's labels and taints whole: all it
    carries was applied by it."""
    SimClusterNode = apps.get_model("pools", "SimClusterNode")
    for row in SimClusterNode.objects.all():
        row.managed = {"labels": sorted(row.labels or {}), "taints": sorted([t["key"], t["effect"]] for t in row.taints or ())}
        row.save(update_fields=["managed"])


class Migration(migrations.Migration):
    dependencies = [
        ("pools", "0012_pod_mirror"),
    ]

    operations = [
        migrations.AddField(
            model_name="simclusternode",
            name="managed",
            field=models.JSONField(
                blank=True, default=dict, help_text="What the control plane applied last: label keys and taint (key, effect) pairs (a field manager's set)"
            ),
        ),
        migrations.RunPython(managed_from_current, migrations.RunPython.noop),
    ]
