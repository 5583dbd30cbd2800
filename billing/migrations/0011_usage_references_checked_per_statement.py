"""The usage ledger's references to its pool and team, checked per statement instead of per row.

An hour of a 1,000-pool fleet writes ~41,000 usage rows, and a foreign key checks each row on
its own: a locked index probe per row and reference, ~0.14 s of an hour part's ~1.3 s at full
speed. The triggers below keep the foreign keys' guarantee on PostgreSQL, set-based:

- after each statement that writes usage rows, the pools and teams they name are locked FOR KEY
  SHARE at once (as a foreign key's check locks them, so none is deleted before the writer
  commits) and must all exist, else the statement fails with foreign_key_violation;
- a pool or team that usage rows name cannot be deleted, nor its id changed (Django's PROTECT
  refuses it first; this guards every other client too).

SQLite, the embedded demo's database, checks each written row in a trigger; its deletes are
guarded by PROTECT alone (Django's test flush deletes table by table, in no dependency order).
A later migration that alters `billing_usagerecord` on SQLite remakes the table, which drops its
triggers: it must create them again (`tests/billing/test_ledger_references.py` fails without).
"""

import django.db.models.deletion
from django.db import migrations, models

POSTGRESQL = [
    """
    CREATE FUNCTION billing_usagerecord_refs_exist() RETURNS trigger LANGUAGE plpgsql AS $$
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
            RAISE foreign_key_violation USING MESSAGE = 'usage rows name a pool that does not exist',
                TABLE = 'billing_usagerecord', COLUMN = 'pool_id';
        END IF;
        WITH locked AS (SELECT id FROM pools_team WHERE id = ANY (teams) FOR KEY SHARE)
        SELECT count(*) INTO found FROM locked;
        IF found < cardinality(teams) THEN
            RAISE foreign_key_violation USING MESSAGE = 'usage rows name a team that does not exist',
                TABLE = 'billing_usagerecord', COLUMN = 'team_id';
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER billing_usagerecord_refs_inserted AFTER INSERT ON billing_usagerecord
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION billing_usagerecord_refs_exist()
    """,
    """
    CREATE TRIGGER billing_usagerecord_refs_updated AFTER UPDATE ON billing_usagerecord
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION billing_usagerecord_refs_exist()
    """,
    """
    CREATE FUNCTION billing_usagerecord_refs_kept() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        named boolean;
    BEGIN
        IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
            RETURN NEW;
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM billing_usagerecord WHERE %I = $1)', TG_ARGV[0]) INTO named USING OLD.id;
        IF named THEN
            RAISE foreign_key_violation USING MESSAGE = format('%s %s is named by usage rows', TG_TABLE_NAME, OLD.id),
                TABLE = TG_TABLE_NAME;
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER billing_usagerecord_pool_kept BEFORE DELETE OR UPDATE OF id ON pools_gpunodepool
    FOR EACH ROW EXECUTE FUNCTION billing_usagerecord_refs_kept('pool_id')
    """,
    """
    CREATE TRIGGER billing_usagerecord_team_kept BEFORE DELETE OR UPDATE OF id ON pools_team
    FOR EACH ROW EXECUTE FUNCTION billing_usagerecord_refs_kept('team_id')
    """,
]
POSTGRESQL_REVERSE = [
    "DROP TRIGGER billing_usagerecord_team_kept ON pools_team",
    "DROP TRIGGER billing_usagerecord_pool_kept ON pools_gpunodepool",
    "DROP FUNCTION billing_usagerecord_refs_kept()",
    "DROP TRIGGER billing_usagerecord_refs_updated ON billing_usagerecord",
    "DROP TRIGGER billing_usagerecord_refs_inserted ON billing_usagerecord",
    "DROP FUNCTION billing_usagerecord_refs_exist()",
]
_SQLITE_MISSING = (
    "NOT EXISTS (SELECT 1 FROM pools_gpunodepool WHERE id = NEW.pool_id)"
    " OR NOT EXISTS (SELECT 1 FROM pools_team WHERE id = NEW.team_id)"
)
SQLITE = [
    f"""
    CREATE TRIGGER billing_usagerecord_refs_{event.split()[0].lower()} BEFORE {event} ON billing_usagerecord
    WHEN {_SQLITE_MISSING}
    BEGIN SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed: usage rows name a pool or team that does not exist'); END
    """
    for event in ("INSERT", "UPDATE OF pool_id, team_id")
]
SQLITE_REVERSE = ["DROP TRIGGER billing_usagerecord_refs_insert", "DROP TRIGGER billing_usagerecord_refs_update"]


def _run(statements: dict):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(sql, params=None)  # no placeholders: `%I` is format()'s

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_meter_parts'),
        ('pools', '0017_node_successor'),
    ]

    operations = [
        migrations.AlterField(
            model_name='usagerecord',
            name='pool',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.gpunodepool'),
        ),
        migrations.AlterField(
            model_name='usagerecord',
            name='team',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='pools.team'),
        ),
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL, "sqlite": SQLITE}),
            _run({"postgresql": POSTGRESQL_REVERSE, "sqlite": SQLITE_REVERSE}),
        ),
    ]
