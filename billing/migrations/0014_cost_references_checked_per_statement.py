"""The cost ledger's references to its pool and team checked per statement on PostgreSQL, as the
usage ledger's are since 0011, by the same two functions, made general here.

An hour part of a 1,000-pool fleet writes ~3,500 cost rows, and their deferred foreign keys were
checked row by row before the hour's parts are counted (`SET CONSTRAINTS ALL IMMEDIATE`: 24 ms
of a part's ~0.86 s at full speed). The foreign keys give way to the triggers of 0011, now taking
the ledger's name for their messages: after each statement that writes cost rows, the pools and
teams they name are locked FOR KEY SHARE at once and must all exist; a pool or team that cost
rows name cannot be deleted, nor its id changed. 0011's usage triggers call the general
functions too, with the messages they had.

SQLite, the embedded demo's database, keeps its foreign keys (checked per row; no table to remake).
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

USAGE = importlib.import_module("billing.migrations.0011_usage_references_checked_per_statement")

FOREIGN_KEYS = {
    "pool_id": ("billing_costrecord_pool_id_90fe9938_fk_pools_gpunodepool_id", "pools_gpunodepool"),
    "team_id": ("billing_costrecord_team_id_79d3e556_fk_pools_team_id", "pools_team"),
}
# (table, the rows' name in messages, trigger prefix)
LEDGERS = (("billing_usagerecord", "usage rows", "billing_usagerecord"), ("billing_costrecord", "cost rows", "billing_costrecord"))

FUNCTIONS = [
    """
    CREATE FUNCTION billing_ledger_refs_exist() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        pools bigint[];
        teams bigint[];
        found integer;
    BEGIN
        SELECT array_agg(DISTINCT pool_id), array_agg(DISTINCT team_id) INTO pools, teams FROM written;
        IF pools IS NULL THEN
            RETURN NULL;
        END IF;
        WITH locked AS (SELECT id FROM pools_gpunodepool WHERE id = ANY (pools) FOR KEY SHARE)
        SELECT count(*) INTO found FROM locked;
        IF found < cardinality(pools) THEN
            RAISE foreign_key_violation USING MESSAGE = format('%s name a pool that does not exist', TG_ARGV[0]),
                TABLE = TG_TABLE_NAME, COLUMN = 'pool_id';
        END IF;
        WITH locked AS (SELECT id FROM pools_team WHERE id = ANY (teams) FOR KEY SHARE)
        SELECT count(*) INTO found FROM locked;
        IF found < cardinality(teams) THEN
            RAISE foreign_key_violation USING MESSAGE = format('%s name a team that does not exist', TG_ARGV[0]),
                TABLE = TG_TABLE_NAME, COLUMN = 'team_id';
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE FUNCTION billing_ledger_refs_kept() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        named boolean;
    BEGIN
        IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
            RETURN NEW;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I = $1)', TG_ARGV[0], TG_ARGV[1]) INTO named USING OLD.id;
        IF named THEN
            RAISE foreign_key_violation USING MESSAGE = format('%s %s is named by %s', TG_TABLE_NAME, OLD.id, TG_ARGV[2]),
                TABLE = TG_TABLE_NAME;
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END
    $$
    """,
]


def _triggers(table: str, rows: str, prefix: str) -> list[str]:
    return [
        *(
            f"""
            CREATE TRIGGER {prefix}_refs_{done} AFTER {event} ON {table}
            REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION billing_ledger_refs_exist('{rows}')
            """
            for event, done in (("INSERT", "inserted"), ("UPDATE", "updated"))
        ),
        f"""
        CREATE TRIGGER {prefix}_pool_kept BEFORE DELETE OR UPDATE OF id ON pools_gpunodepool
        FOR EACH ROW EXECUTE FUNCTION billing_ledger_refs_kept('{table}', 'pool_id', '{rows}')
        """,
        f"""
        CREATE TRIGGER {prefix}_team_kept BEFORE DELETE OR UPDATE OF id ON pools_team
        FOR EACH ROW EXECUTE FUNCTION billing_ledger_refs_kept('{table}', 'team_id', '{rows}')
        """,
    ]


def _triggers_dropped(table: str, prefix: str) -> list[str]:
    return [
        f"DROP TRIGGER {prefix}_team_kept ON pools_team",
        f"DROP TRIGGER {prefix}_pool_kept ON pools_gpunodepool",
        f"DROP TRIGGER {prefix}_refs_updated ON {table}",
        f"DROP TRIGGER {prefix}_refs_inserted ON {table}",
    ]


FORWARD = [
    *(f'ALTER TABLE billing_costrecord DROP CONSTRAINT "{name}"' for name, _ in FOREIGN_KEYS.values()),
    *USAGE.POSTGRESQL_REVERSE,  # 0011's usage triggers and functions, made general below
    *FUNCTIONS,
    *(sql for ledger in LEDGERS for sql in _triggers(*ledger)),
]
REVERSE = [
    *(sql for table, _, prefix in reversed(LEDGERS) for sql in _triggers_dropped(table, prefix)),
    "DROP FUNCTION billing_ledger_refs_kept()",
    "DROP FUNCTION billing_ledger_refs_exist()",
    *USAGE.POSTGRESQL,
    *(
        f'ALTER TABLE billing_costrecord ADD CONSTRAINT "{name}" FOREIGN KEY ("{column}") REFERENCES "{target}" ("id") DEFERRABLE INITIALLY DEFERRED'
        for column, (name, target) in FOREIGN_KEYS.items()
    ),
]


def _run(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql, params=None)  # no placeholders: `%I` and `%s` are format()'s

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0013_workload_resources_name_their_node'),
        ('pools', '0017_node_successor'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_run(FORWARD), _run(REVERSE))],
            state_operations=[
                migrations.AlterField(
                    model_name='costrecord',
                    name='pool',
                    field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.gpunodepool'),
                ),
                migrations.AlterField(
                    model_name='costrecord',
                    name='team',
                    field=models.ForeignKey(db_constraint=False, db_index=False, help_text='Who is charged', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.team'),
                ),
            ],
        ),
    ]
