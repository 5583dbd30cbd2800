"""The pod mirror lists the cluster again once: the documents it stored before kept no
ownerReferences, which the scale-down now reads (a DaemonSet's pod goes with its node, a pod no
controller owns keeps it). A watch resumed from the stored resourceVersion would bring them only
as each pod changes; with no resourceVersion the mirror relists at its next start
(pools/controllers/pod_mirror.py), as after 410 Gone."""

from django.db import migrations


def relist(apps, schema_editor):
    apps.get_model("pools", "WatchCursor").objects.filter(resource="pods").update(resource_version="")


class Migration(migrations.Migration):

    dependencies = [
        ("pools", "0022_pod_placements"),
    ]

    operations = [
        migrations.RunPython(relist, migrations.RunPython.noop, elidable=True),
    ]
