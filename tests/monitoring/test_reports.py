"""Reports (seed D1, T3; issue 6 §2): heartbeats and batched metrics with sequence numbers,
idempotent replays, out-of-order within a bound, Xids and driver/CUDA conditions."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from monitoring import ingest_sql, services
from monitoring.models import AgentCommand, GpuErrorEvent, NodeAgentState, NodeReport
from monitoring.report_parse import batch_parse, gpu_summary
from pools.models import Node
from tests.monitoring.conftest import joined, report

REPORTS = "/api/agent/v1/reports/"


def post(client, reports, **extra):
    response = client.post(REPORTS, {"reports": reports, **extra}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def seqs(node):
    return list(NodeReport.objects.filter(node=node).values_list("seq", flat=True))


def test_a_batch_is_stored_and_acknowledged_up_to_its_highest_contiguous_seq(agent, node):
    body = post(agent(), [report(1), report(2), report(3)])
    assert body == {"ackedSeq": 3, "stored": 3, "duplicates": 0, "rejected": [], "commands": []}
    assert seqs(node) == [1, 2, 3]
    stored = NodeReport.objects.get(node=node, seq=2)
    assert stored.driver_version == "535.104.05" and stored.gpus[1]["DCGM_FI_DEV_FB_TOTAL"] == 81920


def test_a_report_updates_the_heartbeat_and_the_latest_gpu_summary(agent, node):
    assert node.last_heartbeat is None
    post(agent(), [report(1, used=20480)])
    node.refresh_from_db()
    assert node.last_heartbeat is not None
    state = NodeAgentState.objects.get(node=node)
    assert (state.fb_used_mib, state.fb_total_mib, state.gpu_util_avg) == (40960, 163840, 75.0)


def test_the_memory_summary_counts_only_gpus_whose_total_is_known():
    """A GPU's total is FB_TOTAL, else used + free; one with neither counts in neither, so the
    node's used memory never passes its total (FB_USED alone stored 1 MiB used of 0: fuzzing)."""
    gpus = [{"index": 0, "DCGM_FI_DEV_FB_USED": 1}, {"index": 1, "DCGM_FI_DEV_FB_USED": 100, "DCGM_FI_DEV_FB_FREE": 300},
            {"index": 2, "DCGM_FI_DEV_FB_USED": 10, "DCGM_FI_DEV_FB_TOTAL": 80}]
    assert gpu_summary(gpus)[:2] == (110, 480)
    assert gpu_summary(gpus[:1])[:2] == (0, 0)


def test_a_replayed_batch_is_acknowledged_but_not_stored_twice(agent, node):
    client = agent()
    post(client, [report(1), report(2)])
    body = post(client, [report(1), report(2), report(3)])
    assert (body["ackedSeq"], body["stored"], body["duplicates"]) == (3, 1, 2)
    assert seqs(node) == [1, 2, 3]


def test_the_same_seq_twice_in_one_batch_is_stored_once(agent, node):
    body = post(agent(), [report(1), report(1)])
    assert (body["stored"], body["duplicates"]) == (1, 1) and seqs(node) == [1]


def test_out_of_order_reports_within_the_window_are_kept_and_the_ack_waits_for_the_gap(agent, node):
    client = agent()
    assert post(client, [report(1), report(3), report(4)])["ackedSeq"] == 1
    assert post(client, [report(2)])["ackedSeq"] == 4
    assert seqs(node) == [1, 2, 3, 4]


def test_reports_beyond_the_window_are_rejected(agent, node, settings):
    settings.EBCLOUD_AGENT_SEQ_WINDOW = 10
    body = post(agent(), [report(1), report(10), report(11)])  # acked 0: up to 10 is within
    assert body["rejected"] == [11] and body["ackedSeq"] == 1 and seqs(node) == [1, 10]


def test_the_agents_oldest_buffered_seq_closes_a_gap_it_will_never_fill(agent, node):
    client = agent()
    post(client, [report(1)])
    body = post(client, [report(7), report(8)], oldestSeq=7)  # 2..6 fell off a full buffer
    assert body["ackedSeq"] == 8


def test_an_older_late_batch_does_not_overwrite_newer_metrics(agent, node):
    client = agent()
    post(client, [report(1), report(3, used=100)])
    post(client, [report(2, used=999)])
    state = NodeAgentState.objects.get(node=node)
    assert state.max_seq == 3 and state.fb_used_mib == 200 and state.acked_seq == 3


