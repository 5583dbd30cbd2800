"""A node usage record may bill a pool's alike nodes together (issue 23): `node_names` lists them.

Nodes of one pool with the same billing, price, GPUs and labels used the same in an hour; an hour
of a 1,000-pool fleet bills ~20,000 nodes, ~20 a pool and nearly all of them alike, so the hour
writes ~1,000 node rows instead of ~20,000, as a workload's replicas on a node are one pod row.
The rows stored before bill one node each and keep an empty `node_names`: nothing to rewrite.
Going back, each record of several nodes becomes a record per node again (its amounts divided:
they are sums of equal amounts), so nothing is lost either way.

On PostgreSQL the column comes with no rewrite of the table. On SQLite, the embedded demo's
database, adding it remakes the table, which drops 0015's per-row reference triggers: they are
made again after it (and going back, after the table is remade again).
"""

import importlib

from django.db import migrations, models

LABEL_SETS = importlib.import_module("billing.migrations.0015_usage_label_sets")
_run = LABEL_SETS._run
SPLIT = ("quantity", "amount", "list_amount")  # summed over a record's nodes; GPUs too


def _a_record_a_node(apps, schema_editor):
    """Each record of several nodes as one record per node, as metering wrote them before."""
    UsageRecord = apps.get_model("billing", "UsageRecord")
    alike = UsageRecord.objects.exclude(node_names="")
    for record in alike.iterator(chunk_size=2000):
        names = record.node_names.split()
        count = len(names)
        for field in SPLIT:
            value = getattr(record, field)
            setattr(record, field, None if value is None else value / count)
        record.gpu_count //= count
        record.node_names = ""
        copies = []
        for name in names[1:]:
            copy = UsageRecord(**{f.attname: getattr(record, f.attname) for f in record._meta.concrete_fields if not f.primary_key})
            copy.resource = copy.node_name = name
            copies.append(copy)
        record.save()
        UsageRecord.objects.bulk_create(copies)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0016_cost_day_team_index_redundant"),
    ]

    operations = [
        # Back on SQLite, once the table is remade without the column: 0015's triggers again.
        migrations.RunPython(migrations.RunPython.noop, _run({"sqlite": LABEL_SETS.SQLITE})),
        migrations.AddField(
            model_name="usagerecord",
            name="node_names",
            field=models.TextField(
                blank=True, default="", help_text="a node record's nodes when more than one, space-separated"
            ),
        ),
        migrations.RunPython(_run({"sqlite": LABEL_SETS.SQLITE}), _run({"sqlite": LABEL_SETS.SQLITE_REVERSE})),
        # Back: first (the column and the triggers still there), a record per node again.
        migrations.RunPython(migrations.RunPython.noop, _a_record_a_node),
    ]
