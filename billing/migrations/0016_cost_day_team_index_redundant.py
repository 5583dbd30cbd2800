"""The daily rollup's single-column index on `team` goes (issue 23): the (team, day) index leads
with it, and every index is written for each of the ~5,000 rows a day gets and for each update
that cannot stay on its row's page (migration 0012 did the same for the hourly ledger).

Only the index: Django's own `AlterField` would also drop the foreign key and add it again,
checking every row.
"""

import django.db.models.deletion
from django.db import migrations, models

TEAM_INDEX = "billing_costday_team_id_0ac23861"


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0015_usage_label_sets"),
        ("pools", "0017_node_successor"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="costday",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="pools.team"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{TEAM_INDEX}"',
                    f'CREATE INDEX "{TEAM_INDEX}" ON "billing_costday" ("team_id")',
                ),
            ],
        ),
    ]
