"""GPU faults injected into the simulated cloud reach the repair ladder through the real path
(issue 6 §3-5: "simulated source ... driven by the simulated cloud's fault injection"; seed T3,
P4, D1): inject -> the node's agent fetches its machine's faults over HTTP with its node
credential -> reports them as Xids -> the repair ladder -> RepairStarted -> the provider or the
agent acts -> the node is Ready again. The agent never touches the database."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from monitoring import services
from monitoring.agent import Agent
from monitoring.agent_buffer import DiskBuffer
from monitoring.agent_sources import ControlPlaneFaults, SimulatedSource
from monitoring.models import AgentCommand, GpuErrorEvent, NodeReport
from pools.controllers.lifecycle import pool_reconcile
from pools.controllers.repair import pool_repair
from pools.core.errors import ConflictError, ValidationError
from pools.models import Node
from pools.models.cloud import SimGpuFault, SimMachine
from pools.models.repair import RepairApproval
from pools.providers.faults import gpu_fault_inject
from pools.providers.simulated import SIM_XID_MIX, SimulatedCloud
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, run_until

FAULTS = "/api/agent/v1/simulated-faults/"


def with_machine(node: Node, *, created=None) -> SimMachine:
    """Give a directly made node a running machine in the simulated cloud."""
    pool = node.pool
    machine = SimMachine.objects.create(
        provider_id=f"sim-{node.name}", client_token=node.name, zone=pool.zone, gpu_model=pool.gpu_model, node_type=pool.node_type,
        gpus=node.gpu_count, billing=node.billing, image="ubuntu-22.04-cuda-12.2", status="Running", created_at=created or timezone.now(),
    )  # fmt: skip
    Node.objects.filter(pk=node.pk).update(provider_id=machine.provider_id)
    node.provider_id = machine.provider_id
    return machine


# --- injection -----------------------------------------------------------------------------------


def test_only_admins_inject_and_only_into_a_running_machine(actors, node):
    with pytest.raises(ConflictError, match="no running machine"):
        gpu_fault_inject(user=actors["admin"], node=node, gpu=0, xid=79)
    with_machine(node)
    with pytest.raises(PermissionDenied):
        gpu_fault_inject(user=actors["lead"], node=node, gpu=0, xid=79)
    with pytest.raises(ValidationError) as bad_gpu:
        gpu_fault_inject(user=actors["admin"], node=node, gpu=8, xid=79)
    assert bad_gpu.value.errors[0].field == "gpu"
    fault = gpu_fault_inject(user=actors["admin"], node=node, gpu=7, xid=79)
    assert (fault.gpu_index, fault.xid, fault.delivered_at) == (7, 79, None)
    event = node.pool.events.get(reason="GpuFaultInjected")
    assert event.actor == actors["admin"] and "Xid 79" in event.message


def test_the_command_injects_a_fault(actors, node, capsys):
    with_machine(node)
    call_command("inject_fault", node.name, "--gpu", "2", "--xid", "48")
    assert SimGpuFault.objects.get().gpu_index == 2 and "Xid 48" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no node named"):
        call_command("inject_fault", "nope", "--xid", "48")
    with pytest.raises(CommandError, match="GPU index"):
        call_command("inject_fault", node.name, "--gpu", "9", "--xid", "48")


# --- the agent endpoint ---------------------------------------------------------------------------


def test_an_agent_fetches_its_own_machines_faults_exactly_once(actors, agent, node, make_node):
    other = make_node("train-pool-a-m-1")
    with_machine(node)
    with_machine(other)
    gpu_fault_inject(user=actors["admin"], node=node, gpu=1, xid=48)
    gpu_fault_inject(user=actors["admin"], node=other, gpu=0, xid=79)
    client = agent()
    first = client.post(FAULTS, format="json")
    assert first.status_code == 200
    assert [(f["gpu"], f["xid"]) for f in first.json()["faults"]] == [(1, 48)]  # not the other node's
    assert client.post(FAULTS, format="json").json() == {"faults": []}  # handed out once
    assert SimGpuFault.objects.get(xid=79).delivered_at is None


def test_the_endpoint_needs_a_node_credential_and_the_simulated_cloud(agent, settings):
    assert APIClient().post(FAULTS, format="json").status_code == 401
    client = agent()
    assert client.post(FAULTS, format="json").json() == {"faults": []}  # no machine: no hardware faults
    assert client.get(FAULTS).status_code == 405
    settings.EBCLOUD_CLOUD_PROVIDER = "aliyun"
    assert client.post(FAULTS, format="json").status_code == 404


def test_the_fault_rate_draws_the_same_faults_per_gpu_hour(node, settings):
    """EBCLOUD_SIM_XID_RATE: per GPU-hour, from a hash (the default 0 draws nothing)."""
    now = timezone.now()
    machine = with_machine(node, created=now - timedelta(hours=3))
    cloud = SimulatedCloud()
    assert cloud.gpu_faults_take(provider_id=machine.provider_id, now=now) == []
    settings.EBCLOUD_SIM_XID_RATE = 1.0
    drawn = {(f.gpu_index, f.xid, f.created_at) for f in cloud.gpu_faults_take(provider_id=machine.provider_id, now=now)}
    assert 8 <= len(drawn) <= 16 and all(xid in SIM_XID_MIX for _, xid, _ in drawn)  # this hour and the last
    assert all(at <= now for *_, at in drawn)
    assert cloud.gpu_faults_take(provider_id=machine.provider_id, now=now) == []  # drawn once, fetched once
    SimGpuFault.objects.all().delete()
    again = {(f.gpu_index, f.xid, f.created_at) for f in cloud.gpu_faults_take(provider_id=machine.provider_id, now=now)}
    assert again == drawn
    settings.EBCLOUD_SIM_XID_SEED = 7
    SimGpuFault.objects.all().delete()
    other_seed = {(f.gpu_index, f.xid, f.created_at) for f in cloud.gpu_faults_take(provider_id=machine.provider_id, now=now)}
    assert other_seed != drawn


def test_the_feed_turns_fetched_faults_into_xids_and_stops_on_a_404():
    calls = []

    def answer(request):
        calls.append(request.headers["Authorization"])
        if len(calls) == 1:
            return httpx.Response(200, json={"faults": [{"id": 3, "gpu": 2, "xid": 48, "at": "2026-11-30T06:00:00+00:00"}]})
        return httpx.Response(404, json={"errors": [{"field": "", "message": "not found"}]})

    feed = ControlPlaneFaults(server="http://cp", credential=lambda: "ebca_x", http=httpx.Client(transport=httpx.MockTransport(answer)))
    source = SimulatedSource(gpus=4, fault_feed=feed)
    source.sample()
    assert source.xids() == [{"gpu": 2, "xid": 48, "at": "2026-11-30T06:00:00+00:00"}]
    assert source.xids() == [] and not feed.enabled
    assert source.xids() == [] and calls == ["Bearer ebca_x", "Bearer ebca_x"]  # no third request
    silent = ControlPlaneFaults(server="http://cp", credential=lambda: None, http=None)
    assert silent() == []  # not joined yet: nothing to ask


# --- end to end, in-process -------------------------------------------------------------------------


def agent_for(node: Node, admin, tmp_path, wsgi) -> tuple[Agent, SimulatedSource]:
    """The node agent program, joined with a real join token, over HTTP to this process."""
    _, token = services.join_token_create(user=admin, node=node)
    source = SimulatedSource(gpus=node.gpu_count, seed=1)
    agent = Agent(server="http://testserver", source=source, buffer=DiskBuffer(tmp_path / "reports.sqlite3"),
                  credential_file=tmp_path / "credential.json", node=node.name, join_token=token)  # fmt: skip
    agent.http.close()
    agent.http = wsgi
    source.fault_feed = ControlPlaneFaults.of(agent)  # as `python -m monitoring.agent --simulate` wires it
    return agent, source


def report_once(agent: Agent) -> None:
    agent.collect()
    agent.flush()


def test_an_injected_xid_79_reaches_the_ladder_and_the_cloud_replaces_the_node(actors, tmp_path, wsgi):
    start = timezone.now()
    pool = approved_pool(actors, make_document(), now=start)
    ready = run_until(pool, start)
    first_nodes = set(pool.nodes.values_list("name", flat=True))
    node = pool.nodes.filter(phase="Ready").order_by("name").first()
    agent, _ = agent_for(node, actors["admin"], tmp_path, wsgi)
    report_once(agent)  # joined and reporting, no fault yet
    assert not GpuErrorEvent.objects.exists()

    gpu_fault_inject(user=actors["admin"], node=node, gpu=3, xid=79)
    report_once(agent)  # the agent fetches the fault and reports it as an Xid
    report_once(agent)
    xid = GpuErrorEvent.objects.get(node=node)  # exactly once
    assert (xid.xid, xid.gpu_index, xid.kind, xid.action) == (79, 3, "fatal", "replace")

    now = max(ready, timezone.now()) + timedelta(minutes=1)
    assert pool_repair(pool_id=pool.pk, now=now) == 1
    assert "released and replaced" in pool.events.get(node=node, reason="RepairStarted").message
    node.refresh_from_db()
    assert (node.phase, node.release_reason) == ("Terminated", "Repair")
    assert SimMachine.objects.get(provider_id=node.provider_id).status == "Released"  # the provider's action

    for _ in range(240):  # the lifecycle orders the successor into the same lease slot
        now += timedelta(seconds=15)
        pool_reconcile(pool_id=pool.pk, now=now)
        live = list(Node.objects.filter(pool=pool).exclude(phase="Terminated"))
        if len(live) == 2 and all(n.phase == "Ready" for n in live):
            break
    else:
        raise AssertionError(f"no replacement became Ready: {[(n.name, n.phase) for n in live]}")
    successor = [n for n in live if n.name not in first_nodes]
    assert len(successor) == 1 and pool.events.filter(reason="NodeReady", node=successor[0]).exists()
    agent.close()


def test_an_injected_xid_48_waits_for_approval_then_the_agent_resets_the_gpu(actors, tmp_path, wsgi, client):
    start = timezone.now()
    pool = approved_pool(actors, make_document(autoRepairPolicy={"requireApproval": True}), now=start)
    ready = run_until(pool, start)
    node = pool.nodes.filter(phase="Ready").order_by("name").first()
    agent, source = agent_for(node, actors["admin"], tmp_path, wsgi)
    report_once(agent)
    gpu_fault_inject(user=actors["admin"], node=node, gpu=5, xid=48)
    report_once(agent)
    fault_at = GpuErrorEvent.objects.get(node=node).at
    # The report that carries the Xid 48 counts its double-bit ECC error on GPU 5 (issue 21).
    assert [g["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] for g in last_gpus(node)] == [0, 0, 0, 0, 0, 1, 0, 0]

    now = max(ready, fault_at) + timedelta(minutes=11)  # a reset-class fault must persist 10 minutes
    assert pool_repair(pool_id=pool.pk, now=now) == 0
    request = RepairApproval.objects.get(node=node, status="Pending")
    page = reverse("pools:node-detail", args=[pool.name, node.name])
    client.force_login(actors["lead"])
    assert b"Repair pending approval" in client.get(page).content  # the lead sees it waiting
    client.force_login(actors["admin"])
    assert client.post(page, {"action": "approve", "approval": request.pk}).status_code == 302

    assert pool_repair(pool_id=pool.pk, now=now + timedelta(minutes=1)) == 1
    node.refresh_from_db()
    assert node.phase == "Repairing" and pool.events.filter(node=node, reason="RepairStarted").exists()
    report_once(agent)  # the reset goes out in the report response and runs on the node
    assert source.executed[0]["action"] == "reset_gpu" and source.executed[0]["gpu"] == 5
    report_once(agent)  # its acknowledgement goes back with the next batch
    assert AgentCommand.objects.get(node=node).status == "Succeeded"
    pool_repair(pool_id=pool.pk, now=now + timedelta(minutes=2))
    node.refresh_from_db()
    assert (node.phase, node.unschedulable) == ("Ready", False)
    assert pool.events.filter(node=node, reason="RepairSucceeded").exists()
    assert all(g["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0 for g in last_gpus(node))  # the reset cleared the volatile count
    agent.close()


def last_gpus(node: Node) -> list[dict]:
    return NodeReport.objects.filter(node=node).order_by("-seq").first().gpus


def test_the_simulated_gpus_count_an_ecc_error_for_each_uncorrectable_ecc_xid():
    """Xid 48, 94, 95 and 140 are uncorrectable ECC errors in NVIDIA's catalog; 13 and 79 are not.
    A reset of the GPU or a reboot clears the volatile counter."""
    source = SimulatedSource(gpus=3, faults={1: [(0, 48), (0, 95), (1, 13), (2, 79)], 3: [(1, 140)]})
    dbe = lambda: [g["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] for g in source.sample()]  # noqa: E731
    assert dbe() == [2, 0, 0] and len(source.xids()) == 4
    source.execute({"action": "reset_gpu", "gpu": 0})
    assert dbe() == [0, 0, 0]
    assert dbe() == [0, 1, 0]
    source.execute({"action": "reboot"})
    assert dbe() == [0, 0, 0]
