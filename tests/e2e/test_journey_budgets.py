"""Journey, issue 21 item 11 (and issue 20 item 2): finance creates and edits a team's budget and
a pool's budget in the browser, sees the error beside the field when the amount is wrong, and
reads where each budget comes from (the default, the spec, finance) on the budgets page and on
the pool page."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import Budget
from tests.billing.billing_helpers import pool

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def budget_row(actor, name: str):
    return actor.page.locator("table tbody tr", has_text=name).first


def test_finance_creates_and_edits_a_team_budget_and_a_pool_budget(browse, actors, teams):
    p = pool(actors["lead"])  # no spec.budget: the default applies
    finance = browse("finance")
    finance.follow("nav a:has-text('Costs')")
    finance.follow("a:has-text('Budgets')")
    row = budget_row(finance, f"pool {p.name}")
    assert "Default (subscription fee, on-demand headroom and registry fee)" in row.inner_text()
    assert "109625.00" in row.inner_text()

    # A team budget: a wrong amount is refused beside its field, then saved.
    finance.follow("a:has-text('New team budget')")
    finance.page.select_option("#id_team", "algorithm")
    finance.page.fill("#id_monthly", "-5")
    finance.page.fill("#id_thresholds", "80, 100")
    finance.follow("main button:has-text('Save')")
    error = finance.page.locator("#id_monthly ~ .error")
    assert error.count() == 1 and "greater than or equal to 0.01" in error.inner_text()
    finance.page.fill("#id_monthly", "150000")
    finance.follow("main button:has-text('Save')")
    body = finance.page.inner_text("body")
    assert "budget is 150000.00 CNY a month." in body, body[:600]
    row = budget_row(finance, "team budget")
    assert "Set by finance" in row.inner_text() and "150000.00" in row.inner_text()
    finance.shot("finance-budgets-01-team-budget")

    # ... and changed.
    finance.follow("a[aria-label='Change the budget of team Algorithm']")
    assert finance.page.input_value("#id_monthly") == "150000.00"
    finance.page.fill("#id_monthly", "175000")
    finance.page.fill("#id_thresholds", "50, 80, 100")
    finance.follow("main button:has-text('Save')")
    assert "175000.00" in budget_row(finance, "team budget").inner_text()
    team_budget = Budget.objects.get(team=teams["algorithm"], pool=None)
    assert (team_budget.monthly_amount, team_budget.thresholds) == (Decimal("175000.00"), [50, 80, 100])

    # A pool's budget: the form says what the default would be and which budget wins.
    finance.follow(f"a[aria-label='Change the budget of pool {p.name}']")
    assert "109625.00 CNY a month" in finance.page.inner_text("#budget-default")
    assert "wins over" in finance.page.inner_text("main")
    finance.page.fill("#id_monthly", "0")
    finance.follow("main button:has-text('Save')")
    assert finance.page.locator("#id_monthly ~ .error").count() == 1
    finance.page.fill("#id_monthly", "90000")
    finance.follow("main button:has-text('Save')")
    row = budget_row(finance, f"pool {p.name}")
    assert "Set by finance" in row.inner_text() and "90000.00" in row.inner_text()
    finance.follow(f"a[aria-label='Change the budget of pool {p.name}']")
    assert finance.page.input_value("#id_monthly") == "90000.00"
    finance.page.fill("#id_monthly", "95000.50")
    finance.follow("main button:has-text('Save')")
    assert "95000.50" in budget_row(finance, f"pool {p.name}").inner_text()
    finance.shot("finance-budgets-02-pool-budget")

    # The pool page says so too, and the team's lead reads it there.
    lead = browse("lead")
    lead.goto(f"/pools/{p.name}/")
    budget = lead.page.inner_text("#pool-budget")
    assert "95000.50 CNY" in budget and "Set by finance" in budget and "the default would be 109625.00 CNY" in budget
    assert lead.page.locator("#pool-budget a:has-text('Change the budget')").count() == 0
