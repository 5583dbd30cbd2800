"""A rolling upgrade: the previous release's code keeps running on the migrated schema
(docs/operator.md, "Upgrading", step 4), so each column added since then must take an INSERT
that does not name it: nullable, or NOT NULL with a database default (`db_default`), never a
Python-only `default`, which the old code does not know.

PREVIOUS_RELEASE is the last migration of each app in the release before this one (28f8ab2);
move it forward when a release ships.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection, models
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from monitoring.models import AgentCredential
from pools.models import Node, Notification
from pools.services import pools as pool_services
from tests.conftest import make_document

PREVIOUS_RELEASE = {
    "billing": "0018_price_book_values_checked",
    "monitoring": "0005_alert_episodes_and_silences",
    "pools": "0018_pod_disruption_budget",
}


def previous_columns() -> dict[str, set[str]]:
    """Each table of the previous release and the columns it had."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    state = loader.project_state(list(PREVIOUS_RELEASE.items()))
    old_apps = state.apps
    return {
        model._meta.db_table: {field.column for field in model._meta.concrete_fields}
        for model in old_apps.get_models()
        if model._meta.app_label in PREVIOUS_RELEASE
    }


def test_every_column_added_since_the_previous_release_takes_an_insert_that_omits_it():
    old = previous_columns()
    offending = []
    for model in apps.get_models():
        known = old.get(model._meta.db_table)
        if known is None:
            continue  # a new table: the old code never writes it
        for field in model._meta.concrete_fields:
            if field.column not in known and not field.null and field.db_default is models.NOT_PROVIDED:
                offending.append(f"{model._meta.label}.{field.name}")
    assert not offending, f"NOT NULL columns without a database default (add db_default= to the field and its AddField): {offending}"


@pytest.fixture
def pool(actors):
    pool = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a"))
    pool_services.order_approve(user=actors["admin"], order=pool.orders.get())
    return pool


def insert_as_the_previous_release(template: models.Model, **changes) -> int:
    """INSERT a copy of `template` through raw SQL naming only the columns the previous release
    knew (all of them, as its ORM does), with `changes` applied; the new row's primary key."""
    model = type(template)
    known = previous_columns()[model._meta.db_table]
    fields = [f for f in model._meta.concrete_fields if f.column in known and not f.primary_key]
    values = [f.get_db_prep_save(changes.get(f.attname, getattr(template, f.attname)), connection) for f in fields]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    return model.objects.exclude(pk=template.pk).latest("pk").pk


def test_the_previous_release_can_still_insert_a_notification(teams):
    template = Notification.objects.create(team=teams["algorithm"], kind="BudgetThresholdReached", message="m", key="k-1")
    row = Notification.objects.get(pk=insert_as_the_previous_release(template, key="k-2"))
    assert (row.attempts, row.last_error, row.key) == (0, "", "k-2")


def test_the_previous_release_can_still_insert_a_node_and_an_agent_credential(pool):
    template = Node.objects.create(pool=pool, name="train-pool-a-m-0", zone=pool.zone, gpu_count=8, phase="Ready", billing="monthly")
    node = Node.objects.get(pk=insert_as_the_previous_release(template, name="train-pool-a-m-1"))
    assert (node.name, node.system_image) == ("train-pool-a-m-1", "")

    revoked = AgentCredential.objects.create(node=node, key_prefix="ebc_", key_hash="a" * 64, revoked_at=timezone.now())
    credential = AgentCredential.objects.get(pk=insert_as_the_previous_release(revoked, key_hash="b" * 64, revoked_at=None))
    assert (credential.node_id, credential.revoked_at, credential.predecessor_in_grace) == (node.pk, None, False)
