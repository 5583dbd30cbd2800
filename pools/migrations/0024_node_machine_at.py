"""`Node.machine_at`: when the cloud delivered the node's machine. An on-demand node is billed
from it, not from when it was requested (a burst node the cloud never sold costs nothing).
Nodes that already have a machine get their request time, which they were billed from until
now, so no hour already metered would be priced differently."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    Node = apps.get_model("pools", "Node")
    Node.objects.exclude(provider_id="").filter(machine_at__isnull=True).update(machine_at=models.F("created_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("pools", "0023_pod_mirror_relists_for_owner_references"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="machine_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When the cloud delivered the node's machine (its order succeeded); an on-demand node is billed from it, as the cloud bills from launch",
                null=True,
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
