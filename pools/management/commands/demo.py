"""`manage.py demo`: the whole demo behind `make run`, under one supervisor.

One step prepares the database (migrate, then the demo data, in this one process: one start-up
and one round of system checks instead of three), then it starts the web server, waits until
it answers, and only then the django-q2 worker and the simulated fleet (on a busy machine they
would slow the first page down). Each runs in its own process group (pools/demo/supervisor.py);
Ctrl-C or SIGTERM stops all of them, whole groups, and exits; so does the exit of any of them.
It says how long the start took.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from pools.demo.supervisor import Supervisor
from pools.management.arguments import port, positive_seconds, seconds_or_zero

MANAGE = str(Path(settings.BASE_DIR) / "manage.py")
# runserver's banner repeats what this command says itself; its request log and errors stay.
RUNSERVER_BANNER = ("Django version ", "Starting development server at ", "Quit the server with ",
                    "WARNING: This is a development server.", "For production use, use a production WSGI",
                    "For more information on production servers see", "Performing system checks",
                    "System check identified no issues")


RUNSERVER_DATE = re.compile(r"^[A-Z][a-z]+ \d{2}, \d{4} - \d{2}:\d{2}:\d{2}$")  # "December 02, 2026 - 08:51:05"


def keep_web_line(line: str) -> bool:
    return not (line.startswith(RUNSERVER_BANNER) or RUNSERVER_DATE.match(line))


class Command(BaseCommand):
    help = "Prepare the database and demo data, then run the web server, the worker and the simulated fleet until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address the web server listens on")
        parser.add_argument("--port", type=port, default=8000, help="port the web server listens on (1 to 65535)")
        parser.add_argument("--no-fleet", action="store_true", help="no simulated fleet (web server and worker only)")
        parser.add_argument("--grace", type=seconds_or_zero, default=10.0,
                            help="seconds each process has to stop after SIGTERM before SIGKILL, 0 to 86400 (default %(default)s)")
        parser.add_argument("--ready-timeout", type=positive_seconds, default=300.0,
                            help="seconds to wait for the web server's first answer, above 0 and at most 86400 (default %(default)s)")

    def handle(self, *args, **o):
        began = time.monotonic() - process_age()
        if o["grace"] < 0 or o["ready_timeout"] <= 0:
            raise CommandError("--grace must be at least 0 and --ready-timeout positive")
        if not port_free(o["host"], o["port"]):
            raise CommandError(f"port {o['port']} on {o['host']} is in use: stop what serves it or pass --port")
        url = f"http://{o['host']}:{o['port']}/"
        self._prepare(began, url)  # Ctrl-C here is a plain KeyboardInterrupt: nothing runs yet
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        supervisor = Supervisor(self._say, env=os.environ.copy())
        code = 0
        try:
            web = supervisor.start("web", [sys.executable, MANAGE, "runserver", "--noreload", "--skip-checks",
                                           f"{o['host']}:{o['port']}"], keep=keep_web_line)
            if not wait_until_serving(url + "login/", process=web.process, stop=stop, timeout=o["ready_timeout"]):
                if stop.is_set():
                    return
                raise CommandError(f"the web server did not answer at {url} within {o['ready_timeout']:g} s")
            self._say(self.style.SUCCESS(f"Serving {url} (ready in {time.monotonic() - began:.1f} s; Ctrl-C stops everything)"))
            # The worker's log: failures only, unless Q_LOG_LEVEL says otherwise.
            supervisor.start("worker", [sys.executable, MANAGE, "qcluster"], env={"Q_LOG_LEVEL": "WARNING", **os.environ})
            self._say("worker started (django-q2: the schedules, order follow-ups, alerts)")
            if not o["no_fleet"]:
                supervisor.start("fleet", [sys.executable, MANAGE, "demo_fleet", "--server", url.rstrip("/")])
                self._say("fleet started (simulated agents, workload and GPU faults)")
            while not stop.wait(0.5):
                gone = supervisor.exited()
                if gone is not None:
                    self._say(self.style.ERROR(f"{gone.name} exited with code {gone.process.returncode}; stopping the others"))
                    code = 1
                    break
        finally:
            self._say(f"stopping {', '.join(c.name for c in supervisor.children) or 'nothing'}")
            killed = supervisor.stop(grace=o["grace"])
            note = "".join(f"; {name}: {len(pids)} process(es) killed after {o['grace']:g} s" for name, pids in killed.items())
            self._say(f"stopped{note}")
        if code:
            sys.exit(code)

    def _prepare(self, began: float, url: str) -> None:
        """Migrate and load the demo data in this process."""
        executor = MigrationExecutor(connection)
        pending = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
        if pending:
            self._say(f"preparing the database: {pending} migrations (the first start only; about a minute on 2 busy cores)")
            call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo", url=url, stdout=self.stdout)
        self._say(f"database and demo data ready in {time.monotonic() - began:.1f} s")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()


def process_age() -> float:
    """Seconds since this process started (Python and Django's start-up included), from /proc;
    0 where there is none."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def port_free(host: str, port: int) -> bool:
    """Whether the web server could listen there. A `--host` that is no address of this machine
    is a CommandError: it was reported as the port being in use."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
                raise CommandError(f"--host {host!r} is not an address of this machine ({exc.strerror})") from exc
            return False
    return True


def wait_until_serving(url: str, *, process, stop: threading.Event, timeout: float) -> bool:
    """Polls `url` until it answers (any HTTP status: the server is up), the process exits,
    `stop` is set or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set() and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=10):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            stop.wait(0.3)
    return False
