"""A node usage record may bill a pool's alike nodes together (issue 23): `node_names` lists them.

Nodes of one pool with the same billing, price, GPUs and labels used the same in an hour; an hour
of a 1,000-pool fleet bills ~20,000 nodes, ~20 a pool and nearly all of them alike, so the hour
writes ~1,000 node rows instead of ~20,000, as a workload's replicas on a node are one pod row.
The rows stored before bill one node each and keep an empty `node_names`: nothing to rewrite.

On PostgreSQL the column comes with no rewrite of the table. On SQLite, the embedded demo's
database, adding it remakes the table, which drops 0015's per-row reference triggers: they are
made again after it (and going back, after the table is remade again).
"""

import importlib

from django.db import migrations, models

LABEL_SETS = importlib.import_module("billing.migrations.0015_usage_label_sets")
_run = LABEL_SETS._run


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
    ]
