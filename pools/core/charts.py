"""Plotly figures of a pool over time, from its per-minute samples (issue 5 §5, issue 6 §6).

Pure: takes plain sample rows and returns plotly figure specs (dicts) that the page embeds with
`json_script`; `static/js/charts.js` draws them with the plotly.min.js of the installed package.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, NamedTuple

BILLING_KINDS = ("monthly", "on_demand", "preemptible")
LAYOUT = {"margin": {"l": 50, "r": 50, "t": 40, "b": 40}, "height": 300, "legend": {"orientation": "h"}}
# The narrowest time axis drawn: a new pool's first minutes (or a single sample) would otherwise
# get an axis of a few milliseconds, ticked "19:19:59.9995".
MIN_AXIS_SPAN = timedelta(minutes=10)


class Sample(NamedTuple):
    """One minute of a pool (a tuple: a page builds 1,440 of them per view)."""

    minute: datetime
    min_nodes: int
    max_nodes: int
    capacity_gpus: int
    allocated_gpus: float | None = None
    gpu_memory_used_pct: float | None = None
    pending_pods: int | None = None
    node_counts: Mapping[str, Mapping[str, int]] = MappingProxyType({})


def _line(name: str, x: list[str], y: list[Any], **style: Any) -> dict[str, Any]:
    """A step line ("hv": a value holds until the next point) with only its steps: the points
    where the value changes, and the last one. The same line as every minute's point, drawn from
    a handful of points where the value seldom changes (node counts, min/max) instead of 1,440
    a day for each trace: the pool page's JSON and its rendering shrink accordingly (issue 9)."""
    x, y = steps(x, y)
    return {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y, "line": {"shape": "hv", **style.pop("line", {})}, **style}


def steps(x: list[Any], y: list[Any]) -> tuple[list[Any], list[Any]]:
    """The points of (x, y) where y differs from the point before, and the last point."""
    keep = [i for i in range(len(y)) if i == 0 or y[i] != y[i - 1] or i == len(y) - 1]
    return [x[i] for i in keep], [y[i] for i in keep]


def window_label(span: timedelta) -> str:
    """The window a chart really covers, in words: "last 10 minutes", "last 3 hours"."""
    minutes = max(1, round(span.total_seconds() / 60))
    if minutes < 120:
        return f"last {minutes} minute{'s' if minutes != 1 else ''}"
    return f"last {round(minutes / 60)} hours"


def samples_window(samples: Iterable[Sample], *, now: datetime) -> str:
    """What a day's chart of these samples covers: from the first sample (a new pool has a few
    minutes, not a day) to now; empty without samples."""
    first = min((s.minute for s in samples), default=None)
    return "" if first is None else window_label(now - first)


def _time_axis(rows: list[Sample], now: datetime | None) -> dict[str, Any]:
    """A date axis over the samples up to now, at least MIN_AXIS_SPAN wide (minutes as ticks)."""
    end = max(now or rows[-1].minute, rows[-1].minute)
    start = min(rows[0].minute, end - MIN_AXIS_SPAN)
    return {"type": "date", "range": [start.isoformat(), end.isoformat()], "hoverformat": "%Y-%m-%d %H:%M"}


def pool_figures(samples: Iterable[Sample], *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """Up to three figures: nodes by billing kind with min/max, the GPU water level, and the
    metrics the autoscaler reads (GPU-memory utilisation and queued pods; left out while no
    agent has reported either). Each title says the window the samples cover up to `now`
    (default: the last sample). Empty when there is no sample."""
    rows = sorted(samples, key=lambda s: s.minute)
    if not rows:
        return {}
    window = window_label(max(now or rows[-1].minute, rows[-1].minute) - rows[0].minute)
    layout = {**LAYOUT, "xaxis": _time_axis(rows, now)}
    x = [s.minute.isoformat() for s in rows]
    nodes = []
    for kind in BILLING_KINDS:
        counts = [s.node_counts.get(kind, {}) for s in rows]
        if not any(any(c.values()) for c in counts):
            continue
        nodes.append(_line(f"{kind} desired", x, [c.get("desired", 0) for c in counts], line={"dash": "dot"}))
        nodes.append(_line(f"{kind} current", x, [c.get("current", 0) for c in counts]))
        nodes.append(_line(f"{kind} ready", x, [c.get("ready", 0) for c in counts]))
    nodes.append(_line("nodeCount.min", x, [s.min_nodes for s in rows], line={"color": "#57606a", "dash": "dash"}))
    nodes.append(_line("nodeCount.max", x, [s.max_nodes for s in rows], line={"color": "#b42318", "dash": "dash"}))
    water = [
        _line("capacity GPUs", x, [s.capacity_gpus for s in rows], fill="tozeroy"),
        _line("allocated GPUs", x, [s.allocated_gpus for s in rows], fill="tozeroy"),
    ]
    metrics = [
        _line("GPU memory used %", x, [s.gpu_memory_used_pct for s in rows]),
        _line("queued pods", x, [s.pending_pods for s in rows], yaxis="y2"),
    ]
    figures = {
        "nodes": {"data": nodes, "layout": {**layout, "title": {"text": f"Nodes by billing kind, {window}"}, "yaxis": {"title": {"text": "nodes"}, "rangemode": "tozero"}}},
        "water": {"data": water, "layout": {**layout, "title": {"text": f"GPU water level, {window}"}, "yaxis": {"title": {"text": "GPUs"}, "rangemode": "tozero"}}},
    }
    if all(s.gpu_memory_used_pct is None and s.pending_pods is None for s in rows):
        return figures  # no axes without a line on them: the page says so in words
    return {
        **figures,
        "metrics": {
            "data": metrics,
            "layout": {
                **layout,
                "title": {"text": f"Autoscaler metrics, {window}"},
                "yaxis": {"title": {"text": "% GPU memory"}, "range": [0, 100]},
                "yaxis2": {"title": {"text": "queued pods"}, "overlaying": "y", "side": "right", "rangemode": "tozero", "tickformat": ",d",
                           # whole pods: a step of at least 1, else plotly labels 0.2, 0.4 ... as "0, 0, 1"
                           "tick0": 0, "dtick": max(1, math.ceil(max((s.pending_pods or 0 for s in rows), default=0) / 5))},
            },
        },
    }
