"""Chargeback from stored cost records: the core's grouping rules, roles, ranges, FOCUS."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal

import pytest

from billing import chargeback, focus_selectors, selectors
from billing.allocation import GroupTotal, allocate_hour, group_rows
from billing.focus import MANDATORY_COLUMNS
from billing.metering import allocation_inputs
from billing.models import CostRecord, UsageRecord
from billing.selectors import CostQuery
from tests.billing.billing_helpers import HOUR, T0, charge, meter, node, pod, pool, scenario

pytestmark = pytest.mark.django_db

DAY = date(2026, 12, 1)


def as_dicts(groups):
    return sorted(tuple(sorted(g.as_dict().items())) for g in groups)


def test_database_grouping_matches_the_pure_cores_group_rows(actors, teams):
    scenario(actors, teams)
    rows = []
    for hour in UsageRecord.objects.order_by("hour").values_list("hour", flat=True).distinct():
        nodes, pods, fees = allocation_inputs(
            UsageRecord.objects.filter(hour=hour).select_related("pool", "team")
        )
        rows.extend(allocate_hour(nodes, pods, fees))
    for by in (("team", "project", "gpu-class"), ("project",), ("team", "billing")):
        expected = group_rows(rows, by)
        got = chargeback.chargeback(user=actors["finance"], query=CostQuery(by=by))
        assert as_dicts(got) == as_dicts(expected), by


def test_label_keys_are_verbatim_and_unallocated_and_idle_are_a_kind_with_the_charged_team(actors, teams):
    """C4, issue 21 §4: fixed columns, empty cells for missing labels, never a marker."""
    scenario(actors, teams)
    groups = [g.as_dict() for g in chargeback.chargeback(user=actors["finance"], query=CostQuery())]
    assert all("gpu-class" in g and "gpu_class" not in g for g in groups)
    assert all(list(g) == list(CostQuery().columns) for g in groups)
    assert CostQuery().columns == (
        "charged_team", "team", "project", "gpu-class", "namespace", "billing", "kind", "status", "amount", "currency",
    )  # fmt: skip
    assert not [v for g in groups for v in g.values() if v.startswith("__")]
    notebook = [g for g in groups if g["namespace"] == "algorithm" and g["project"] == ""]
    assert notebook and {g["kind"] for g in notebook} == {"unallocated"}
    idle = [g for g in groups if g["kind"] == "idle"]
    assert {g["namespace"] for g in idle} == {""}
    assert {g["charged_team"] for g in idle} == {"algorithm", "inference"}
    spot = [g for g in groups if g["billing"] == "preemptible"]
    assert spot and {g["charged_team"] for g in spot} == {"inference"}
    assert not [g for g in groups if g["billing"] == "preemptible" and g["charged_team"] == "algorithm"]
    assert {g["status"] for g in groups} == {"metered"}


def test_the_grand_total_is_every_cost_record_to_the_cent(actors, teams):
    scenario(actors, teams)
    groups = chargeback.chargeback(user=actors["finance"], query=CostQuery())
    summary = chargeback.summarize(groups)
    assert summary.total == sum(CostRecord.objects.values_list("amount", flat=True))
    assert summary.total == sum(
        UsageRecord.objects.exclude(kind="pod").values_list("amount", flat=True)
    )
    assert Decimal(0) < summary.idle < summary.total and summary.idle_share > 0


def test_totals_and_accruing_amounts_are_per_currency_never_summed_across():
    def group(team, amount, currency, kind="allocated", status="metered"):
        return GroupTotal(key=(("charged_team", team),), kind=kind, amount=Decimal(amount), currency=currency, status=status)

    groups = [group("algorithm", "100.00", "CNY", kind="idle"), group("algorithm", "300.00", "CNY", status="accruing"),
              group("algorithm", "5.00", "USD", status="accruing"), group("inference", "15.00", "USD", kind="idle")]  # fmt: skip
    summary = chargeback.summarize(groups)
    assert [(t.currency, t.total, t.idle, t.accruing, t.idle_share) for t in summary.by_currency] == [
        ("CNY", Decimal("400.00"), Decimal("100.00"), Decimal("300.00"), Decimal("25.0")),
        ("USD", Decimal("20.00"), Decimal("15.00"), Decimal("5.00"), Decimal("75.0")),
    ]
    assert summary.several and summary.total is summary.idle is summary.currency is summary.idle_share is None
    assert [t.currency for t in summary.accruing_lines] == ["CNY", "USD"]
    assert chargeback.accruing_by_team(groups) == [("algorithm", Decimal("300.00"), "CNY"), ("algorithm", Decimal("5.00"), "USD")]
    one = chargeback.summarize(groups[:2])
    assert (one.total, one.idle, one.accruing, one.currency) == (Decimal("400.00"), Decimal("100.00"), Decimal("300.00"), "CNY")
    empty = chargeback.summarize([])
    assert empty.by_currency == () and (empty.total, empty.currency) == (Decimal(0), "CNY")


def test_the_cost_series_has_a_set_of_series_per_currency(actors):
    charge(pool(actors["lead"]), "100.00", hours=2, currency="CNY")
    charge(pool(actors["other_lead"], name="usd-pool", region="cn-north-1a"), "10.00", hours=2, currency="USD")
    series = chargeback.cost_series(user=actors["finance"], query=CostQuery(start=DAY, end=DAY))
    assert series == {"CNY": {("idle", "algorithm"): {DAY: Decimal("200.00")}},
                      "USD": {("idle", "inference"): {DAY: Decimal("20.00")}}}  # fmt: skip


def test_leads_see_costs_charged_to_their_teams_and_finance_sees_all(actors, teams):
    scenario(actors, teams)

    def teams_of(user):
        groups = chargeback.chargeback(user=actors[user], query=CostQuery(by=("team",)))
        return {g.as_dict()["charged_team"] for g in groups}

    assert teams_of("finance") == teams_of("admin") == {"algorithm", "inference"}
    assert teams_of("lead") == teams_of("member") == {"algorithm"}
    assert teams_of("other_lead") == {"inference"}
    anonymous = type("Anon", (), {"is_authenticated": False})()
    assert chargeback.chargeback(user=anonymous, query=CostQuery()) == []


def test_a_date_range_includes_whole_days(actors, teams):
    p = pool(actors["lead"])
    node(p, "n-0")
    meter(T0 + timedelta(hours=23), hours=2)  # the last hour of Dec 1 and the first of Dec 2
    one_day = chargeback.chargeback(user=actors["finance"], query=CostQuery(start=DAY, end=DAY))
    two_days = chargeback.chargeback(
        user=actors["finance"], query=CostQuery(start=DAY, end=DAY + timedelta(days=1))
    )
    assert chargeback.summarize(one_day).total == sum(
        CostRecord.objects.filter(hour=T0 + timedelta(hours=23)).values_list("amount", flat=True)
    )
    assert chargeback.summarize(two_days).total == sum(
        CostRecord.objects.values_list("amount", flat=True)
    )


def test_the_cost_series_is_daily_and_stacks_idle_separately(actors, teams):
    scenario(actors, teams)
    by_currency = chargeback.cost_series(user=actors["finance"], query=CostQuery())
    assert list(by_currency) == ["CNY"]
    series = by_currency["CNY"]
    assert set(series) == {
        ("allocated", "algorithm"), ("allocated", "inference"), ("idle", "algorithm"), ("idle", "inference"),
    }  # fmt: skip
    total = sum(amount for points in series.values() for amount in points.values())
    assert total == sum(CostRecord.objects.values_list("amount", flat=True))


def test_query_parsing_rejects_bad_keys_and_ranges():
    with pytest.raises(Exception) as info:
        selectors.cost_query_parse(
            {"by": "team,bad key", "from": "2026-12-05", "to": "2026-12-01", "billing": "x"}
        )
    fields = {e.field for e in info.value.errors}
    assert fields == {"by", "to", "billing"}
    with pytest.raises(Exception) as info:
        selectors.cost_query_parse({"by": "charged_team"})
    assert [e.field for e in info.value.errors] == ["by"]
    query = selectors.cost_query_parse({"by": "team,namespace,gpu-class", "sort": "gpu-class"})
    assert (
        query.by == ("team", "gpu-class") and query.include_namespace and query.sort == "gpu-class"
    )


def test_focus_export_has_the_mandatory_columns_and_amortises_each_commitment_exactly(
    actors, teams
):
    p = pool(actors["lead"])
    n = node(p, "n-0")
    n.lease_end = T0 + 3 * HOUR  # a three-hour lease: the whole commitment can be metered
    n.save()
    pod(teams["algorithm"], n, "llm", gpus=3, labels={"project": "llm"})
    node(p, "od-0", billing="on_demand", created=T0 - HOUR)
    meter(hours=3)
    rows = list(focus_selectors.focus_rows_for_user(user=actors["finance"], query=CostQuery()))
    for row in rows:
        assert set(MANDATORY_COLUMNS) <= set(row)
        # ChargeClass is null except for corrections, as FOCUS allows.
        missing = [c for c in MANDATORY_COLUMNS if row.get(c) is None and c != "ChargeClass"]
        assert not missing, (row["ChargeCategory"], missing)
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    committed = [
        r for r in rows if r.get("CommitmentDiscountId") and r["ChargeCategory"] == "Usage"
    ]
    assert len(purchases) == 1 and purchases[0]["EffectiveCost"] == 0
    assert sum(r["EffectiveCost"] for r in committed) == sum(r["BilledCost"] for r in purchases)
    assert {r["CommitmentDiscountStatus"] for r in committed} == {"Used", "Unused"}
    assert {r["PricingCategory"] for r in rows if r["ResourceId"] == "od-0"} == {"Standard"}
    tags = json.loads(next(r for r in committed if r["CommitmentDiscountStatus"] == "Used")["Tags"])
    assert tags["project"] == "llm" and tags["gpu-class"] == "a100"
    # Usage rows' EffectiveCost equals the stored costs (same core, same records).
    usage = sum(r["EffectiveCost"] for r in rows if r["ChargeCategory"] == "Usage")
    assert usage == sum(CostRecord.objects.values_list("amount", flat=True))


def test_focus_export_of_a_lead_covers_only_their_teams_pools(actors, teams):
    scenario(actors, teams, hours=1)
    pools = {
        json.loads(r["Tags"]).get("ebcloud.io/pool")
        for r in focus_selectors.focus_rows_for_user(user=actors["other_lead"], query=CostQuery())
    }
    assert pools == {"spot-pool"}
    spot = [
        r
        for r in focus_selectors.focus_rows_for_user(user=actors["other_lead"], query=CostQuery())
        if r["ResourceId"] == "spot-0"
    ]
    assert {r["PricingCategory"] for r in spot} == {"Dynamic"}


def test_a_pod_on_a_pool_lent_to_its_team_is_charged_to_its_own_team(actors, teams):
    """Issue 21 §4 (C4, G3): the host's `team` and `project` labels are not inherited by a
    guest; its cost is charged to its team, in the charged-team column and the team label."""
    host = pool(actors["lead"], sharedWith=["inference"])
    assert host.shared_with == ("inference",)
    n = node(host, "n-0")
    pod(teams["inference"], n, "serve", namespace="inference", gpus=2)
    pod(teams["algorithm"], n, "llm", gpus=2, labels={"project": "llm"})
    meter(hours=1)
    guest = UsageRecord.objects.get(kind="pod", namespace="inference")
    assert guest.team.slug == "inference" and guest.labels["team"] == "inference"
    assert "project" not in guest.labels and guest.labels["gpu-class"] == "a100"
    groups = [g.as_dict() for g in chargeback.chargeback(user=actors["finance"], query=CostQuery())]
    inference = [g for g in groups if g["namespace"] == "inference"]
    assert inference and all(g["charged_team"] == g["team"] == "inference" for g in inference)
    assert {g["kind"] for g in inference} == {"unallocated"}  # it carries no project label
    assert {g["charged_team"] for g in groups if g["kind"] == "idle"} == {"algorithm"}
    # The lead of the guest team sees its own cost, none of the host's.
    lead = chargeback.chargeback(user=actors["other_lead"], query=CostQuery())
    assert {g.as_dict()["charged_team"] for g in lead} == {"inference"}