def test_invalid_reports_name_their_field(agent, node):
    bad = report(0)
    bad["gpus"][0]["DCGM_FI_DEV_FB_USED"] = "lots"
    bad["gpus"][1]["temperature"] = 50
    response = agent().post(REPORTS, {"reports": [bad]}, format="json")
    assert response.status_code == 400
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"reports[0].seq", "reports[0].gpus[0].DCGM_FI_DEV_FB_USED", "reports[0].gpus[1].temperature"}
    assert agent().post(REPORTS, {"reports": []}, format="json").json()["errors"][0]["field"] == "reports"


def test_ingest_uses_a_fixed_number_of_queries_whatever_the_batch_size(agent, node):
    client = agent()
    post(client, [report(1)])
    with CaptureQueriesContext(connection) as small:
        post(client, [report(2)])
    with CaptureQueriesContext(connection) as large:
        post(client, [report(seq) for seq in range(3, 103)])
    assert len(small) == len(large) <= 8, [q["sql"] for q in large.captured_queries]


def test_an_application_xid_is_stored_with_its_class_and_gives_a_normal_event(agent, node):
    post(agent(), [report(1, xids=[(3, 13)])])
    error = GpuErrorEvent.objects.get(node=node)
    assert (error.xid, error.gpu_index, error.kind, error.action) == (13, 3, "application", "none")
    event = node.events.get(reason="XidError")
    assert event.type == "Normal" and "application must restart" in event.message


@pytest.mark.parametrize(("xid", "kind", "action"), [(48, "reset", "reset_gpu"), (79, "fatal", "replace"), (999, "unknown", "none")])
def test_node_affecting_and_unknown_xids_give_a_warning(agent, node, xid, kind, action):
    post(agent(), [report(1, xids=[(0, xid)])])
    error = GpuErrorEvent.objects.get(node=node)
    assert (error.kind, error.action) == (kind, action)
    assert node.events.get(reason="XidError").type == "Warning"


def test_a_replayed_xid_is_not_stored_twice(agent, node):
    client = agent()
    post(client, [report(1, xids=[(0, 79)])])
    post(client, [report(1, xids=[(0, 79)])])
    assert GpuErrorEvent.objects.filter(node=node).count() == 1


def delivered_twice(node, admin, reports):
    """The same batch from two requests (the agent's retry of a batch whose answer was lost)
    that both authenticated, reading the node's state, before either stored it."""
    raw = joined(node, admin)
    both = [services.credential_authenticate(raw) for _ in range(2)]
    for credential in both:
        services.reports_ingest(credential=credential, batch=batch_parse({"reports": reports}, max_batch=10))


def test_an_xid_delivered_twice_at_once_is_one_event_of_count_one(node, actors):
    delivered_twice(node, actors["admin"], [report(1, xids=[(0, 48), (1, 79)])])
    assert GpuErrorEvent.objects.filter(node=node).count() == 2
    assert sorted(node.events.filter(reason="XidError").values_list("count", flat=True)) == [1, 1]


def test_a_driver_mismatch_delivered_twice_at_once_is_one_warning_of_count_one(node, actors):
    delivered_twice(node, actors["admin"], [report(1, driver="525.60.13", cuda="12.2")])
    assert list(node.events.filter(reason="CudaDriverMismatch").values_list("count", flat=True)) == [1]
    assert NodeAgentState.objects.get(node=node).conditions[0]["status"] == "True"
    delivered_twice(node, actors["admin"], [report(2, driver="550.54.14", cuda="12.2")])
    assert list(node.events.filter(reason="CudaDriverMismatchResolved").values_list("count", flat=True)) == [1]
    assert NodeAgentState.objects.get(node=node).conditions[0]["status"] == "False"


def test_a_driver_too_old_for_the_workloads_cuda_becomes_a_node_condition_and_a_warning(agent, node):
    """T3: driver vs CUDA version mismatch (intermittent crashes)."""
    client = agent()
    post(client, [report(1, driver="525.60.13", cuda="12.2")])
    condition = NodeAgentState.objects.get(node=node).conditions[0]
    assert condition["type"] == "CudaDriverMismatch" and condition["status"] == "True"
    assert condition["reason"] == "DriverBelowToolkitMinimum"
    assert "needs driver >= 535.54.03" in condition["message"]
    assert node.events.get(reason="CudaDriverMismatch").type == "Warning"
    post(client, [report(2, driver="525.60.13", cuda="12.2")])  # unchanged: no second event
    assert node.events.get(reason="CudaDriverMismatch").count == 1
    post(client, [report(3, driver="550.54.14", cuda="12.2")])
    state = NodeAgentState.objects.get(node=node)
    assert state.conditions[0]["status"] == "False"
    assert node.events.filter(reason="CudaDriverMismatchResolved").exists()


