"""The FOCUS export from cost records (issue 20 item 6; C4): its totals are the cost records',
its content is the node-level export's summed per cost record (differences listed and checked
column by column), and it streams in constant memory."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal

import pytest

from billing import focus_selectors
from billing.focus import FOCUS_COLUMNS, FocusAccount, iter_csv_lines
from billing.focus_records import CACHE_LIMIT, PoolFacts, focus_csv_from_records
from billing.models import CostRecord, NodePrice, PoolResourceSample
from billing.selectors import CostQuery
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool, scenario

pytestmark = pytest.mark.django_db

AMOUNTS = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")
QUANTITIES = ("PricingQuantity", "ConsumedQuantity", "CommitmentDiscountQuantity")
# Columns that name what a row is about: the node and pods there, the pool here.
DIFFERENT = ("ResourceId", "ResourceName", "ResourceType", "ChargeDescription", "Tags",
             "CommitmentDiscountId", "CommitmentDiscountName")  # fmt: skip
NODE_LEVEL_TAGS = ("ebcloud.io/node", "ebcloud.io/pod", "ebcloud.io/pods", "ebcloud.io/team")
ALL = CostQuery()


def parse(text: str) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and tuple(rows[0]) == FOCUS_COLUMNS
    return rows


def fast(user, query=ALL, granularity="hourly") -> list[dict[str, str]]:
    return parse("".join(focus_selectors.focus_csv_for_user(user=user, query=query, granularity=granularity)))


def node_level(user, query=ALL) -> list[dict[str, str]]:
    rows = focus_selectors.focus_rows_for_user(user=user, query=query)
    return parse("".join(iter_csv_lines(rows, FOCUS_COLUMNS)))


def total(rows, column, **where) -> Decimal:
    return sum(
        (Decimal(r[column] or 0) for r in rows if all(r[k] == v for k, v in where.items())),
        Decimal(0),
    )


def cost_record_key(row: dict[str, str]) -> tuple:
    """What a cost record is per: hour, pool, namespace, user labels, cost kind, component
    (the SKU), billing kind (the pricing category) — read off a FOCUS usage row."""
    tags = json.loads(row["Tags"])
    labels = tuple(sorted((k, v) for k, v in tags.items() if not k.startswith("ebcloud.io/")))
    return (row["ChargePeriodStart"], tags["ebcloud.io/pool"], tags.get("ebcloud.io/namespace", ""),
            labels, tags["ebcloud.io/cost-kind"], row["SkuId"], row["PricingCategory"])  # fmt: skip


def summed(rows) -> dict[tuple, dict[str, object]]:
    """Usage rows summed per cost record key: amounts and quantities added, every other column
    (but the DIFFERENT ones) the set of values seen."""
    groups: dict[tuple, dict[str, object]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        if row["ChargeCategory"] != "Usage":
            continue
        group = groups[cost_record_key(row)]
        for column, value in row.items():
            if column in AMOUNTS or (column in QUANTITIES and value):
                group[column] = group.get(column, set()) or Decimal(0)
                group[column] += Decimal(value)
            elif column not in DIFFERENT:
                group[column].add(value)
    return {key: dict(group) for key, group in groups.items()}


def test_usage_totals_equal_the_cost_records_and_each_record_is_one_row(actors, teams):
    scenario(actors, teams, hours=3)
    rows = fast(actors["finance"])
    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    assert len(usage) == CostRecord.objects.count()
    records = list(CostRecord.objects.values_list("amount", "billing_kind", "component"))
    assert total(usage, "EffectiveCost") == sum(a for a, _, _ in records)
    # A commitment's GPU usage bills nothing (its purchase did); the rest (fees too) bills
    # what it cost.
    committed = [a for a, kind, part in records if kind == "monthly" and part == "gpu"]
    assert total(usage, "BilledCost") == sum(a for a, _, _ in records) - sum(committed)
    assert total(usage, "BilledCost", PricingCategory="Committed") == 0


def test_same_content_as_the_node_level_export_summed_per_cost_record(actors, teams):
    scenario(actors, teams, hours=3)
    new, old = fast(actors["finance"]), node_level(actors["finance"])
    assert summed(new) == summed(old)
    assert {r["PricingCategory"] for r in new} == {"Committed", "Standard", "Dynamic"}
    # The documented differences: the pool instead of the node and pods.
    gpu = [r for r in new if r["ChargeCategory"] == "Usage" and r["ServiceCategory"] == "Compute"]
    assert {(r["ResourceId"], r["ResourceType"]) for r in gpu} == {
        ("train-pool-a", "GPU Node Pool"), ("spot-pool", "GPU Node Pool")
    }
    for row in new:
        if row["ChargeCategory"] == "Usage":
            assert not set(json.loads(row["Tags"])) & set(NODE_LEVEL_TAGS[:3])
    used = next(r for r in gpu if r["CommitmentDiscountStatus"] == "Used")
    assert json.loads(used["Tags"])["ebcloud.io/team"] == "algorithm"
    assert used["ChargeDescription"] == (
        "monthly GPU nodes (8x A100_80G) of pool train-pool-a: pods of namespace algorithm"
    )


def per_day(rows):
    """Hourly rows as if their charge period were their day (to sum them per day)."""
    out = []
    for row in rows:
        if row["ChargeCategory"] == "Usage":
            day = row["ChargePeriodStart"][:10]
            row = row | {"ChargePeriodStart": f"{day}T00:00:00Z",
                         "ChargePeriodEnd": f"{day}T00:00:00Z".replace(day, str(date.fromisoformat(day) + timedelta(days=1)))}  # fmt: skip
        out.append(row)
    return out


def test_daily_rows_are_the_hourly_rows_summed_per_day_and_total_the_cost_records(actors, teams):
    scenario(actors, teams, hours=3)
    meter(start=T0 + 24 * HOUR, hours=2)  # and two hours of the next day
    daily, hourly = fast(actors["finance"], granularity="daily"), fast(actors["finance"])
    assert total(daily, "EffectiveCost", ChargeCategory="Usage") == sum(
        CostRecord.objects.values_list("amount", flat=True)
    )
    assert {r["ChargePeriodStart"] for r in daily if r["ChargeCategory"] == "Usage"} == {
        "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z"
    }
    # Everything but the list cost and unit prices is the hourly rows' sum; the list cost is
    # rounded once per row, so a day's is within half a cent per summed hour of the hours' sum,
    # and a day's unit price is the average of its hours' (a fee's amount per hour).
    by_day, hours = summed(daily), summed(per_day(hourly))
    assert by_day.keys() == hours.keys()
    for key, group in by_day.items():
        assert abs(group.pop("ListCost") - hours[key].pop("ListCost")) <= Decimal("0.015")
        group.pop("ContractedCost"), hours[key].pop("ContractedCost")
        for column in ("ListUnitPrice", "ContractedUnitPrice"):
            (unit,), seen = group.pop(column), [Decimal(u) for u in hours[key].pop(column)]
            assert min(seen) <= Decimal(unit) <= max(seen)
        assert group == hours[key]


def test_purchases_are_the_node_level_ones_drawn_by_the_pools_commitment(actors, teams):
    p = pool(actors["lead"])
    n = node(p, "n-0")
    n.lease_end = T0 + 3 * HOUR  # the whole commitment is metered
    n.save()
    pod(teams["algorithm"], n, "llm", gpus=3, labels={"project": "llm"})
    meter(hours=3)
    new, old = fast(actors["finance"]), node_level(actors["finance"])
    buy_new = [r for r in new if r["ChargeCategory"] == "Purchase"]
    buy_old = [r for r in old if r["ChargeCategory"] == "Purchase"]
    names = ("CommitmentDiscountId", "CommitmentDiscountName")
    assert [{k: v for k, v in r.items() if k not in names} for r in buy_new] == [
        {k: v for k, v in r.items() if k not in names} for r in buy_old
    ]
    assert {r["CommitmentDiscountId"] for r in new if r["CommitmentDiscountId"]} == {
        "monthly-leases/train-pool-a"
    }
    # Over the whole lease, the commitment's usage is exactly what its purchases billed.
    drawn = total(new, "EffectiveCost", CommitmentDiscountId="monthly-leases/train-pool-a", ChargeCategory="Usage")
    assert drawn == total(buy_new, "BilledCost") > 0


def test_a_lead_gets_their_teams_pools_and_a_range_its_hours(actors, teams):
    scenario(actors, teams, hours=3)
    pools = {json.loads(r["Tags"])["ebcloud.io/pool"] for r in fast(actors["other_lead"])}
    assert pools == {"spot-pool"}
    one_day = CostQuery(start=T0.date(), end=T0.date())
    assert fast(actors["finance"], one_day) == fast(actors["finance"])
    next_day = CostQuery(start=T0.date() + timedelta(days=1), end=T0.date() + timedelta(days=1))
    text = "".join(focus_selectors.focus_csv_for_user(user=actors["finance"], query=next_day, granularity="hourly"))
    assert text.count("\r\n") == 1  # the header: no hour metered that day, no purchase starts


ACCOUNT = FocusAccount(billing_account_id="acct{0}", billing_account_name="Braces {x} and, commas")
POOLS = {1: PoolFacts("p{1}", "team-{}", "cn-north-1a", 8)}


def synthetic(n: int):
    """n cost records of one pool, hour after hour, each with its own label set."""
    for i in range(n):
        yield (T0 + (i // 1000) * HOUR, 1, 7, f"ns-{i % 40}", json.dumps({"project": f"{{{i}}}"}),
               "A100_80G", "on_demand", "usage", "gpu", Decimal("2.000000"), Decimal("6.72"), "CNY", 1)  # fmt: skip


def test_braces_and_commas_in_any_text_come_out_verbatim():
    text = "".join(focus_csv_from_records(synthetic(3), pools=POOLS, teams={7: "t"}, account=ACCOUNT))
    rows = parse(text)
    assert [json.loads(r["Tags"])["project"] for r in rows] == ["{0}", "{1}", "{2}"]
    assert {r["BillingAccountId"] for r in rows} == {"acct{0}"}
    assert {r["BillingAccountName"] for r in rows} == {"Braces {x} and, commas"}
    assert {r["ResourceId"] for r in rows} == {"p{1}"}
    assert {r["SubAccountId"] for r in rows} == {"team-{}"}
    # No node usage records: the list price is the cost's own.
    assert {(r["ListUnitPrice"], r["ListCost"], r["BilledCost"]) for r in rows} == {("3.36", "6.72", "6.72")}


def test_a_list_price_gives_list_cost_of_the_rows_gpu_hours():
    prices = lambda hour: {(1, "on_demand"): Decimal("4.1234567891")}  # noqa: E731
    rows = parse("".join(focus_csv_from_records(synthetic(1), pools=POOLS, teams={}, account=ACCOUNT,
                                                list_prices=prices)))  # fmt: skip
    assert (rows[0]["ListUnitPrice"], rows[0]["ListCost"], rows[0]["ContractedCost"]) == (
        "4.1234567891", "8.25", "8.25"
    )


def test_memory_stays_flat_however_many_records_stream_through():
    def peak(n: int) -> int:
        tracemalloc.start()
        for _ in focus_csv_from_records(synthetic(n), pools=POOLS, teams={}, account=ACCOUNT):
            pass
        high = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return high

    # Every record has its own label set: past CACHE_LIMIT records the text cache is full, and
    # three times as many records need no more memory.
    small, large = peak(CACHE_LIMIT + 10_000), peak(3 * (CACHE_LIMIT + 10_000))
    assert large < small * 1.2 and large < 64 * 2**20, (small, large)


def test_both_exports_bill_each_row_in_the_currency_it_was_charged_in(actors, teams):
    """Nodes priced in USD, fees in CNY: every purchase and GPU row says USD and every fee row
    CNY, in the export from cost records and in the node-level one (which once said CNY for all)."""
    p = pool(actors["lead"])
    NodePrice.objects.update(currency="USD")
    n = node(p, "n-0")
    n.lease_end = T0 + 2 * HOUR
    n.save()
    pod(teams["algorithm"], n, "llm", gpus=3)
    pod(teams["algorithm"], node(p, "od-0", billing="on_demand", created=T0 - HOUR), "eval", gpus=2)
    PoolResourceSample.objects.create(pool=p, hour=T0, storage_gb=Decimal("100"), cross_zone_gb=Decimal("0"))
    meter(hours=2)
    new, old = fast(actors["finance"]), node_level(actors["finance"])
    assert summed(new) == summed(old)
    for rows in (new, old):
        assert {r["ChargeCategory"] for r in rows} == {"Purchase", "Usage"}
        for r in rows:
            assert r["BillingCurrency"] == ("USD" if r["ServiceCategory"] == "Compute" else "CNY"), r
        for currency in ("USD", "CNY"):
            charged = CostRecord.objects.filter(currency=currency).values_list("amount", flat=True)
            assert total(rows, "EffectiveCost", ChargeCategory="Usage", BillingCurrency=currency) == sum(charged) > 0
