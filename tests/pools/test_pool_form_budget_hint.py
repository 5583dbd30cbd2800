"""The new-pool form's budget hint shows the default budget's computation (the guides promise
it: docs/guide-team-lead.md §2, docs/guide-finance.md), by the same rule and price book as the
Edit form's hint, for the choices the form shows before the pool exists."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.budget_selectors import pool_form_budget_hint
from billing.models import NodePrice, PriceBookEntry
from pools.forms import PoolForm
from pools.models import GpuNodePool
from tests.pools.test_views import FORM

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 15, 9, 0, tzinfo=UTC)  # any time after the demo price book's 2024 epoch


def hint_for(data: dict) -> str:
    """The new-pool page's hint for a form sent back with `data` (as `pools.views.pools.pool_create` builds it)."""
    return pool_form_budget_hint(pool=None, now=NOW, shape=PoolForm(data, teams=[]).chosen_shape())


def test_the_new_pool_page_shows_the_computation_for_its_initial_choices(browser, actors, time_machine):
    """The form opens on A100_80G, GPU_1_CARD, monthly, 2 to 6 nodes: 2 × 2500.00 a month plus
    4 × 12.50 an hour for a quarter of 730 hours. It said only "the pool page shows the computation"."""
    time_machine.move_to(NOW, tick=False)
    page = browser("lead").get("/pools/new/").content.decode()
    assert "For the choices first shown here (2 to 6 GPU_1_CARD nodes of A100_80G, monthly lease)" in page
    assert "2 monthly node(s) × 2500.00 = 5000.00, plus up to 4 on-demand node(s) × 12.5000 an hour × 182.5 hours" in page
    assert "14125.00 CNY a month" in page


def test_the_hint_follows_the_choices_prefilled_from_a_pending_pods_link(browser, actors, time_machine):
    time_machine.move_to(NOW, tick=False)
    page = browser("lead").get("/pools/new/?gpu_model=A100_80G&node_type=GPU_8_CARD").content.decode()
    assert "2 monthly node(s) × 20000.00 = 40000.00" in page and "113000.00 CNY a month" in page  # the finance guide's example, less its registry fee (this price book has none)


def test_a_form_sent_back_with_an_error_computes_for_the_choices_sent(actors):
    hint = hint_for({**FORM, "name": "Bad Name", "lease_type": "yearly", "preemptible": "on", "min_nodes": "1", "max_nodes": "1"})
    assert "For the choices sent (1 to 1 GPU_8_CARD nodes of A100_80G, yearly lease, preemptible)" in hint
    assert "1 monthly node(s) × 10200.00 = 10200.00" in hint and "10200.00 CNY a month" in hint  # 60% of 85% of 20000.00


def test_choices_with_no_shape_keep_the_rule_in_words(actors):
    for changed in ({"min_nodes": "many"}, {"max_nodes": "٦"}, {"min_nodes": "9" * 40}, {"max_nodes": "9" * 40}, {"lease_type": "weekly"}, {"node_type": "GPU_3_CARD"}):
        hint = hint_for({**FORM, **changed})
        assert hint.startswith("Leave empty for the default: the monthly nodes' fee") and "×" not in hint, changed


def test_a_nul_byte_in_a_choice_is_a_form_error_not_a_server_error(browser, actors):
    """The hint looked the raw value up before the field refused it: PostgreSQL refuses a NUL in
    a query (DataError, a 500) where SQLite accepts it. Only a value among the choices is looked up."""
    lead = browser("lead")
    page = lead.get("/pools/new/?gpu_model=%00")
    assert page.status_code == 200 and "Leave empty for the default" in page.content.decode()
    sent = lead.post("/pools/new/", {**FORM, "node_type": "GPU_8\x00_CARD"})
    assert sent.status_code == 400 and "Select a valid choice" in sent.content.decode()
    assert not GpuNodePool.objects.filter(name=FORM["name"]).exists()


def test_the_preview_reads_no_price_book(browser, actors):
    """The htmx preview rebuilds the form on every keystroke and never shows the hint: it must not
    compute it (the price book's reads on each keystroke were for nothing)."""
    lead = browser("lead")
    with CaptureQueriesContext(connection) as queries:
        answer = lead.post("/pools/new/preview/", FORM)
    assert answer.status_code == 200 and "A100_80G" in answer.content.decode()
    price_tables = {NodePrice._meta.db_table, PriceBookEntry._meta.db_table}
    assert not [q["sql"] for q in queries if any(table in q["sql"] for table in price_tables)]
