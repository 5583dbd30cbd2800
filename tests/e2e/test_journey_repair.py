"""Journey (d), issue #8 item 2: a platform admin follows a node through repair on the node
pages (issue 6; seed T3, P4, D1). The admin mints a join token in the browser and the real
node agent program (simulated GPUs, in this process) joins over HTTP with it; the admin makes
GPU 0 raise Xid 79 (fallen off the bus) in the simulated cloud; the agent reports it; the pool's
repairs need approval (`autoRepairPolicy.requireApproval`), so the repair pass asks, the admin
approves on the node page, the next pass starts the replacement (RepairStarted: drained and
released through the cloud), the lifecycle controller orders the successor into the same lease
slot, and the admin finds the successor Ready.

The pool was brought up a quarter of an hour ago on the virtual clock (realistic step
durations), so everything the journey does afterwards happens at the wall clock's time and the
node's history reads in order; the successor is provisioned with fast simulated steps."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.agent import Agent
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import ControlPlaneFaults, SimulatedSource
from monitoring.models import GpuErrorEvent
from pools.controllers.lifecycle import pool_reconcile
from pools.controllers.repair import pool_repair
from pools.models import Node
from pools.services import pools as services
from tests.conftest import make_document
from tests.e2e.background import bring_up

# Sequences reset: order and node names in the screenshots are the same on every run.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def pool_ready_since_a_while(actors, *, approval=True):
    """train-pool-a, ordered, approved and brought up to two Ready nodes 15 minutes ago."""
    start = timezone.now() - timedelta(minutes=15)
    document = make_document(autoRepairPolicy={"requireApproval": True}) if approval else make_document()
    pool = services.pool_create(user=actors["lead"], document=document, now=start)
    services.order_approve(user=actors["admin"], order=pool.orders.get(), now=start)
    bring_up([pool], start=start)
    return pool


def start_agent(token: str, node: Node, server: str, tmp_path) -> Agent:
    """The node agent program as `python -m monitoring.agent --simulate` wires it."""
    source = SimulatedSource(gpus=node.gpu_count, seed=1)
    agent = Agent(server=server, source=source, buffer=DiskBuffer(tmp_path / "reports.sqlite3"),
                  credential_file=tmp_path / "credential.json", node=node.name, join_token=token)  # fmt: skip
    source.fault_feed = ControlPlaneFaults.of(agent)
    return agent


def report_once(agent: Agent) -> None:
    agent.collect()
    agent.flush()


def history(admin) -> str:
    return admin.page.inner_text("section:has(h2:has-text('Repair history'))")


def phase(admin) -> str:
    return admin.page.inner_text("main .actions .phase")


def successor_ready(pool, replaced: set[str], settings) -> Node:
    """Reconcile at the wall clock until the replacement node is Ready (fast simulated steps)."""
    settings.EBCLOUD_SIM_STEP_SECONDS = dict.fromkeys(settings.SIM_STEP_SECONDS_REALISTIC, 0)
    for _ in range(20):
        pool_reconcile(pool_id=pool.pk, now=timezone.now())
        successor = pool.nodes.exclude(name__in=replaced).first()
        if successor is not None and successor.phase == Node.Phase.READY:
            return successor
    raise AssertionError(f"no successor Ready: {list(pool.nodes.values_list('name', 'phase'))}")


def test_an_admin_follows_a_node_through_an_approved_replacement(
    browse, actors, live_server, tmp_path, settings
):
    pool = pool_ready_since_a_while(actors)
    first_nodes = set(pool.nodes.values_list("name", flat=True))
    node = pool.nodes.filter(phase="Ready").order_by("name").first()
    admin = browse("admin")
    admin.goto(f"/pools/{pool.name}/")
    admin.follow(f"main a:has-text('{node.name}')")
    assert "The node agent has not reported yet." in admin.page.inner_text("main")

    # The agent joins with a join token minted on the node page, then reports its GPUs.
    admin.follow("main button:has-text('New join token')")
    command = admin.page.inner_text("section:has(h2:has-text('Join token')) pre")
    token = re.search(r"--join-token (\S+)", command).group(1)
    agent = start_agent(token, node, live_server.url, tmp_path)
    try:
        report_once(agent)
        admin.reload()
        assert admin.page.locator("section:has(h2:has-text('GPUs')) tbody tr").count() == 8
        admin.shot("admin-02-node-gpus", element="section:has(h2:has-text('GPUs'))")

        # GPU 0 raises Xid 79 in the simulated cloud; the agent fetches and reports it.
        admin.page.fill("#fault-gpu", "0")
        admin.page.fill("#fault-xid", "79")
        admin.follow("main button:has-text('Raise Xid')")
        report_once(agent)
    finally:
        agent.close()
    xid = GpuErrorEvent.objects.get(node=node)
    assert (xid.xid, xid.gpu_index, xid.action) == (79, 0, "replace")

    # The repair pass asks a platform admin first (autoRepairPolicy.requireApproval).
    assert pool_repair(pool_id=pool.pk, now=timezone.now()) == 0
    admin.reload()
    assert "Repair pending approval" in admin.page.inner_text("main")
    assert "Xid79" in history(admin) and "GpuFaultInjected" in history(admin)
    admin.shot("admin-03-repair-approval")
    admin.follow("main button:has-text('Approve repair')")
    assert "approved" in admin.page.inner_text("main [role=status]")

    # The next pass starts it: the node is drained and its machine released through the cloud.
    assert pool_repair(pool_id=pool.pk, now=timezone.now()) == 1
    admin.reload()
    assert phase(admin) in ("Draining", "Terminating", "Terminated")
    assert "RepairStarted" in history(admin) and "released and replaced" in history(admin)
    admin.shot("admin-04-node-replaced")
    admin.shot("admin-05-repair-history", element="section:has(h2:has-text('Repair history'))")

    # The fleet's repair page (issue 21) shows the replacement in progress, and polls meanwhile.
    admin.follow("nav a:has-text('Repairs')")
    assert node.name in admin.page.inner_text("#repairs") and "replace" in admin.page.inner_text("#repairs")
    assert admin.page.get_attribute("#repairs", "hx-trigger") == "every 5s"
    admin.follow(f"#repairs a:has-text('{node.name}')")  # back to the node

    # The lifecycle controller orders the successor into the same lease slot.
    successor = successor_ready(pool, first_nodes, settings)
    admin.follow(f"main a:has-text('pool {pool.name}')")
    nodes = admin.page.inner_text("section:has(h2:has-text('Nodes'))")
    assert successor.name in nodes and "Terminated" in nodes
    admin.shot("admin-06-pool-nodes-after-repair", element="section:has(h2:has-text('Nodes'))")
    admin.follow(f"main a:has-text('{successor.name}')")
    assert phase(admin) == "Ready" and "No faults or repairs." in history(admin)  # a fresh machine
    admin.shot("admin-07-successor-ready")

    # The successor names the node it replaced and back; the replaced node says who pays.
    assert "no new order and no second charge" in admin.page.inner_text("#who-pays")
    admin.follow(f"main dd a:has-text('{node.name}')")
    assert "RepairSucceeded" in history(admin) and successor.name in history(admin)
    assert "the team pays for one node in this slot, not for both" in admin.page.inner_text("#who-pays")
    admin.shot("admin-08-replaced-node-links-successor", element="section:has(h2:has-text('Node'))")
    admin.follow(f"main dd a:has-text('{successor.name}')")
    assert phase(admin) == "Ready"

    # Nothing moves any more: the repair page says so, shows the outcome and stops polling.
    admin.follow("nav a:has-text('Repairs')")
    section = admin.page.inner_text("#repairs")
    assert "No repair in progress." in section and "RepairSucceeded" in section
    assert admin.page.get_attribute("#repairs", "hx-trigger") is None
    admin.shot("admin-09-fleet-repairs")


def test_a_faulty_node_is_cordoned_while_it_waits_and_the_pool_page_follows_its_reset(
    browse, actors, live_server, tmp_path
):
    """Issue 21's Xid 48: the node page counts its double-bit ECC error, the node takes no new
    pods while the fault must persist, and the pool page's repair section updates by itself
    (htmx polling) until the GPU reset held, then stops polling."""
    pool = pool_ready_since_a_while(actors, approval=False)
    node = pool.nodes.filter(phase="Ready").order_by("name").first()
    admin = browse("admin")
    admin.goto(f"/pools/{pool.name}/nodes/{node.name}/")
    admin.follow("main button:has-text('New join token')")
    token = re.search(r"--join-token (\S+)", admin.page.inner_text("section:has(h2:has-text('Join token')) pre")).group(1)
    agent = start_agent(token, node, live_server.url, tmp_path)
    try:
        report_once(agent)
        admin.reload()
        admin.page.fill("#fault-gpu", "2")
        admin.page.fill("#fault-xid", "48")
        admin.follow("main button:has-text('Raise Xid')")
        report_once(agent)
        admin.reload()
        gpu2 = admin.page.inner_text("section:has(h2:has-text('GPUs')) tbody tr:nth-child(3)")
        assert "0 / 1" in gpu2  # ECC SBE / DBE: the Xid 48's double-bit error, in the same report

        fault = GpuErrorEvent.objects.get(node=node).at
        assert pool_repair(pool_id=pool.pk, now=fault + timedelta(minutes=1)) == 0  # must persist 10 minutes
        admin.goto(f"/pools/{pool.name}/")
        section = admin.page.inner_text("#repairs")
        assert node.name in section and "cordoned, waiting for its repair to start" in section
        assert admin.page.get_attribute("#repairs", "hx-trigger") == "every 5s"
        admin.shot("admin-10-pool-repair-waiting", element="section:has(h2:has-text('Repairs'))")

        # The fault persisted: the reset runs on the node and holds, while the page stays open.
        assert pool_repair(pool_id=pool.pk, now=fault + timedelta(minutes=11)) == 1
        report_once(agent)  # the agent runs the reset
        report_once(agent)  # and acknowledges it
        pool_repair(pool_id=pool.pk, now=fault + timedelta(minutes=12))
        admin.page.wait_for_selector("#repairs:has-text('No repair in progress.')", timeout=20_000)
        assert "RepairSucceeded" in admin.page.inner_text("#repairs")
        assert admin.page.get_attribute("#repairs", "hx-trigger") is None  # settled: polling stopped
        admin.follow(f"#repairs a:has-text('{node.name}')")
        assert phase(admin) == "Ready"
        assert "NodeCordoned" in history(admin) and "RepairSucceeded" in history(admin)
        gpu2 = admin.page.inner_text("section:has(h2:has-text('GPUs')) tbody tr:nth-child(3)")
        assert "0 / 0" in gpu2  # the reset cleared the volatile count
    finally:
        agent.close()
