"""Alert delivery with a worker `kill -9`ed mid-send (the django-q2 task timeout kills a worker
the same way): two workers run the per-minute task (`monitoring.tasks.rollup_pool_samples`,
which sends the due notifications), one killed while it calls the webhook.

Fixed bug: a notification was mailed and POSTed in one transaction, so a worker killed during
the webhook call (a hanging receiver, ~18 s per notification, past the 60 s task timeout) rolled
back the mail it had sent, and the next run mailed again. Mail and webhook are now committed
apart: a kill repeats at most the call in flight, never the mail sent before it.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pools.models import Notification
from tests.billing.billing_helpers import T0
from tests.chaos.workers import CHAOS, chaos_round, worker_env

pytestmark = CHAOS

TASK = ["task", "monitoring.tasks.rollup_pool_samples"]
NOW = T0 + timedelta(minutes=1)
MESSAGES = [f"Pool p{i} is full" for i in range(3)]
KILLS = {
    "webhook-in-flight-mail-committed": {"target": "pools.services.notifications:webhook_post", "when": "before"},
    "webhook-posted-not-committed": {"target": "pools.services.notifications:webhook_post", "when": "after"},
}


@pytest.fixture
def receiver():
    """A real webhook receiver on the loopback; keeps the messages of the JSON it was sent."""
    bodies: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["message"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", bodies
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kill", KILLS.values(), ids=KILLS.keys())
def test_a_worker_killed_during_the_webhook_never_mails_twice(teams, receiver, kill):
    url, posted = receiver
    for i, message in enumerate(MESSAGES):  # committed; their on-commit delivery never ran (a dead worker)
        Notification.objects.create(team=teams["algorithm"], kind="HighGpuAllocation", message=message,
                                    payload={"message": message}, key=f"k{i}", created_at=T0)  # fmt: skip
    env = worker_env(CHAOS_NOW=NOW.isoformat(), EBCLOUD_ALERT_WEBHOOK_URL=url)
    chaos = chaos_round(TASK, kill=kill, env=env)
    restarted = chaos.restarted.run()

    mailed = _subjects(chaos.killed.stdout) + _subjects(chaos.normal.stdout) + _subjects(restarted.stdout)
    assert sorted(mailed) == [f"[EBCloud] {m}" for m in MESSAGES], "one e-mail per alert"
    assert set(posted) == set(MESSAGES) and len(posted) <= len(MESSAGES) + 1  # only the call in flight again
    assert max(Counter(posted).values()) == (2 if kill["when"] == "after" else 1)
    assert not Notification.objects.filter(delivered_at=None).exists()


def _subjects(stdout: str) -> list[str]:
    """Subjects of the e-mails a worker sent (the console e-mail backend prints each one)."""
    return re.findall(r"^Subject: (.*)$", stdout, flags=re.MULTILINE)
