"""Pool charts over time (issue 5 §5, issue 6 §6): figures from samples, and the pool page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from monitoring.models import PoolSample
from pools.core.charts import Sample, pool_figures
from pools.services import pools as services
from tests.conftest import assets_off_site, make_document

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
    assert "/static/vendor/plotly.min.js" in page
    assert assets_off_site(page) == []
    html = client.get("/pools/charted/charts/", headers={"HX-Request": "true"}).content.decode()
    assert 'id="pool-charts"' in html and 'id="chart-nodes"' in html and "<html" not in html
    embedded = html.split('id="pool-charts" type="application/json">')[1].split("</script>")[0]
    assert json.loads(embedded)["water"]["data"][1]["y"] == [4.0]


# --- issue 21 item 8: the real window, a readable time axis, empty charts in words, polling ---


def test_the_window_is_said_in_minutes_then_hours():
    from pools.core.charts import window_label

    assert window_label(timedelta(seconds=20)) == "last 1 minute"
    assert window_label(timedelta(minutes=10)) == "last 10 minutes"
    assert window_label(timedelta(minutes=119)) == "last 119 minutes"
    assert window_label(timedelta(hours=3, minutes=10)) == "last 3 hours"
    assert window_label(timedelta(hours=24)) == "last 24 hours"


def test_a_new_pools_charts_say_their_real_window_on_an_axis_of_minutes():
    """Ten minutes of samples are "the last 10 minutes", not a day; one sample still gets an
    axis ten minutes wide (plotly would otherwise tick it in fractions of a second)."""
    one = [Sample(minute=T, min_nodes=2, max_nodes=6, capacity_gpus=16, allocated_gpus=4.0)]
    figures = pool_figures(one, now=T + timedelta(minutes=10))
    assert figures["nodes"]["layout"]["title"]["text"] == "Nodes by billing kind, last 10 minutes"
    assert figures["water"]["layout"]["title"]["text"] == "GPU water level, last 10 minutes"
    start, end = (datetime.fromisoformat(v) for v in figures["water"]["layout"]["xaxis"]["range"])
    assert figures["water"]["layout"]["xaxis"]["type"] == "date" and end - start >= timedelta(minutes=10)
    alone = pool_figures(one)
    start, end = (datetime.fromisoformat(v) for v in alone["nodes"]["layout"]["xaxis"]["range"])
    assert end - start == timedelta(minutes=10) and "last 1 minute" in alone["nodes"]["layout"]["title"]["text"]


def test_no_metrics_no_empty_axes():
    quiet = [Sample(minute=T, min_nodes=2, max_nodes=6, capacity_gpus=16)]
    assert set(pool_figures(quiet)) == {"nodes", "water"}
    reported = [quiet[0]._replace(pending_pods=0)]
    assert "metrics" in pool_figures(reported)


def _pool_with_sample(actors, phase):
    pool = services.pool_create(user=actors["lead"], document=make_document("charted", nodeCount={"min": 0, "max": 4}))
    type(pool).objects.filter(pk=pool.pk).update(phase=phase)
    PoolSample.objects.create(pool=pool, minute=T - timedelta(minutes=10), capacity_gpus=8, min_nodes=0, max_nodes=4, node_counts={})
    return pool


def test_the_chart_panel_states_its_window_says_what_is_missing_and_polls_while_the_pool_changes(client, actors, time_machine):
    time_machine.move_to(T, tick=False)
    pool = _pool_with_sample(actors, "Provisioning")
    client.force_login(actors["member"])
    assert "Capacity over the last 24 hours" not in client.get("/pools/charted/").content.decode()
    html = client.get("/pools/charted/charts/", headers={"HX-Request": "true"}).content.decode()
    assert "Per-minute samples of the last 10 minutes" in html
    assert "No GPU memory or queued-pod figures yet" in html and 'id="chart-metrics"' not in html
    assert 'id="pool-chart-panel" hx-get="/pools/charted/charts/" hx-trigger="every 30s"' in html
    type(pool).objects.filter(pk=pool.pk).update(phase="Ready")
    settled = client.get("/pools/charted/charts/", headers={"HX-Request": "true"}).content.decode()
    assert 'id="pool-chart-panel" >' in settled and "hx-trigger" not in settled


def test_the_pool_status_polls_while_the_pool_changes_and_stops_when_it_settles(client, actors, time_machine):
    time_machine.move_to(T, tick=False)
    pool = _pool_with_sample(actors, "Provisioning")
    client.force_login(actors["member"])
    page = client.get("/pools/charted/").content.decode()
    assert 'hx-get="/pools/charted/?part=status" hx-trigger="every 10s"' in page
    part = client.get("/pools/charted/?part=status", headers={"HX-Request": "true"}).content.decode()
    assert 'id="pool-status"' in part and "<html" not in part and 'id="timeline"' not in part
    assert '<span id="pool-phase" class="phase phase-Provisioning" hx-swap-oob="true">Provisioning</span>' in part
    type(pool).objects.filter(pk=pool.pk).update(phase="Ready")
    settled = client.get("/pools/charted/?part=status", headers={"HX-Request": "true"}).content.decode()
    assert 'hx-swap-oob="true">Ready</span>' in settled and 'hx-trigger="every 10s"' not in settled
