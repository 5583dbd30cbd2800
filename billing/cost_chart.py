"""The costs page's chart: daily cost stacked by the first grouping key, as a plotly figure.

Pure (standard library only): takes the series `billing.chargeback.cost_series` reads (per
currency) and the query's days, returns the figure dict the page embeds with `json_script`.
Why each setting (issue 21 §4): the y-axis names the currency; the x-axis spans the whole range
asked for, a tick per day, and each bar is a day wide at most, so one day of data is one narrow
bar on a readable date axis rather than a single bar across the chart; the axes take the room
their ticks need (`automargin`); legend entries are plain words, never internal markers.
Costs in several currencies get a panel each, one above the other on the same days: a stack
of bars adds its parts, and CNY on top of USD would be a sum across currencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

DAY_MS = 86_400_000
MIN_DAYS = 7  # a shorter range still gets a week of axis: a day's bar stays a bar
PANEL_HEIGHT = 340  # the chart of one currency
EXTRA_PANEL_HEIGHT = 220  # each further currency's panel
PANEL_GAP = 0.08  # between two currencies' panels, a share of the plot's height


def series_name(kind: str, value: str, key: str) -> str:
    """A legend entry in words: the value itself, or what the cost is."""
    if kind == "idle":
        return f"Idle capacity of {value}" if value else "Idle capacity"
    if kind == "unallocated":
        return f"Used, no {key} label"
    if kind == "accruing":
        return "Accruing, not yet metered"
    return value


def cost_figure(
    by_currency: Mapping[str, Mapping[tuple[str, str], Mapping[date, Decimal]]],
    *,
    key: str,
    start: date | None = None,
    end: date | None = None,
) -> dict[str, Any]:
    """Stacked daily bars, one trace per series, over the days `start`..`end` (or the data's);
    one y-axis (panel) per currency, in code order from the top."""
    days = sorted({day for series in by_currency.values() for points in series.values() for day in points})
    first = start or (days[0] if days else None)
    last = end or (days[-1] if days else None)
    currencies = list(by_currency)
    several = len(currencies) > 1
    traces = []
    for i, currency in enumerate(currencies):
        for (kind, value), points in by_currency[currency].items():
            name = series_name(kind, value, key)
            trace = {
                "type": "bar",
                "name": f"{name} ({currency})" if several else name,
                "x": [day.isoformat() for day in points],
                "y": [str(amount) for amount in points.values()],
                "width": [DAY_MS * 0.8] * len(points),
                "hovertemplate": f"%{{x|%b %-d}}<br>{name}: %{{y:,.2f}} {currency}<extra></extra>",
            }  # fmt: skip
            if i:
                trace["yaxis"] = f"y{i + 1}"
            traces.append(trace)
    xaxis: dict[str, Any] = {"type": "date", "tickformat": "%b %-d", "automargin": True, "title": {"text": "Day (UTC)"}}
    if first is not None and last is not None:
        last = max(last, first + timedelta(days=MIN_DAYS - 1))
        xaxis["range"] = [_at(first, -12), _at(last, 12)]
        if (last - first).days <= 31:  # ticks from the first day on, every day or every other
            xaxis["dtick"] = DAY_MS if (last - first).days <= 14 else 2 * DAY_MS
            xaxis["tick0"] = first.isoformat()
    layout: dict[str, Any] = {
        "barmode": "stack",
        "margin": {"t": 10, "r": 10, "b": 10, "l": 10},
        "xaxis": xaxis,
        "legend": {"orientation": "h", "y": -0.25},
        "height": PANEL_HEIGHT + EXTRA_PANEL_HEIGHT * max(len(currencies) - 1, 0),
    }
    for i, currency in enumerate(currencies or [""]):
        yaxis = {"title": {"text": f"Cost ({currency})" if currency else "Cost"}, "tickformat": ",.2f",
                 "rangemode": "tozero", "automargin": True}  # fmt: skip
        if several:
            yaxis["domain"] = _domain(i, len(currencies))
            yaxis["anchor"] = "x"
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = yaxis
    if several:
        xaxis["anchor"] = f"y{len(currencies)}"  # the day axis under the lowest panel
        layout["legend"]["y"] = -0.25 * PANEL_HEIGHT / layout["height"]
    return {"data": traces, "layout": layout}


def _domain(i: int, n: int) -> list[float]:
    """The vertical share of the i-th of n panels, from the top, with a gap between them."""
    size = (1 - PANEL_GAP * (n - 1)) / n
    top = 1 - i * (size + PANEL_GAP)
    return [max(0.0, round(top - size, 4)), round(top, 4)]


def _at(day: date, hours: int) -> str:
    return (datetime.combine(day, time()) + timedelta(hours=hours)).isoformat()
