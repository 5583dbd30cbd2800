"""The report ingest's hot path (issue 6 §8: 10,000 nodes at one report per 15 s on two cores).

ReportsView answers a well-formed report without DRF's request/response machinery, the hot
statements are prepared on PostgreSQL, and the authenticated credential's node is built from
the authentication row. These tests pin that the shortcuts change no answer: the same batches
give the same responses and rows as through DRF, every error is still DRF's, and the objects
the service gets behave like ORM-loaded ones.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from monitoring import ingest_sql, services
from monitoring.api.views import ReportsView
from monitoring.models import NodeAgentState, NodeReport
from monitoring.report_parse import batch_parse
from pools.core.errors import ValidationError
from tests.monitoring.conftest import joined, report

REPORTS = "/api/agent/v1/reports/"
DRF_POST = ReportsView.post
# DRF's JSONParser reads this charset too; the fast path takes UTF-8 only, so it hands such a
# request to DRF: the same request body through the other path.
VIA_DRF = "application/json; charset=iso-8859-1"


def _post(client: APIClient, body: dict, content_type: str = "application/json"):
    return client.post(REPORTS, json.dumps(body), content_type=content_type)


def _stored(node) -> list[tuple]:
    return list(NodeReport.objects.filter(node=node).order_by("seq").values_list("seq", "driver_version", "gpus"))


def test_the_fast_path_and_drf_give_the_same_answers_and_rows(agent, node, make_node, monkeypatch):
    """One node's batches go through the fast path, another's the same batches through DRF:
    replays, duplicates within a batch, out-of-order reports, a gap closed by oldestSeq and a
    driver change give identical responses, stored reports and agent state."""
    drf_posts = []
    monkeypatch.setattr(ReportsView, "post", lambda view, request: drf_posts.append(1) or DRF_POST(view, request))
    other = make_node("train-pool-a-m-1")
    fast, slow = agent(), agent(other)
    batches = [
        {"reports": [report(1), report(2)]},
        {"reports": [report(1), report(2), report(3)]},  # replay
        {"reports": [report(5), report(5), report(6)]},  # duplicate, gap at 4
        {"reports": [report(4)]},
        {"reports": [report(9, driver="470.57.02")], "oldestSeq": 9},  # 7-8 dropped, driver change
    ]
    for body in batches:
        a, b = _post(fast, body), _post(slow, body, VIA_DRF)
        assert (a.status_code, a.json()) == (b.status_code, b.json()) and a.status_code == 200
    assert len(drf_posts) == len(batches)  # the other node's only: the fast path took the first's
    assert _stored(node) == _stored(other)
    columns = ["acked_seq", "max_seq", "driver_version", "cuda_version", "fb_used_mib", "fb_total_mib", "gpu_util_avg"]
    states = NodeAgentState.objects.filter(node__in=[node, other]).order_by("node__name").values_list(*columns)
    assert states[0] == states[1]


def test_a_refused_batch_is_answered_once_in_the_api_error_shape(agent, node, make_node):
    """A body naming another node is refused after the event is recorded: the fast path
    answers the 403 itself (handing it to DRF would record the refusal twice)."""
    make_node("train-pool-a-m-1")
    response = _post(agent(), {"node": "train-pool-a-m-1", "reports": [report(1)]})
    assert response.status_code == 403
    assert response.json() == {"errors": [{"field": "", "message": "this credential belongs to node train-pool-a-m-0, not 'train-pool-a-m-1'"}]}
    assert node.events.filter(reason="AgentNodeMismatch").count() == 1


def test_an_invalid_batch_names_its_fields_as_before(agent, node):
    response = _post(agent(), {"reports": [{"seq": 0, "at": "yesterday", "gpus": [{"index": 0, "DCGM_FI_DEV_GPU_UTIL": True}]}]})
    assert response.status_code == 400
    assert {e["field"] for e in response.json()["errors"]} == {"reports[0].seq", "reports[0].at", "reports[0].gpus[0].DCGM_FI_DEV_GPU_UTIL"}


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        ('{"reports": [', "application/json", 400, "JSON parse error"),
        ('{"reports": [{"seq": 1, "at": NaN}]}', "application/json", 400, "Out of range float values"),
        ("reports=1", "text/plain", 415, "Unsupported media type"),
    ],
)
def test_bodies_the_fast_path_cannot_read_get_drfs_answer(agent, node, body, content_type, status, message):
    response = agent().post(REPORTS, body, content_type=content_type)
    assert response.status_code == status and message in response.json()["errors"][0]["message"]
    assert not NodeReport.objects.exists()


@pytest.mark.parametrize("header", ["Bearer", "Bearer  ebca_x y", "Token ebca_x", "Bearer ebca_ünicode", "Bearer ebca_not-a-credential"])
def test_a_missing_or_bad_credential_gets_drfs_401_with_the_challenge(node, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = _post(client, {"reports": [report(1)]})
    assert response.status_code == 401 and response["WWW-Authenticate"] == 'Bearer realm="agent"'
    assert "errors" in response.json() and not NodeReport.objects.exists()


def test_the_authenticated_node_loads_what_the_row_did_not_carry(node, actors, django_assert_num_queries):
    """The credential's node is built from the authentication row (id, name, phase, pool);
    its other fields load on access as deferred fields do, and its agent state needs no query."""
    secret = joined(node, actors["admin"])
    with django_assert_num_queries(1):
        credential = services.credential_authenticate(secret)
        assert (credential.node.name, credential.node.phase, credential.node.pool_id) == (node.name, "Ready", node.pool_id)
        assert credential.node.agent_state.acked_seq == 0 and credential.node.agent_state.node is credential.node
    with django_assert_num_queries(1):
        assert credential.node.gpu_count == node.gpu_count
    assert credential.node.pool == node.pool and not credential.node._state.adding


@pytest.mark.django_db(transaction=True)
def test_the_hot_statements_are_prepared_on_postgresql_and_logged_with_their_values(agent, node):
    """Prepared once per connection, so PostgreSQL plans the authentication join once (it took
    longer to plan than to run); the query log still shows each statement with its values."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    client = agent()
    _post(client, {"reports": [report(1)]})
    with CaptureQueriesContext(connection) as captured:
        _post(client, {"reports": [report(2)]})
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SELECT", "WITH"]
    assert "ON CONFLICT (node_id, seq)" in captured.captured_queries[1]["sql"] and ", 2, " in captured.captured_queries[1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("FROM monitoring_agentcredential" in s for s in prepared) and any(s.startswith("WITH w0 AS (INSERT") for s in prepared)


def test_prepared_statements_can_be_turned_off(agent, node, settings, monkeypatch):
    """For a transaction-pooling PgBouncer that does not track prepared statements: with the
    setting off the ingest uses Django's own cursor and answers the same."""
    settings.EBCLOUD_AGENT_PREPARED_STATEMENTS = False
    monkeypatch.setattr(ingest_sql, "_PreparedCursor", None)  # calling it would fail the request
    body = _post(agent(), {"reports": [report(1), report(2)]}).json()
    assert (body["ackedSeq"], body["stored"]) == (2, 2) and [s for s, *_ in _stored(node)] == [1, 2]


def test_gpus_skip_the_field_by_field_check_only_when_every_field_is_a_known_number():
    """The parser's shortcut for sane GPUs changes nothing: booleans, strings, unknown fields
    and bad indexes still fail with their paths, text fields are still normalised, and a GPU
    that passes comes back equal to what was sent."""
    sane = {"index": 3, "DCGM_FI_DEV_FB_USED": 100, "DCGM_FI_DEV_POWER_USAGE": 250.5}
    for _ in range(2):  # the second time its fields are known
        assert batch_parse({"reports": [{"seq": 1, "at": 0, "gpus": [sane]}]}, max_batch=10).reports[0].gpus == [sane]
    bad = [
        ({**sane, "DCGM_FI_DEV_FB_USED": True}, "reports[0].gpus[0].DCGM_FI_DEV_FB_USED"),
        ({**sane, "DCGM_FI_DEV_FB_USED": "100"}, "reports[0].gpus[0].DCGM_FI_DEV_FB_USED"),
        ({**sane, "fan": 1}, "reports[0].gpus[0].fan"),
        ({**sane, "index": -1}, "reports[0].gpus[0].index"),
        ({**sane, "index": True}, "reports[0].gpus[0].index"),
    ]
    for gpu, field in bad:
        with pytest.raises(ValidationError) as caught:
            batch_parse({"reports": [{"seq": 1, "at": 0, "gpus": [gpu]}]}, max_batch=10)
        assert [e.field for e in caught.value.errors] == [field]
    named = batch_parse({"reports": [{"seq": 1, "at": 0, "gpus": [{**sane, "name": None, "uuid": "GPU-1"}]}]}, max_batch=10)
    assert named.reports[0].gpus == [{**sane, "name": "", "uuid": "GPU-1"}]
