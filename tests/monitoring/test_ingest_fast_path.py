"""The report ingest's hot path (issue 6 §8: 10,000 nodes at one report per 15 s on two cores).

ReportsView answers a well-formed report without DRF's request/response machinery, the hot
statements are prepared on PostgreSQL, and the authenticated credential's node is built from
the authentication row. These tests pin that the shortcuts change no answer: the same batches
give the same responses and rows as through DRF, every error is still DRF's, and the objects
the service gets behave like ORM-loaded ones.
"""

from __future__ import annotations

import io
import json
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from config import wsgi
from config.lean_handler import AgentReportsHandler
from monitoring import ingest_sql, services
from monitoring.api.views import ReportsView
from monitoring.models import NodeAgentState, NodeReport
from monitoring.report_parse import batch_parse
from pools.core.errors import ConflictError, ValidationError
from tests.monitoring.conftest import REQUEST_SIGNALS, joined, report
from tests.race import concurrently

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
    """The credential's node is built from the authentication row (id, name, phase, pool, GPU
    count, which every batch's GPU indices are checked against); its other fields load on access
    as deferred fields do, and its agent state needs no query."""
    secret = joined(node, actors["admin"])
    with django_assert_num_queries(1):
        credential = services.credential_authenticate(secret)
        assert (credential.node.name, credential.node.phase, credential.node.pool_id, credential.node.gpu_count) == (node.name, "Ready", node.pool_id, node.gpu_count)
        assert credential.node.agent_state.acked_seq == 0 and credential.node.agent_state.node is credential.node
    with django_assert_num_queries(1):
        assert credential.node.zone_id == node.zone_id
    assert credential.node.pool == node.pool and not credential.node._state.adding


@pytest.mark.django_db(transaction=True)
def test_the_hot_statements_are_prepared_on_postgresql_and_logged_with_their_values(agent, node):
    """Prepared once per connection, so PostgreSQL plans the authentication join once (it took
    longer to plan than to run); the query log still shows each statement with its values.
    The steady state's next report is stored by the authentication's own statement (issue 23
    item 2: one round trip per report); anything else is authenticated, then written."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    client = agent()
    _post(client, {"reports": [report(1)]})
    with CaptureQueriesContext(connection) as captured:
        assert _post(client, {"reports": [report(2)]}).json()["ackedSeq"] == 2
    assert [q["sql"].split()[:2] for q in captured.captured_queries] == [["WITH", "auth"]]
    assert "ON CONFLICT (node_id, seq)" in captured.captured_queries[0]["sql"] and "2::bigint" in captured.captured_queries[0]["sql"]
    with CaptureQueriesContext(connection) as captured:  # two reports: authenticated, then written
        assert _post(client, {"reports": [report(3), report(4)]}).json()["ackedSeq"] == 4
    assert [q["sql"].split()[:2] for q in captured.captured_queries] == [["SELECT", "c.id,"], ["WITH", "w0"]]
    with CaptureQueriesContext(connection) as captured:  # one report after a gap: the first statement stores nothing
        assert _post(client, {"reports": [report(6)]}).json()["ackedSeq"] == 4
    assert [q["sql"].split()[:2] for q in captured.captured_queries] == [["WITH", "auth"], ["WITH", "w0"]]
    assert [s for s, *_ in _stored(node)] == [1, 2, 3, 4, 6]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0].strip() for row in cursor.fetchall()]
    assert any(s.startswith("SELECT c.id") for s in prepared) and any(s.startswith("WITH w0 AS (INSERT") for s in prepared)
    assert any(s.startswith("WITH auth") for s in prepared)


@pytest.mark.django_db(transaction=True)
def test_two_requests_racing_with_the_next_report_store_it_once(agent, node):
    """The one-statement path re-checks the sequence numbers under the agent state's row lock:
    of two requests with the same next report (a retry racing the original), one stores it and
    the other finds it stored, and both acknowledge it."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (SQLite serialises them)")
    client = agent()
    _post(client, {"reports": [report(1)]})
    credential = client._credentials["HTTP_AUTHORIZATION"].split()[1]

    def send():
        return services.credential_authenticate_storing_next(credential, batch_parse({"reports": [report(2)]}, max_batch=10))

    answers = concurrently(send, send)
    stored = [result for _, result in answers if result is not None]
    assert len(stored) <= 1 and [s for s, *_ in _stored(node)] == [1, 2]
    for credential_seen, result in answers:
        if result is None:  # the loser goes on by the general path and acknowledges it too
            result = services.reports_ingest(credential=credential_seen, batch=batch_parse({"reports": [report(2)]}, max_batch=10))
        assert result.acked_seq == 2
    assert NodeAgentState.objects.get(node=node).acked_seq == 2


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
        assert batch_parse({"reports": [{"seq": 1, "at": 1764547200, "gpus": [sane]}]}, max_batch=10).reports[0].gpus == [sane]
    bad = [
        ({**sane, "DCGM_FI_DEV_FB_USED": True}, "reports[0].gpus[0].DCGM_FI_DEV_FB_USED"),
        ({**sane, "DCGM_FI_DEV_FB_USED": "100"}, "reports[0].gpus[0].DCGM_FI_DEV_FB_USED"),
        ({**sane, "fan": 1}, "reports[0].gpus[0].fan"),
        ({**sane, "index": -1}, "reports[0].gpus[0].index"),
        ({**sane, "index": True}, "reports[0].gpus[0].index"),
    ]
    for gpu, field in bad:
        with pytest.raises(ValidationError) as caught:
            batch_parse({"reports": [{"seq": 1, "at": 1764547200, "gpus": [gpu]}]}, max_batch=10)
        assert [e.field for e in caught.value.errors] == [field]
    named = batch_parse({"reports": [{"seq": 1, "at": 1764547200, "gpus": [{**sane, "name": None, "uuid": "GPU-1"}]}]}, max_batch=10)
    assert named.reports[0].gpus == [{**sane, "name": "", "uuid": "GPU-1"}]


