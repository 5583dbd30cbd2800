"""A leased preemptible node in the FOCUS exports (FinOps review): its lease is a commitment, as a
monthly node's, in the default export from the cost records (daily, hourly) as in the node-level
one (`detail`). Its usage is Committed and billed 0, the lease's purchase carries the money, in
the export of the team that paid for it; a team the pool is lent to sees its pods' usage as the
same commitment's, billed 0, and no purchase. The default export once billed such usage as
Dynamic, without the purchase: on the same data it said less money than the node-level one."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from billing.selectors import CostQuery
from tests.billing.billing_helpers import focus_export, meter, pod
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, live_nodes, run_until

pytestmark = pytest.mark.django_db

BOUGHT = datetime(2026, 12, 1, 8, 20, tzinfo=UTC)
EXPORTS = ("daily", "hourly", "detail")
DECEMBER = CostQuery(start=date(2026, 12, 1), end=date(2026, 12, 31))


def total(rows, column: str) -> Decimal:
    return sum((Decimal(r[column]) for r in rows), Decimal(0))


@pytest.fixture
def spot(actors, teams):
    """Algorithm's preemptible pool (one node leased for a month at 12,000.00) lent to
    inference, running a pod of each team; three hours metered."""
    document = make_document("spot", preemptible=True, sharedWith=["inference"], nodeCount={"min": 1, "max": 1})
    pool = approved_pool(actors, document, now=BOUGHT)
    run_until(pool, BOUGHT)
    (leased,) = live_nodes(pool)
    assert leased.billing == "preemptible"
    pod(teams["algorithm"], leased, "train", gpus=4, started=BOUGHT)
    pod(teams["inference"], leased, "serve", namespace="inference", gpus=2, started=BOUGHT)
    meter(start=datetime(2026, 12, 1, 9, tzinfo=UTC), hours=3)
    return pool


def test_every_export_of_a_leased_preemptible_pool_bills_its_purchase_and_commits_its_usage(actors, spot):
    owner = {form: focus_export(actors["lead"], DECEMBER, form) for form in EXPORTS}
    finance = {form: focus_export(actors["finance"], DECEMBER, form) for form in EXPORTS}
    for form in EXPORTS:
        for rows in (owner[form], finance[form]):
            (purchase,) = [r for r in rows if r["ChargeCategory"] == "Purchase"]
            assert Decimal(purchase["BilledCost"]) == Decimal(12000), form
            usage = [r for r in rows if r["ServiceCategory"] == "Compute" and r["ChargeCategory"] == "Usage"]
            assert usage and {(r["PricingCategory"], r["BilledCost"]) for r in usage} == {("Committed", "0.00")}, form
            assert {r["CommitmentDiscountId"] for r in usage} == {purchase["CommitmentDiscountId"]}, form
            assert {r["SkuId"] for r in usage} == {purchase["SkuId"]} == {"gpu-node/A100_80G/preemptible"}, form
            assert {r["CommitmentDiscountStatus"] for r in usage} == {"Used", "Unused"}, form
        # The default export says the same money as the node-level one.
        assert total(finance[form], "BilledCost") == total(finance["detail"], "BilledCost"), form
        assert total(finance[form], "EffectiveCost") == total(finance["detail"], "EffectiveCost") > 0, form


def test_the_team_the_pool_is_lent_to_sees_its_usage_as_the_commitment_s_and_no_purchase(actors, spot):
    for form in EXPORTS:
        rows = focus_export(actors["other_lead"], DECEMBER, form)
        assert not [r for r in rows if r["ChargeCategory"] == "Purchase"], form
        usage = [r for r in rows if r["ServiceCategory"] == "Compute"]
        assert usage and {(r["PricingCategory"], r["BilledCost"], r["CommitmentDiscountStatus"]) for r in usage} == {
            ("Committed", "0.00", "Used")
        }, form
        assert total(rows, "EffectiveCost") > 0 and total(rows, "BilledCost") == total(
            [r for r in rows if r["ServiceCategory"] != "Compute"], "BilledCost"
        ), form


def test_a_range_after_its_purchase_bills_nothing_of_the_lease(actors, spot):
    """Its usage the next day, once more hours are metered: amortised, not billed again."""
    meter(start=datetime(2026, 12, 2, 9, tzinfo=UTC), hours=2)
    second = CostQuery(start=date(2026, 12, 2), end=date(2026, 12, 2))
    for form in EXPORTS:
        rows = [r for r in focus_export(actors["finance"], second, form) if r["ServiceCategory"] == "Compute"]
        assert rows and total(rows, "BilledCost") == 0 < total(rows, "EffectiveCost"), form
        assert all(r["ChargePeriodStart"] >= "2026-12-02" for r in rows), form
