"""Whose costs a FOCUS export holds (design §6: teams are isolated): what the chargeback shows the
same user for the same filters, i.e. the costs *charged* to their teams, never those of the team
that owns the pool. A pod of a team the pool is lent to (`spec.sharedWith`) is in its own team's
export and not in the owner's; the pool's idle capacity is the owner's; a lease's purchases are
in the export of the team that paid for it. Every form (daily, hourly, node-level `detail`)
totals what the chargeback totals, for a lead of the owner, a lead of the guest and finance."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing import chargeback
from billing.models import MeterRun
from billing.selectors import CostQuery
from tests.billing.billing_helpers import focus_export, meter, node, pod, pool

pytestmark = pytest.mark.django_db

EXPORTS = ("daily", "hourly", "detail")
QUERIES = {
    "everything": CostQuery(),
    "charged to algorithm": CostQuery(team="algorithm"),
    "charged to inference": CostQuery(team="inference"),
    "the shared pool": CostQuery(pool="train-pool-a"),
    "monthly nodes": CostQuery(billing="monthly"),
    "on-demand nodes": CostQuery(billing="on_demand"),
}


def tags(row) -> dict[str, str]:
    return json.loads(row["Tags"])


def chargeback_total(user, query: CostQuery) -> Decimal:
    return sum((g.amount for g in chargeback.chargeback(user=user, query=query)), Decimal(0))


def effective(rows) -> Decimal:
    return sum((Decimal(r["EffectiveCost"]) for r in rows), Decimal(0))


@pytest.fixture
def lent(actors, teams):
    """Algorithm's pool lent to inference: a monthly node running a pod of each team (inference's
    labelled project=secret-proj), an on-demand node running algorithm's batch; inference's own
    preemptible pool beside it. Two metered hours."""
    host = pool(actors["lead"], sharedWith=["inference"])
    monthly = node(host, "n-0")
    pod(teams["inference"], monthly, "serve", namespace="inference", gpus=2, labels={"project": "secret-proj"})
    pod(teams["algorithm"], monthly, "llm", gpus=2, labels={"project": "llm"})
    on_demand = node(host, "od-0", billing="on_demand")
    pod(teams["algorithm"], on_demand, "batch", gpus=8, labels={"project": "etl"})
    spot = pool(actors["other_lead"], name="spot-pool", labels={"team": "inference"}, preemptible=True, region="cn-north-1a")
    pod(teams["inference"], node(spot, "spot-0", billing="preemptible"), "chat", namespace="inference", gpus=1)
    meter(hours=2)
    return host


@pytest.mark.parametrize("who", ["lead", "other_lead", "finance"])
def test_every_export_totals_what_the_chargeback_shows_the_same_user_for_the_same_filters(actors, lent, who):
    user = actors[who]
    for name, query in QUERIES.items():
        expected = chargeback_total(user, query)
        for form in EXPORTS:
            assert effective(focus_export(user, query, form)) == expected, (who, name, form)
    assert chargeback_total(user, CostQuery()) > 0


def test_the_owner_s_lead_never_sees_the_guest_s_rows_and_the_guest_s_lead_sees_them(actors, lent):
    for form in EXPORTS:
        owner = focus_export(actors["lead"], CostQuery(), form)
        assert owner and not [r for r in owner if "secret-proj" in r["Tags"] or "inference" in r["ChargeDescription"]], form
        assert not [r for r in owner if tags(r).get("ebcloud.io/namespace") == "inference"], form
        guest = [r for r in focus_export(actors["other_lead"], CostQuery(), form) if r["ChargeCategory"] == "Usage"]
        on_the_lent_pool = [r for r in guest if tags(r)["ebcloud.io/pool"] == "train-pool-a"]
        assert on_the_lent_pool and all(tags(r)["project"] == "secret-proj" for r in on_the_lent_pool), form
        # The lent pool's idle capacity is its owner's, and nothing of algorithm's pods shows.
        assert {tags(r)["ebcloud.io/cost-kind"] for r in on_the_lent_pool} == {"usage", "fee"}, form
        assert not [r for r in guest if tags(r).get("ebcloud.io/namespace") == "algorithm"], form
    detail = focus_export(actors["other_lead"], CostQuery(pool="train-pool-a"), "detail")
    assert {tags(r).get("ebcloud.io/pod") for r in detail} == {"serve"}
    # The guest's rows on the lent pool name it as every row names its pool.
    daily = focus_export(actors["other_lead"], CostQuery(pool="train-pool-a"), "daily")
    assert {(r["ResourceId"], r["ResourceType"]) for r in daily if r["ServiceCategory"] == "Compute"} == {
        ("train-pool-a", "GPU Node Pool")
    }


def test_every_usage_row_is_tagged_with_the_team_it_is_charged_to_in_every_form(actors, lent):
    """The `ebcloud.io/team` tag is the charged team (the finance guide splits by it): a guest's
    pod on the lent pool is its own team's, not the owner's whose node label says otherwise, and
    a node without that label (the on-demand one) is tagged too. Summed by the tag, each form
    gives every team what the chargeback charges it."""
    for form in EXPORTS:
        by_tag: dict[str | None, Decimal] = {}
        for row in focus_export(actors["finance"], CostQuery(), form):
            if row["ChargeCategory"] == "Usage":
                team = tags(row).get("ebcloud.io/team")
                by_tag[team] = by_tag.get(team, Decimal(0)) + Decimal(row["EffectiveCost"])
        charged = {team: chargeback_total(actors["finance"], CostQuery(team=team)) for team in ("algorithm", "inference")}
        assert by_tag == charged, form


def test_a_lease_s_purchases_are_in_the_export_of_the_team_that_paid_for_it(actors, lent):
    def purchases(who, query=QUERIES["everything"], form="daily"):
        return [r for r in focus_export(actors[who], query, form) if r["ChargeCategory"] == "Purchase"]

    for form in EXPORTS:
        bought = purchases("lead", form=form)
        assert bought and {r["SubAccountId"] for r in bought} == {"algorithm"}, form
        assert purchases("finance", form=form) == bought, form
        assert purchases("finance", CostQuery(team="algorithm"), form) == bought, form
        assert not purchases("other_lead", form=form), form
        assert not purchases("finance", CostQuery(team="inference"), form), form
        assert not purchases("finance", CostQuery(billing="on_demand"), form), form


def test_an_hour_metered_before_guests_paid_fees_by_capacity_is_recomputed_as_it_was_charged(actors, lent):
    """The detail export recomputes each hour from its usage records: an hour metered when a
    guest paid a lent pool's fees by GPU-hours used (2 of the 12 used here) is split so again,
    as its stored costs were, not by its share of the pool's GPUs (2 of 16) as hours since."""
    def guest_fees() -> Decimal:
        rows = focus_export(actors["other_lead"], CostQuery(pool="train-pool-a"), "detail")
        return sum((Decimal(r["EffectiveCost"]) for r in rows if tags(r)["ebcloud.io/cost-kind"] == "fee"), Decimal(0))

    by_capacity = guest_fees()
    MeterRun.objects.update(guest_fees_by_capacity=False)
    by_use = guest_fees()
    assert by_use > by_capacity > 0 and abs(by_use * 12 - by_capacity * 16) <= Decimal("0.10"), (by_use, by_capacity)


@pytest.mark.django_db(transaction=True)
def test_the_hours_metered_before_the_migration_are_marked_as_split_by_use():
    """Migration 0025: a MeterRun row already there (metered by the release before) reads
    False, one the release writes True."""
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("billing", "0024_budget_source_registry_fee")])
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO billing_meterrun (hour, part, parts, started_at, node_records, pod_records, cost_records, total) "
                           "VALUES ('2026-11-30 10:00:00+00:00', 0, 1, '2026-11-30 11:02:00+00:00', 0, 0, 0, 0)")  # fmt: skip
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert list(MeterRun.objects.values_list("guest_fees_by_capacity", flat=True)) == [False]
    assert MeterRun.objects.create(hour=datetime(2026, 11, 30, 11, tzinfo=UTC)).guest_fees_by_capacity is True
