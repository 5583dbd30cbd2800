"""FOCUS 1.2 export: leases are commitments, usage draws them down, CSV streams."""

import csv
import itertools
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.allocation import FeeHour, NodeHour, PodHour
from billing.focus import (
    FOCUS_COLUMNS,
    MANDATORY_COLUMNS,
    FocusAccount,
    Lease,
    focus_rows,
    format_value,
    iter_csv_lines,
    iter_focus_rows,
    purchase_rows,
)
from billing.lease_costs import (
    add_months,
    lease_payment,
    monthly_hour_cost,
    on_demand_hour_cost,
    preemptible_hour_cost,
)

H0 = datetime(2025, 1, 1, tzinfo=UTC)
ACCOUNT = FocusAccount("acct-1", "EBCloud demo")
LABELS = {"team": "ml", "project": "llm", "gpu-class": "a100"}


def lease(hours=None, start=H0, months=1, price=D(20000), node="n1"):
    end = start + timedelta(hours=hours) if hours else add_months(start, months)
    return Lease("cd-1", node, "train", "ml", start, end, price, 8, "A100_80G", "zone-a", "L1")


def monthly_hours(lease_, pods_per_hour=lambda i: []):
    nodes, pods = [], []
    hour, i = lease_.start, 0
    while hour < lease_.end:
        cost = monthly_hour_cost(lease_.monthly_price, lease_.start, lease_.end, hour)
        nodes.append(
            NodeHour(hour, lease_.node, "train", "ml", "monthly", 8, cost, "A100_80G", "zone-a",
                     LABELS, D(100))
        )  # fmt: skip
        for j, gpus in enumerate(pods_per_hour(i)):
            pods.append(PodHour(hour, "research", f"job-{j}", lease_.node, D(gpus), LABELS))
        hour += timedelta(hours=1)
        i += 1
    return nodes, pods


def commitment_totals(rows, commitment_id):
    mine = [r for r in rows if r["CommitmentDiscountId"] == commitment_id]
    usage = sum(r["EffectiveCost"] for r in mine if r["ChargeCategory"] == "Usage")
    bought = sum(r["BilledCost"] for r in mine if r["ChargeCategory"] == "Purchase")
    return usage, bought


# --------------------------------------------------------------------------- shape


def test_rows_carry_all_57_focus_columns_and_mandatory_ones_are_filled():
    assert len(FOCUS_COLUMNS) == len(set(FOCUS_COLUMNS)) == 57
    assert set(MANDATORY_COLUMNS) <= set(FOCUS_COLUMNS)
    le = lease(hours=2)
    nodes, pods = monthly_hours(le, lambda i: [3])
    fees = [FeeHour(H0, "train", "ml", "network", D("0.40"))]
    rows = focus_rows(nodes, pods, fees, ACCOUNT, [le])
    for row in rows:
        assert tuple(row) == FOCUS_COLUMNS
        assert all(row[c] is not None for c in MANDATORY_COLUMNS if c != "ChargeClass")
        assert row["ChargeClass"] is None  # not a correction
        assert row["EffectiveCost"] >= 0 and row["BilledCost"] >= 0


def test_a_monthly_lease_is_a_purchase_plus_committed_usage():
    le = lease(hours=2)
    nodes, pods = monthly_hours(le, lambda i: [2])
    rows = focus_rows(nodes, pods, [], ACCOUNT, [le])
    purchase = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert len(purchase) == 1
    p = purchase[0]
    assert p["BilledCost"] == lease_payment(D(20000), le.start, le.end)
    assert p["EffectiveCost"] == 0 and p["ChargeFrequency"] == "Recurring"
    assert p["PricingCategory"] == "Standard" and p["CommitmentDiscountQuantity"] == 16
    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    assert {r["PricingCategory"] for r in usage} == {"Committed"}
    assert {r["BilledCost"] for r in usage} == {D("0.00")}
    used = [r for r in usage if r["CommitmentDiscountStatus"] == "Used"]
    unused = [r for r in usage if r["CommitmentDiscountStatus"] == "Unused"]
    assert len(used) == len(unused) == 2
    assert all(r["ConsumedQuantity"] == 2 for r in used)
    assert all(
        r["ConsumedQuantity"] is None and r["CommitmentDiscountQuantity"] == 6 for r in unused
    )