# --- The lean handler (config/lean_handler.py): the reports path without the site's middleware ---


def _call(app, body: bytes | str, *, credential: str | None = None, content_type: str = "application/json",
          path: str = REPORTS, **extra) -> tuple[str, dict, bytes, type]:
    """One request through a WSGI application, as gunicorn hands it one, in this test's
    transaction (request signals kept away from the connection, as in tests/monitoring/conftest.py):
    the status line, the headers, the body and the handler class that answered."""
    body = body.encode() if isinstance(body, str) else body
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "testserver",
        "SERVER_PORT": "80", "HTTP_HOST": "testserver", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr, "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
        **({"HTTP_AUTHORIZATION": f"Bearer {credential}"} if credential else {}), **extra,
    }  # fmt: skip
    started = []
    for signal in REQUEST_SIGNALS:
        signal.disconnect(close_old_connections)
    try:
        response = app(environ, lambda status, headers, exc_info=None: started.append((status, dict(headers))))
        try:
            content = b"".join(response)
        finally:
            response.close()
    finally:
        for signal in REQUEST_SIGNALS:
            signal.connect(close_old_connections)
    return started[0][0], started[0][1], content, response._handler_class


# Headers only the full chain adds, none of which an agent reads: the page policy, the
# clickjacking guard, and the Vary of the session and htmx layers.
FULL_ONLY = {"Content-Security-Policy", "X-Frame-Options", "Vary"}
ONE = json.dumps({"reports": [report(1)]})


def _same_answer(lean: tuple, full: tuple) -> None:
    assert lean[3] is AgentReportsHandler and full[3] is WSGIHandler
    assert lean[0] == full[0] and lean[2] == full[2]
    assert {k: v for k, v in lean[1].items() if k not in FULL_ONLY} == {k: v for k, v in full[1].items() if k not in FULL_ONLY}


