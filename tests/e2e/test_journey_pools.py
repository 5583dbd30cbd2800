"""Journey (a), issue #8 item 2: a team lead creates one pool with the form and another by YAML
upload and sees both wait for approval; an admin approves the orders; the controller brings the
nodes up to Ready; the lead's pool page draws the watermark chart from the rollup's samples
(seed O2, O4, G1, T1). Every page is checked with axe on the way (conftest's `browse`)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node
from pools.services import pods as pod_services
from tests.conftest import EXAMPLES
from tests.e2e.background import MINUTE, bring_up, sample_minutes
from tests.pools.pod_helpers import pod_document

# Sequences reset: order and node names in the screenshots are the same on every run.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def lead_creates_a_pool_with_the_form(lead):
    lead.follow("main a:has-text('New pool')")
    page = lead.page
    page.fill("#id_name", "infer-pool-a")
    page.select_option("#id_gpu_model", "L40S")
    page.select_option("#id_node_type", "GPU_4_CARD")
    page.select_option("#id_region", "cn-east-2b")
    page.fill("#id_min_nodes", "1")
    page.fill("#id_max_nodes", "3")
    page.fill("#id_budget_monthly", "8000")
    for index, (key, value) in enumerate((("team", "algorithm"), ("project", "chat"))):
        lead.swap(lambda: page.click("button:has-text('Add label')"))  # htmx adds an empty row
        row = page.locator("#rows-label .row").nth(index)
        row.locator("input[name=label_key]").fill(key)
        row.locator("input[name=label_value]").fill(value)
    lead.shot("lead-01-pool-form", full_page=True)
    lead.follow("main button:has-text('Create pool')")
    assert page.url.endswith("/pools/infer-pool-a/")
    assert page.locator("main .phase").first.inner_text() == "Pending"
    assert "awaits approval by a platform admin" in page.inner_text("main")
    lead.shot("lead-02-pool-pending")


def lead_uploads_a_pool_as_yaml(lead):
    lead.goto("/pools/")
    lead.follow("main a:has-text('Import YAML')")
    lead.page.set_input_files("#id_upload", str(EXAMPLES / "create-train-pool.yaml"))
    lead.shot("lead-03-import-yaml")
    lead.follow("main button:has-text('Import')")
    assert lead.page.url.endswith("/pools/train-pool-a/")
    assert "awaits approval" in lead.page.inner_text("main")


def admin_approves_both_orders(admin):
    admin.goto("/orders/")  # an admin's orders page opens on the Pending ones
    rows = admin.page.locator("main tbody tr")
    assert (
        rows.count() == 2
        and "infer-pool-a" in rows.all_inner_texts()[0] + rows.all_inner_texts()[1]
    )
    admin.shot("admin-01-orders-pending")
    for _ in range(2):
        admin.follow("main button:has-text('Approve') >> nth=0")
        assert "approved" in admin.page.inner_text("main .messages")
    assert "No orders." in admin.page.inner_text("main tbody")


def test_a_lead_creates_two_pools_an_admin_approves_and_the_nodes_come_up(browse, actors):
    lead = browse("lead")
    lead_creates_a_pool_with_the_form(lead)
    lead_uploads_a_pool_as_yaml(lead)
    lead.goto("/pools/")
    table = lead.page.inner_text("#pool-table")
    assert table.count("Pending") >= 2 and table.count("awaits approval by a platform admin") >= 2  # the pendingReason in words
    lead.shot("lead-04-pools-waiting")

    admin = browse("admin")
    admin_approves_both_orders(admin)

    pools = list(
        GpuNodePool.objects.filter(name__in=["infer-pool-a", "train-pool-a"]).order_by("name")
    )
    ready_at = bring_up(pools, start=timezone.now())
    assert Node.objects.filter(pool__in=pools, phase="Ready").count() == 3  # 1 + 2 monthly nodes
    # A training pod lands on train-pool-a, so the water level shows allocated GPUs as well.
    document = pod_document(
        "bert-train-0", gpus=4, pool_affinity=None, tolerate="train", models="A100_80G"
    )
    pod = pod_services.pod_create(user=actors["member"], document=document, now=ready_at)
    scheduler_pass(now=ready_at + MINUTE)
    pod.refresh_from_db()
    assert pod.phase == "Running" and pod.node.pool.name == "train-pool-a", pod.explanation
    sample_minutes(start=ready_at, minutes=3)

    lead.goto("/pools/")
    assert lead.page.inner_text("#pool-table").count("Ready") >= 2
    lead.follow("#pool-table a:has-text('train-pool-a')")
    lead.page.wait_for_selector("#chart-water .main-svg")
    water = lead.page.evaluate(
        "() => Object.fromEntries(document.getElementById('chart-water').data.map(t => [t.name, t.y]))"
    )
    assert water["capacity GPUs"][0] == 0 and max(water["capacity GPUs"]) == 16, water
    assert max(water["allocated GPUs"]) == 4, water
    main = lead.page.inner_text("main")
    assert "NodeReady" in main and "2 node(s) became Ready" in main
    assert lead.page.locator("main .phase").first.inner_text() == "Ready"
    lead.shot("lead-05-pool-ready")
    lead.shot("lead-06-pool-watermarks", element="section:has(#chart-water)")
