"""Nodes: the system image their machine was ordered with; provisioning follows it, not the spec.

A node provisioning when this runs is given its pool's image now (the image its remaining steps
were following); Ready nodes and nodes not ordered yet keep it empty."""

from django.db import migrations, models


def provisioning_nodes_keep_the_pools_image(apps, schema_editor):
    Node = apps.get_model("pools", "Node")
    provisioning = Node.objects.filter(phase__in=("Provisioning", "Initializing", "Registering"), release_reason="").exclude(provider_id="")
    GpuNodePool = apps.get_model("pools", "GpuNodePool")
    for pool in GpuNodePool.objects.filter(pk__in=provisioning.values("pool_id")).only("pk", "document"):
        spec = (pool.document or {}).get("spec") or {}
        image = str(spec.get("systemImage", "ubuntu-22.04-cuda-12.2"))  # the default of pools/core/spec.py
        provisioning.filter(pool_id=pool.pk).update(system_image=image[:128])


class Migration(migrations.Migration):

    dependencies = [
        ('pools', '0020_notification_delivery_steps'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='system_image',
            field=models.CharField(blank=True, db_default='', default='', help_text="The system image the node's machine was ordered with; its provisioning steps follow it, whatever the pool's spec says later", max_length=128),
        ),
        migrations.RunPython(provisioning_nodes_keep_the_pools_image, migrations.RunPython.noop, elidable=True),
    ]
