"""Pool charts over time (issue 5 §5, issue 6 §6): figures from samples, and the pool page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from monitoring.models import PoolSample
from pools.core.charts import Sample, pool_figures
from pools.services import pools as services
from tests.conftest import make_document

T = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # the clock is frozen there where a page reads it


def test_no_samples_no_figures():
    assert pool_figures([]) == {}


def test_the_node_chart_has_each_billing_kind_with_min_and_max_lines():
    samples = [
        Sample(minute=T, min_nodes=2, max_nodes=6, capacity_gpus=16, allocated_gpus=12.5, gpu_memory_used_pct=90.0, pending_pods=3,
               node_counts={"monthly": {"desired": 2, "current": 2, "ready": 2}, "on_demand": {"desired": 1, "current": 1, "ready": 0}}),
        Sample(minute=T + timedelta(minutes=1), min_nodes=2, max_nodes=6, capacity_gpus=24, allocated_gpus=20.0, gpu_memory_used_pct=70.0, pending_pods=0,
               node_counts={"monthly": {"desired": 2, "current": 2, "ready": 2}, "on_demand": {"desired": 1, "current": 1, "ready": 1}}),
    ]  # fmt: skip
    figures = pool_figures(reversed(samples))
    names = [trace["name"] for trace in figures["nodes"]["data"]]
    assert names == ["monthly desired", "monthly current", "monthly ready", "on_demand desired", "on_demand current", "on_demand ready", "nodeCount.min", "nodeCount.max"]
    ready = next(t for t in figures["nodes"]["data"] if t["name"] == "on_demand ready")
    assert ready["y"] == [0, 1] and ready["x"][0] < ready["x"][1]
    assert [t["y"] for t in figures["water"]["data"]] == [[16, 24], [12.5, 20.0]]
    assert figures["metrics"]["data"][1]["yaxis"] == "y2"
    assert figures["metrics"]["layout"]["yaxis2"]["dtick"] == 1  # whole pods, never 0.2 steps


def test_step_lines_keep_only_their_steps_and_the_last_point():
    """Issue 9: a day of minutes whose value seldom changes is drawn from its changes (the
    "hv" line holds each value until the next point), gaps (None) included."""
    from pools.core.charts import steps

    x = list(range(8))
    assert steps(x, [2, 2, 2, 3, 3, None, None, 3]) == ([0, 3, 5, 7], [2, 3, None, 3])
    assert steps(x[:3], [1, 1, 1]) == ([0, 2], [1, 1])
    assert steps([0], [5]) == ([0], [5]) and steps([], []) == ([], [])
    day = [Sample(minute=T + timedelta(minutes=m), min_nodes=2, max_nodes=6, capacity_gpus=16 if m < 600 else 24) for m in range(1440)]
    water = pool_figures(day)["water"]["data"][0]
    assert water["y"] == [16, 24, 24] and water["x"] == [day[0].minute.isoformat(), day[600].minute.isoformat(), day[-1].minute.isoformat()]


def test_the_pool_page_embeds_the_figures_and_plotly_from_static(client, actors, time_machine):
    time_machine.move_to(T, tick=False)
    pool = services.pool_create(user=actors["lead"], document=make_document("charted", nodeCount={"min": 0, "max": 4}))
    PoolSample.objects.create(pool=pool, minute=T - timedelta(minutes=5), capacity_gpus=8, allocated_gpus=4, pending_pods=2,
                              min_nodes=0, max_nodes=4, node_counts={"monthly": {"desired": 1, "current": 1, "ready": 1}})  # fmt: skip
    client.force_login(actors["member"])
    page = client.get("/pools/charted/").content.decode()
    # The page shows at once and loads its charts after (issue 9: the day of samples is its heaviest read).
    assert 'hx-get="/pools/charted/charts/"' in page and 'hx-trigger="load"' in page
    assert "/static/vendor/plotly.min.js" in page and "cdn" not in page.lower()
    html = client.get("/pools/charted/charts/", headers={"HX-Request": "true"}).content.decode()
    assert 'id="pool-charts"' in html and 'id="chart-nodes"' in html and "<html" not in html
    embedded = html.split('id="pool-charts" type="application/json">')[1].split("</script>")[0]
    assert json.loads(embedded)["water"]["data"][1]["y"] == [4.0]