def test_a_matching_driver_leaves_the_condition_false_without_a_warning(agent, node):
    post(agent(), [report(1, driver="535.104.05", cuda="12.2")])
    assert NodeAgentState.objects.get(node=node).conditions[0]["status"] == "False"
    assert not node.events.filter(type="Warning").exists()


def test_the_heartbeat_never_moves_backwards(agent, node):
    from datetime import timedelta

    from django.utils import timezone

    later = timezone.now() + timedelta(hours=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat=later)
    post(agent(), [report(1)])
    node.refresh_from_db()
    assert node.last_heartbeat == later


def test_commands_go_out_in_the_response_until_the_agent_acknowledges_them(agent, node):
    client = agent()
    command = services.agent_command_enqueue(node=node, action="reset_gpu", gpu_index=2, reason="Xid 48")
    first = post(client, [report(1)])["commands"]
    assert first == [{"id": command.pk, "action": "reset_gpu", "gpu": 2, "reason": "Xid 48"}]
    assert post(client, [report(2)])["commands"] == first  # at least once, until acknowledged
    body = post(client, [report(3)], acks=[{"id": command.pk, "ok": True, "message": "nvidia-smi -r done"}])
    assert body["commands"] == []
    command.refresh_from_db()
    assert command.status == AgentCommand.Status.SUCCEEDED and command.delivered_at and command.finished_at
    assert node.events.filter(reason="AgentCommandSucceeded").exists()


def test_an_agent_cannot_acknowledge_another_nodes_command(agent, node, make_node):
    other = make_node("train-pool-a-m-1")
    command = services.agent_command_enqueue(node=other, action="reboot")
    post(agent(), [report(1)], acks=[{"id": command.pk, "ok": True}])
    command.refresh_from_db()
    assert command.status == "Pending"


@pytest.mark.django_db(transaction=True)
def test_a_steady_state_report_costs_one_statement_on_postgresql(agent, node):
    """The hot path (monitoring/ingest_sql.py): on PostgreSQL the authentication's statement
    also stores the steady state's next report (data-modifying CTEs); elsewhere authenticate,
    then three statements in a transaction."""
    client = agent()
    post(client, [report(1)])
    with CaptureQueriesContext(connection) as captured:
        post(client, [report(2)])
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"))]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 4), statements
    assert seqs(node) == [1, 2]


# --- hostile telemetry: refused whole, recorded, never half-stored ------------------------------


def broken(seq: int, *, gpu: int = 1, field: str = "DCGM_FI_DEV_FB_USED", value=-5000) -> dict:
    bad = report(seq)
    bad["gpus"][gpu][field] = value
    return bad


