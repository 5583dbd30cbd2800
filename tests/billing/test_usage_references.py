"""The usage ledger's pool and team references hold as a foreign key's would (issue 23 item 3:
checked per statement, not per row, by migration 0011's triggers): a write naming a missing pool
or team is refused whole, a pool or team that usage rows name cannot be deleted, and a writer
that has not committed yet keeps what it names from being deleted under it."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import ProtectedError

from billing.bulk_insert import bulk_insert
from billing.models import UsageRecord
from pools.models import Team
from tests.billing.billing_helpers import T0, scenario

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the guards against other clients are PostgreSQL's")


def usage_row(pool, team, name: str) -> UsageRecord:
    return UsageRecord(hour=T0, kind=UsageRecord.Kind.NODE, resource=name, pool=pool, team=team, quantity=1, amount=1)


def test_a_write_naming_a_missing_pool_or_team_is_refused_whole(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    before = UsageRecord.objects.count()
    ghost = Team(pk=10**9, name="Ghost", slug="ghost")
    for bad in (usage_row(pool, ghost, "bad-team"), usage_row(pool, teams["algorithm"], "bad-pool")):
        if bad.resource == "bad-pool":
            bad.pool_id = 10**9
        good = [usage_row(pool, teams["algorithm"], f"good-{i}") for i in range(3)]
        with pytest.raises(IntegrityError, match="does not exist"), transaction.atomic():
            bulk_insert(UsageRecord, [*good, bad])  # COPY on PostgreSQL: one statement
        assert UsageRecord.objects.count() == before


def test_a_pool_or_team_named_by_usage_rows_is_not_deleted_by_the_orm(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    with pytest.raises(ProtectedError):
        teams["inference"].delete()
    with pytest.raises(ProtectedError):
        pool.delete()


@postgresql_only
def test_nor_by_any_other_client_nor_renumbered(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")  # named by a usage row and nothing else
    bulk_insert(UsageRecord, [usage_row(pool, payer, "paid-by-payer")])
    with connection.cursor() as cursor:
        for sql in ("DELETE FROM pools_team WHERE id = %s", "UPDATE pools_team SET id = id + 1000000 WHERE id = %s"):
            with pytest.raises(IntegrityError, match="named by usage rows"), transaction.atomic():
                cursor.execute(sql, [payer.pk])
        cursor.execute("UPDATE pools_team SET name = 'Payer Ltd' WHERE id = %s", [payer.pk])  # its other columns change freely
    UsageRecord.objects.filter(team=payer).delete()
    payer.delete()
    assert not Team.objects.filter(slug="payer").exists()


def _in_thread(target) -> threading.Thread:
    def run():
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_what_an_uncommitted_writer_names_cannot_be_deleted_under_it(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")
    written, release = threading.Event(), threading.Event()

    def writer():
        with transaction.atomic():
            bulk_insert(UsageRecord, [usage_row(pool, payer, "paid-by-payer")])
            written.set()
            release.wait(10)
            transaction.set_rollback(True)

    thread = _in_thread(writer)
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
def test_a_writer_naming_what_was_deleted_meanwhile_is_refused(actors, teams):
    pool, _ = scenario(actors, teams, hours=1)
    payer = Team.objects.create(name="Payer", slug="payer")
    errors = []
    started = threading.Event()

    def writer():
        started.set()
        try:
            with transaction.atomic():
                bulk_insert(UsageRecord, [usage_row(pool, payer, "paid-by-payer")])  # waits for the delete's commit
        except IntegrityError as exc:
            errors.append(str(exc))

    with transaction.atomic():
        Team.objects.filter(pk=payer.pk).delete()  # holds the row until the commit
        thread = _in_thread(writer)
        assert started.wait(10)
        with connection.cursor() as cursor:  # the writer is waiting on the deleted row's lock
            for _ in range(100):
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                threading.Event().wait(0.05)
    thread.join()
    assert errors and "team that does not exist" in errors[0]
    assert not UsageRecord.objects.filter(resource="paid-by-payer").exists()
