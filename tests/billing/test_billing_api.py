"""GET /api/v1/costs/ (JSON, CSV, FOCUS) and the /costs/ page: totals, streaming, roles."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext

from billing.focus import FOCUS_COLUMNS, format_value
from billing.models import CostDay, CostRecord
from tests.billing.billing_helpers import charge, meter, node, pod, pool, scenario

pytestmark = pytest.mark.django_db

RANGE = "from=2026-12-01&to=2026-12-31"
# The same columns in the page, the CSV and the JSON whatever the rows (issue 21 §4).
COLUMNS = [
    "charged_team", "team", "project", "gpu-class", "namespace", "billing", "kind", "status", "amount", "currency",
]  # fmt: skip


@pytest.fixture(autouse=True)
def after_the_month(time_machine):
    """The clock after the metered range: no hour of it is still accruing (test_accruing covers
    those), so totals are the cost records' whatever today's date."""
    time_machine.move_to(datetime(2027, 1, 15, 9, 0, tzinfo=UTC), tick=True)


@pytest.fixture
def costs(actors, teams):
    return scenario(actors, teams)


def body(response) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()


def csv_rows(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(body(response))))


def web(actors, role) -> Client:
    client = Client()
    if role:
        client.force_login(actors[role])
    return client


def page_total(response) -> Decimal:
    return Decimal(
        re.search(r"<strong data-total>([\d.]+)</strong>", response.content.decode()).group(1)
    )


def test_json_groups_by_the_asked_label_keys_with_totals(api, costs):
    response = api("finance").get(f"/api/v1/costs/?by=team,project,gpu-class&{RANGE}")
    assert response.status_code == 200
    data = response.json()
    assert data["columns"] == COLUMNS
    assert Decimal(data["total"]) == sum(CostRecord.objects.values_list("amount", flat=True))
    assert sum(Decimal(r["amount"]) for r in data["rows"]) == Decimal(data["total"])
    assert Decimal(data["idle"]) > 0 and Decimal(data["idleShare"]) > 0
    # One currency: the breakdown is that currency's line, the same numbers.
    assert data["totals"] == [{k: data[k] for k in ("currency", "total", "idle", "accruing", "idleShare")}]
    assert data["currency"] == "CNY"


def test_csv_streams_the_same_rows_and_its_total_equals_the_page_total_to_the_cent(
    api, actors, costs
):
    response = api("finance").get(f"/api/v1/costs/?by=team,project,gpu-class&{RANGE}&format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = csv_rows(response)
    assert list(rows[0]) == COLUMNS
    csv_total = sum(Decimal(r["amount"]) for r in rows)
    page = web(actors, "finance").get(f"/costs/?by=team,project,gpu-class&{RANGE}")
    assert page.status_code == 200
    assert csv_total == page_total(page) == sum(CostRecord.objects.values_list("amount", flat=True))
    # The lead's CSV and page agree too, on fewer rows.
    lead_rows = csv_rows(api("lead").get(f"/api/v1/costs/?{RANGE}&format=csv"))
    assert {r["charged_team"] for r in lead_rows} == {"algorithm"}
    assert sum(Decimal(r["amount"]) for r in lead_rows) == page_total(
        web(actors, "lead").get(f"/costs/?{RANGE}")
    )


def test_detail_csv_streams_every_cost_record(api, costs):
    rows = csv_rows(api("finance").get(f"/api/v1/costs/?{RANGE}&format=csv&detail=1"))
    assert len(rows) == CostRecord.objects.count()
    assert rows[0]["labels"].startswith("{")


def test_focus_export_streams_focus_columns(api, costs):
    response = api("finance").get(f"/api/v1/costs/?{RANGE}&format=focus")
    assert response.status_code == 200
    rows = csv_rows(response)
    assert tuple(rows[0]) == FOCUS_COLUMNS
    assert {r["ChargeCategory"] for r in rows} == {"Purchase", "Usage"}
    days = {r["ChargePeriodStart"][:10] for r in rows if r["ChargeCategory"] == "Usage"}
    assert all(r["ChargePeriodStart"].endswith("T00:00:00Z") for r in rows)  # daily by default
    hourly = csv_rows(api("finance").get(f"/api/v1/costs/?{RANGE}&format=focus&granularity=hourly"))
    assert {r["ChargePeriodStart"][:10] for r in hourly if r["ChargeCategory"] == "Usage"} == days
    detail = csv_rows(api("finance").get(f"/api/v1/costs/?{RANGE}&format=focus&detail=1"))
    assert "GPU Node" in {r["ResourceType"] for r in detail}  # per node and workload


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("by=bad%20key", "by"),
        ("from=yesterday", "from"),
        ("format=xml", "format"),
        ("from=2026-12-05&to=2026-12-01", "to"),
        ("sort=nope", "sort"),
        ("format=focus&granularity=weekly", "granularity"),
        # the calendar's ends overflowed `to` + 1 day and the chart's margins: a 500
        ("to=9999-12-31", "to"),
        ("from=0001-01-01", "from"),
        ("format=csv&to=9999-12-31", "to"),
        ("format=focus&to=9999-12-31", "to"),
        ("format=csv&from=0001-01-01&to=9999-12-31", "from"),
    ],
)
def test_bad_parameters_are_400_with_the_parameter_as_field(api, costs, query, field):
    response = api("lead").get(f"/api/v1/costs/?{query}")
    assert response.status_code == 400
    assert field in {e["field"] for e in response.json()["errors"]}


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("from=2027-02-01", {"field": "from", "message": "2027-02-01 is after today (2027-01-15, UTC): give a day up to today, or a to as well"}),
        ("to=2026-12-31", {"field": "to", "message": "2026-12-31 is before the 1st of this month (2027-01-01, UTC), where the costs start when from is not given: give a from as well"}),
        ("from=2027-02-01&to=2027-01-31", {"field": "to", "message": "must not be before from"}),
        ("from=abc&to=2026-12-31", {"field": "from", "message": "must be a date such as 2026-12-01"}),
    ],
    ids=["from-in-the-future", "to-before-this-month", "both-given", "a-malformed-from-is-not-also-out-of-order"],
)
def test_a_backwards_range_names_the_parameter_that_was_given(api, costs, query, error):
    """A `from` alone in the future was refused as "to: must not be before from", about a `to`
    the user never gave (QA): the clock is 2027-01-15 (`after_the_month`)."""
    response = api("finance").get(f"/api/v1/costs/?{query}")
    assert response.status_code == 400
    assert response.json()["errors"] == [error]


@pytest.mark.parametrize(
    ("by", "said"),
    [
        ("kind", "kind is always a column"),
        ("team,status", "status is always a column"),
        ("amount", "amount is always a column"),
        ("currency", "currency is always a column"),
        ("team,team", "'team' is given twice"),
    ],
)
def test_a_label_key_that_is_a_fixed_column_or_given_twice_is_refused_by_name(api, costs, by, said):
    """A key named like a fixed column made a second column of that name, whose cell the row's
    own value overwrote (the label's value lost, the row read as unallocated); a repeated key was
    said to be one too many of eight (found by a QA sweep)."""
    response = api("finance").get(f"/api/v1/costs/?by={by}&{RANGE}")
    assert response.status_code == 400
    assert any(said in e["message"] for e in response.json()["errors"] if e["field"] == "by"), response.json()


def test_grouped_by_namespace_alone_the_page_keeps_that_grouping(actors, costs):
    html = web(actors, "finance").get(f"/costs/?by=namespace&{RANGE}").content.decode()
    assert "Costs grouped by namespace," in html and "by=namespace" in html  # its sort links keep it


def test_an_empty_range_totals_have_two_decimals(api, costs):
    data = api("finance").get("/api/v1/costs/?from=2020-01-01&to=2020-01-31").json()
    assert (data["total"], data["idle"], data["idleShare"]) == ("0.00", "0.00", "0.0")


def test_roles_see_their_teams_costs_only(api, costs):
    def teams_of(role):
        return {r["team"] for r in api(role).get(f"/api/v1/costs/?by=team&{RANGE}").json()["rows"]}

    assert teams_of("finance") == teams_of("admin") == {"algorithm", "inference"}
    assert teams_of("lead") == teams_of("member") == {"algorithm"}
    assert teams_of("other_lead") == {"inference"}
    assert api(None).get("/api/v1/costs/").status_code in (401, 403)
    assert api(None).get("/api/v1/costs/?format=csv").status_code in (401, 403)


def test_another_teams_costs_are_filtered_out_even_when_asked_for(api, costs):
    data = api("lead").get(f"/api/v1/costs/?by=team&team=inference&{RANGE}").json()
    assert data["rows"] == [] and data["total"] == "0.00" and data["totals"] == []


def test_totals_are_per_currency_and_never_add_one_currency_to_another(api, actors):
    """200.00 CNY and 20.00 USD are not 220.00 of anything: the API has a total per currency
    (and no single total), the page a line per currency and a chart panel per currency, and the
    CSV's rows add up to the same totals currency by currency."""
    charge(pool(actors["lead"]), "100.00", hours=2, currency="CNY")
    charge(pool(actors["other_lead"], name="usd-pool", region="cn-north-1a"), "10.00", hours=2, currency="USD")
    data = api("finance").get(f"/api/v1/costs/?{RANGE}").json()
    assert data["totals"] == [
        {"currency": "CNY", "total": "200.00", "idle": "200.00", "accruing": "0", "idleShare": "100.0"},
        {"currency": "USD", "total": "20.00", "idle": "20.00", "accruing": "0", "idleShare": "100.0"},
    ]
    assert [data[k] for k in ("total", "idle", "accruing", "idleShare", "currency")] == [None] * 5
    by_currency: dict[str, Decimal] = {}
    for row in csv_rows(api("finance").get(f"/api/v1/costs/?{RANGE}&format=csv")):
        by_currency[row["currency"]] = by_currency.get(row["currency"], Decimal(0)) + Decimal(row["amount"])
    assert by_currency == {"CNY": Decimal("200.00"), "USD": Decimal("20.00")}

    page = web(actors, "finance").get(f"/costs/?{RANGE}")
    html = page.content.decode()
    lines = re.findall(r'data-currency="(\w+)">Total <strong data-total>([\d.]+)</strong> (\w+) ·\s+'
                       r'idle <strong data-idle>([\d.]+)</strong> \(([\d.]+)% of the total\)', html)  # fmt: skip
    assert lines == [("CNY", "200.00", "CNY", "200.00", "100.0"), ("USD", "20.00", "USD", "20.00", "100.0")]
    assert "220.00" not in html and "CNY/USD" not in html
    layout, traces = page.context["chart"]["layout"], page.context["chart"]["data"]
    assert (layout["yaxis"]["title"]["text"], layout["yaxis2"]["title"]["text"]) == ("Cost (CNY)", "Cost (USD)")
    panels = {axis: sum(Decimal(y) for t in traces if t.get("yaxis", "y") == axis for y in t["y"]) for axis in ("y", "y2")}
    assert panels == {"y": Decimal("200.00"), "y2": Decimal("20.00")}


def test_finance_reads_but_cannot_write(api, costs):
    assert api("finance").post("/api/v1/costs/", {}, format="json").status_code == 405
    assert api("finance").delete("/api/v1/costs/").status_code == 405


def test_the_costs_page_shows_table_idle_share_chart_and_download(actors, costs):
    response = web(actors, "finance").get(f"/costs/?by=team,project,gpu-class&{RANGE}&sort=team")
    html = response.content.decode()
    assert response.status_code == 200
    assert "gpu-class" in html and '<tr class="idle metered">' in html and '<tr class="unallocated metered">' in html
    assert "__idle__" not in html and "__unallocated__" not in html
    assert "% of the total" in html
    # The sorted column says so to a screen reader; its arrow is for the eye only.
    assert html.count("aria-sort=") == 1 and '<th scope="col" aria-sort="ascending"><a href=' in html and '<span aria-hidden="true"> ▲</span>' in html
    assert 'id="cost-chart-data"' in html and "vendor/plotly.min.js" in html
    assert (
        "/api/v1/costs/?by=team%2Cproject%2Cgpu-class&amp;from=2026-12-01" in html
        and "format=csv" in html
    )
    assert response["Vary"] and "HX-Request" in response["Vary"]


def test_an_empty_range_shows_no_chart_axes(actors, costs):
    html = web(actors, "finance").get("/costs/?from=2020-01-01&to=2020-01-31").content.decode()
    assert "No costs in this range." in html and 'id="cost-chart"' not in html


def test_the_costs_page_fragment_for_htmx(actors, costs):
    response = web(actors, "finance").get(f"/costs/?{RANGE}", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="cost-table">') and "<html" not in html


def test_the_costs_page_is_filtered_by_role_and_needs_a_login(actors, costs):
    assert web(actors, None).get("/costs/").status_code == 302
    other = web(actors, "other_lead").get(f"/costs/?by=team&{RANGE}").content.decode()
    assert "inference" in other and "<td>algorithm</td>" not in other
    lead = web(actors, "lead").get(f"/costs/?by=team&{RANGE}").content.decode()
    assert "<td>algorithm</td>" in lead and "<td>inference</td>" not in lead


def test_the_costs_page_shows_parameter_errors_instead_of_failing(actors, costs):
    response = web(actors, "lead").get("/costs/?from=nonsense")
    assert response.status_code == 200 and "must be a date" in response.content.decode()


@pytest.mark.parametrize("query", ["to=9999-12-31", "from=0001-01-01", "from=0001-01-01&to=9999-12-31"])
def test_the_costs_page_refuses_the_calendar_s_ends_beside_the_field(actors, costs, query):
    response = web(actors, "finance").get(f"/costs/?{query}")
    assert response.status_code == 200
    errors = {e.field: e.message for e in response.context["errors"]}
    assert set(errors) == {part.split("=")[0] for part in query.split("&")}
    assert all(m == "must be between 2000-01-01 and 2999-12-31: no costs are kept outside those years" for m in errors.values())


def test_the_first_and_last_days_allowed_are_answered(api, actors, costs):
    wide = "from=2000-01-01&to=2999-12-31"
    assert web(actors, "finance").get(f"/costs/?{wide}").context["errors"] == []
    for fmt in ("json", "csv", "focus"):
        response = api("finance").get(f"/api/v1/costs/?{wide}&format={fmt}")
        assert response.status_code == 200 and response.getvalue(), fmt  # streamed exports: read to the end


@pytest.mark.parametrize(
    ("now", "page_queries", "csv_queries"),
    [(datetime(2026, 12, 1, 12, 30, tzinfo=UTC), 34, 28), (datetime(2027, 1, 15, 9, 0, tzinfo=UTC), 9, 3)],
    ids=["inside-the-range-with-two-accruing-hours", "after-the-range"],
)
def test_the_page_and_the_api_use_a_constant_number_of_queries(
    api, actors, costs, now, page_queries, csv_queries, time_machine
):
    """The clock is frozen: inside the range the page and the CSV also project the two hours
    not metered yet (11:00 and 12:00, about 12 queries each whatever the fleet's size:
    `billing.metering.usage_collect`, its lease corrections' one included) and the page the month's budgets (every pool has one:
    two queries read their month's spend from the daily rollup, whatever their number); the
    bound held only until the real clock reached the test's range."""
    time_machine.move_to(now, tick=False)
    client = web(actors, "finance")
    with CaptureQueriesContext(connection) as page:
        client.get(f"/costs/?{RANGE}")
    finance = api("finance")
    with CaptureQueriesContext(connection) as endpoint:
        body(finance.get(f"/api/v1/costs/?{RANGE}&format=csv"))
    assert CostRecord.objects.count() > 10
    assert len(page) <= page_queries + 1, [q["sql"] for q in page]  # + the open alerts beside the navigation
    assert len(endpoint) <= csv_queries, [q["sql"] for q in endpoint]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_ebcloud_cost_export_writes_the_same_csv_as_the_api(
    live_server, actors, teams, tmp_path, monkeypatch
):
    from click.testing import CliRunner
    from rest_framework.authtoken.models import Token

    from ebcloud.cli import cli

    scenario(actors, teams)
    monkeypatch.setenv("EBCLOUD_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("EBCLOUD_SERVER", live_server.url)
    monkeypatch.setenv("EBCLOUD_TOKEN", Token.objects.create(user=actors["finance"]).key)
    out = tmp_path / "costs.csv"
    args = [
        "cost",
        "export",
        "--by-labels",
        "team,project,gpu-class",
        "--from",
        "2026-12-01",
        "--to",
        "2026-12-31",
    ]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == COLUMNS
    assert sum(Decimal(r["amount"]) for r in rows) == sum(
        CostRecord.objects.values_list("amount", flat=True)
    )
    focus = CliRunner().invoke(cli, [*args, "--format", "focus"], catch_exceptions=False)
    assert focus.exit_code == 0 and focus.output.startswith("AvailabilityZone,BilledCost,")
    bad = CliRunner().invoke(cli, ["cost", "export", "--by-labels", "bad key"])
    assert bad.exit_code == 1 and "by: 'bad key' is not a label key" in bad.output
    monkeypatch.setenv("EBCLOUD_TOKEN", Token.objects.create(user=actors["other_lead"]).key)
    lead = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert {r["charged_team"] for r in csv.DictReader(io.StringIO(lead.output))} == {"inference"}


# --- formula injection (OWASP CSV injection) ----------------------------------------------------

FORMULAS = {"hyperlink": '=HYPERLINK("http://x","y")', "plus": "+1", "at": "@SUM(A1)", "minus": "-cmd"}


def formula_cells(text: str) -> list[str]:
    """Cells a spreadsheet would evaluate: starting with = + - @ tab or CR, and not a number."""
    return [
        cell
        for row in csv.reader(io.StringIO(text))
        for cell in row
        if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not re.fullmatch(r"-?\d+(\.\d+)?", cell)
    ]


@pytest.fixture
def hostile_labels(actors, teams):
    """Pods in the read model (as a real cluster's mirror would hold them) whose labels are
    formulas, metered into cost records; and a credit (a negative amount) on the side."""
    a = pool(actors["lead"])
    n = node(a, "n-0")
    for name, text in FORMULAS.items():
        pod(teams["algorithm"], n, f"p-{name}", gpus=2, labels={"project": text})
    meter(hours=2)
    for model in (CostRecord, CostDay):  # a credit, in the records and in the daily rollup chargeback reads
        model.objects.filter(pk=model.objects.order_by("pk").first().pk).update(amount=Decimal("-1000.00"))
    return a


def test_label_values_that_are_formulas_are_neutralised_in_the_csv_and_stay_visible(api, hostile_labels):
    text = body(api("finance").get(f"/api/v1/costs/?by=team,project&{RANGE}&format=csv"))
    assert formula_cells(text) == []
    projects = {r["project"] for r in csv.DictReader(io.StringIO(text))}
    assert {"'" + f for f in FORMULAS.values()} <= projects
    rows = list(csv.reader(io.StringIO(text)))
    amounts = [row[rows[0].index("amount")] for row in rows[1:]]
    assert any(a.startswith("-") for a in amounts)  # the credit's group: a bare negative number
    assert all(re.fullmatch(r"-?\d+\.\d\d", a) for a in amounts), amounts


def test_the_detail_csv_and_focus_have_no_formula_cells_and_numbers_stay_numbers(api, hostile_labels):
    detail = body(api("finance").get(f"/api/v1/costs/?{RANGE}&format=csv&detail=1"))
    focus = body(api("finance").get(f"/api/v1/costs/?{RANGE}&format=focus"))
    assert formula_cells(detail) == [] and formula_cells(focus) == []
    assert "=HYPERLINK(" in detail and "@SUM(A1)" in detail  # inside the labels JSON: not a cell's start
    rows = list(csv.DictReader(io.StringIO(focus)))
    assert any("@SUM(A1)" in r["Tags"] for r in rows)
    for r in rows:
        for column in ("BilledCost", "EffectiveCost", "ListCost", "PricingQuantity"):
            assert re.fullmatch(r"-?\d+(\.\d+)?", r[column]), (column, r[column])


@pytest.mark.parametrize(
    ("value", "cell"),
    [("=1+1", "'=1+1"), ("+1", "'+1"), ("-cmd", "'-cmd"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\rx", "'\rx"),
     ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"), ("a=b", "a=b"), ("-12.50", "-12.50"), ("12", "12"),
     (Decimal("-12.50"), "-12.50"), (-3, "-3"), (None, "")],
)
def test_a_cell_is_neutralised_only_where_a_spreadsheet_would_see_a_formula(value, cell):
    assert format_value(value) == cell
