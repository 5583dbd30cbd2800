"""The default monthly budget of a pool and which budget wins (issue 20 item 2; seed T6, O1):
pure arithmetic, no database."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing.budget_default import (
    DEFAULT,
    FINANCE,
    MONTH_HOURS,
    ON_DEMAND_SHARE,
    SPEC,
    budget_choose,
    default_budget,
)


def a100_pool(min_nodes=2, max_nodes=6, monthly="20000.00", hourly="100.0000"):
    return default_budget(
        min_nodes=min_nodes, max_nodes=max_nodes, node_monthly_price=Decimal(monthly),
        hourly_price=Decimal(hourly), currency="CNY",
    )  # fmt: skip


def test_the_default_is_the_subscription_fee_plus_the_on_demand_headroom():
    budget = a100_pool()
    assert budget.subscription == Decimal("40000.00")  # 2 monthly nodes
    assert budget.headroom_hours == Decimal("182.5")  # a quarter of 730 hours
    assert budget.headroom == Decimal("73000.00")  # 4 on-demand nodes × 100 an hour × 182.5 h
    assert budget.amount == Decimal("113000.00") and budget.currency == "CNY"


def test_the_explanation_states_each_step_of_the_computation():
    text = a100_pool().explanation
    assert text == (
        "2 monthly node(s) × 20000.00 = 40000.00, plus up to 4 on-demand node(s) × 100.0000 an hour × "
        "182.5 hours (25% of a month) = 73000.00: 113000.00 CNY a month"
    )


def test_a_pool_without_headroom_is_budgeted_at_its_subscription_fee():
    assert a100_pool(min_nodes=3, max_nodes=3).amount == Decimal("60000.00")


def test_a_pool_with_no_baseline_is_budgeted_for_its_peaks_only():
    assert a100_pool(min_nodes=0, max_nodes=2).amount == Decimal("36500.00")


def test_finance_wins_over_the_spec_which_wins_over_the_default():
    default = a100_pool()
    assert budget_choose(finance=Decimal("5"), spec=Decimal("7"), spec_currency="USD", default=default) == (
        budget_choose(finance=Decimal("5"), spec=Decimal("7"), spec_currency="USD", default=None)
    )
    chosen = budget_choose(finance=Decimal("5"), spec=Decimal("7"), spec_currency="USD", default=default)
    assert (chosen.amount, chosen.currency, chosen.source) == (Decimal("5"), "USD", FINANCE)
    chosen = budget_choose(finance=None, spec=Decimal("7"), spec_currency="USD", default=default)
    assert (chosen.amount, chosen.currency, chosen.source) == (Decimal("7"), "USD", SPEC)
    chosen = budget_choose(finance=None, spec=None, spec_currency=None, default=default)
    assert (chosen.amount, chosen.currency, chosen.source) == (Decimal("113000.00"), "CNY", DEFAULT)
    chosen = budget_choose(finance=Decimal("5"), spec=None, spec_currency=None, default=default)
    assert (chosen.currency, chosen.source) == ("CNY", FINANCE)  # the currency of what it replaces


def test_no_source_means_no_budget():
    assert budget_choose(finance=None, spec=None, spec_currency=None, default=None) is None
    free = a100_pool(min_nodes=0, max_nodes=0)
    assert budget_choose(finance=None, spec=None, spec_currency=None, default=free) is None


prices = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("100000"), places=2)


@given(st.integers(0, 50), st.integers(0, 50), prices, prices)
def test_the_default_adds_up_and_grows_with_the_headroom(min_nodes, extra, monthly, hourly):
    budget = default_budget(min_nodes=min_nodes, max_nodes=min_nodes + extra, node_monthly_price=monthly, hourly_price=hourly, currency="CNY")
    assert budget.amount == budget.subscription + budget.headroom
    assert budget.subscription == monthly * min_nodes
    assert budget.headroom == (hourly * extra * MONTH_HOURS * ON_DEMAND_SHARE).quantize(Decimal("0.01"), ROUND_HALF_UP)
    bigger = default_budget(min_nodes=min_nodes, max_nodes=min_nodes + extra + 1, node_monthly_price=monthly, hourly_price=hourly, currency="CNY")
    assert bigger.amount > budget.amount


def test_the_registry_fee_every_pool_pays_is_part_of_the_default():
    """Metered each hour the pool has a node (billing.metering): left out, a pool that ran as
    planned went over its default budget by its fee. A pool with no baseline has a node only in
    its peaks, so only their share of the fee is expected."""
    with_fee = default_budget(min_nodes=2, max_nodes=6, node_monthly_price=Decimal("20000.00"), hourly_price=Decimal("100.0000"),
                              currency="CNY", pool_fee=Decimal("500"))  # fmt: skip
    assert (with_fee.fee, with_fee.amount) == (Decimal("500.00"), Decimal("113500.00"))
    assert with_fee.explanation.endswith("= 73000.00, plus the pool's registry fee 500.00: 113500.00 CNY a month")
    peaks_only = default_budget(min_nodes=0, max_nodes=2, node_monthly_price=Decimal("20000.00"), hourly_price=Decimal("100.0000"),
                                currency="CNY", pool_fee=Decimal("500"))  # fmt: skip
    assert (peaks_only.fee, peaks_only.amount) == (Decimal("125.00"), Decimal("36625.00"))
