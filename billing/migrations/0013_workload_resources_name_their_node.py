"""Usage records' `resource` widened to 430 characters: a workload's record now names its node
(`namespace/pod@node`), so a pod recreated under its own name on another node within an hour
(a StatefulSet's pod after its node was drained) is a second record, not a clash on the ledger's
(hour, kind, resource) key that failed the hour at every retry.

On PostgreSQL a longer varchar is a catalog change (no rewrite of the table or its indexes).
SQLite does not enforce the length, so nothing is done there: Django's own operation would remake
the table there and drop migration 0011's triggers with it.
"""

from django.db import migrations, models


def _widen(length: int):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'ALTER TABLE "billing_usagerecord" ALTER COLUMN "resource" TYPE varchar({length})')

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0012_cost_references_indexed_with_the_hour'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_widen(430), _widen(320))],
            state_operations=[
                migrations.AlterField(
                    model_name='usagerecord',
                    name='resource',
                    field=models.CharField(help_text='node name, namespace/pod@node, or pool name', max_length=430),
                ),
            ],
        ),
    ]