def test_the_site_sends_the_reports_path_and_only_it_to_the_lean_handler(node, actors):
    secret = joined(node, actors["admin"])
    body = json.dumps({"reports": [report(1)]})
    assert _call(wsgi.application, body, credential=secret)[3] is AgentReportsHandler
    for other in ("/api/agent/v1/reports", "/api/agent/v1/reports//", "/api/agent/v1/credential/rotate/"):
        assert _call(wsgi.application, body, credential=secret, path=other)[3] is WSGIHandler


def test_the_lean_and_the_full_handler_store_the_same_and_answer_the_same(node, make_node, actors):
    """Two nodes send the same batches, one through each handler: byte-identical answers
    (replays, duplicates, gaps, a driver change) and the same stored reports."""
    other = make_node("train-pool-a-m-1")
    lean_secret, full_secret = joined(node, actors["admin"]), joined(other, actors["admin"])
    batches = [
        {"reports": [report(1), report(2)]},
        {"reports": [report(1), report(2), report(3)]},
        {"reports": [report(5), report(5), report(6)]},
        {"reports": [report(9, driver="470.57.02")], "oldestSeq": 9},
    ]
    for body in batches:
        lean = _call(wsgi.agent_reports_application, json.dumps(body), credential=lean_secret)
        full = _call(wsgi.full_application, json.dumps(body), credential=full_secret)
        _same_answer(lean, full)
        assert lean[0] == "200 OK" and int(lean[1]["Content-Length"]) == len(lean[2])
    assert _stored(node) == _stored(other)


@pytest.mark.parametrize(
    ("body", "content_type", "credential", "status"),
    [
        ('{"reports": [{"seq": 0, "at": "yesterday"}]}', "application/json", "own", "400 Bad Request"),
        ('{"reports": [', "application/json", "own", "400 Bad Request"),
        ('{"reports": [{"seq": 1, "at": NaN}]}', "application/json", "own", "400 Bad Request"),
        ('{"reports": []}', "application/json", "own", "400 Bad Request"),
        # a list field of another JSON type: `"acks": 5` was a 500 on both handlers
        ('{"reports": [{"seq": 34, "at": "2026-12-05T21:30:00Z"}], "acks": 5}', "application/json", "own", "400 Bad Request"),
        ('{"reports": [{"seq": 34, "at": "2026-12-05T21:30:00Z"}], "acks": true}', "application/json; charset=utf-8", "own", "400 Bad Request"),
        ('{"reports": [{"seq": 34, "at": "2026-12-05T21:30:00Z"}], "acks": 5}', VIA_DRF, "own", "400 Bad Request"),
        ('{"reports": [{"seq": 34, "at": "2026-12-05T21:30:00Z", "gpus": 5}]}', "application/json", "own", "400 Bad Request"),
        (ONE, "application/json", None, "401 Unauthorized"),
        (ONE, "application/json", "ebca_not-a-credential", "401 Unauthorized"),
        (json.dumps({"node": "train-pool-a-m-1", "reports": [report(1)]}), "application/json", "own", "403 Forbidden"),
        ("reports=1", "text/plain", "own", "415 Unsupported Media Type"),
    ],
)
def test_every_error_is_answered_alike_by_both_handlers(node, make_node, actors, body, content_type, credential, status):
    make_node("train-pool-a-m-1")
    secret = joined(node, actors["admin"]) if credential == "own" else credential
    lean = _call(wsgi.agent_reports_application, body, credential=secret, content_type=content_type)
    full = _call(wsgi.full_application, body, credential=secret, content_type=content_type)
    _same_answer(lean, full)
    assert lean[0] == status and json.loads(lean[2])["errors"]


