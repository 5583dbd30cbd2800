"""Every pool has a monthly budget (issue 20 item 2; seed T6, O1): the default from the price
book unless the spec or finance sets one, with finance > spec > default; finance creates and
edits pool and team budgets (issue 21 item 11); the pool page and the costs pages show them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import budgets
from billing.budget_admin import budget_pool_set
from billing.models import Budget, BudgetAlert, NodePrice
from pools.core.errors import ValidationError
from pools.models import AuditEntry, GpuNodePool, Notification, PoolEvent
from pools.services import notifications as notify
from pools.services import pools as pool_services
from tests.billing.billing_helpers import HOUR, T0, pool
from tests.billing.test_budgets import spend
from tests.conftest import make_document

pytestmark = pytest.mark.django_db

FORM = {
    "name": "train-pool-a",
    "gpu_model": "A100_80G",
    "node_type": "GPU_8_CARD",
    "region": "cn-east-2a",
    "min_nodes": "0",
    "max_nodes": "6",
    "lease_type": "monthly",
    "system_image": "ubuntu-22.04-cuda-12.2",
    "auto_repair": "on",
    "scheduling_policy": "binpack",
    "label_key": ["team"],
    "label_value": ["algorithm"],
}
# The helper's pool: no baseline, 6 on-demand A100 8-card nodes at 100.0000 an hour for a
# quarter of 730 hours, and a quarter of the 500.00 registry fee (the pool has a node then only).
HELPER_DEFAULT = Decimal("109625.00")


@pytest.fixture(autouse=True)
def notifications(settings, monkeypatch):
    settings.EBCLOUD_ALERT_EMAILS = ["finops@example.com"]
    settings.EBCLOUD_ALERT_WEBHOOK_URL = ""
    monkeypatch.setattr(notify, "WEBHOOK_BACKOFF_S", 0)


def budget_of(p) -> Budget:
    return Budget.objects.get(pool=p)


def test_a_new_pool_gets_the_default_budget_from_the_price_book(actors):
    document = make_document("baseline-pool", nodeCount={"min": 2, "max": 6})
    p = pool_services.pool_create(user=actors["lead"], document=document, now=T0)
    budget = budget_of(p)
    # 2 × 20000.00 a month + 4 on-demand nodes × 100.0000 an hour × 182.5 hours
    assert (budget.monthly_amount, budget.currency, budget.source, budget.thresholds) == (
        Decimal("113000.00"), "CNY", Budget.Source.DEFAULT, [80, 100],
    )  # fmt: skip
    assert budget.default_amount == Decimal("113000.00") and "2 monthly node(s) × 20000.00" in budget.default_note


def test_a_preemptible_pool_s_baseline_is_priced_at_the_preemptible_price(actors):
    document = make_document("cheap-pool", nodeCount={"min": 2, "max": 2}, preemptible=True)
    p = pool_services.pool_create(user=actors["lead"], document=document, now=T0)
    assert budget_of(p).monthly_amount == Decimal("24000.00")  # 60% of 20000.00, two nodes


def test_a_pool_without_a_spec_budget_alerts_at_80_percent_by_mail_and_in_the_app(actors, django_capture_on_commit_callbacks):
    """Seed T6: every pool, budget or not in its spec, alerts at 80% of its monthly budget."""
    actors["lead"].email = "lead@example.com"
    actors["lead"].save()
    p = pool(actors["lead"])
    assert "budget" not in p.document["spec"]
    spend(p, HELPER_DEFAULT * Decimal("0.8"))
    with django_capture_on_commit_callbacks(execute=True):
        fired = budgets.budgets_evaluate(now=T0 + HOUR)
    assert [(a.threshold, a.basis, a.amount) for a in fired] == [(80, "actual", Decimal("87700.00"))]
    assert set(mail.outbox[0].to) == {"finops@example.com", "lead@example.com"}
    assert "80% of its monthly budget 109625.00 CNY" in mail.outbox[0].body
    assert Notification.objects.get().pool == p
    assert PoolEvent.objects.filter(pool=p, reason="BudgetThresholdReached").count() == 1
    assert budgets.budgets_evaluate(now=T0 + 2 * HOUR) == []  # once per period


def test_the_default_follows_the_spec_and_the_price_book(actors):
    p = pool(actors["lead"])
    assert budget_of(p).monthly_amount == HELPER_DEFAULT
    pool_services.pool_resize(user=actors["lead"], pool=p, max_nodes=4, now=T0)
    assert budget_of(p).monthly_amount == Decimal("73125.00")
    old = NodePrice.objects.filter(node_type=p.node_type, gpu_model=p.gpu_model).latest("effective_from")
    NodePrice.objects.create(node_type=p.node_type, gpu_model=p.gpu_model, monthly_price=old.monthly_price,
                             hourly_price=Decimal("200"), currency="CNY", effective_from=T0 + timedelta(days=1))  # fmt: skip
    budgets.budgets_sync(now=T0 + timedelta(days=2))
    assert budget_of(p).monthly_amount == Decimal("146125.00")


def test_finance_wins_over_the_spec_which_wins_over_the_default(actors):
    p = pool(actors["lead"], budget={"monthly": "5000", "thresholds": [50]})
    assert (budget_of(p).source, budget_of(p).monthly_amount, budget_of(p).thresholds) == ("spec", Decimal("5000"), [50])
    budget_pool_set(user=actors["finance"], pool=p, monthly_amount=Decimal("7000"), now=T0)
    pool_services.pool_patch(user=actors["lead"], pool=p, patch={"spec": {"budget": {"monthly": "6000"}}}, now=T0)
    budget = budget_of(p)
    assert (budget.source, budget.monthly_amount, budget.default_amount) == ("finance", Decimal("7000"), HELPER_DEFAULT)
    budget_pool_set(user=actors["admin"], pool=p, monthly_amount=None, now=T0)
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("spec", Decimal("6000"))
    p.refresh_from_db()
    pool_services.pool_patch(user=actors["lead"], pool=p, patch={"spec": {"budget": None}}, now=T0)
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("default", HELPER_DEFAULT)
    actions = list(AuditEntry.objects.filter(action__startswith="budget.").values_list("action", "actor__username"))
    assert sorted(actions) == [("budget.pool.clear", "admin"), ("budget.pool.set", "finance")]
    assert PoolEvent.objects.filter(pool=p, reason="BudgetSet").count() == 2


def test_a_deleted_pool_keeps_its_budget_as_it_was(actors):
    """History, with its alerts (tests/billing/test_budget_deleted_pool.py): never deleted, and
    no longer following the price book or the spec."""
    p = pool(actors["lead"])
    before = budget_of(p)
    pool_services.pool_delete(user=actors["lead"], pool=p, now=T0)
    NodePrice.objects.update(hourly_price=Decimal("1.00"))
    budgets.budgets_sync(now=T0 + HOUR)
    after = Budget.objects.get()
    assert (after.pk, after.monthly_amount, after.source, after.updated_at) == (before.pk, HELPER_DEFAULT, "default", before.updated_at)


# ---------------------------------------------------------------- pages


def test_the_pool_form_sets_the_spec_budget_with_the_default_as_its_hint(browser, actors):
    p = pool(actors["lead"])
    client = browser("lead")
    page = client.get(f"/pools/{p.name}/edit/").content.decode()
    assert "Leave empty for the default: 0 monthly node(s)" in page and "109625.00 CNY a month" in page
    bad = client.post(f"/pools/{p.name}/edit/", {**FORM, "budget_monthly": "0"})
    assert bad.status_code == 400 and bad.context["form"].errors["budget_monthly"]
    assert client.post(f"/pools/{p.name}/edit/", {**FORM, "budget_monthly": "4200"}).status_code == 302
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("spec", Decimal("4200"))
    assert client.post(f"/pools/{p.name}/edit/", FORM).status_code == 302  # empty: the default again
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("default", HELPER_DEFAULT)


def test_the_pool_page_shows_the_budget_its_source_spend_forecast_and_alerts(browser, actors, time_machine):
    p = pool(actors["lead"])
    spend(p, "90000", hours=80, start=T0)
    budgets.budgets_evaluate(now=T0 + 80 * HOUR)
    time_machine.move_to(T0 + 80 * HOUR, tick=False)  # the page shows this month's spend
    html = browser("lead").get(f"/pools/{p.name}/").content.decode()
    for text in ("109625.00 CNY", "Default (subscription fee, on-demand headroom and registry fee)", "Spent this month",
                 "90000.00 CNY (82.1% used)", "Forecast", "80% of the budget on spend"):  # fmt: skip
        assert text in html, text
    assert "Change the budget" not in html
    assert "Change the budget" in browser("finance").get(f"/pools/{p.name}/").content.decode()


def test_the_costs_pages_list_every_visible_budget_with_its_source(browser, actors, teams):
    mine = pool(actors["lead"])
    theirs = pool(actors["other_lead"], name="infer-pool", labels={"team": "inference"})
    budgets.budget_team_set(user=actors["finance"], team=teams["algorithm"], monthly_amount=Decimal("100"))
    for url in ("/costs/", "/costs/budgets/"):
        lead = browser("lead").get(url).content.decode()
        assert f"pool {mine.name}" in lead and theirs.name not in lead and "Set by finance" in lead
        finance = browser("finance").get(url).content.decode()
        assert f"pool {mine.name}" in finance and f"pool {theirs.name}" in finance


def test_finance_sets_a_pool_budget_on_its_page_with_errors_beside_the_field(browser, actors):
    p = pool(actors["lead"], budget={"monthly": "5000"})
    client = browser("finance")
    page = client.get(f"/costs/budgets/pools/{p.name}/").content.decode()
    assert "5000" in page and "109625.00 CNY a month" in page and "wins over" in page
    bad = client.post(f"/costs/budgets/pools/{p.name}/", {"monthly": "-3"})
    assert bad.status_code == 400 and bad.context["form"].errors["monthly"]
    assert client.post(f"/costs/budgets/pools/{p.name}/", {"monthly": "8000.50"}).status_code == 302
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("finance", Decimal("8000.50"))
    assert client.post(f"/costs/budgets/pools/{p.name}/", {"monthly": ""}).status_code == 302
    assert (budget_of(p).source, budget_of(p).monthly_amount) == ("spec", Decimal("5000"))


def test_only_finance_and_admins_edit_pool_budgets_and_other_teams_see_no_pool(browser, actors):
    p = pool(actors["lead"])
    url = f"/costs/budgets/pools/{p.name}/"
    assert browser("other_lead").get(url).status_code == 404
    assert browser("other_lead").post(url, {"monthly": "1"}).status_code == 404
    assert browser("lead").post(url, {"monthly": "1"}).status_code == 403
    assert browser("member").get(url).status_code == 403
    assert browser("admin").post(url, {"monthly": "1"}).status_code == 302
    assert budget_of(p).monthly_amount == Decimal("1")


def test_finance_creates_changes_and_removes_a_team_budget(browser, actors, teams):
    client = browser("finance")
    bad = client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "abc", "currency": "CNY", "thresholds": "80, x"})
    assert bad.status_code == 400 and set(bad.context["form"].errors) == {"monthly", "thresholds"}
    bad = client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "100", "currency": "12", "thresholds": "80"})
    assert bad.status_code == 400 and bad.context["form"].errors["currency"]
    created = client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "100", "currency": "CNY", "thresholds": "50, 90"})
    assert created.status_code == 302
    budget = Budget.objects.get(team=teams["algorithm"], pool=None)
    assert (budget.monthly_amount, budget.thresholds, budget.source) == (Decimal("100"), [50, 90], "finance")
    again = client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "5", "currency": "CNY", "thresholds": "80"})
    assert again.status_code == 400 and again.context["form"].errors["team"]
    edited = client.post("/costs/budgets/teams/algorithm/", {"monthly": "250", "currency": "CNY", "thresholds": "80,100"})
    assert edited.status_code == 302
    budget.refresh_from_db()
    assert (budget.monthly_amount, budget.thresholds) == (Decimal("250"), [80, 100])
    assert client.post("/costs/budgets/teams/algorithm/delete/").status_code == 302
    assert not Budget.objects.filter(pool=None).exists()
    actions = sorted(AuditEntry.objects.filter(action__startswith="budget.team").values_list("action", flat=True))
    assert actions == ["budget.team.delete", "budget.team.set", "budget.team.set"]


@pytest.mark.parametrize(("role", "own_team"), [("lead", 403), ("member", 403), ("other_lead", 404)])
def test_leads_and_members_cannot_edit_team_budgets(browser, actors, teams, role, own_team):
    """Their own team's budget page is refused (403); another team's is not found (404), as
    another team's pool is."""
    budgets.budget_team_set(user=actors["admin"], team=teams["algorithm"], monthly_amount=Decimal("100"))
    client = browser(role)
    assert client.get("/costs/budgets/teams/new/").status_code == 403
    assert client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "5", "currency": "CNY", "thresholds": "80"}).status_code == 403
    assert client.get("/costs/budgets/teams/algorithm/").status_code == own_team
    assert client.post("/costs/budgets/teams/algorithm/", {"monthly": "5", "currency": "CNY", "thresholds": "80"}).status_code == own_team
    assert client.post("/costs/budgets/teams/algorithm/delete/").status_code == own_team
    assert Budget.objects.get(pool=None).monthly_amount == Decimal("100")
    assert not BudgetAlert.objects.exists() and GpuNodePool.objects.count() == 0