def test_a_refused_batch_stores_nothing_and_is_a_warning_event_on_the_node_that_aggregates(agent, node):
    client = agent()
    post(client, [report(1)])
    before = NodeAgentState.objects.filter(node=node).values().get()
    response = client.post(REPORTS, {"reports": [report(2), broken(3)]}, format="json")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["reports[1].gpus[1].DCGM_FI_DEV_FB_USED"]
    assert seqs(node) == [1] and NodeAgentState.objects.filter(node=node).values().get() == before
    event = node.events.get(reason="ReportRejected")
    assert event.type == "Warning" and event.count == 1
    assert "gpus[1].DCGM_FI_DEV_FB_USED: must be from 0 to" in event.message and "reports[" not in event.message
    # The same fault again, at another place in another batch: the same event, counted.
    assert client.post(REPORTS, {"reports": [broken(4)]}, format="json").status_code == 400
    event.refresh_from_db()
    assert event.count == 2 and node.events.filter(reason="ReportRejected").count() == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("DCGM_FI_DEV_FB_USED", 10**30), ("DCGM_FI_DEV_FB_USED", 1e308), ("DCGM_FI_DEV_GPU_UTIL", 1e308), ("DCGM_FI_DEV_FB_USED", 90000)],
    ids=["beyond-int64", "float-1e308", "util-1e308", "used-above-total"],
)
def test_values_that_were_stored_or_a_500_are_a_400_and_reach_neither_metrics_nor_the_node_page(agent, node, field, value, client, actors):
    response = agent().post(REPORTS, {"reports": [broken(1, field=field, value=value)]}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == f"reports[0].gpus[1].{field}"
    assert not NodeReport.objects.exists()
    client.force_login(actors["admin"])
    page = client.get(reverse("pools:node-detail", args=[node.pool.name, node.name]))
    assert page.status_code == 200 and str(value).encode() not in page.content


def test_1e309_in_the_body_is_a_400_not_infinity(agent, node):
    """JSON's 1e309 parses as an infinite float; the fast path and DRF's parser both take it."""
    body = '{"reports": [{"seq": 1, "at": 1764547200, "gpus": [{"index": 0, "DCGM_FI_DEV_POWER_USAGE": 1e309}]}]}'
    response = agent().generic("POST", REPORTS, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "reports[0].gpus[0].DCGM_FI_DEV_POWER_USAGE"
    assert not NodeReport.objects.exists()


def test_a_report_the_server_failed_to_store_is_never_acknowledged(agent, node, monkeypatch):
    """Acknowledgement means stored: a failure between the parse and the commit (here the
    last statement of the write fails, after the insert) stores nothing, and a later batch's
    ackedSeq does not cover the lost report; the agent's resend stores it."""
    client = agent()
    client.raise_request_exception = False
    post(client, [report(1)])
    real, failures = ingest_sql._heartbeat_sql, []

    def fails_once(ops, **kwargs):
        if not failures:
            failures.append(kwargs)
            return "UPDATE monitoring_no_such_table SET x = 1", []
        return real(ops, **kwargs)

    monkeypatch.setattr(ingest_sql, "_heartbeat_sql", fails_once)
    assert client.post(REPORTS, {"reports": [report(2)], "oldestSeq": 2}, format="json").status_code == 500
    assert failures and seqs(node) == [1]
    later = post(client, [report(3)], oldestSeq=2)  # the agent still holds 2, so it says so
    assert later["ackedSeq"] == 1 and seqs(node) == [1, 3]
    assert post(client, [report(2), report(3)], oldestSeq=2)["ackedSeq"] == 3
    assert seqs(node) == [1, 2, 3]


def refused(client, reports, **extra) -> list[tuple[str, str]]:
    response = client.post(REPORTS, {"reports": reports, **extra}, format="json")
    assert response.status_code == 400, response.content
    return [(e["field"], e["message"]) for e in response.json()["errors"]]


def test_a_gpu_the_node_does_not_have_is_refused_with_its_path_and_stores_nothing(agent, node):
    """Found by a hostile-input probe: an Xid on GPU 32767 of an 8-GPU node was stored and started
    a repair of a GPU that is not there (999 on a 4-GPU node: a replacement), and a GPU listed
    twice counted twice in the pool's GPU memory. The steady state's next report (PostgreSQL's
    one-statement path) is checked as any other."""
    client = agent()
    post(client, [report(1)])
    beyond = report(2)
    beyond["gpus"][1]["index"] = 8
    assert refused(client, [beyond]) == [("reports[0].gpus[1].index", "must be from 0 to 7: the node has 8 GPUs")]
    twice = report(2)
    twice["gpus"][1]["index"] = 0
    assert refused(client, [twice]) == [("reports[0].gpus[1].index", "GPU 0 is listed twice in this report")]
    assert refused(client, [report(2), report(3, xids=[(32767, 48)])]) == [("reports[1].xids[0].gpu", "must be from 0 to 7: the node has 8 GPUs")]
    assert seqs(node) == [1] and not GpuErrorEvent.objects.exists() and node.events.filter(reason="ReportRejected").exists()
    assert not AgentCommand.objects.exists() and Node.objects.get(pk=node.pk).phase == "Ready"
    assert post(client, [report(2, gpus=8, xids=[(7, 48)])])["ackedSeq"] == 2  # its last GPU is one of its own


def test_an_oldest_seq_above_the_batch_is_refused_instead_of_reading_every_later_report_as_a_replay(agent, node):
    client = agent()
    assert refused(client, [report(1100)], oldestSeq=2**63 - 1) == [
        ("oldestSeq", "must not be above the batch's lowest seq (1100): it is the oldest report the agent still holds")
    ]
    assert post(client, [report(1101)], oldestSeq=1101)["ackedSeq"] == 1101 and seqs(node) == [1101]
