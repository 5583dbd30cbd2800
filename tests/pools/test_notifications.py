"""Alerts reach people (issue 20 items 2 and 3; seed T6): one notification per key, listed in the
product, mailed to the team's leads, POSTed to the webhook (a real HTTP server here), sent again
when a worker died before sending, acknowledged by the team's leads only."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from pools.models import Notification
from pools.services import notifications

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def channels(settings, monkeypatch):
    settings.EBCLOUD_ALERT_EMAILS = ["oncall@example.com"]
    settings.EBCLOUD_ALERT_WEBHOOK_URL = ""
    monkeypatch.setattr(notifications, "WEBHOOK_BACKOFF_S", 0)


@pytest.fixture
def receiver():
    """A real webhook receiver on the loopback: answers each POST with the next status of
    `statuses` (200 once they run out) and keeps the JSON bodies."""
    state = {"statuses": [], "bodies": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            state["bodies"].append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(state["statuses"].pop(0) if state["statuses"] else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield state
    server.shutdown()
    server.server_close()


def _raise(team, key="budget-alert:1", **extra):
    return notifications.notification_raise(team=team, kind="HighGpuAllocation", message="Pool p is full", key=key, now=NOW, **extra)


def test_one_key_tells_once_by_mail_and_webhook(actors, teams, settings, receiver, django_capture_on_commit_callbacks):
    actors["lead"].email = "lead@example.com"
    actors["lead"].save()
    actors["member"].email = "member@example.com"
    actors["member"].save()
    settings.EBCLOUD_ALERT_WEBHOOK_URL = receiver["url"]
    with django_capture_on_commit_callbacks(execute=True):
        first = _raise(teams["algorithm"], payload={"threshold": 90})
        again = _raise(teams["algorithm"])
    assert first is not None and again is None
    first.refresh_from_db()
    assert first.delivered_at is not None and first.emailed_to == 2
    assert first.webhook_status == "delivered 200 (attempt 1)"
    assert [sorted(m.to) for m in mail.outbox] == [["lead@example.com", "oncall@example.com"]]  # leads, not members
    assert mail.outbox[0].subject == "[EBCloud] Pool p is full"
    (body,) = receiver["bodies"]
    assert {k: body[k] for k in ("kind", "team", "severity", "message", "threshold")} == {
        "kind": "HighGpuAllocation", "team": "algorithm", "severity": "Warning", "message": "Pool p is full", "threshold": 90}


def test_the_webhook_is_retried_on_5xx_and_gives_up_after_its_attempts(teams, settings, receiver, django_capture_on_commit_callbacks):
    settings.EBCLOUD_ALERT_WEBHOOK_URL = receiver["url"]
    receiver["statuses"] = [503, 200]
    with django_capture_on_commit_callbacks(execute=True):
        told = _raise(teams["algorithm"])
    told.refresh_from_db()
    assert told.webhook_status == "delivered 200 (attempt 2)" and len(receiver["bodies"]) == 2
    receiver["statuses"] = [500, 502, 503]
    with django_capture_on_commit_callbacks(execute=True):
        failed = _raise(teams["algorithm"], key="other")
    failed.refresh_from_db()
    assert failed.webhook_status == "failed: HTTP 503 after 3 attempts" and failed.delivered_at is not None


def test_what_a_dead_worker_left_unsent_is_sent_once_later(teams):
    told = _raise(teams["algorithm"])  # committed, its on-commit delivery never ran
    assert Notification.objects.get().delivered_at is None and mail.outbox == []
    assert notifications.notifications_redeliver(now=NOW) == 1
    assert notifications.notifications_redeliver(now=NOW) == 0
    assert len(mail.outbox) == 1
    assert not notifications.notification_deliver(notification_id=told.pk)


def test_the_teams_leads_and_admins_acknowledge_others_cannot(actors, teams, browser):
    told = _raise(teams["algorithm"])
    url = f"/notifications/{told.pk}/acknowledge/"
    assert browser("other_lead").post(url).status_code == 404  # another team's alert does not exist for them
    assert browser("member").post(url).status_code == 403
    assert browser("finance").post(url).status_code == 403
    assert browser(None).post(url).status_code == 302  # to the login page
    assert Notification.objects.get().acknowledged_at is None
    response = browser("lead").post(url, follow=True)
    assert response.status_code == 200 and b"Alert acknowledged." in response.content
    told.refresh_from_db()
    assert told.acknowledged_by == actors["lead"] and told.acknowledged_at is not None
    assert b"already acknowledged" in browser("admin").post(url, follow=True).content


def test_the_list_shows_each_role_its_teams_alerts_and_the_open_count(teams, browser):
    _raise(teams["algorithm"], key="a")
    _raise(teams["inference"], key="b", severity=Notification.Severity.CRITICAL)
    lead = browser("lead").get("/notifications/")
    assert lead.status_code == 200 and lead.content.count(b"Pool p is full") == 1
    assert b"Algorithm" in lead.content and b"Inference" not in lead.content
    assert b'Alerts <span class="badge">1<' in lead.content
    finance = browser("finance").get("/notifications/?show=open").content
    assert finance.count(b"Pool p is full") == 2 and b"Critical" in finance
    assert b"Acknowledge" not in finance  # finance reads; the teams' leads act
    member = browser("member").get("/notifications/").content
    assert b"Pool p is full" in member and b"<button" not in member.split(b"<main")[1]
