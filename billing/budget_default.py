"""Which monthly budget a pool has, decided without the database (seed T6, O1; design §1).

Every live pool has a budget. Unless someone chose one, it is what the pool is built to cost:
its subscription fee (the `nodeCount.min` baseline nodes at the monthly price of the pool's
lease term, preemptible price where the pool is preemptible) plus its on-demand headroom (the
`max - min` nodes it may add, at the on-demand hourly price, for `ON_DEMAND_SHARE` of an
average month's hours) plus the registry fee every pool pays each month (metered hour by hour
with the rest, in the hours the pool has a node: left out, a pool that ran exactly as planned
went over its default budget). O1 plans a pool so that the monthly baseline carries about 60% of the
daily load and only the peaks run on on-demand nodes: peaks that last about a quarter of the
day, which is the share chosen here (docs/guide-finance.md explains it to finance).

Precedence (`budget_choose`): a budget finance set for the pool wins over `spec.budget.monthly`
(the team's own plan), which wins over the default. Pure (no Django): Decimals in and out.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import cached_property

from pools.core.spec import MAX_MONTHLY_BUDGET

CENT = Decimal("0.01")
# An average month: 365 days × 24 hours / 12. Fixed, so a default budget does not change
# between a 28-day and a 31-day month.
MONTH_HOURS = Decimal("730")
# The share of the month's hours the headroom nodes are expected to run (peaks, O1).
ON_DEMAND_SHARE = Decimal("0.25")

DEFAULT = "default"
SPEC = "spec"
FINANCE = "finance"
DEFAULT_THRESHOLDS = (80, 100)


@dataclass(frozen=True)
class DefaultBudget:
    """The default monthly budget of a pool and how it was reached (shown as the form's hint).
    Its figures are computed once: the budget sync reads them for every pool of a shape."""

    baseline_nodes: int
    node_monthly_price: Decimal
    headroom_nodes: int
    hourly_price: Decimal
    share: Decimal
    currency: str
    pool_fee: Decimal = Decimal(0)  # the registry fee per pool-month, in `currency`

    @cached_property
    def subscription(self) -> Decimal:
        return (self.node_monthly_price * self.baseline_nodes).quantize(CENT, ROUND_HALF_UP)

    @cached_property
    def headroom_hours(self) -> Decimal:
        return MONTH_HOURS * self.share

    @cached_property
    def headroom(self) -> Decimal:
        return (self.hourly_price * self.headroom_nodes * self.headroom_hours).quantize(CENT, ROUND_HALF_UP)

    @cached_property
    def fee(self) -> Decimal:
        """The registry fee the month is expected to bring: it is metered in the hours the pool
        has a node, so all month with a baseline, else for the headroom's share of it."""
        return self.pool_fee if self.baseline_nodes else (self.pool_fee * self.share).quantize(CENT, ROUND_HALF_UP)

    @cached_property
    def amount(self) -> Decimal:
        """At most what a budget holds: a price book far off scale must not stop the metering
        that syncs budgets for every team."""
        return min(self.subscription + self.headroom + self.fee, MAX_MONTHLY_BUDGET)

    @cached_property
    def explanation(self) -> str:
        """The computation in plain words, e.g. for the hint under the pool form's budget field."""
        return (
            f"{self.baseline_nodes} monthly node(s) × {self.node_monthly_price} = {self.subscription}, "
            f"plus up to {self.headroom_nodes} on-demand node(s) × {self.hourly_price:f} an hour × "
            f"{self.headroom_hours.normalize():f} hours ({(self.share * 100).normalize():f}% of a month) = "
            f"{self.headroom}" + (f", plus the pool's registry fee {self.fee}" if self.fee else "")
            + f": {self.amount} {self.currency} a month"
            + (" (the most a budget holds)" if self.amount == MAX_MONTHLY_BUDGET else "")
        )


def default_budget(
    *,
    min_nodes: int,
    max_nodes: int,
    node_monthly_price: Decimal,
    hourly_price: Decimal,
    currency: str,
    share: Decimal = ON_DEMAND_SHARE,
    pool_fee: Decimal = Decimal(0),
) -> DefaultBudget:
    """Subscription fee plus on-demand headroom; `node_monthly_price` is one node's monthly
    price after the lease term's (or the preemptible) discount, as an order would pay it."""
    return DefaultBudget(
        baseline_nodes=min_nodes,
        node_monthly_price=Decimal(node_monthly_price),
        headroom_nodes=max(max_nodes - min_nodes, 0),
        hourly_price=Decimal(hourly_price),
        share=share,
        currency=currency,
        pool_fee=Decimal(pool_fee).quantize(CENT, ROUND_HALF_UP),
    )


@dataclass(frozen=True)
class Chosen:
    amount: Decimal
    currency: str
    source: str


def budget_choose(
    *,
    finance: Decimal | None,
    spec: Decimal | None,
    spec_currency: str | None,
    default: DefaultBudget | None,
) -> Chosen | None:
    """Finance's budget for the pool > `spec.budget.monthly` > the default; None when there is
    none of them (no spec budget and no price to compute a default from). A finance budget
    keeps the currency of what it replaces (the spend it is compared with is in that one)."""
    fallback_currency = spec_currency if spec is not None else default.currency if default else "CNY"
    if finance is not None:
        return Chosen(Decimal(finance), fallback_currency or "CNY", FINANCE)
    if spec is not None:
        return Chosen(Decimal(spec), spec_currency or "CNY", SPEC)
    if default is not None and default.amount > 0:
        return Chosen(default.amount, default.currency, DEFAULT)
    return None
