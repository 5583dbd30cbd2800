"""Usage records' labels stored once per distinct set (issue 23: they were 60% of the ledger's
bytes): sets named by their content, shared across hours and parts, written before the hour's
transaction, checked like the ledger's other references, and migrated from the stored rows."""

from __future__ import annotations

import importlib
import json
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from billing import services
from billing.bulk_insert import bulk_insert
from billing.label_sets import LabelSets, label_set_id, label_sets_store
from billing.models import LabelSet, UsageRecord
from pools.claims import Part
from pools.models import Node
from tests.billing.billing_helpers import HOUR, T0, label_set, meter, pod, scenario

pytestmark = pytest.mark.django_db


def test_a_set_is_named_by_its_content_whatever_the_order_of_its_keys():
    assert label_set_id({"team": "a", "project": "x"}) == label_set_id({"project": "x", "team": "a"})
    assert label_set_id({"team": "a"}) != label_set_id({"team": "b"}) != label_set_id({})
    assert label_set_id({"名": "値"}) == label_set_id(json.loads('{"名": "値"}'))
    sets = LabelSets()
    shared = {"team": "a"}
    assert sets.of(shared) is sets.of(shared)  # found by the dict's identity
    assert sets.of(dict(shared)).pk == sets.of(shared).pk  # an equal dict: another object, one row


@pytest.mark.parametrize("labels", [{}, {"team": "a", "project": "x"}, {"名": "値", "a b": 'q"t'}, {"n": 1, "l": [1, {"z": None}]}])
def test_the_migration_names_sets_by_the_same_rule(labels):
    """Migration 0015 keeps its own copy of the rule (a migration must not change when the code
    does): the ids it gave stored rows are the ones metering gives now."""
    migration = importlib.import_module("billing.migrations.0015_usage_label_sets")
    assert migration._label_set_id(labels) == label_set_id(labels)


def test_hours_share_their_sets_and_each_record_reads_its_labels(actors, teams):
    scenario(actors, teams, hours=2)
    first, second = (set(UsageRecord.objects.filter(hour=T0 + i * HOUR).values_list("label_set_id", flat=True)) for i in range(2))
    assert first == second and LabelSet.objects.count() == len(first)
    for record in UsageRecord.objects.select_related("label_set"):
        assert record.labels == record.label_set.labels and label_set_id(record.labels) == record.label_set_id
    llm = UsageRecord.objects.get(hour=T0, kind="pod", resource__startswith="algorithm/llm")
    assert llm.labels["project"] == "llm" and llm.labels["team"] == "algorithm"


def test_the_parts_of_an_hour_share_sets_and_store_only_new_ones(actors, teams):
    scenario(actors, teams, hours=1)
    stored = LabelSet.objects.count()
    for index in range(2):
        services.meter_hour(hour=T0 + HOUR, part=Part(index, 2))
    assert LabelSet.objects.count() == stored  # the same labels as the hour before: nothing new
    assert label_sets_store([LabelSet(id=label_set_id({"x": "1"}), labels={"x": "1"})]) == 1
    assert label_sets_store([LabelSet(id=label_set_id({"x": "1"}), labels={"x": "1"})]) == 0


def test_an_hour_that_fails_leaves_its_new_sets_and_no_record(actors, teams, monkeypatch):
    """The sets are committed before the hour's transaction, so parts adding the same new set
    never wait for each other's hour; a failed hour leaves them, named again when it reruns."""
    scenario(actors, teams, hours=1)
    before = LabelSet.objects.count()
    pod(teams["algorithm"], Node.objects.get(name="n-0"), "eval", gpus=1, labels={"project": "eval"})

    def fails(records):
        raise RuntimeError("allocation failed")

    monkeypatch.setattr(services, "cost_records_for", fails)
    with pytest.raises(RuntimeError):
        services.meter_hour(hour=T0 + HOUR)
    kept = LabelSet.objects.count()
    assert kept == before + 1 and not UsageRecord.objects.filter(hour=T0 + HOUR).exists()
    monkeypatch.undo()
    services.meter_hour(hour=T0 + HOUR)
    assert LabelSet.objects.count() == kept
    assert UsageRecord.objects.get(hour=T0 + HOUR, resource__startswith="algorithm/eval").labels["project"] == "eval"


def test_a_record_naming_a_set_that_is_not_stored_is_refused_with_its_statement(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    before = UsageRecord.objects.count()
    common = dict(hour=T0 + 5 * HOUR, kind=UsageRecord.Kind.REGISTRY, pool=pool, team=pool.team, quantity=Decimal(1))
    good = UsageRecord(resource="good", label_set=label_set(), **common)
    ghost = UsageRecord(resource="ghost", label_set=LabelSet(id=label_set_id({"never": "stored"}), labels={"never": "stored"}), **common)
    with pytest.raises(IntegrityError, match="label set"), transaction.atomic():
        bulk_insert(UsageRecord, [good, ghost])  # COPY on PostgreSQL: one statement
    assert UsageRecord.objects.count() == before


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the guard against other clients is PostgreSQL's")
def test_a_set_is_never_changed_or_deleted(actors, teams):
    scenario(actors, teams, hours=1)
    named = UsageRecord.objects.values_list("label_set_id", flat=True).first()
    with connection.cursor() as cursor:
        for sql in ("DELETE FROM billing_labelset WHERE id = %s", """UPDATE billing_labelset SET labels = '{"team": "x"}' WHERE id = %s"""):
            with pytest.raises(IntegrityError, match="never changed or deleted"), transaction.atomic():
                cursor.execute(sql, [named])


def usage_triggers() -> set[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'billing_usagerecord'::regclass AND NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'billing_usagerecord'")
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_stored_rows_their_sets_and_back(actors, teams):
    """0015 moves each stored row's labels into its set (equal labels: one set) and back."""
    scenario(actors, teams, hours=1)
    expected = {r.resource: r.labels for r in UsageRecord.objects.select_related("label_set")}
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("billing", "0014_cost_references_checked_per_statement")])
        with connection.cursor() as cursor:
            cursor.execute("SELECT resource, labels FROM billing_usagerecord")
            back = {resource: labels if isinstance(labels, dict) else json.loads(labels) for resource, labels in cursor.fetchall()}
        assert back == expected
        checked = usage_triggers()  # the references' checks of 0011 and 0014, on SQLite made again
        assert checked >= {"billing_usagerecord_refs_inserted", "billing_usagerecord_refs_updated"} if connection.vendor == "postgresql" else checked == {"billing_usagerecord_refs_insert", "billing_usagerecord_refs_update"}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    if connection.vendor == "postgresql":
        assert usage_triggers() >= {"billing_usagerecord_label_sets_inserted", "billing_usagerecord_label_sets_updated", "billing_usagerecord_refs_inserted"}
    else:
        assert usage_triggers() == {"billing_usagerecord_refs_insert", "billing_usagerecord_refs_update"}
    stored = {r.resource: r.labels for r in UsageRecord.objects.select_related("label_set")}
    assert stored == expected
    assert LabelSet.objects.count() == len({json.dumps(labels, sort_keys=True) for labels in expected.values()})
    meter(start=T0 + HOUR)  # the next hour names the migrated sets: no new ones
    assert LabelSet.objects.count() == len({json.dumps(labels, sort_keys=True) for labels in expected.values()})
