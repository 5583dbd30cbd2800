"""`make run` (`manage.py demo`) on real processes: a fresh SQLite database, a free port; the
page answers, the log has no access-log line of the demo agents' requests, and Ctrl-C (SIGINT)
leaves no process of the tree it started (the django-q2 cluster's children included)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pools.demo.supervisor import group_members, live_processes

ROOT = Path(__file__).resolve().parents[2]
# A fresh SQLite database is most of the wait (75 migrations: ~15 s on an idle core, a minute on
# two busy ones); the fleet's first agents join about 20 s after the web server answers.
START_TIMEOUT_S = 240
AGENT_TIMEOUT_S = 120
GRACE_S = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _descendants(root: int) -> set[int]:
    """Every live process below `root` (by parent pid)."""
    parents = {pid: parent for pid, (parent, _) in live_processes().items()}
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    return pid in live_processes()


class Output:
    """The supervisor's output, read as it comes."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float, process: subprocess.Popen) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if re.search(pattern, line)), None)
            if found is not None:
                return found
            assert process.poll() is None, "\n".join(self.lines)
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n" + "\n".join(self.lines))


@pytest.mark.live
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_make_run_serves_logs_plainly_and_ctrl_c_stops_every_process(tmp_path):
    port = _free_port()
    env = {**os.environ, "EBCLOUD_VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
           "EBCLOUD_SIM_FAST": "true", "EBCLOUD_TRACE_DIR": str(tmp_path / "no-trace"), "PYTHONUNBUFFERED": "1"}
    for name in ("EBCLOUD_TESTING", "EBCLOUD_LOG_DEMO_REQUESTS", "Q_LOG_LEVEL"):
        env.pop(name, None)
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port), "--grace", str(GRACE_S)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # so that the test can clean up after a failure
    out = Output(demo.stdout)
    seen: set[int] = set()
    try:
        serving = out.wait_for(r"^Serving http://", START_TIMEOUT_S, demo)
        assert re.search(r"ready in \d+\.\d s", serving)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=30) as page:
            assert page.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/css/app.css", timeout=30) as page:
            assert page.status == 200
        # An agent joined over the agent API (a successful /api/agent/ request), then reported.
        out.wait_for(r"^fleet +\| joined as node ", AGENT_TIMEOUT_S, demo)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the django-q2 cluster: a parent and its children
            seen |= _descendants(demo.pid)
            if len(seen) >= 6:
                break
            time.sleep(0.5)
        time.sleep(6)  # one report interval
        seen |= _descendants(demo.pid)
        groups = {os.getpgid(pid) for pid in seen if _alive(pid)}
        assert len(seen) >= 6 and len(groups) >= 3, (seen, groups)

        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=GRACE_S + 30)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(pid) for pid in seen):
            time.sleep(0.1)
        assert [pid for pid in seen if _alive(pid)] == []
        assert all(group_members(pgid) == [] for pgid in groups)
        assert demo.returncode == 0, "\n".join(out.lines)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
        for pid in seen:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    lines = out.lines
    assert "GET /login/" in "\n".join(lines)  # the access log is on...
    assert not [line for line in lines if re.search(r'"(GET|POST|PUT|PATCH) /(api/agent|static)/', line)]  # ...but quiet
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines)
    assert lines[-1].startswith("stopped") and "killed" not in lines[-1], "\n".join(lines)
