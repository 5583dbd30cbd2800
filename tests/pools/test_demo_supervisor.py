"""The demo's process supervisor (pools/demo/supervisor.py) on real processes: every process
group it started is gone after stop(), a stubborn one by SIGKILL after the grace period."""

from __future__ import annotations

import sys
import time

from pools.demo.supervisor import Supervisor, group_members

# A parent that starts a child in its own process group and then sleeps: a django-q2 cluster
# in miniature. With IGNORE_TERM both ignore SIGTERM, so only SIGKILL ends them.
FAMILY = """
import signal, subprocess, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                          "if sys.argv[1] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                          "print('child up', flush=True); time.sleep(600)", sys.argv[1]])
print("parent up", flush=True)
time.sleep(600)
"""


def _started(supervisor: Supervisor, lines: list[str], name: str, mode: str):
    child = supervisor.start(name, [sys.executable, "-c", FAMILY, mode])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(group_members(child.pgid)) < 2:
        time.sleep(0.05)
    assert len(group_members(child.pgid)) == 2, lines
    return child


def test_stop_ends_every_process_of_every_group_and_relays_output_by_name():
    lines: list[str] = []
    supervisor = Supervisor(lines.append)
    polite = _started(supervisor, lines, "polite", "polite")
    stubborn = _started(supervisor, lines, "stub", "stubborn")
    began = time.monotonic()
    killed = supervisor.stop(grace=1.0)
    assert group_members(polite.pgid) == [] and group_members(stubborn.pgid) == []
    assert set(killed) == {"stub"} and len(killed["stub"]) == 2  # the polite family went on SIGTERM
    assert time.monotonic() - began < 10
    assert "polite | parent up" in lines and "stub   | child up" in lines
    assert supervisor.stop(grace=0) == {}  # idempotent


def test_exited_names_the_first_child_that_ended():
    supervisor = Supervisor(lambda line: None)
    supervisor.start("short", [sys.executable, "-c", "raise SystemExit(3)"])
    deadline = time.monotonic() + 20
    while supervisor.exited() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = supervisor.exited()
    assert gone is not None and gone.name == "short" and gone.process.returncode == 3
    supervisor.stop(grace=1)
