"""The web tier as docs/operator.md runs it: granian serving `config.wsgi:application` in worker
processes of blocking threads, on PostgreSQL. The operator guide chose granian over gunicorn
for the agents' reports (issue 23 item 2: a fifth less CPU per report, docs/benchmarks.md), so
these tests hold granian to what the guide promises of it, on a real process tree:

- both entry points answer: the lean path of the agents' reports (stored before the answer) and
  the full Django chain (a page, the API);
- the peer address reaches the application (the metrics endpoint answers loopback only);
- a streamed export arrives whole (granian iterates the WSGI response; no request timeout);
- `kill -HUP` respawns the workers without refusing one request.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from monitoring.models import NodeReport
from pools.demo.supervisor import live_processes
from tests.k8s.control_plane import free_ports
from tests.monitoring.conftest import joined, report

ROOT = Path(__file__).resolve().parents[2]
REPORTS = "/api/agent/v1/reports/"
START_TIMEOUT_S = 60

pytestmark = [
    pytest.mark.live,
    pytest.mark.django_db(transaction=True),  # the server's processes read what the test commits
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the server's processes need the test database too"),
]


def _database_url() -> str:
    s = connection.settings_dict
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{s['USER']}{password}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _workers(main_pid: int) -> set[int]:
    return {pid for pid, (parent, _) in live_processes().items() if parent == main_pid}


@pytest.fixture
def server(tmp_path):
    """granian with the operator guide's flags on a free port, against the test database."""
    (port,) = free_ports(1)
    env = {**os.environ, "DATABASE_URL": _database_url(), "DATABASE_CONN_MAX_AGE": "60", "DEBUG": "false",
           "SECRET_KEY": "web-server-test-key-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false",
           # as this suite's settings: static files unhashed (no collectstatic for the page)
           "EBCLOUD_TESTING": "true", "EBCLOUD_VAR_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "granian", "--interface", "wsgi", "config.wsgi:application", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "2", "--blocking-threads", "2", "--backlog", "2048", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                if httpx.post(base + REPORTS, content=b"{}", timeout=2).status_code == 401:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "granian did not answer"
            time.sleep(0.3)
        yield process, base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _post_report(base: str, credential: str, seq: int) -> httpx.Response:
    body = json.dumps({"reports": [report(seq)], "oldestSeq": 1})
    return httpx.post(base + REPORTS, content=body, timeout=10,
                      headers={"Authorization": f"Bearer {credential}", "Content-Type": "application/json"})


def test_granian_serves_reports_pages_the_api_and_a_streamed_export(server, node, actors):
    _, base = server
    credential = joined(node, actors["admin"])
    answer = _post_report(base, credential, 1)
    assert answer.status_code == 200 and answer.json()["ackedSeq"] == 1
    assert NodeReport.objects.filter(node=node, seq=1).exists()  # acknowledged means stored
    assert httpx.get(base + "/login/").status_code == 200
    assert httpx.get(base + "/metrics").status_code == 200  # the peer address is loopback
    token, _ = Token.objects.get_or_create(user=actors["finance"])
    export = httpx.get(base + "/api/v1/costs/?from=2026-12-01&to=2026-12-31&format=csv", timeout=30,
                       headers={"Authorization": f"Token {token.key}"})
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/csv")
    assert export.text.splitlines()[0].startswith("charged_team,team,project,")


def test_a_hup_respawns_the_workers_without_refusing_a_request(server, node, actors):
    process, base = server
    credential = joined(node, actors["admin"])
    before = _workers(process.pid)
    statuses: list[int] = []
    stop = threading.Event()

    def agent():
        seq = 0
        while not stop.is_set():
            seq += 1
            try:
                statuses.append(_post_report(base, credential, seq).status_code)
            except httpx.TransportError as exc:
                statuses.append(repr(exc))
            time.sleep(0.02)

    sender = threading.Thread(target=agent)
    sender.start()
    try:
        time.sleep(0.5)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (_workers(process.pid) and not _workers(process.pid) & before):
            assert time.monotonic() < deadline, "the workers were not respawned"
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop.set()
        sender.join()
    assert len(statuses) > 20 and set(statuses) == {200}, [s for s in statuses if s != 200]
    assert NodeReport.objects.filter(node=node).count() == len(statuses)