def test_a_body_over_the_limit_a_bad_host_and_a_conflict_are_answered_alike(node, actors, settings, monkeypatch):
    """413 before the body is read, 400 for a Host not in ALLOWED_HOSTS, and a 409 raised by the
    service (a conflict injected there: no report path reaches one today) in the API's shape."""
    secret = joined(node, actors["admin"])
    too_big = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    cases = [
        ({"body": too_big}, "413 Request Entity Too Large"),
        ({"body": ONE, "HTTP_HOST": "evil.example"}, "400 Bad Request"),
    ]
    for kwargs, status in cases:
        answers = [_call(app, credential=secret, **kwargs) for app in (wsgi.agent_reports_application, wsgi.full_application)]
        _same_answer(*answers)
        assert answers[0][0] == status and json.loads(answers[0][2])["errors"]

    def conflict(**_):
        raise ConflictError("this node was replaced meanwhile")

    monkeypatch.setattr(services, "reports_ingest", conflict)
    answers = [_call(app, ONE, credential=secret) for app in (wsgi.agent_reports_application, wsgi.full_application)]
    _same_answer(*answers)
    assert answers[0][0] == "409 Conflict" and json.loads(answers[0][2])["errors"][0]["message"] == "this node was replaced meanwhile"


def test_the_https_redirect_still_applies_on_the_lean_path(node, actors, settings):
    """With SECURE_SSL_REDIRECT on, a plain-HTTP report is redirected as by the full chain; one
    behind a TLS-terminating proxy (X-Forwarded-Proto: https) is served, with HSTS."""
    settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_SECONDS = True, 3600
    lean, full = AgentReportsHandler(), WSGIHandler()  # SecurityMiddleware reads the settings when built
    secret = joined(node, actors["admin"])
    body = json.dumps({"reports": [report(1)]})
    answers = [_call(app, body, credential=secret) for app in (lean, full)]
    _same_answer(*answers)
    assert answers[0][0].startswith("301") and answers[0][1]["Location"] == f"https://testserver{REPORTS}"
    served = _call(lean, body, credential=secret, HTTP_X_FORWARDED_PROTO="https")
    assert served[0] == "200 OK" and served[1]["Strict-Transport-Security"] == "max-age=3600"


def test_the_lean_handler_sends_the_request_signals_that_manage_database_connections(node, actors):
    """request_started and request_finished go out as from Django's handler, so
    close_old_connections (and CONN_MAX_AGE, CONN_HEALTH_CHECKS) applies to the reports path."""
    sent = []

    def receiver(sender, **kwargs):
        sent.append(sender)

    for signal in REQUEST_SIGNALS:
        signal.connect(receiver)
    try:
        status = _call(wsgi.application, ONE, credential=joined(node, actors["admin"]))[0]
    finally:
        for signal in REQUEST_SIGNALS:
            signal.disconnect(receiver)
    assert status == "200 OK" and sent == [AgentReportsHandler, AgentReportsHandler]


def test_an_error_inside_the_steady_answer_is_answered_like_the_full_chain(node, actors, monkeypatch, caplog):
    """The agents' handler answers a steady report before the chain; an exception raised there
    (the database gone) becomes the API's 500, logged, as Django's handler makes it, and the
    chain does not run the report a second time."""
    secret = joined(node, actors["admin"])
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(services, "credential_authenticate_storing_next", broken)
    answers = [_call(app, ONE, credential=secret) for app in (wsgi.agent_reports_application, wsgi.full_application)]
    _same_answer(*answers)
    assert answers[0][0] == "500 Internal Server Error" and json.loads(answers[0][2])["errors"][0]["message"] == "internal server error"
    assert calls == [1, 1]  # once per handler
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"].count(f"Internal Server Error: {REPORTS}") == 2


