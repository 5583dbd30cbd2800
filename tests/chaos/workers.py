"""Real worker processes against the test database, and the `kill -9` of one mid-task.

A worker is `python -m tests.chaos.killable ARGS` (manage.py with a cue to stop at, see
killable.py), connected through DATABASE_URL to the test database this test committed its data
to (`transactional_db`). `chaos_round` is the experiment every chaos test runs:

1. the killable worker starts and runs until its cue: it stops there, mid-task, holding
   whatever it holds (a pool's claim, an uncommitted transaction, row locks);
2. the normal worker runs the same work and goes on until it finishes or blocks on a lock
   the stopped worker holds (seen in `pg_stat_activity`);
3. the test sends the stopped worker SIGKILL: no `finally`, no rollback by the worker itself;
   PostgreSQL rolls back its open transaction when the connection drops;
4. the normal worker finishes.

Then the test restarts the killed worker (`Round.restart`) and runs passes until convergence.
Workers start warm (Django set up, waiting for a go) so that process starts overlap.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from pools.models.cloud import PoolClaim

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60
CHAOS = [
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="chaos tests run worker processes side by side: PostgreSQL only (SQLite has one writer and no skip_locked)",
    ),
    pytest.mark.django_db(transaction=True),  # the workers must see the test's data: commit it
]
_serial = itertools.count()
_started: list[Worker] = []  # every worker of the running test, reaped after it (conftest)


def database_url() -> str:
    """The test database (its NAME is pytest-django's test_<name>) as a DATABASE_URL."""
    s = connection.settings_dict
    auth = quote(s["USER"], safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{quote(s['HOST'] or '127.0.0.1', safe='')}:{s['PORT'] or 5432}/{quote(s['NAME'], safe='')}"


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAOS_", "EBCLOUD_SIM_"))}
    env.update(
        DATABASE_URL=database_url(),
        EBCLOUD_TESTING="false",
        CHAOS_STEP_SECONDS="0",  # a node is Ready in one pass; no failure is injected
        EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend",
        EBCLOUD_ALERT_EMAILS="finops@example.com",
        EBCLOUD_ALERT_WEBHOOK_URL="",
    )
    env.update(extra)
    return env


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


class Worker:
    """One worker process. `kill`: its cue (killable.py); otherwise it waits warm for `run()`."""

    def __init__(self, args: list[str], *, env: dict[str, str], kill: dict | None = None):
        self.args = args
        self.flag = Path(tempfile.gettempdir()) / f"chaos-{os.getpid()}-{next(_serial)}"
        env = dict(env)
        if kill is not None:
            env.update(CHAOS_KILL=json.dumps(kill), CHAOS_ARRIVED=str(self.flag))
        else:
            env.update(CHAOS_GO=str(self.flag))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.killable", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _started.append(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    def go(self) -> Worker:
        self.flag.touch()
        return self

    def run(self) -> Finished:
        """Go, wait, and require success."""
        finished = self.go().finish()
        assert finished.returncode == 0, f"{self.args}: {finished.stderr}"
        return finished

    def wait_arrived(self) -> str:
        """Where the worker stopped; fails if it ended without reaching its cue."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if self.flag.exists():
                return self.flag.read_text()
            if self.process.poll() is not None:
                out, err = self.process.communicate()
                raise AssertionError(f"worker {self.args} ended (rc {self.process.returncode}) before its cue:\n{out}\n{err}")
            time.sleep(0.02)
        raise AssertionError(f"worker {self.args} did not reach its cue in {TIMEOUT_S}s")

    def kill9(self) -> Finished:
        os.kill(self.pid, signal.SIGKILL)
        finished = self.finish()
        assert finished.returncode == -signal.SIGKILL, finished
        return finished

    def finish(self) -> Finished:
        try:
            out, err = self.process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
            raise AssertionError(f"worker {self.args} hung:\n{out}\n{err}") from None
        finally:
            self.flag.unlink(missing_ok=True)
        return Finished(self.process.returncode, out, err)


def reap() -> None:
    """SIGKILL whatever a failed test left running (a stopped worker holds locks the database
    flush after the test would wait on)."""
    while _started:
        worker = _started.pop()
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.communicate()
        worker.flag.unlink(missing_ok=True)


def blocked_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0


@dataclass
class Round:
    where: str  # the cue the killed worker stopped at
    killed_pid: int
    killed: Finished
    normal: Finished
    normal_blocked: bool  # the normal worker waited on a lock the killed one held
    restarted: Worker  # the killed worker's command, started warm: `.run()` restarts it


def chaos_round(args: list[str], *, kill: dict, env: dict[str, str], normal_args: list[str] | None = None) -> Round:
    """Steps 1-4 of the module docstring: two workers, the killable one `kill -9`ed mid-task."""
    killable = Worker(args, env=env, kill=kill)
    normal = Worker(normal_args or args, env=env)
    restarted = Worker(args, env=env)
    where = killable.wait_arrived()
    normal.go()
    blocked = False
    deadline = time.monotonic() + TIMEOUT_S
    while normal.process.poll() is None and time.monotonic() < deadline:
        if blocked_on_a_lock():
            blocked = True
            break
        time.sleep(0.02)
    killed = killable.kill9()
    finished = normal.finish()
    assert finished.returncode == 0, f"the normal worker failed: {finished.stderr}"
    return Round(where=where, killed_pid=killable.pid, killed=killed, normal=finished, normal_blocked=blocked, restarted=restarted)


def claims_of(pid: int):
    """Pool claims still held by the (dead) worker with this process id."""
    return PoolClaim.objects.filter(owner__contains=f":{pid}:", claimed_until__isnull=False)


def claims_expire(pid: int) -> int:
    """Stand-in for EBCLOUD_RECONCILE_CLAIM_SECONDS passing: the dead worker's claims lapse
    (the workers share this test's clock; waiting the 120 s would be the real thing)."""
    return claims_of(pid).update(claimed_until=None, owner="")
