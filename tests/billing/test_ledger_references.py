"""The usage and cost ledgers' pool and team references hold as a foreign key's would (issue 23
item 3: checked per statement, not per row, by migration 0011's triggers, made general and
extended to the cost rows by 0014): a write naming a missing pool or team is refused whole, a
pool or team that ledger rows name cannot be deleted, and a writer that has not committed yet
keeps what it names from being deleted under it."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import ProtectedError

from billing.bulk_insert import bulk_insert
from billing.models import CostRecord, UsageRecord
from pools.models import Team
from tests.billing.billing_helpers import T0, in_thread, label_set, scenario

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the guards against other clients are PostgreSQL's")


def usage_row(pool, team, name: str) -> UsageRecord:
    return UsageRecord(hour=T0, kind=UsageRecord.Kind.NODE, resource=name, pool=pool, team=team, quantity=1, amount=1, label_set=label_set())


def cost_row(pool, team, name: str) -> CostRecord:
    return CostRecord(hour=T0, pool=pool, team=team, namespace=name, billing_kind="on_demand", cost_kind="usage", amount=1)


# What a row names itself by, to find it again.
LEDGERS = {
    "usage": (UsageRecord, usage_row, "resource"),
    "cost": (CostRecord, cost_row, "namespace"),
}
ledgers = pytest.mark.parametrize("ledger", LEDGERS)


@ledgers
def test_a_write_naming_a_missing_pool_or_team_is_refused_whole(actors, teams, ledger):
    model, row, _ = LEDGERS[ledger]
    if ledger == "cost" and connection.vendor != "postgresql":
        pytest.skip("SQLite keeps the cost rows' foreign keys, checked at the commit, and a test's transaction never commits")
    pool, _ = scenario(actors, teams, hours=1)
    before = model.objects.count()
    ghost = Team(pk=10**9, name="Ghost", slug="ghost")
    bad_pool = row(pool, teams["algorithm"], "bad-pool")
    bad_pool.pool_id = 10**9
    for bad in (row(pool, ghost, "bad-team"), bad_pool):
        good = [row(pool, teams["algorithm"], f"good-{i}") for i in range(3)]
        with pytest.raises(IntegrityError), transaction.atomic():
            bulk_insert(model, [*good, bad])  # COPY on PostgreSQL: one statement
        assert model.objects.count() == before
    if connection.vendor == "postgresql":  # the triggers' messages (SQLite's foreign keys have their own)
        with pytest.raises(IntegrityError, match=f"{ledger} rows name a team that does not exist"), transaction.atomic():
            bulk_insert(model, [row(pool, ghost, "bad-team")])


def test_a_pool_or_team_named_by_ledger_rows_is_not_deleted_by_the_orm(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    with pytest.raises(ProtectedError):
        teams["inference"].delete()
    with pytest.raises(ProtectedError):
        pool.delete()


@postgresql_only
@ledgers
def test_nor_by_any_other_client_nor_renumbered(actors, teams, ledger):
    model, row, _ = LEDGERS[ledger]
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")  # named by one ledger row and nothing else
    bulk_insert(model, [row(pool, payer, "paid-by-payer")])
    with connection.cursor() as cursor:
        for sql in ("DELETE FROM pools_team WHERE id = %s", "UPDATE pools_team SET id = id + 1000000 WHERE id = %s"):
            with pytest.raises(IntegrityError, match=f"named by {ledger} rows"), transaction.atomic():
                cursor.execute(sql, [payer.pk])
        cursor.execute("UPDATE pools_team SET name = 'Payer Ltd' WHERE id = %s", [payer.pk])  # its other columns change freely
    model.objects.filter(team=payer).delete()
    payer.delete()
    assert not Team.objects.filter(slug="payer").exists()


@postgresql_only
@pytest.mark.django_db(transaction=True)
@ledgers
def test_what_an_uncommitted_writer_names_cannot_be_deleted_under_it(actors, teams, ledger):
    model, row, _ = LEDGERS[ledger]
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")
    written, release = threading.Event(), threading.Event()

    def writer():
        with transaction.atomic():
            bulk_insert(model, [row(pool, payer, "paid-by-payer")])
            written.set()
            release.wait(10)
            transaction.set_rollback(True)

    thread = in_thread(writer)
    assert written.wait(10)
    with connection.cursor() as cursor:
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            cursor.execute("SET LOCAL lock_timeout = '200ms'")
            cursor.execute("DELETE FROM pools_team WHERE id = %s", [payer.pk])
    release.set()
    thread.join()
    payer.delete()  # the writer rolled back: nothing names it now


@postgresql_only
@pytest.mark.django_db(transaction=True)
@ledgers
def test_a_writer_naming_what_was_deleted_meanwhile_is_refused(actors, teams, ledger):
    model, row, name = LEDGERS[ledger]
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")
    errors = []
    started = threading.Event()

    def writer():
        started.set()
        try:
            with transaction.atomic():
                bulk_insert(model, [row(pool, payer, "paid-by-payer")])  # waits for the delete's commit
        except IntegrityError as exc:
            errors.append(str(exc))

    with transaction.atomic():
        Team.objects.filter(pk=payer.pk).delete()  # holds the row until the commit
        thread = in_thread(writer)
        assert started.wait(10)
        with connection.cursor() as cursor:  # the writer is waiting on the deleted row's lock
            for _ in range(100):
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                threading.Event().wait(0.05)
    thread.join()
    assert errors and "team that does not exist" in errors[0]
    assert not model.objects.filter(**{name: "paid-by-payer"}).exists()