def test_a_lease_is_one_purchase_of_its_months_and_a_part_month_is_pro_rata():
    """One row for the term, billed when paid (FinOps review B; it was a row per lease month):
    its months are the quantity, the unit price per month, unit price × quantity = cost."""
    le = Lease("cd-2", "n1", "train", "ml", H0, datetime(2025, 2, 11, tzinfo=UTC), D(28000), 8)
    (row,) = purchase_rows(le, ACCOUNT)
    assert row["BilledCost"] == row["ListCost"] == row["ContractedCost"] == D("38000.00")
    assert (row["ChargePeriodStart"], row["ChargePeriodEnd"]) == (H0, datetime(2025, 2, 11, tzinfo=UTC))
    assert row["PricingQuantity"] == D("1.3571428571")
    assert (row["ContractedUnitPrice"] * row["PricingQuantity"]).quantize(D("0.01")) == D("38000.00")


def test_a_purchase_lists_at_the_list_price_and_a_multi_month_term_is_one_time():
    """FinOps review: ListCost is the undiscounted list price × months, ContractedCost what the
    lease costs; a term paid once, up front, for several months is One-Time, a month Recurring."""
    quarter = Lease("cd-3", "n1", "train", "ml", H0, add_months(H0, 3), D(19000), 8,
                    payment=D("57000.00"), list_monthly_price=D("20000.00"), term_months=3)  # fmt: skip
    (row,) = purchase_rows(quarter, ACCOUNT)
    assert (row["ListUnitPrice"], row["ListCost"]) == (D(20000), D("60000.00"))
    assert (row["ContractedUnitPrice"], row["ContractedCost"], row["BilledCost"]) == (D(19000), D("57000.00"), D("57000.00"))
    assert row["ChargeFrequency"] == "One-Time"
    (month,) = purchase_rows(lease(months=1), ACCOUNT)
    assert month["ChargeFrequency"] == "Recurring"


def test_over_a_whole_lease_effective_usage_equals_the_purchases():
    le = lease(months=1)
    nodes, pods = monthly_hours(
        le, lambda i: [8] if i % 24 < 9 else ([1, D("0.5")] if i % 3 else [])
    )
    rows = focus_rows(nodes, pods, [], ACCOUNT, [le])
    usage, bought = commitment_totals(rows, "cd-1")
    assert usage == bought == D("20000.00")


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 120),
    st.integers(0, 10**7),
    st.lists(st.lists(st.sampled_from([0, 1, 2, D("0.25"), 8]), max_size=3), max_size=120),
)
def test_per_commitment_effective_cost_equals_billed_purchases(hours, cents, plan):
    le = lease(hours=hours, price=D(cents) / 100)
    nodes, pods = monthly_hours(le, lambda i: plan[i] if i < len(plan) else [])
    rows = focus_rows(nodes, pods, [], ACCOUNT, [le])
    usage, bought = commitment_totals(rows, "cd-1")
    assert usage == bought == lease_payment(le.monthly_price, le.start, le.end)


def test_on_demand_is_standard_and_preemptible_is_dynamic_and_both_bill_what_they_cost():
    nodes = [
        NodeHour(H0, "od", "burst", "ml", "on_demand", 8, on_demand_hour_cost(D(100)), "A100"),
        NodeHour(H0, "sp", "spot", "ml", "preemptible", 8, preemptible_hour_cost(D(100), D("0.6")),
                 "A100", list_price=D(100)),
    ]  # fmt: skip
    pods = [PodHour(H0, "batch", "train-1", "sp", D(8), {"billing": "preemptible"})]
    rows = focus_rows(nodes, pods, [], ACCOUNT)
    by = {r["ResourceId"]: r for r in rows}
    assert by["od"]["PricingCategory"] == "Standard"
    assert by["sp"]["PricingCategory"] == "Dynamic"
    assert by["sp"]["BilledCost"] == by["sp"]["EffectiveCost"] == D("40.00")
    assert by["sp"]["ListCost"] == D("100.00")  # list price kept: the discount is visible
    assert all(r["CommitmentDiscountId"] is None for r in rows)


