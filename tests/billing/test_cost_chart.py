"""The costs page's chart reads plainly (issue 21 §4; seed G3): the currency on the y-axis, a
date axis over the whole range with a tick per day and narrow bars, legend entries in words;
costs in several currencies in a panel each, never stacked on one another."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from billing.cost_chart import DAY_MS, cost_figure, series_name

DEC_1 = date(2026, 12, 1)


def test_one_day_of_costs_is_a_narrow_bar_on_a_dated_axis_in_the_currency():
    series = {("allocated", "algorithm"): {DEC_1: Decimal("12.50")}, ("idle", "algorithm"): {DEC_1: Decimal("3.10")}}
    figure = cost_figure({"CNY": series}, key="team", start=DEC_1, end=date(2026, 12, 31))
    layout = figure["layout"]
    assert layout["yaxis"]["title"]["text"] == "Cost (CNY)"
    assert layout["xaxis"]["type"] == "date" and layout["xaxis"]["tickformat"] == "%b %-d"
    assert layout["xaxis"]["range"] == ["2026-11-30T12:00:00", "2026-12-31T12:00:00"]
    assert layout["xaxis"]["automargin"] and layout["yaxis"]["automargin"]
    assert all(width < DAY_MS for trace in figure["data"] for width in trace["width"])
    assert [t["name"] for t in figure["data"]] == ["algorithm", "Idle capacity of algorithm"]
    assert all("CNY" in t["hovertemplate"] for t in figure["data"])


def test_a_single_day_range_still_gets_a_week_of_axis():
    figure = cost_figure({"CNY": {("allocated", "llm"): {DEC_1: Decimal(1)}}}, key="project", start=DEC_1, end=DEC_1)
    assert figure["layout"]["xaxis"]["range"] == ["2026-11-30T12:00:00", "2026-12-07T12:00:00"]
    assert figure["layout"]["xaxis"]["dtick"] == DAY_MS and figure["layout"]["xaxis"]["tick0"] == "2026-12-01"


def test_legend_entries_are_words_never_markers():
    assert series_name("unallocated", "", "project") == "Used, no project label"
    assert series_name("idle", "", "project") == "Idle capacity"
    assert series_name("accruing", "", "team") == "Accruing, not yet metered"
    assert series_name("allocated", "llm", "project") == "llm"
    names = [series_name(kind, value, "project") for kind, value in (("unallocated", ""), ("idle", ""), ("accruing", ""))]
    assert not [n for n in names if "__" in n or "(" in n]


def test_no_series_no_range():
    figure = cost_figure({}, key="team")
    assert figure["data"] == [] and "range" not in figure["layout"]["xaxis"]
    assert figure["layout"]["yaxis"]["title"]["text"] == "Cost"


def test_one_currency_is_one_panel_as_before():
    figure = cost_figure({"CNY": {("allocated", "llm"): {DEC_1: Decimal(1)}}}, key="project", start=DEC_1, end=DEC_1)
    assert "yaxis2" not in figure["layout"] and "domain" not in figure["layout"]["yaxis"]
    assert [t["name"] for t in figure["data"]] == ["llm"] and "yaxis" not in figure["data"][0]
    assert figure["layout"]["height"] == 340


def test_each_currency_is_a_panel_of_its_own_over_the_same_days():
    figure = cost_figure(
        {"CNY": {("idle", "algorithm"): {DEC_1: Decimal("200.00")}}, "USD": {("idle", "inference"): {DEC_1: Decimal("20.00")}}},
        key="team", start=DEC_1, end=DEC_1,
    )  # fmt: skip
    layout = figure["layout"]
    assert [t.get("yaxis", "y") for t in figure["data"]] == ["y", "y2"]  # stacked within a panel only
    assert [t["name"] for t in figure["data"]] == ["Idle capacity of algorithm (CNY)", "Idle capacity of inference (USD)"]
    assert "USD" in figure["data"][1]["hovertemplate"] and "CNY" not in figure["data"][1]["hovertemplate"]
    assert (layout["yaxis"]["title"]["text"], layout["yaxis2"]["title"]["text"]) == ("Cost (CNY)", "Cost (USD)")
    top, bottom = layout["yaxis"]["domain"], layout["yaxis2"]["domain"]
    assert 0 <= bottom[0] < bottom[1] < top[0] < top[1] <= 1  # CNY above USD, apart
    assert layout["xaxis"]["anchor"] == "y2" and layout["height"] > 340  # the days under the lowest panel
