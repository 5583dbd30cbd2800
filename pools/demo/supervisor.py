"""A small process supervisor for the demo (`manage.py demo`, behind `make run`).

Each child runs in its own session, so its own process group: the terminal's Ctrl-C reaches
only the supervisor, which then stops every group it started as a whole (a django-q2 cluster
is a parent with several children). Stopping is SIGTERM to each child, then to the rest of its
group once it is gone, then SIGKILL to whatever is left after a grace period. Each child's
output is relayed line by line with the child's name in front, so one terminal tells who said
what. Django-free: it only knows processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    relay: threading.Thread | None = field(default=None, repr=False)

    @property
    def pgid(self) -> int:
        """The child leads its own group (start_new_session), so the group id is its pid."""
        return self.process.pid


def live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process that is not a zombie, from /proc."""
    table = {}
    for entry in PROC.iterdir():
        if not (entry.name.isascii() and entry.name.isdigit()):  # '²' is a digit to isdigit() only
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after it.
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] not in ("Z", "X"):
            table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group. /proc where there is one: a zombie
    still answers a signal, and a container's init may be slow to reap orphans; elsewhere the
    group counts as alive while it accepts signal 0."""
    if not PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    return sorted(pid for pid, (_, group) in live_processes().items() if group == pgid)


def _signal(pid: int, sig: int, *, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):  # gone already
        pass


class Supervisor:
    """Starts children in their own process groups and stops them all, whatever way it ends."""

    def __init__(self, write: Callable[[str], None], *, env: dict[str, str] | None = None, cwd: str | Path | None = None):
        self.write = write
        self.env = env
        self.cwd = cwd
        self.children: list[Child] = []
        self._write_lock = threading.Lock()

    def say(self, line: str) -> None:
        with self._write_lock:
            self.write(line)

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
              keep: Callable[[str], bool] = lambda line: True) -> Child:
        """Start `argv` in a new session; relay each of its output lines that `keep` accepts."""
        process = subprocess.Popen(
            list(argv), cwd=self.cwd, env=env if env is not None else self.env, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            errors="replace",
        )
        child = Child(name, process)
        child.relay = threading.Thread(target=self._relay, args=(child, keep), name=f"relay-{name}", daemon=True)
        child.relay.start()
        self.children.append(child)
        return child

    def _relay(self, child: Child, keep: Callable[[str], bool]) -> None:
        for line in child.process.stdout:
            line = line.rstrip("\n")
            if line and keep(line):
                self.say(f"{child.name:<6} | {line}")

    def exited(self) -> Child | None:
        """The first child that has exited, if any."""
        return next((c for c in self.children if c.process.poll() is not None), None)

    def stop(self, grace: float = 10.0) -> dict[str, list[int]]:
        """SIGTERM each child (the leader of its group: a django-q2 cluster stops its own
        processes in order, and SIGTERM to all of them at once can leave its parent waiting
        forever on a lock a killed child held), then SIGTERM whatever its group still holds once
        the leader is gone, and SIGKILL every group that is not empty after `grace` seconds.
        Returns the pids that needed SIGKILL by child name. Idempotent."""
        for child in self.children:
            if child.process.poll() is None:
                _signal(child.pgid, signal.SIGTERM, group=False)
        orphans_told: set[str] = set()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            busy = False
            for child in self.children:
                if child.process.poll() is None:
                    busy = True
                elif group_members(child.pgid):
                    busy = True
                    if child.name not in orphans_told:
                        _signal(child.pgid, signal.SIGTERM, group=True)
                        orphans_told.add(child.name)
            if not busy:
                break
            time.sleep(0.1)
        killed = {}
        for child in self.children:
            left = group_members(child.pgid)
            if left:
                killed[child.name] = left
                _signal(child.pgid, signal.SIGKILL, group=True)
        for child in self.children:
            child.process.wait()
            if child.relay is not None:
                child.relay.join(timeout=2)
        # SIGKILL is delivered, not awaited: on a busy machine a killed grandchild still shows
        # as running for a moment. Return once the groups are empty (or 5 s have passed).
        settled = time.monotonic() + 5
        groups = [child.pgid for child in self.children if child.name in killed]
        while time.monotonic() < settled and any(group_members(pgid) for pgid in groups):
            time.sleep(0.05)
        return killed
