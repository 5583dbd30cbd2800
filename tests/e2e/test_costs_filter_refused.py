"""Finance presses Filter on a filter the costs page refuses (a malformed `name#id`, `to` before
`from`): the form submits through htmx, so the error must come in the swapped fragment, with
no total (the unfiltered one was read as the filtered one) and no download, the fields as
typed; once corrected, the figures come back (tests/billing/test_costs_page_filters.py has the
same through Django's client)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tests.billing.billing_helpers import scenario

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def test_a_refused_filter_shows_its_error_in_place_of_the_totals(browse, actors, teams, time_machine):
    time_machine.move_to(datetime(2027, 1, 15, 9, 0, tzinfo=UTC), tick=True)  # every hour metered
    scenario(actors, teams, hours=3)
    finance = browse("finance")
    finance.goto("/costs/?from=2026-12-01&to=2026-12-31")
    page = finance.page
    everyone = Decimal(page.inner_text("#cost-table [data-total]"))
    finance.swap(lambda: page.select_option("#id_team", "inference"))
    inference = Decimal(page.inner_text("#cost-table [data-total]"))
    assert 0 < inference < everyone

    page.fill("#id_pool", "train-pool-a#abc")
    finance.swap(lambda: page.click("button:has-text('Filter')"))
    page.wait_for_selector("#cost-table [role=alert]")
    assert "Pool: must be a pool's name" in page.inner_text("#cost-table [role=alert]")
    assert page.locator("#cost-table [data-total]").count() == 0
    assert page.locator("#cost-table a:has-text('Download CSV')").count() == 0
    assert (page.input_value("#id_team"), page.input_value("#id_pool")) == ("inference", "train-pool-a#abc")

    # One change a swap (every address htmx pushes is checked by axe): from a valid range...
    finance.goto("/costs/?team=inference&from=2026-12-01&to=2026-12-31")
    finance.swap(lambda: page.fill("#id_from", "2026-12-09"))
    finance.swap(lambda: page.fill("#id_to", "2026-12-05"))
    page.wait_for_selector("#cost-table [role=alert]:has-text('To: must not be before from')")
    assert page.locator("#cost-table [data-total]").count() == 0
    assert (page.input_value("#id_from"), page.input_value("#id_to")) == ("2026-12-09", "2026-12-05")

    finance.swap(lambda: page.fill("#id_from", "2026-12-01"))
    page.wait_for_selector("#cost-table [data-total]")
    assert page.locator("#cost-table [role=alert]").count() == 0
    assert Decimal(page.inner_text("#cost-table [data-total]")) == inference
