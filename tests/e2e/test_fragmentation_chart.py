"""Browser check (Playwright, Debian's chromium): the fragmentation page loads plotly.min.js
from our static files (the installed package's copy, no CDN) and draws its charts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pools.controllers.scheduler import scheduler_pass
from tests.e2e.axe import assert_accessible
from tests.pools.pod_helpers import T0, pool_with_nodes, pool_with_share_layout, submit

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(chromium):
    """A page of the shared browser (the `chromium` fixture skips without Debian's chromium)."""
    return chromium.new_page()


def log_in_as_lead(page, base_url: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("input[name=username]", "lead")
    page.fill("input[name=password]", "pw-lead")
    page.click("button[type=submit]")


def test_the_fragmentation_charts_are_drawn_by_plotly_from_static(live_server, actors, page):
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(2):
        submit(actors["member"], f"f{i}", gpus=2)
    scheduler_pass(now=T0)
    requests = []
    page.on("request", lambda request: requests.append(request.url))
    log_in_as_lead(page, live_server.url)
    page.goto(f"{live_server.url}/pools/train-pool-a/fragmentation/")
    page.wait_for_selector("#chart-allocation .main-svg", timeout=15000)
    assert page.locator("#chart-fragments .main-svg").count() >= 1
    assert any(url.endswith("/static/vendor/plotly.min.js") for url in requests)
    assert all(url.startswith(live_server.url) for url in requests)
    assert_accessible(page)


def test_the_pool_page_draws_its_capacity_charts(live_server, actors, page):
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.models import PoolSample

    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    now = timezone.now().replace(second=0, microsecond=0)
    for minute in range(5):
        PoolSample.objects.create(pool=pool, minute=now - timedelta(minutes=5 - minute), capacity_gpus=16, allocated_gpus=4 * minute,
                                  pending_pods=minute, gpu_memory_used_pct=20.0 * minute, min_nodes=0, max_nodes=6,
                                  node_counts={"monthly": {"desired": 2, "current": 2, "ready": 2}})  # fmt: skip
    log_in_as_lead(page, live_server.url)
    page.goto(f"{live_server.url}/pools/{pool.name}/")
    for chart in ("nodes", "water", "metrics"):
        page.wait_for_selector(f"#chart-{chart} .main-svg", timeout=15000)
    assert_accessible(page)
    page.screenshot(path=str(Path(__file__).resolve().parents[2] / "var" / "pool-page.png"), full_page=True)


def test_a_lead_packs_the_gpu_shares_from_the_page(live_server, actors, page):
    pool_with_share_layout(actors)
    log_in_as_lead(page, live_server.url)
    page.goto(f"{live_server.url}/pools/train-pool-a/fragmentation/")
    page.wait_for_selector("text=1 whole GPU(s) freed", timeout=15000)
    page.click("summary")  # the moves, folded under the summary
    assert page.locator("#repack-plan details table tbody tr").count() >= 1
    assert_accessible(page)
    page.click("text=Apply: pack GPU shares")
    page.wait_for_selector("text=GPU shares repacked:", timeout=15000)
    page.wait_for_selector("text=No moves of GPU shares free a whole GPU or make room for a waiting pod.", timeout=15000)
    assert_accessible(page)


def test_a_lead_starts_a_waiting_share_by_packing_the_gpu_shares(live_server, actors, page):
    """500+100 | 500+100 and an 800 waiting: the page says it makes room, and applying it starts
    the pod, as the flash message and the pod's page then say."""
    pool_with_share_layout(actors, {0: [("a1", 500), ("a2", 100)], 1: [("b1", 500), ("b2", 100)]}, milli=800, cpu="1", memory="1Gi")
    log_in_as_lead(page, live_server.url)
    page.goto(f"{live_server.url}/pools/train-pool-a/fragmentation/")
    page.wait_for_selector("text=make room for", timeout=15000)
    assert "algorithm/waiting on train-pool-a-0" in page.locator("#repack-plan").inner_text()
    assert_accessible(page)
    page.click("text=Apply: pack GPU shares")
    page.wait_for_selector("text=waiting pod(s) started: algorithm/waiting", timeout=15000)
    assert_accessible(page)
