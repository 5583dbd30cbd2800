"""Usage records' labels stored once per distinct set (`LabelSet`), the records naming their set.

An hour of a 1,000-pool fleet writes ~41,000 usage rows with ~4,700 distinct label sets, nearly
all of them the hour before's; the labels were 13 of the 19.6 MB the hour's rows carried, and
parsing them as JSON a third of PostgreSQL's work storing the rows (issue 23). A set's id is its
content's (the first 128 bits of the SHA-256 of its JSON with sorted keys): `billing.label_sets`
names sets by that rule, frozen here for the rows already stored.

The reference is checked per statement on PostgreSQL, as 0011 and 0014 check the pool and team:
after each statement that writes usage rows, the sets they name must all exist. A set is never
changed or deleted there (a trigger refuses both; its id is its content). SQLite, the embedded
demo's database, checks each row in 0011's triggers, made again here with the set in them:
this migration remakes the table there, which drops them.

It rewrites every stored usage row once (2.3 s for the bench's 41,000 rows and 4,740 sets):
on a ledger of many months, run it in a quiet hour. Each later hour then stores 43% less.
"""

import hashlib
import importlib
import json
import uuid

import django.db.models.deletion
from django.db import migrations, models

USAGE = importlib.import_module("billing.migrations.0011_usage_references_checked_per_statement")


def _label_set_id(labels: dict) -> uuid.UUID:
    text = json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return uuid.UUID(bytes=hashlib.sha256(text.encode()).digest()[:16])


def _sets_named(apps, schema_editor):
    """Each distinct label set of the stored usage rows as a `LabelSet`, and the rows naming it."""
    connection = schema_editor.connection
    postgresql = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT labels::text FROM billing_usagerecord" if postgresql else "SELECT DISTINCT labels FROM billing_usagerecord")
        texts = [text for (text,) in cursor.fetchall()]
        named = [(text, _label_set_id(json.loads(text) if text else {})) for text in texts]
        sets = {set_id: text or "{}" for text, set_id in named}
        if postgresql:
            cursor.execute(
                "INSERT INTO billing_labelset (id, labels) SELECT * FROM unnest(%s::uuid[], %s::jsonb[]) ON CONFLICT DO NOTHING",
                [list(sets), list(sets.values())],
            )
            # jsonb compares by content: one statement names every row's set.
            cursor.execute("UPDATE billing_usagerecord u SET label_set_id = s.id FROM billing_labelset s WHERE u.labels = s.labels")
        else:
            cursor.executemany("INSERT OR IGNORE INTO billing_labelset (id, labels) VALUES (%s, %s)", [(k.hex, v) for k, v in sets.items()])
            cursor.executemany("UPDATE billing_usagerecord SET label_set_id = %s WHERE labels = %s", [(k.hex, text) for text, k in named])


def _labels_back(apps, schema_editor):
    """Back: each usage row's labels from its set."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("UPDATE billing_usagerecord u SET labels = s.labels FROM billing_labelset s WHERE s.id = u.label_set_id")
        else:
            cursor.execute("UPDATE billing_usagerecord SET labels = (SELECT s.labels FROM billing_labelset s WHERE s.id = billing_usagerecord.label_set_id)")


POSTGRESQL = [
    """
    CREATE FUNCTION billing_usage_label_sets_exist() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        sets uuid[];
        found integer;
    BEGIN
        SELECT array_agg(DISTINCT label_set_id) INTO sets FROM written;
        IF sets IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT count(*) INTO found FROM billing_labelset WHERE id = ANY (sets);
        IF found < cardinality(sets) THEN
            RAISE foreign_key_violation USING MESSAGE = 'usage rows name a label set that does not exist',
                TABLE = 'billing_usagerecord', COLUMN = 'label_set_id';
        END IF;
        RETURN NULL;
    END
    $$
    """,
    *(
        f"""
        CREATE TRIGGER billing_usagerecord_label_sets_{done} AFTER {event} ON billing_usagerecord
        REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION billing_usage_label_sets_exist()
        """
        for event, done in (("INSERT", "inserted"), ("UPDATE", "updated"))
    ),
    """
    CREATE FUNCTION billing_labelset_kept() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE restrict_violation USING MESSAGE = format('label set %s is never changed or deleted: usage rows name it by its content', OLD.id),
            TABLE = TG_TABLE_NAME;
    END
    $$
    """,
    """
    CREATE TRIGGER billing_labelset_kept BEFORE DELETE OR UPDATE ON billing_labelset
    FOR EACH ROW EXECUTE FUNCTION billing_labelset_kept()
    """,
]
POSTGRESQL_REVERSE = [
    "DROP TRIGGER billing_labelset_kept ON billing_labelset",
    "DROP FUNCTION billing_labelset_kept()",
    "DROP TRIGGER billing_usagerecord_label_sets_updated ON billing_usagerecord",
    "DROP TRIGGER billing_usagerecord_label_sets_inserted ON billing_usagerecord",
    "DROP FUNCTION billing_usage_label_sets_exist()",
]
_SQLITE_MISSING = f"{USAGE._SQLITE_MISSING} OR NOT EXISTS (SELECT 1 FROM billing_labelset WHERE id = NEW.label_set_id)"
SQLITE = [
    *(f"DROP TRIGGER IF EXISTS billing_usagerecord_refs_{event}" for event in ("insert", "update")),
    *(
        f"""
        CREATE TRIGGER billing_usagerecord_refs_{event.split()[0].lower()} BEFORE {event} ON billing_usagerecord
        WHEN {_SQLITE_MISSING}
        BEGIN SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed: usage rows name a pool, team or label set that does not exist'); END
        """
        for event in ("INSERT", "UPDATE OF pool_id, team_id, label_set_id")
    ),
]
SQLITE_REVERSE = [*(f"DROP TRIGGER IF EXISTS billing_usagerecord_refs_{event}" for event in ("insert", "update"))]

_run = USAGE._run  # each vendor's statements, no placeholders (`%s` is format()'s)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0014_cost_references_checked_per_statement'),
    ]

    operations = [
        # Back on SQLite, once the table is as 0011 left it (and remade): 0011's triggers again.
        migrations.RunPython(migrations.RunPython.noop, _run({"sqlite": [*SQLITE_REVERSE, *USAGE.SQLITE]})),
        migrations.CreateModel(
            name='LabelSet',
            fields=[
                ('id', models.UUIDField(primary_key=True, serialize=False)),
                ('labels', models.JSONField()),
            ],
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='label_set',
            field=models.ForeignKey(db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='billing.labelset'),
        ),
        migrations.RunPython(_sets_named, _labels_back),
        migrations.RemoveField(
            model_name='usagerecord',
            name='labels',
        ),
        migrations.AlterField(
            model_name='usagerecord',
            name='label_set',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='billing.labelset'),
        ),
        # SQLite's remade table lost 0011's triggers: made again, with the set.
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL, "sqlite": SQLITE}),
            _run({"postgresql": POSTGRESQL_REVERSE, "sqlite": SQLITE_REVERSE}),
        ),
    ]