def test_effective_and_billed_totals_match_costs_fees_and_purchases():
    le = lease(hours=3)
    nodes, pods = monthly_hours(le, lambda i: [4])
    nodes.append(NodeHour(H0, "od", "train", "ml", "on_demand", 8, D("100.00"), "A100"))
    fees = [FeeHour(H0 + timedelta(hours=h), "train", "ml", "storage", D("0.90")) for h in range(3)]
    rows = focus_rows(nodes, pods, fees, ACCOUNT, [le])
    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    assert sum(r["EffectiveCost"] for r in usage) == sum(n.cost for n in nodes) + D("2.70")
    billed = sum(r["BilledCost"] for r in rows)
    assert billed == lease_payment(D(20000), le.start, le.end) + D("100.00") + D("2.70")


def test_fees_are_usage_rows_in_their_own_service_category():
    nodes = [NodeHour(H0, "od", "train", "ml", "on_demand", 8, D("100.00"), "A100", "zone-a")]
    fees = [
        FeeHour(H0, "train", "ml", "network", D("0.50")),
        FeeHour(H0, "train", "ml", "registry", D("0.10")),
    ]
    rows = focus_rows(nodes, [], fees, ACCOUNT)
    cats = {r["ResourceId"]: (r["ServiceCategory"], r["ServiceSubcategory"]) for r in rows}
    assert cats["train/network"] == ("Networking", "Data Transfer")
    assert cats["train/registry"] == ("Developer Tools", "Other (Developer Tools)")
    assert all(r["RegionId"] == "zone-a" for r in rows)


def test_tags_are_a_json_object_with_labels_verbatim_and_prefixed_provider_tags():
    le = lease(hours=1)
    nodes, pods = monthly_hours(le, lambda i: [1])
    rows = focus_rows(nodes, pods, [], ACCOUNT, [le])
    used = next(r for r in rows if r["CommitmentDiscountStatus"] == "Used")
    tags = json.loads(used["Tags"])
    assert tags["gpu-class"] == "a100" and "gpu_class" not in tags
    assert tags["ebcloud.io/namespace"] == "research" and tags["ebcloud.io/pod"] == "job-0"
    assert used["SubAccountId"] == "ml"


def test_a_monthly_node_without_a_lease_is_an_error():
    le = lease(hours=1)
    nodes, _ = monthly_hours(le)
    with pytest.raises(ValueError, match="no lease"):
        focus_rows(nodes, [], [], ACCOUNT, [])


# --------------------------------------------------------------------------- CSV


def test_values_are_formatted_the_focus_way():
    assert format_value(None) == ""
    assert format_value(D("1E+4")) == "10000"
    assert format_value(datetime(2025, 1, 1, 8, tzinfo=UTC)) == "2025-01-01T08:00:00Z"


def test_csv_lines_round_trip_through_a_csv_reader():
    le = lease(hours=2)
    nodes, pods = monthly_hours(le, lambda i: [2])
    rows = focus_rows(nodes, pods, [], ACCOUNT, [le])
    lines = list(iter_csv_lines(rows))
    assert all(line.endswith("\r\n") for line in lines)
    parsed = list(csv.reader("".join(lines).splitlines()))
    assert tuple(parsed[0]) == FOCUS_COLUMNS
    assert len(parsed) == len(rows) + 1
    assert parsed[1][FOCUS_COLUMNS.index("BilledCost")] == str(rows[0]["BilledCost"])


def test_the_csv_writer_streams_from_an_endless_source():
    def endless_hours():
        for i in itertools.count():
            hour = H0 + timedelta(hours=i)
            yield "CNY", [NodeHour(hour, "od", "burst", "ml", "on_demand", 8, D("100.00"))], [], []

    lines = iter_csv_lines(iter_focus_rows(endless_hours(), ACCOUNT))
    first = list(itertools.islice(lines, 4))
    assert len(first) == 4 and first[0].startswith("AvailabilityZone,BilledCost")
