"""Plotly figures of a pool over time, from its per-minute samples (issue 5 §5, issue 6 §6).

Pure: takes plain sample rows and returns plotly figure specs (dicts) that the page embeds with
`json_script`; `static/js/charts.js` draws them with the plotly.min.js of the installed package.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

BILLING_KINDS = ("monthly", "on_demand", "preemptible")
LAYOUT = {"margin": {"l": 50, "r": 50, "t": 40, "b": 40}, "height": 300, "legend": {"orientation": "h"}}


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


def pool_figures(samples: Iterable[Sample]) -> dict[str, dict[str, Any]]:
    """Three figures: nodes by billing kind with min/max, the GPU water level, and the metrics
    the autoscaler reads (GPU-memory utilisation and queued pods). Empty when there is no sample."""
    rows = sorted(samples, key=lambda s: s.minute)
    if not rows:
        return {}
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
    return {
        "nodes": {"data": nodes, "layout": {**LAYOUT, "title": {"text": "Nodes by billing kind"}, "yaxis": {"title": {"text": "nodes"}, "rangemode": "tozero"}}},
        "water": {"data": water, "layout": {**LAYOUT, "title": {"text": "GPU water level"}, "yaxis": {"title": {"text": "GPUs"}, "rangemode": "tozero"}}},
        "metrics": {
            "data": metrics,
            "layout": {
                **LAYOUT,
                "title": {"text": "Autoscaler metrics"},
                "yaxis": {"title": {"text": "% GPU memory"}, "range": [0, 100]},
                "yaxis2": {"title": {"text": "queued pods"}, "overlaying": "y", "side": "right", "rangemode": "tozero", "tickformat": ",d",
                           # whole pods: a step of at least 1, else plotly labels 0.2, 0.4 ... as "0, 0, 1"
                           "tick0": 0, "dtick": max(1, math.ceil(max((s.pending_pods or 0 for s in rows), default=0) / 5))},
            },
        },
    }
