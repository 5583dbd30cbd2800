"""Budget reads for the pool page, the pool form and finance's budget forms (issue 20 item 2):
the pool's budget this month with where it comes from and the alerts already sent, and what the
budget would be without finance's override or without the spec (precedence, shown to users)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.budget_default import DefaultBudget
from billing.budget_sync import pool_default_budget
from billing.models import Budget, BudgetAlert
from billing.month_spend import BudgetStatus, period_bounds
from billing.selectors import budget_status
from pools.models import GpuModel, GpuNodePool, NodeType

PRECEDENCE = "A budget finance sets wins over the one in the pool's spec, which wins over the default."


@dataclass(frozen=True)
class PoolBudget:
    """The pool page's budget panel."""

    status: BudgetStatus
    alerts: list[BudgetAlert]  # sent this month, oldest first

    @property
    def budget(self) -> Budget:
        return self.status.budget


def pool_budget(*, pool: GpuNodePool, now: datetime) -> PoolBudget | None:
    """The pool's budget this month and the alerts sent for it this month (None: no budget,
    which only happens when it has no spec budget and the price book has no price for it)."""
    budget = Budget.objects.filter(pool=pool).select_related("pool", "team").first()
    if budget is None:
        return None
    start, _ = period_bounds(now)
    alerts = list(BudgetAlert.objects.filter(budget=budget, period=start.date()).order_by("created_at", "id"))
    return PoolBudget(status=budget_status(budget=budget, now=now), alerts=alerts)


@dataclass(frozen=True)
class PoolBudgetSources:
    """Each source of a pool's budget, for finance's form and the pool form's hint."""

    budget: Budget | None
    finance: Decimal | None
    spec: Decimal | None
    spec_currency: str
    default: DefaultBudget | None


def pool_budget_sources(*, pool: GpuNodePool, now: datetime) -> PoolBudgetSources:
    budget = Budget.objects.filter(pool=pool).first()
    spec = (pool.document or {}).get("spec", {}).get("budget") or {}
    return PoolBudgetSources(
        budget=budget,
        finance=budget.override_amount if budget else None,
        spec=Decimal(str(spec["monthly"])) if "monthly" in spec else None,
        spec_currency=spec.get("currency", "CNY"),
        default=pool_default_budget(pool=pool, at=now),
    )


@dataclass(frozen=True)
class PoolShape:
    """A pool not made yet, as the new-pool form's choices give it (`PoolForm.chosen_shape`):
    its GPU model and node type among the catalog's, a known lease type, counts that pass their
    fields' rules."""

    gpu_model: str
    node_type: str
    lease_type: str
    preemptible: bool
    min_nodes: int
    max_nodes: int
    sent: bool  # the choices a user sent (the form came back with an error), else its first ones


RULE_IN_WORDS = "Leave empty for the default: the monthly nodes' fee plus room for the on-demand nodes above them, plus the registry fee"


def pool_form_budget_hint(*, pool: GpuNodePool | None, now: datetime, shape: PoolShape | None = None) -> str:
    """The help under the pool form's budget field: what an empty field means for this pool, or
    for a new one the computation for the form's choices (`shape`), as the guides promise, by
    the same rule and price book as the Edit form's; the rule in words when they price nothing."""
    if pool is None:
        return (shape and _shape_hint(shape, now)) or f"{RULE_IN_WORDS} (the pool page shows the computation)."
    sources = pool_budget_sources(pool=pool, now=now)
    hint = "Leave empty for the default"
    hint += f": {sources.default.explanation}." if sources.default else " (the price book has no price for this pool yet)."
    if sources.finance is not None:
        hint += f" Finance set this pool's budget to {sources.finance}; that applies over this field."
    return hint


def _shape_hint(shape: PoolShape, now: datetime) -> str:
    model, kind = GpuModel.objects.filter(name=shape.gpu_model).first(), NodeType.objects.filter(name=shape.node_type).first()
    if model is None or kind is None:
        return ""
    pool = GpuNodePool(
        gpu_model=model, node_type=kind, lease_type=shape.lease_type, preemptible=shape.preemptible,
        min_nodes=shape.min_nodes, max_nodes=shape.max_nodes,
    )  # fmt: skip  # never saved: the price book's reads take only these fields
    try:
        default = pool_default_budget(pool=pool, at=now)
        explanation = default.explanation if default is not None else ""
    except ArithmeticError:  # a count past any price's digits (the spec refuses it beside its field)
        return ""
    if not explanation:
        return ""
    return (
        f"{RULE_IN_WORDS}. For the choices {'sent' if shape.sent else 'first shown here'} ({shape.min_nodes} to "
        f"{shape.max_nodes} {shape.node_type} nodes of {shape.gpu_model}, {shape.lease_type} lease"
        f"{', preemptible' if shape.preemptible else ''}): {explanation}. Other choices change the numbers."
    )
