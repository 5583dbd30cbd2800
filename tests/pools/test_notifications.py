"""Alerts reach people (issue 20 items 2 and 3; seed T6): one notification per key, listed in the
product, mailed to the team's leads, POSTed to the webhook (a real HTTP server here), sent again
when a worker died before sending, acknowledged by the team's leads only."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from pools.models import Notification
from pools.services import notifications
from tests.pools.mail_helpers import smtp_relay

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


@pytest.fixture
def mail_server(settings):
    """A real SMTP relay on the loopback that refuses the addresses in `mail_server.refused`."""
    with smtp_relay(settings) as server:
        yield server


@pytest.fixture
def hanging_webhook(settings, monkeypatch):
    """A webhook that accepts the connection and never answers: each attempt waits for its
    timeout (0.2 s here instead of 5 s), so one webhook call takes its worst case, 0.6 s. A mail
    (to the locmem backend) is planned at EMAIL_TIMEOUT, 0.05 s here."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    monkeypatch.setattr(notifications, "WEBHOOK_TIMEOUT_S", 0.2)
    settings.EMAIL_TIMEOUT = 0.05
    settings.EBCLOUD_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{hole.getsockname()[1]}/hook"
    yield
    hole.close()


def test_redelivery_mails_first_and_stops_within_its_budget_while_the_webhook_hangs(teams, hanging_webhook):
    """Fixed bug: a few notifications with a hanging webhook outlasted the task timeout, the
    worker was killed before its commit and the next run mailed again. Now each run mails what is
    due, calls the webhook only while its worst case fits the budget, and never mails twice."""
    for i in range(4):
        _raise(teams["algorithm"], key=f"k{i}")  # committed, their on-commit delivery never ran
    started = time.monotonic()
    assert notifications.notifications_redeliver(now=NOW, time_budget_s=1.0) == 4
    assert time.monotonic() - started < 1.0
    assert len(mail.outbox) == 4 and not Notification.objects.filter(mailed_at=None).exists()
    (posted,) = Notification.objects.exclude(webhook_at=None)  # a second 0.6 s call did not fit
    assert posted.webhook_status == "failed: ReadTimeout after 3 attempts" and posted.delivered_at == NOW
    for minute in range(1, 4):  # the next runs call the rest of the webhooks and mail nobody again
        assert notifications.notifications_redeliver(now=NOW + timedelta(minutes=minute), time_budget_s=1.0) == 1
    assert not Notification.objects.filter(delivered_at=None).exists() and len(mail.outbox) == 4


def test_the_redelivery_budget_is_a_share_of_the_task_timeout(teams, hanging_webhook, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 2}  # a 0.8 s budget: one 0.6 s webhook call
    for i in range(3):
        _raise(teams["algorithm"], key=f"k{i}")
    started = time.monotonic()
    notifications.notifications_redeliver(now=NOW)
    assert time.monotonic() - started < 1.0  # the three webhook calls would have taken 1.8 s
    assert len(mail.outbox) == 3 and Notification.objects.exclude(webhook_at=None).count() == 1


def test_a_refused_mail_is_retried_with_back_off_then_given_up_and_the_others_still_go_out(actors, teams, settings, mail_server):
    """Fixed bug: an exception from send_mail (the relay refusing the recipients) escaped the
    redelivery, so every run stopped at that notification and the ones after it were never sent."""
    for role, address in (("lead", "gone@example.com"), ("other_lead", "ops@example.com")):
        actors[role].email = address
        actors[role].save()
    settings.EBCLOUD_ALERT_EMAILS = []
    mail_server.refused = {"gone@example.com"}
    poison = _raise(teams["algorithm"], key="a")
    good = _raise(teams["inference"], key="b")
    assert notifications.notifications_redeliver(now=NOW) == 2  # the poison's (empty) webhook step is done
    good.refresh_from_db()
    poison.refresh_from_db()
    assert good.delivered_at == NOW and mail_server.messages == [["ops@example.com"]]
    assert (poison.attempts, poison.mailed_at, poison.delivered_at) == (1, None, None)
    assert poison.last_error == "mail: the mail server refused 1 recipient(s)"
    notifications.notifications_redeliver(now=NOW + timedelta(seconds=59))  # backing off: not tried
    poison.refresh_from_db()
    waits = [poison.next_try_at - NOW]
    for tries in range(2, notifications.MAX_ATTEMPTS + 1):
        at = poison.next_try_at
        notifications.notifications_redeliver(now=at)
        poison.refresh_from_db()
        assert poison.attempts == tries
        waits.append(poison.next_try_at - at if poison.next_try_at else None)
    assert waits == [timedelta(minutes=m) for m in (1, 2, 4, 8, 16)] + [None]
    assert poison.failed_at == at and poison.mailed_at is None
    assert notifications.notifications_redeliver(now=at + timedelta(days=1)) == 0  # given up
    assert mail_server.messages == [["ops@example.com"]]


def test_a_failed_mail_does_not_hold_the_webhook_back_nor_repeat_it(actors, teams, settings, mail_server, receiver):
    settings.EBCLOUD_ALERT_EMAILS = ["oncall@example.com"]
    settings.EBCLOUD_ALERT_WEBHOOK_URL = receiver["url"]
    mail_server.refused = {"oncall@example.com"}
    told = _raise(teams["algorithm"])
    notifications.notifications_redeliver(now=NOW)
    assert len(receiver["bodies"]) == 1 and mail_server.messages == []
    mail_server.refused = set()  # the relay is fixed: the next try mails, the webhook is not called again
    assert notifications.notifications_redeliver(now=NOW + timedelta(minutes=1)) == 1
    told.refresh_from_db()
    assert told.delivered_at == NOW + timedelta(minutes=1) and (told.attempts, told.emailed_to) == (1, 1)
    assert mail_server.messages == [["oncall@example.com"]] and len(receiver["bodies"]) == 1


def test_the_list_shows_an_alert_that_could_not_be_delivered(actors, teams, settings, mail_server, browser):
    settings.EBCLOUD_ALERT_EMAILS = ["oncall@example.com"]
    mail_server.refused = {"oncall@example.com"}
    told = _raise(teams["algorithm"])
    notifications.notifications_redeliver(now=NOW)
    assert b"Delivery failing, trying again (1 failed try: mail: the mail server refused 1 recipient(s))" in browser("lead").get("/notifications/").content
    Notification.objects.filter(pk=told.pk).update(attempts=notifications.MAX_ATTEMPTS - 1, next_try_at=None)
    notifications.notifications_redeliver(now=NOW + timedelta(minutes=1))
    page = browser("lead").get("/notifications/").content
    assert b"Not delivered: gave up after 6 failed tries (mail: the mail server refused 1 recipient(s))." in page
    assert b"oncall@example.com" not in page  # the reason names no address
