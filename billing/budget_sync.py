"""Every live pool's Budget row kept in line with what decides it: finance's override, the
pool's `spec.budget`, and the default from the price book (`billing.budget_default`).

Run for one pool when it is created or changed (`pools.services.pools`), and for every pool
before budgets are evaluated (`billing.budgets.budgets_evaluate`), so a price change reaches
the defaults within one evaluation. A row is written only when something changed.

A deleted pool's budget is history, as in OpenCost's or a cloud's budgets: it stays as it was
when the pool went, with its alerts and finance's override, and is still evaluated in every
month the pool is charged in (its monthly leases run on to their end, `docs/guide-finance.md`).
Deleting it took the month's alerts off the budgets page and finance's override with no audit
entry, while the pool went on costing.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from billing import pricing
from billing.budget_default import DEFAULT_THRESHOLDS, DefaultBudget, budget_choose, default_budget
from billing.models import Budget, CostRecord, PriceBookEntry
from billing.month_spend import period_bounds
from billing.node_prices import price_entry_in_force
from pools.claims import WHOLE, Part
from pools.core.errors import ValidationError
from pools.models import GpuNodePool


def pool_default_budget(*, pool: GpuNodePool, at: datetime) -> DefaultBudget | None:
    """The pool's default budget at the prices in force at `at` (None: the price book has no
    price for its node type, GPU model or lease term). The registry fee counts where it is in
    the nodes' currency (the admin keeps one currency: `billing.admin`)."""
    try:
        price = pricing.price_in_force(node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, at=at)
        quote = pricing.quote_for(
            node_type_id=pool.node_type_id, gpu_model_id=pool.gpu_model_id, lease_type=pool.lease_type,
            nodes=pool.min_nodes, at=at, preemptible=pool.preemptible,
        )  # fmt: skip
    except ValidationError:
        return None
    registry = price_entry_in_force(kind=PriceBookEntry.Kind.REGISTRY_POOL_MONTH, at=at)
    return default_budget(
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        node_monthly_price=quote.node_monthly_price,
        hourly_price=price.hourly_price,
        currency=price.currency,
        pool_fee=registry.amount if registry is not None and registry.currency == price.currency else Decimal(0),
    )


def budget_sync_pool(
    *, pool: GpuNodePool, now: datetime | None = None, budget: Budget | None = None, defaults: dict | None = None
) -> Budget | None:
    """Make the pool's Budget what its sources decide now; None (and no row) when nothing
    decides one. A deleted pool's budget is kept as it was (history: see the module's
    docstring), never deleted nor created. `budget` is the pool's row when the caller has it;
    `defaults` memoises default budgets across the pools of one sync (a fleet has few shapes)."""
    now = now or timezone.now()
    if budget is None:
        budget = Budget.objects.filter(pool=pool).first()
    if pool.deleted_at is not None:
        return budget
    spec = (pool.document or {}).get("spec", {}).get("budget") or {}
    spec_amount = Decimal(str(spec["monthly"])) if "monthly" in spec else None
    shape = (pool.node_type_id, pool.gpu_model_id, pool.lease_type, pool.preemptible, pool.min_nodes, pool.max_nodes)
    if defaults is None:
        default = pool_default_budget(pool=pool, at=now)
    else:
        if shape not in defaults:
            defaults[shape] = pool_default_budget(pool=pool, at=now)
        default = defaults[shape]
    chosen = budget_choose(
        finance=budget.override_amount if budget else None,
        spec=spec_amount,
        spec_currency=spec.get("currency", "CNY") if spec_amount is not None else None,
        default=default,
    )
    if chosen is None:
        if budget is not None:
            budget.delete()
        return None
    values = {
        "team_id": pool.team_id,
        "monthly_amount": chosen.amount,
        "currency": chosen.currency,
        "source": chosen.source,
        "thresholds": sorted({int(t) for t in spec.get("thresholds", DEFAULT_THRESHOLDS)}),
        "default_amount": default.amount if default else None,
        "default_note": default.explanation if default else "",
    }
    if budget is None:  # another worker may insert it first: then its row is brought in line below
        budget, created = Budget.objects.get_or_create(pool=pool, defaults={"created_at": now, "updated_at": now, **values})
        if created:
            return budget
    changed = {k: v for k, v in values.items() if getattr(budget, k) != v}
    if changed:
        for key, value in changed.items():
            setattr(budget, key, value)
        budget.updated_at = now
        budget.save(update_fields=[*changed, "updated_at"])
    return budget


def budgets_sync(*, now: datetime | None = None) -> int:
    """Every live pool's budget in line (added, changed or removed); the number of pool budgets
    evaluated (those of the deleted pools charged this month too)."""
    return len(pool_budgets_synced(now=now))


def charged_in_month_q(now: datetime) -> Q:
    """Budgets of a pool charged in `now`'s month: one (pool, hour) index probe per budget."""
    start, end = period_bounds(now)
    return Q(Exists(CostRecord.objects.filter(pool_id=OuterRef("pool_id"), hour__gte=start, hour__lt=end)))


def budgets_in_force_q(now: datetime) -> Q:
    """The budgets of `now`'s month: the teams', the live pools' and those of the deleted pools
    still charged in it (their leases run on). A deleted pool's budget from an earlier month
    stays, with its alerts, but is no longer this month's. The one statement of the rule: the
    hourly evaluation (`pool_budgets_synced`), the budgets page and `/metrics` all filter by it."""
    return Q(pool__isnull=True) | Q(pool__deleted_at__isnull=True) | charged_in_month_q(now)


POOL_HEAVY = ("document", "conditions", "scaling_history", "node_counts")


def pool_budgets_synced(*, now: datetime | None = None, part: Part = WHOLE) -> list[Budget]:
    """`budgets_sync` (of the `part`'s pools), returning the budgets to evaluate with their pool
    and team set, so that evaluating them (`billing.budgets.budgets_evaluate`) reads no pool a
    second time: the live pools', and those of the deleted pools charged in `now`'s month, as
    they are (never deleted: see the module's docstring)."""
    now = now or timezone.now()
    # One query for both, the pool budgets in force (`budgets_in_force_q`): a deleted pool's
    # budget comes with its pool's name and dates, not its document (the live pools are read
    # below, once).
    found = part.of(Budget.objects.filter(budgets_in_force_q(now), pool__isnull=False))
    found = found.select_related("pool", "team").defer(*(f"pool__{f}" for f in POOL_HEAVY)).order_by("pk")
    rows, kept = {}, []
    for budget in found:
        if budget.pool.deleted_at is None:
            rows[budget.pool_id] = budget
        else:
            kept.append(budget)
    defaults: dict = {}
    for pool in part.of(GpuNodePool.objects.active(), "pk").select_related("team").without_status():
        budget = budget_sync_pool(pool=pool, now=now, budget=rows.pop(pool.pk, None), defaults=defaults)
        if budget is not None:
            budget.pool, budget.team = pool, pool.team
            kept.append(budget)
    return kept