@pytest.mark.parametrize("role", ["lead", "member"])
def test_another_team_s_budget_is_not_found_by_a_lead_or_member(browser, actors, teams, role):
    budgets.budget_team_set(user=actors["admin"], team=teams["inference"], monthly_amount=Decimal("100"))
    client = browser(role)
    for url in ("/costs/budgets/teams/inference/", "/costs/budgets/teams/no-such-team/"):
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"monthly": "5", "currency": "CNY", "thresholds": "80"}).status_code == 404, url
        assert client.post(url + "delete/").status_code == 404, url
    assert Budget.objects.get(pool=None).monthly_amount == Decimal("100")


@pytest.mark.parametrize("thresholds", ["²", "⁵0", "80, ٣"])
def test_digits_that_are_not_ascii_are_not_a_whole_percentage(browser, teams, thresholds):
    """'²' is a digit to str.isdigit() but int() refuses it: that was a 500."""
    response = browser("finance").post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "1000", "currency": "CNY", "thresholds": thresholds})
    bad = thresholds.split(", ")[-1]
    assert response.status_code == 400 and response.context["form"].errors["thresholds"] == [f"{bad!r} is not a whole percentage"]
    assert not Budget.objects.filter(pool=None).exists()


@pytest.mark.parametrize("currency", ["USD", "XXX"])
def test_a_team_budget_is_in_the_currency_the_team_is_charged_in(browser, actors, teams, currency):
    """A budget in another currency counts none of the team's spend: 0.00 forever, no alert."""
    pool(actors["lead"])
    client = browser("finance")
    response = client.post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "1000", "currency": currency, "thresholds": "80"})
    assert response.status_code == 400
    assert response.context["form"].errors["currency"] == [
        "must be CNY: team Algorithm is charged in that currency, and a budget in another would count none of its spend"
    ]
    assert not Budget.objects.filter(pool=None).exists()
    NodePrice.objects.update(currency="USD")  # the price book changes currency: the next budget follows
    assert budgets.budget_team_set(user=actors["finance"], team=teams["algorithm"], monthly_amount=Decimal("5"), currency="USD").currency == "USD"
    with pytest.raises(ValidationError) as caught:
        budgets.budget_team_set(user=actors["finance"], team=teams["inference"], monthly_amount=Decimal("5"), currency="XXX")
    assert [e.field for e in caught.value.errors] == ["currency"]  # a team with no pool yet: the price book's


def test_syncing_the_fleet_s_budgets_prices_each_pool_shape_once_and_writes_nothing_unchanged(actors):
    for i in range(4):
        pool(actors["lead"], name=f"pool-{i}")
    with CaptureQueriesContext(connection) as queries:
        assert budgets.budgets_sync(now=T0 + HOUR) == 4
    # the budgets, the pools, and one price, price, lease term and registry fee lookup for their one shape
    assert len(queries) <= 6, [q["sql"] for q in queries]
