"""The node page (issue 6: "repair history on the node page"; "rotatable and revocable from the
UI"; the approval gate): what a team sees of its node, what only platform admins may do there,
and a query count that does not grow with the node's history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring import services as monitoring_services
from monitoring.models import AgentCredential, GpuErrorEvent, credential_works
from pools.controllers.repair import pool_repair
from pools.models import Node
from pools.models.cloud import SimGpuFault, SimMachine
from pools.models.repair import RepairApproval
from pools.providers.simulated import pod_run
from pools.selectors.nodes import node_page
from tests.monitoring.conftest import joined, report
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import xid


@pytest.fixture
def pool(actors):
    return pool_with_nodes(actors["lead"], nodes=5, autoRepairPolicy={"requireApproval": True})


@pytest.fixture
def node(pool):
    node = pool.nodes.order_by("name").first()
    Node.objects.filter(pk=node.pk).update(taints=[{"key": "pool", "value": "train", "effect": "NoSchedule"}], unschedulable=True)
    node.refresh_from_db()
    return node


@pytest.fixture
def page(pool, node):
    return reverse("pools:node-detail", args=[pool.name, node.name])


def send_report(node, admin, **kw):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {joined(node, admin)}")
    response = client.post("/api/agent/v1/reports/", {"reports": [report(1, **kw)]}, format="json")
    assert response.status_code == 200


def test_the_lead_sees_phase_conditions_taints_gpus_credential_and_pods(browser, actors, node, page):
    send_report(node, actors["admin"], gpus=2, driver="470.42.01", cuda="12.2", used=20480)
    pod_run(node_name=node.name, name="bert-0", namespace="algorithm")
    html = browser("lead").get(page).content.decode()
    assert "Ready" in html and "cordoned" in html and "pool=train:NoSchedule" in html
    assert "CudaDriverMismatch" in html and "DriverTooOldForCudaMajor" in html  # the driver/CUDA condition
    assert "AcceleratedHardwareReady" in html and "NoOpenFault" in html
    assert "DCGM field names" in html and "20480 / 81920" in html  # DCGM_FI_DEV_FB_USED / _TOTAL
    assert AgentCredential.objects.get(node=node).key_prefix in html and "active" in html
    assert "algorithm/bert-0" in html
    assert "Revoke credential" not in html and "New join token" not in html  # admin-only buttons


def test_the_repair_history_merges_events_commands_and_xids_newest_first(actors, browser, pool, node, page):
    xid(node, 48, at=timezone.now() - timedelta(minutes=30), gpu=3)
    pool_repair(pool_id=pool.pk, now=timezone.now() - timedelta(minutes=15))  # raises the request
    monitoring_services.agent_command_enqueue(node=node, action="reset_gpu", gpu_index=3, reason="by hand", now=timezone.now() - timedelta(minutes=5))
    html = browser("lead").get(page).content.decode()
    history = html[html.index("Repair history"):]
    order = [history.index(marker) for marker in ("CommandIssued", "RepairPendingApproval", "Xid48")]
    assert order == sorted(order), "newest first: the command, then the request, then the Xid"
    assert "Xid 48 on GPU 3: the GPU needs a reset; the repair starts with one" in history  # not "first rung reset_gpu"
    assert "Repair pending approval" in html and "Approve repair" not in html  # the lead sees it waiting


def test_another_teams_lead_gets_404_and_visitors_log_in(browser, pool, node, page):
    assert browser("other_lead").get(page).status_code == 404
    assert browser("other_lead").post(page, {"action": "revoke"}).status_code == 404
    assert browser(None).get(page).status_code == 302
    assert browser("lead").get(reverse("pools:node-detail", args=["other-pool", node.name])).status_code == 404
    assert browser("lead").get(reverse("pools:node-detail", args=[pool.name, "nope"])).status_code == 404
    assert browser("finance").get(page).status_code == 200


@pytest.mark.parametrize("role", ["lead", "member", "finance"])
def test_only_platform_admins_act_on_the_node(browser, actors, role, node, page):
    joined(node, actors["admin"])
    assert browser(role).post(page, {"action": "revoke"}).status_code == 403
    assert AgentCredential.objects.filter(node=node, revoked_at__isnull=True).exists()


def test_an_admin_revokes_the_credential_and_mints_a_join_token_to_rotate_it(browser, actors, node, page):
    joined(node, actors["admin"])
    admin = browser("admin")
    assert "Revoke credential" in admin.get(page).content.decode()
    assert admin.post(page, {"action": "revoke"}).status_code == 302
    assert AgentCredential.objects.get(node=node).revoked_reason == "RevokedByAdmin"
    assert node.pool.events.get(reason="AgentCredentialRevoked").actor == actors["admin"]
    response = admin.post(page, {"action": "join-token"})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    token = response.context["join_token"]
    assert token in response.content.decode()
    _, secret, _ = monitoring_services.agent_join(token=token, node_name=node.name)  # the node re-joins
    assert monitoring_services.credential_authenticate(secret) is not None
    assert token not in admin.get(page).content.decode()  # shown once


def test_the_page_shows_a_grace_exactly_while_the_rotated_out_credential_works(actors, node):
    """The page's "works until" and the agents' authentication are one condition
    (monitoring.models.credential_in_grace): at the grace's last instant both say the rotated-out
    credential works, at its end both say it does not."""
    old = joined(node, actors["admin"])
    monitoring_services.credential_rotate(credential=monitoring_services.credential_authenticate(old, T0), now=T0)
    end = T0 + monitoring_services.ROTATION_GRACE
    for now, works in ((end - timedelta(microseconds=1), True), (end, False)):
        [shown] = [c for c in node_page(user=actors["lead"], node=node, now=now)["credentials"] if old.startswith(c.key_prefix)]
        assert shown.grace_until == (end if works else None), now
        assert AgentCredential.objects.filter(credential_works(now), pk=shown.pk).exists() is works
        assert (monitoring_services.credential_authenticate(old, now) is not None) is works


def test_an_admin_approves_or_rejects_the_pending_repair_here(browser, actors, pool, node, page):
    xid(node, 48, at=timezone.now() - timedelta(minutes=30))
    pool_repair(pool_id=pool.pk, now=timezone.now() - timedelta(minutes=15))
    request = RepairApproval.objects.get(node=node)
    admin = browser("admin")
    assert "Approve repair" in admin.get(page).content.decode()
    for blank in ("", "   "):  # the guide's "Reject, with a reason", as an order's rejection (found by a QA sweep)
        refused = admin.post(page, {"action": "reject", "approval": request.pk, "note": blank})
        # beside the field labelled Reason, never naming the posted field `note`
        shown = refused.content.decode()
        assert refused.status_code == 400 and "note:" not in shown
        assert 'aria-describedby="reject-note-error"' in shown
        assert '<ul class="errorlist" id="reject-note-error" role="alert"><li>A reason is required: ' in shown
    assert RepairApproval.objects.get(pk=request.pk).status == "Pending"
    assert admin.post(page, {"action": "reject", "approval": request.pk, "note": "tonight"}).status_code == 302
    request.refresh_from_db()
    assert (request.status, request.note, request.decided_by) == ("Rejected", "tonight", actors["admin"])
    response = admin.post(page, {"action": "approve", "approval": request.pk}, follow=True)
    assert "no longer pending" in response.content.decode()  # a second decision is refused, not applied
    assert admin.post(page, {"action": "approve", "approval": 99999}).status_code == 404


def test_an_admin_raises_an_xid_on_a_simulated_machine(browser, actors, pool, node, page):
    assert "Raise Xid" not in browser("admin").get(page).content.decode()  # no machine yet
    machine = SimMachine.objects.create(provider_id="sim-x", client_token=node.name, zone=pool.zone, gpu_model=pool.gpu_model,
                                        node_type=pool.node_type, gpus=8, billing="monthly", image="i", status="Running")  # fmt: skip
    Node.objects.filter(pk=node.pk).update(provider_id=machine.provider_id)
    admin = browser("admin")
    assert "Raise Xid" in admin.get(page).content.decode()
    assert admin.post(page, {"action": "inject-fault", "gpu": "4", "xid": "79"}).status_code == 302
    assert SimGpuFault.objects.filter(machine=machine, gpu_index=4, xid=79).exists()
    response = admin.post(page, {"action": "inject-fault", "gpu": "x", "xid": "79"})
    assert response.status_code == 400 and "GPU: must be a whole number" in response.content.decode()
    response = admin.post(page, {"action": "explode"})
    assert response.status_code == 400 and "unknown action" in response.content.decode()


def test_the_pool_page_links_each_node_to_its_page(browser, pool, node, page):
    assert f'href="{page}"' in browser("lead").get(reverse("pools:detail", args=[pool.name])).content.decode()


def test_the_node_page_costs_the_same_queries_with_a_long_history(browser, actors, pool, node, page):
    send_report(node, actors["admin"])
    lead = browser("lead")
    lead.get(page)
    with CaptureQueriesContext(connection) as few:
        assert lead.get(page).status_code == 200
    now = timezone.now()
    for i in range(30):
        GpuErrorEvent.objects.create(node=node, report_seq=100 + i, position=0, gpu_index=i % 8, xid=13, at=now - timedelta(minutes=i),
                                     kind="application", action="none")  # fmt: skip
        monitoring_services.agent_command_enqueue(node=node, action="cordon_ack", reason=f"drill {i}")
        pod_run(node_name=node.name, name=f"job-{i}", namespace="algorithm")
    xid(node, 48, at=now - timedelta(minutes=30))
    pool_repair(pool_id=pool.pk, now=now - timedelta(minutes=15))
    with CaptureQueriesContext(connection) as many:
        assert lead.get(page).status_code == 200
    assert len(few) == len(many) <= 16, [q["sql"][:90] for q in many.captured_queries]


def test_a_released_node_reads_released_with_the_time_of_its_last_heartbeat(browser, node, page):
    """A node replaced minutes ago read "Last heartbeat 26s ago" and "cordoned · leaving: Repair"
    (found by a QA sweep): it is gone, its last heartbeat a moment in its history."""
    Node.objects.filter(pk=node.pk).update(phase="Terminated", release_reason="Repair", last_heartbeat=T0)
    html = browser("lead").get(page).content.decode()
    assert "released (Repair)" in html and "leaving:" not in html
    assert "2026-12-01" in html and " ago</time>" not in html


@pytest.mark.parametrize("phase", ["Cordoned", "Draining"])
def test_a_cordoned_or_draining_node_is_still_ready_but_takes_no_new_pods(browser, node, page, phase):
    """A cordon sets spec.unschedulable; the kubelet's Ready condition stays True (kubectl reads
    "Ready,SchedulingDisabled"). The page said Ready False of every cordoned node (admin QA)."""
    Node.objects.filter(pk=node.pk).update(phase=phase)
    conditions = browser("lead").get(page).context["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", f"Node{phase}")
    assert ready["message"].startswith("Ready, SchedulingDisabled: ")
