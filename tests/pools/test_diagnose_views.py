"""The pool's Diagnose page and `GET /api/v1/pools/{name}/diagnose/` over live state (issue 8 §3).

The self-check table (seed T5) must read what the controllers wrote: a pod Pending for 40
minutes because the pool's nodes lack its affinity label (T2), an Xid from a node agent (T3), a
rejected order (T1), a day of low-utilisation samples (T4), cross-zone fees and an idle burst
node on the bill (T5). Another team's lead gets a 404, and the queries do not grow with the pool.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import CostRecord, PoolResourceSample
from monitoring.models import GpuErrorEvent, NodeAgentState, PoolSample
from pools.controllers.scheduler import scheduler_pass
from pools.models import Node, PoolOrder
from pools.models.pods import Pod
from pools.selectors import diagnose as diagnose_service
from pools.services import pods as pod_services
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pod_helpers import pod_document, pool_with_nodes


def aged_pool(actors, *, name="train-pool-a", nodes=2, now=None, **spec):
    """The article's pool with Ready nodes that joined two days ago and whose agents report."""
    now = now or timezone.now()
    pool = pool_with_nodes(actors["lead"], name=name, nodes=nodes, **spec)
    Node.objects.filter(pool=pool).update(created_at=now - timedelta(days=2), ready_at=now - timedelta(days=2))
    for node in pool.nodes.all():
        NodeAgentState.objects.create(node=node, driver_version="535.104.05", cuda_version="12.2", last_report_at=now - timedelta(minutes=1))
    return pool


def pending_pod(actors, name, *, age, **kwargs):
    return pod_services.pod_create(user=actors["member"], document=pod_document(name, **kwargs), now=timezone.now() - age)


def troubled(actors):
    """A pool whose baseline order was rejected, with a pod stuck on a missing label and an Xid."""
    now = timezone.now()
    pool = aged_pool(actors, nodeCount={"min": 2, "max": 6})
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="budget freeze")
    pending_pod(actors, "bert-train-0", age=timedelta(minutes=40), gpus=4)  # affinity pool In [train]: nodes lack it
    scheduler_pass(now=now - timedelta(minutes=39))
    node = pool.nodes.order_by("name").first()
    GpuErrorEvent.objects.create(node=node, report_seq=7, position=0, gpu_index=3, xid=79, at=now - timedelta(minutes=10),
                                 kind="fatal", action="replace", mnemonic="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")  # fmt: skip
    return pool


def row(page: str, check_id: str) -> str:
    start = page.index(f'id="check-{check_id}"')
    return page[start : page.index("</tr>", start)]


