"""Journey (c), issue #8 item 2: finance opens the costs page, picks the month, reads the
chargeback by team, project and GPU class, downloads the CSV, and the CSV's rows and total are
the page's to the cent (seed C3, C4). The costs come from three metered hours of two teams'
pools (tests/billing/billing_helpers.scenario), metered in-process like the hourly task."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tests.billing.billing_helpers import scenario

# Sequences reset: order and node names in the screenshots are the same on every run.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def page_rows(actor) -> tuple[list[str], list[list[str]]]:
    header = actor.page.locator("#cost-table thead th").all_inner_texts()
    rows = [
        r.locator("td").all_inner_texts() for r in actor.page.locator("#cost-table tbody tr").all()
    ]
    return [h.rstrip(" ▲▼") for h in header], rows


def test_finance_downloads_the_chargeback_csv_and_its_totals_match_the_page(browse, actors, teams, time_machine):
    # The server's clock after the month: every hour of it metered, none still accruing (the
    # figures and the screenshot do not depend on today's date).
    time_machine.move_to(datetime(2027, 1, 15, 9, 0, tzinfo=UTC), tick=True)
    # Three metered hours of December 2026: train-pool-a (algorithm), spot-pool (inference).
    scenario(actors, teams, hours=3)
    finance = browse("finance")
    finance.follow("nav a:has-text('Costs')")
    # Each change re-renders the table (htmx) and pushes the filter state into the URL.
    finance.swap(lambda: finance.page.fill("#id_from", "2026-12-01"))
    finance.swap(lambda: finance.page.fill("#id_to", "2026-12-31"))
    assert "from=2026-12-01" in finance.page.url and "to=2026-12-31" in finance.page.url
    finance.page.wait_for_selector("#cost-chart .main-svg")
    # Redrawn after the swap has settled: plotly's container keeps its classes (and styles).
    assert finance.page.evaluate(
        "() => document.getElementById('cost-chart').classList.contains('js-plotly-plot')"
    )
    header, rows = page_rows(finance)
    total = Decimal(finance.page.inner_text("#cost-table [data-total]"))
    assert total > 0 and len(rows) >= 5, rows
    # Fixed columns whatever the rows: who is charged, the labels, the kind of cost, metered or
    # accruing (issue 21 §4); no marker such as __idle__ in a label cell.
    assert header == [
        "charged_team", "team", "project", "gpu-class", "namespace", "billing", "kind", "status", "amount", "currency",
    ]  # fmt: skip
    assert not [cell for row in rows for cell in row if cell.startswith("__")]
    # The chart names its currency, dates its axis and words its legend.
    assert finance.page.locator("#cost-chart .ytitle").text_content() == "Cost (CNY)"
    assert "Dec 1" in finance.page.locator("#cost-chart .xtick").all_text_contents()
    legend = finance.page.locator("#cost-chart .legendtext").all_text_contents()
    assert "Idle capacity of algorithm" in legend and not [n for n in legend if "__" in n]
    finance.page.evaluate("() => document.activeElement.blur()")
    finance.shot("finance-01-costs")

    with finance.page.expect_download() as download_info:
        finance.page.click("a:has-text('Download CSV')")
    download = download_info.value
    assert (
        download.suggested_filename == "costs-by-team-project-gpu-class-2026-12-01-2026-12-31.csv"
    )
    exported = list(csv.DictReader(io.StringIO(open(download.path(), encoding="utf-8").read())))
    assert sum(Decimal(r["amount"]) for r in exported) == total
    assert [[r[c] for c in header] for r in exported] == rows  # same rows, same order, same cents

    # A shared link opens the same view: the URL carries the filter state.
    finance.goto(finance.page.url.removeprefix(finance.base_url))
    assert Decimal(finance.page.inner_text("#cost-table [data-total]")) == total
