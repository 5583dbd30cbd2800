"""The article's purchase advisor: break-even, budget split, baseline planning (C2, O1, G4).

Why: a monthly node is cheaper per hour than an on-demand node only if it is busy long
enough. The article gives the rule (break-even H = M / P hours a month), a budget split
(nodes 80 %, storage 15 %, network 5 %) and a planning recipe (guarantee about 60 % of the
daily load on monthly nodes, burst the peak on demand). This module turns those rules into
numbers a team lead can act on, and goes one step further: from an hourly demand history it
computes the baseline N that minimises the bill, the way cloud reservation recommenders do.

Money is Decimal, ratios are Decimal; decisions are made on exact Fractions so that the
tie-breaking rule (never commit to a node that only breaks even) is exact. Pure core: no
Django, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction

from billing.allocation import CENT, split_money
from billing.lease_costs import quantize_money

HOURS_PER_MONTH = 730
RECENT_HOURS = 72
RATIO = Decimal("0.0001")
DEFAULT_BUDGET_SPLIT: tuple[tuple[str, Decimal], ...] = (
    ("nodes", Decimal("0.80")),
    ("storage", Decimal("0.15")),
    ("network", Decimal("0.05")),
)
DEFAULT_WINDOWS_DAYS = (7, 30, 60)


# --------------------------------------------------------------------------- break-even (C2)


def break_even_hours(monthly_price: Decimal, hourly_price: Decimal) -> Decimal:
    """H = M / P: hours a month a node must run for the monthly price to be the cheaper one.

    The article's example: 20,000 / 100 = 200 h. Below H hours of use, on demand is cheaper.
    """
    if monthly_price < 0 or hourly_price <= 0:
        raise ValueError("monthly price must be >= 0 and hourly price > 0")
    return Decimal(monthly_price) / Decimal(hourly_price)


# --------------------------------------------------------------------------- budget (O1)


@dataclass(frozen=True)
class BudgetEstimate:
    """A budget split into named parts that sum exactly to ``total``."""

    total: Decimal
    parts: tuple[tuple[str, Decimal], ...]
    shares: tuple[tuple[str, Decimal], ...]

    def part(self, name: str) -> Decimal:
        return dict(self.parts)[name]

    @property
    def nodes(self) -> Decimal:
        return self.part("nodes")

    @property
    def storage(self) -> Decimal:
        return self.part("storage")

    @property
    def network(self) -> Decimal:
        return self.part("network")


@dataclass(frozen=True)
class SplitComparison:
    """Actual spend of one component against its estimate (for the budget page)."""

    component: str
    estimate: Decimal
    actual: Decimal
    difference: Decimal  # actual - estimate: positive means over the estimate
    estimated_share: Decimal
    actual_share: Decimal | None  # None when nothing was spent at all


def budget_estimate(
    total: Decimal,
    split: Sequence[tuple[str, Decimal]] = DEFAULT_BUDGET_SPLIT,
    quantum: Decimal = CENT,
) -> BudgetEstimate:
    """Split a budget by the article's shares (nodes 80 %, storage 15 %, network 5 %).

    Largest-remainder rounding, so the parts always add up to the total to the cent: a budget
    page whose parts do not add up is not believed.
    """
    shares = tuple((name, Decimal(share)) for name, share in split)
    if sum(s for _, s in shares) != 1 or any(s < 0 for _, s in shares):
        raise ValueError("budget shares must be non-negative and sum to 1")
    amount = quantize_money(Decimal(total), quantum)
    values = split_money(amount, [s for _, s in shares], quantum)
    parts = tuple((name, v) for (name, _), v in zip(shares, values, strict=True))
    return BudgetEstimate(total=amount, parts=parts, shares=shares)


def compare_split(estimate: BudgetEstimate, actual: Mapping[str, Decimal]) -> list[SplitComparison]:
    """Actual vs estimated spend per component, in the estimate's order, extras last.

    Components spent on but not estimated (e.g. registry fees, C1) appear with estimate 0 so
    nothing is hidden.
    """
    spent = sum((quantize_money(Decimal(v), CENT) for v in actual.values()), Decimal(0))
    names = [n for n, _ in estimate.parts] + sorted(
        k for k in actual if k not in dict(estimate.parts)
    )
    shares = dict(estimate.shares)
    out = []
    for name in names:  # in cents: SQLite's sums come back as 15-digit floats ("0.400000000000000")
        est = quantize_money(dict(estimate.parts).get(name, Decimal(0)), CENT)
        act = quantize_money(Decimal(actual.get(name, Decimal(0))), CENT)
        share = (act / spent).quantize(RATIO) if spent else None
        out.append(SplitComparison(name, est, act, act - est, shares.get(name, Decimal(0)), share))
    return out


# --------------------------------------------------------------------------- planning (O1, G4)


@dataclass(frozen=True)
class BaselinePlan:
    """The article's recipe applied: monthly baseline, on-demand burst, and what it costs.

    Cost fields are ``None`` unless prices and an hourly demand profile are given: the
    saving depends entirely on how many hours the peak lasts, so no number is invented.
    """

    peak_gpus: int
    gpus_per_node: int
    daily_share: Decimal
    baseline_nodes: int
    baseline_gpus: int
    peak_nodes: int
    burst_nodes: int
    burst_gpus: int
    window_hours: int | None = None
    burst_node_hours: int | None = None
    all_monthly_cost: Decimal | None = None
    all_on_demand_cost: Decimal | None = None
    plan_cost: Decimal | None = None
    saving_vs_all_monthly: Decimal | None = None
    saving_ratio: Decimal | None = None


def plan_baseline(
    peak_gpus: int,
    gpus_per_node: int,
    daily_share: Decimal = Decimal("0.6"),
    *,
    monthly_price: Decimal | None = None,
    hourly_price: Decimal | None = None,
    demand_profile: Sequence[int] | None = None,
    hours_per_month: int = HOURS_PER_MONTH,
    quantum: Decimal = CENT,
) -> BaselinePlan:
    """Baseline ≈ ``daily_share`` of the peak on monthly nodes, the rest on demand.

    Article: 3 jobs × 8 GPUs = 24 peak; 60 % → 14.4 GPUs, rounded *up* to whole nodes (a
    guaranteed level below the target would not be guaranteed) → 2 × 8-GPU nodes = 16 GPUs
    monthly, bursting on demand up to 24. With ``demand_profile`` (GPUs demanded per hour,
    any window length) and prices, the plan is costed against sizing everything monthly for
    the peak: monthly nodes cost M scaled to the window, burst node-hours cost P each. The
    article claims ~30 % saving; what the formula gives depends on the profile and is
    returned as computed.
    """
    if peak_gpus < 0 or gpus_per_node <= 0 or not Decimal(0) <= daily_share <= Decimal(1):
        raise ValueError("need peak >= 0, gpus_per_node > 0 and daily_share within 0..1")
    baseline_nodes = math.ceil(Fraction(peak_gpus) * Fraction(daily_share) / gpus_per_node)
    peak_nodes = math.ceil(Fraction(peak_gpus, gpus_per_node))
    plan = BaselinePlan(
        peak_gpus=peak_gpus,
        gpus_per_node=gpus_per_node,
        daily_share=daily_share,
        baseline_nodes=baseline_nodes,
        baseline_gpus=baseline_nodes * gpus_per_node,
        peak_nodes=peak_nodes,
        burst_nodes=max(peak_nodes - baseline_nodes, 0),
        burst_gpus=max(peak_gpus - baseline_nodes * gpus_per_node, 0),
    )
    if demand_profile is None or monthly_price is None or hourly_price is None:
        return plan
    nodes = [math.ceil(Fraction(g, gpus_per_node)) for g in demand_profile]
    if not nodes:
        raise ValueError("demand profile is empty")
    window = len(nodes)
    monthly = Fraction(monthly_price) * window / hours_per_month
    price = Fraction(hourly_price)
    sized_for = max(peak_nodes, max(nodes))
    burst_hours = sum(max(d - baseline_nodes, 0) for d in nodes)
    all_monthly = sized_for * monthly
    plan_cost = baseline_nodes * monthly + burst_hours * price
    saving = all_monthly - plan_cost
    return replace(
        plan,
        window_hours=window,
        burst_node_hours=burst_hours,
        all_monthly_cost=quantize_money(all_monthly, quantum),
        all_on_demand_cost=quantize_money(sum(nodes) * price, quantum),
        plan_cost=quantize_money(plan_cost, quantum),
        saving_vs_all_monthly=quantize_money(saving, quantum),
        saving_ratio=quantize_money(saving / all_monthly, RATIO) if all_monthly else None,
    )


# --------------------------------------------------------------------------- recommendation


@dataclass(frozen=True)
class BaselineRecommendation:
    """How many monthly nodes to hold, and the evidence, over one demand window.

    Utilisation and coverage follow AWS Savings Plans / RI recommendations: utilisation =
    used committed hours / committed hours; coverage = committed hours used / total
    demanded hours. Monthly figures scale the window to ``hours_per_month``.
    """

    nodes: int
    optimal_nodes: int
    capped_by_recent_demand: bool
    recent_peak: int
    window_hours: int
    break_even_hours: Decimal
    committed_hours: int
    used_committed_hours: int
    demanded_hours: int
    on_demand_hours: int
    utilisation: Decimal | None
    coverage: Decimal | None
    window_cost: Decimal
    window_all_on_demand_cost: Decimal
    monthly_cost: Decimal
    monthly_all_on_demand_cost: Decimal
    monthly_saving_vs_on_demand: Decimal
    current_nodes: int | None = None
    monthly_current_cost: Decimal | None = None
    monthly_saving_vs_current: Decimal | None = None


def optimal_baseline(
    hourly_node_demand: Sequence[int],
    monthly_price: Decimal,
    hourly_price: Decimal,
    hours_per_month: int = HOURS_PER_MONTH,
) -> int:
    """The N minimising N·M' + P·Σ_h max(0, d_h − N), with M' = M × window / month.

    Adding the N-th node saves P for every hour with d_h ≥ N and costs M': it pays iff more
    than M'/P hours (the break-even hours of the window) need it. So N* is the k-th largest
    demand, k = ⌊M'/P⌋ + 1 — one sort, O(H log H). A node that exactly breaks even is not
    bought (the smallest minimiser): commitment is the riskier side.
    """
    demand = _check_demand(hourly_node_demand)
    if monthly_price < 0 or hourly_price <= 0:
        raise ValueError("monthly price must be >= 0 and hourly price > 0")
    window = len(demand)
    threshold = Fraction(monthly_price) * window / (hours_per_month * Fraction(hourly_price))
    k = math.floor(threshold) + 1
    if k > window:
        return 0
    return sorted(demand, reverse=True)[k - 1]


def baseline_cost(
    hourly_node_demand: Sequence[int],
    nodes: int,
    monthly_price: Decimal,
    hourly_price: Decimal,
    hours_per_month: int = HOURS_PER_MONTH,
) -> Fraction:
    """Exact window cost of holding ``nodes`` monthly and bursting the rest on demand."""
    demand = _check_demand(hourly_node_demand)
    monthly = Fraction(monthly_price) * len(demand) / hours_per_month
    burst = sum(max(d - nodes, 0) for d in demand)
    return nodes * monthly + burst * Fraction(hourly_price)


def recommend_baseline(
    hourly_node_demand: Sequence[int],
    monthly_price: Decimal,
    hourly_price: Decimal,
    hours_per_month: int = HOURS_PER_MONTH,
    *,
    current_nodes: int | None = None,
    recent_hours: int = RECENT_HOURS,
    quantum: Decimal = CENT,
) -> BaselineRecommendation:
    """Recommend a monthly baseline from hourly node demand (nodes needed each hour).

    1. Take the cost-optimal N over the whole window (:func:`optimal_baseline`).
    2. Check it against the last ``recent_hours`` (72 h = 3 days): if the peak demand of the
       last 3 days is below N, cap N to that peak. Monthly capacity is a commitment for a
       whole lease while on-demand follows demand down at once; a drop in the last days
       (a project finished, a team moved) means the older history overstates what will be
       needed, so we do not over-commit on it. If demand comes back, the next run raises N.
    3. Report utilisation, coverage and the expected monthly saving vs all on-demand and vs
       ``current_nodes``, all evaluated over the window (so a capped N shows what the cap
       would cost were the older demand to return).
    """
    demand = _check_demand(hourly_node_demand)
    optimal = optimal_baseline(demand, monthly_price, hourly_price, hours_per_month)
    recent_peak = max(demand[-recent_hours:]) if recent_hours > 0 else optimal
    nodes = min(optimal, recent_peak)
    window = len(demand)
    used = sum(min(d, nodes) for d in demand)
    demanded = sum(demand)
    price = Fraction(hourly_price)
    scale = Fraction(hours_per_month, window)
    cost = baseline_cost(demand, nodes, monthly_price, hourly_price, hours_per_month)
    on_demand = demanded * price
    current_cost = None
    if current_nodes is not None:
        current = baseline_cost(demand, current_nodes, monthly_price, hourly_price, hours_per_month)
        current_cost = current * scale

    def money(value: Fraction) -> Decimal:
        return quantize_money(value, quantum)

    return BaselineRecommendation(
        nodes=nodes,
        optimal_nodes=optimal,
        capped_by_recent_demand=nodes < optimal,
        recent_peak=recent_peak,
        window_hours=window,
        break_even_hours=quantize_money(
            Fraction(monthly_price) * window / (hours_per_month * price), Decimal("0.01")
        ),
        committed_hours=nodes * window,
        used_committed_hours=used,
        demanded_hours=demanded,
        on_demand_hours=demanded - used,
        utilisation=quantize_money(Fraction(used, nodes * window), RATIO) if nodes else None,
        coverage=quantize_money(Fraction(used, demanded), RATIO) if demanded else None,
        window_cost=money(cost),
        window_all_on_demand_cost=money(on_demand),
        monthly_cost=money(cost * scale),
        monthly_all_on_demand_cost=money(on_demand * scale),
        monthly_saving_vs_on_demand=money((on_demand - cost) * scale),
        current_nodes=current_nodes,
        monthly_current_cost=None if current_cost is None else money(current_cost),
        monthly_saving_vs_current=(
            None if current_cost is None else money(current_cost - cost * scale)
        ),
    )


def recommend_for_windows(
    hourly_node_demand: Sequence[int],
    monthly_price: Decimal,
    hourly_price: Decimal,
    windows_days: Sequence[int] = DEFAULT_WINDOWS_DAYS,
    **kwargs,
) -> dict[int, BaselineRecommendation]:
    """One recommendation per look-back window (7/30/60 days = the last 168/720/1440 hours).

    A window longer than the history is left out rather than silently shortened, so a
    "60-day" figure always means 60 days of evidence.
    """
    demand = list(hourly_node_demand)
    out = {}
    for days in windows_days:
        hours = days * 24
        if 0 < hours <= len(demand):
            out[days] = recommend_baseline(demand[-hours:], monthly_price, hourly_price, **kwargs)
    return out


# --------------------------------------------------------------------------- internals


def _check_demand(hourly_node_demand: Sequence[int]) -> list[int]:
    demand = list(hourly_node_demand)
    if not demand:
        raise ValueError("demand history is empty")
    if any(d < 0 for d in demand):
        raise ValueError("demand must be non-negative")
    return demand