def test_the_page_shows_each_live_failure_with_its_cause_and_first_action(browser, actors):
    pool = troubled(actors)
    response = browser("lead").get(f"/pools/{pool.name}/diagnose/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Overall: Failing" in page
    pending = row(page, "pods-pending")
    assert 'data-status="failing"' in pending and "algorithm/bert-train-0" in pending
    assert "Affinity label missing on nodes" in pending and "ebcloud pod why algorithm/bert-train-0" in pending
    assert "0/2 nodes are available: 2 node(s) didn&#x27;t match Pod&#x27;s node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling." in pending
    gpu = row(page, "gpu-errors")
    assert 'data-status="failing"' in gpu and "Xid 79 ×1 on train-pool-a-0 (fatal: GPU has fallen off the bus)" in gpu
    assert "autoRepair is on" in gpu
    scale_up = row(page, "scale-up")
    assert 'data-status="failing"' in scale_up and "order #" in scale_up and "Rejected: budget freeze" in scale_up
    assert '<th scope="row">Scale-up keeps failing' in scale_up and ">Failing</span>" in scale_up  # status in words, not colour only


def test_an_xid_of_a_node_replaced_since_fails_nothing(browser, actors):
    """The demo's Xid 79, repaired by a replacement, kept the check FAILING for a day, naming a
    node that was gone (found by a QA sweep)."""
    pool = troubled(actors)
    pool.nodes.update(phase=Node.Phase.TERMINATED, release_reason="Repair")
    gpu = row(browser("lead").get(f"/pools/{pool.name}/diagnose/").content.decode(), "gpu-errors")
    assert 'data-status="failing"' not in gpu and "Xid 79" not in gpu


def test_the_pool_page_links_to_diagnose(browser, actors):
    pool = aged_pool(actors)
    assert f'href="/pools/{pool.name}/diagnose/">Diagnose</a>' in browser("lead").get(f"/pools/{pool.name}/").content.decode()


def test_metered_samples_and_the_bill_drive_the_utilisation_and_cost_checks(browser, actors):
    """T4 from a day of per-minute samples; T5's bill row from cost records and an idle burst node."""
    now = timezone.now()
    pool = aged_pool(actors)
    Node.objects.create(pool=pool, name="train-pool-a-burst", billing="on_demand", phase="Ready", zone=pool.zone, gpu_count=8,
                        created_at=now - timedelta(hours=3), ready_at=now - timedelta(hours=3))  # fmt: skip
    minute = now.replace(second=0, microsecond=0)
    minutes = [minute - timedelta(hours=24) + timedelta(minutes=1), *(minute - timedelta(hours=h) for h in range(24))]  # a full day
    PoolSample.objects.bulk_create(
        PoolSample(pool=pool, minute=m, capacity_gpus=24, allocated_gpus=4, gpu_util_avg=12.0, min_nodes=0, max_nodes=6) for m in minutes
    )
    hour = now.replace(minute=0, second=0, microsecond=0)
    records = [CostRecord(hour=hour - timedelta(hours=h), pool=pool, team=pool.team, billing_kind="monthly", cost_kind="fee", component="network", amount=Decimal("20.00"))
               for h in range(1, 24 * 8)]  # fmt: skip
    records += [CostRecord(hour=hour - timedelta(hours=h), pool=pool, team=pool.team, billing_kind="monthly", cost_kind="idle", component="gpu", amount=Decimal("10.00"))
                for h in range(1, 24 * 8)]  # fmt: skip
    records[0].amount = Decimal("900.00")  # the last hour: a burst of cross-zone traffic
    CostRecord.objects.bulk_create(records)
    PoolResourceSample.objects.create(pool=pool, hour=hour - timedelta(hours=1), cross_zone_gb=Decimal("4500"))
    page = browser("lead").get(f"/pools/{pool.name}/diagnose/").content.decode()
    util = row(page, "low-utilisation")
    assert 'data-status="failing"' in util and "Mean GPU utilisation 12.0% over 24 h (25 samples, highest 12%), 17% of GPUs allocated" in util
    zone = row(page, "bill-cross-zone")
    assert 'data-status="failing"' in zone and "Cross-zone network 1360.00 CNY" in zone and "4500 GB crossed zones" in zone
    assert "ebcloud cost export --by-labels team,project,gpu-class --detail" in zone
    idle = row(page, "bill-idle-nodes")
    assert 'data-status="failing"' in idle and "train-pool-a-burst (on_demand) idle for 3h" in idle


def test_another_teams_lead_gets_404_on_the_page_and_the_api(browser, actors, api):
    pool = troubled(actors)
    assert browser("other_lead").get(f"/pools/{pool.name}/diagnose/").status_code == 404
    response = api("other_lead").get(f"/api/v1/pools/{pool.name}/diagnose/")
    assert response.status_code == 404 and "errors" in response.json()


def test_the_api_returns_the_same_checks_as_a_document(actors, api):
    pool = troubled(actors)
    response = api("member").get(f"/api/v1/pools/{pool.name}/diagnose/")
    assert response.status_code == 200
    body = response.json()
    assert body["pool"] == pool.name and body["checkedAt"]
    assert [c["id"] for c in body["checks"]] == ["scale-up", "pods-pending", "gpu-errors", "low-utilisation", "bill-cross-zone", "bill-idle-nodes", "scaling-whole-node",
                                             "preemption-checkpointable"]
    by_id = {c["id"]: c for c in body["checks"]}
    assert by_id["pods-pending"]["status"] == "failing"
    assert by_id["low-utilisation"]["status"] == "unknown" and by_id["low-utilisation"]["cause"]
    assert body["summary"]["status"] == "failing" and body["summary"]["failing"] == 3
    assert set(by_id["gpu-errors"]) == {"id", "title", "status", "found", "cause", "action", "details"}


def test_the_api_schema_documents_the_endpoint(api):
    schema = api("lead").get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/pools/{name}/diagnose/"]["get"]
    assert set(operation["responses"]) >= {"200", "401", "404"}
    assert "Diagnosis" in schema["components"]["schemas"]


def test_a_spec_that_cannot_burst_for_whole_node_pods_is_flagged_live(actors):
    """docs/benchmarks.md autoscaler replay: the article's combine: All never bursts for 8-GPU jobs."""
    scaling = {"default": {"metrics": [{"type": "Resource", "resource": "gpu-memory", "targetAverageUtilization": 85},
                                       {"type": "Pods", "pods": "queued_pods", "target": 10}]}}  # fmt: skip
    pool = aged_pool(actors, node_labels={"pool": "train"}, scaling=scaling, burst={"enabled": True, "maxNodes": 1})
    pending_pod(actors, "peak-job", age=timedelta(minutes=3), gpus=8)
    checks = {c.id: c for c in diagnose_service.pool_diagnose(pool=pool, now=timezone.now()).checks}
    assert checks["scaling-whole-node"].status == "failing" and checks["scaling-whole-node"].details == ("algorithm/peak-job",)
    services.pool_patch(user=actors["lead"], pool=pool, patch={"spec": {"scaling": {"default": {"combine": "Any"}}}})
    pool.refresh_from_db()
    assert {c.id: c for c in diagnose_service.pool_diagnose(pool=pool, now=timezone.now()).checks}["scaling-whole-node"].status == "ok"


def _queries(pool) -> int:
    with CaptureQueriesContext(connection) as captured:
        diagnose_service.pool_diagnose(pool=pool, now=timezone.now())
    return len(captured)


def test_the_queries_do_not_grow_with_nodes_pods_errors_or_costs(browser, actors, django_assert_max_num_queries):
    pool = troubled(actors)
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    CostRecord.objects.create(hour=hour - timedelta(hours=1), pool=pool, team=pool.team, billing_kind="monthly", cost_kind="usage", component="gpu", amount=Decimal("100"))
    before = _queries(pool)
    for i in range(6):
        node = Node.objects.create(pool=pool, name=f"extra-{i}", phase="Ready", zone=pool.zone, gpu_count=8, created_at=now - timedelta(days=1), ready_at=now - timedelta(days=1))
        NodeAgentState.objects.create(node=node, last_report_at=now)
        GpuErrorEvent.objects.create(node=node, report_seq=1, position=0, xid=13, at=now - timedelta(hours=1), kind="application", action="none")
        Pod.objects.create(team=pool.team, namespace="algorithm", name=f"run-{i}", gpu_count=2, gpu_milli=1000, node=node, phase="Running", started_at=now)
    for i in range(10):
        pending_pod(actors, f"wait-{i}", age=timedelta(minutes=i))
    CostRecord.objects.bulk_create(
        CostRecord(hour=hour - timedelta(hours=h), pool=pool, team=pool.team, billing_kind="monthly", cost_kind="usage", component=component, amount=Decimal("100"))
        for h in range(2, 200) for component in ("gpu", "network", "storage")
    )
    assert before == _queries(pool) <= 13  # + the live pools, to leave pods another pool takes to it
    client = browser("lead")
    with django_assert_max_num_queries(before + 7):  # + session, user, groups, memberships, the pool, open alerts
        assert client.get(f"/pools/{pool.name}/diagnose/").status_code == 200


def test_text_from_users_is_escaped_and_commands_are_code(browser, actors):
    """A rejection reason is user input: it must not become markup on the page."""
    pool = aged_pool(actors, nodeCount={"min": 2, "max": 6})
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="<script>alert(1)</script>")
    page = row(browser("lead").get(f"/pools/{pool.name}/diagnose/").content.decode(), "scale-up")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<code>ebcloud node-pool describe train-pool-a</code>" in page


def test_a_rejection_a_later_paid_order_made_good_is_no_failing_scale_up_from_the_stored_orders(actors):
    """The check reads the orders the selector loads: a later Paid order has to be among them
    (found by review: the selector loaded only Pending and refused ones, so the rule never saw
    the order that made a rejection good). A later renewal adds no capacity and does not count."""
    pool = services.pool_create(user=actors["lead"], document=make_document("made-good", nodeCount={"min": 2, "max": 4}))
    first = pool.orders.get()
    services.order_reject(user=actors["admin"], order=first, reason="no A100 this month")

    def later(kind: str) -> None:
        order = PoolOrder.objects.get(pk=first.pk)
        order.pk, order.kind, order.status, order.reason = None, kind, PoolOrder.Status.PAID, ""
        order.save()

    def scale_up():
        return {c.id: c for c in diagnose_service.pool_diagnose(pool=pool, now=timezone.now()).checks}["scale-up"]

    later(PoolOrder.Kind.RENEW)
    assert f"order #{first.pk} Rejected" in scale_up().found
    later(PoolOrder.Kind.GROW)
    assert f"order #{first.pk} Rejected" not in scale_up().found