def test_times_from_a_clock_never_set_or_ahead_of_the_control_planes_are_taken_as_received(agent, node):
    """An Xid dated 2999 was "in the last 24 h" on Diagnose for ever, and a fatal one dated 1970
    was stored and never repaired (found by a hostile-input probe). Refusing them cost the node
    its heartbeat, so a skewed clock read as an outage (found by review): the times are taken
    as received, and the node gets one Warning while its clock is off. Ten minutes ahead pass
    as sent (NTP skew)."""
    from django.utils import timezone

    from monitoring.models import GpuErrorEvent

    before = timezone.now()
    ahead = {**report(1), "xids": [{"xid": 48, "gpu": 0, "at": (before + timedelta(minutes=30)).isoformat()}]}
    unset = {**report(2), "xids": [{"xid": 79, "gpu": 1, "at": "1970-01-01T00:00:00Z"}]}
    late = {**report(3), "at": "9999-12-31T23:59:59+00:00"}
    client = agent()
    for body in ({"reports": [ahead, unset, late]}, {"reports": [{**unset, "seq": 4}, {**late, "seq": 5}]}):
        assert _post(client, body).status_code == 200
    after = timezone.now()
    assert all(before <= x.at <= after for x in GpuErrorEvent.objects.filter(node=node))
    assert before <= NodeReport.objects.get(node=node, seq=3).at <= after
    (warning,) = node.events.filter(reason="NodeClockOff")
    assert warning.count == 2 and warning.type == "Warning"
    assert "clock is more than 10 minutes ahead of the control plane's and is not set (before 2000)" in warning.message
    skewed = {**report(6), "xids": [{"xid": 48, "gpu": 0, "at": (after + timedelta(minutes=5)).isoformat()}]}
    assert _post(client, {"reports": [skewed]}).status_code == 200
    assert GpuErrorEvent.objects.filter(node=node, at__gt=after).count() == 1


def test_a_clock_set_back_is_measured_by_the_batchs_sent_at_and_its_fatal_xid_is_repaired(agent, node):
    """A clock set back to 2000-01-02 (past the never-set bound) dated a fatal Xid outside the
    repair's 24 hours: never repaired, and no Warning (review). The agent says its clock as it
    sends (`sentAt`); the offset from the control plane's moves every time of the batch, keeping
    a backlog's spacing. Within 10 minutes nothing moves."""
    from django.utils import timezone

    from monitoring.models import GpuErrorEvent

    behind = datetime(2000, 1, 2, tzinfo=UTC)
    older = {**report(1), "at": (behind - timedelta(minutes=1)).isoformat()}
    fatal = {**report(2), "at": behind.isoformat(), "xids": [{"xid": 79, "gpu": 1, "at": behind.isoformat()}]}
    before = timezone.now()
    assert _post(agent(), {"reports": [older, fatal], "sentAt": behind.isoformat()}).status_code == 200
    after = timezone.now()
    xid = GpuErrorEvent.objects.get(node=node)
    assert before <= xid.at <= after  # inside the repair's window: Xid 79 is replaced at once
    stored = dict(NodeReport.objects.filter(node=node).values_list("seq", "at"))
    assert stored[2] - stored[1] == timedelta(minutes=1)
    (warning,) = node.events.filter(reason="NodeClockOff")
    assert "clock is more than 10 minutes behind the control plane's" in warning.message
    near = timezone.now() - timedelta(minutes=5)
    assert _post(agent(), {"reports": [{**report(3), "at": near.isoformat()}], "sentAt": near.isoformat()}).status_code == 200
    assert NodeReport.objects.get(node=node, seq=3).at == near


def test_a_backlog_stamped_before_the_clock_went_off_keeps_its_times(agent, node):
    """A node reboots with its clock at 2000-01-02 and sends the backlog it stamped right before:
    the send's offset carried every time 26 years ahead, then they were taken as received, the
    spacing lost (review). A time the offset would carry further from now stays as stamped."""
    from django.utils import timezone

    from monitoring.models import GpuErrorEvent

    now = timezone.now()
    backlog = [{**report(i + 1), "at": (now - timedelta(minutes=40 - 10 * i)).isoformat()} for i in range(3)]
    backlog[0]["xids"] = [{"xid": 48, "gpu": 0, "at": backlog[0]["at"]}]
    assert _post(agent(), {"reports": backlog, "sentAt": datetime(2000, 1, 2, tzinfo=UTC).isoformat()}).status_code == 200
    stored = dict(NodeReport.objects.filter(node=node).values_list("seq", "at"))
    assert stored[2] - stored[1] == timedelta(minutes=10) and stored[1] == now - timedelta(minutes=40)
    assert GpuErrorEvent.objects.get(node=node).at == now - timedelta(minutes=40)
