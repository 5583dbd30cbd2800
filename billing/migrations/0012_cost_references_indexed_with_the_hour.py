"""The cost rows' single-column pool and team indexes dropped: the (pool, hour) and (team, hour)
indexes lead with the same columns and serve every lookup by pool or team (PROTECT's check on a
delete among them), and each hour of a 1,000-pool fleet wrote ~7,000 entries into each of the
two for nothing.

Only the indexes go. Django's own operation would also drop and re-add each foreign key on
PostgreSQL, which validates it again over every cost row under an exclusive lock; the statements
below are the same on PostgreSQL and SQLite (Django named the indexes alike on both).
"""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = {"pool_id": "billing_costrecord_pool_id_90fe9938", "team_id": "billing_costrecord_team_id_79d3e556"}


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0011_usage_references_checked_per_statement'),
        ('pools', '0017_node_successor'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX "{name}" ON "billing_costrecord" ("{column}")',
                )
                for column, name in INDEXES.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='costrecord',
                    name='pool',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.gpunodepool'),
                ),
                migrations.AlterField(
                    model_name='costrecord',
                    name='team',
                    field=models.ForeignKey(db_index=False, help_text='Who is charged', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.team'),
                ),
            ],
        ),
    ]
