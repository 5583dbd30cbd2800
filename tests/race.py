"""Callables run at once, each in a thread of its own: the race tests' workers and requests
(design §5: several workers, several admins clicking). They run on PostgreSQL; SQLite has one
writer and no row locks between connections worth testing.

Why each part:
- A thread has its own database connection (Django's are per thread), so each call is a worker
  of its own: its transactions and row locks are real ones, beside the test's and each other's.
- The threads wait at a barrier and are released together, so the calls overlap instead of
  running one after the other as the threads happen to start.
- Each thread closes its connections when done: one left open keeps the test database from
  being flushed or dropped.
- A thread's exception is otherwise printed and lost (the test would pass, or fail later on a
  missing result): the first one raised is raised again in the test, the others in its notes.
- A call that waits forever (a deadlock) fails the test after `timeout` instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

TIMEOUT = 60.0


class Race:
    """`calls` in threads of their own, released together by `start()`; `join()` waits for them
    and returns their results in the order of `calls`. Between the two the test may act on its
    own connection, e.g. hold a lock the calls then queue on. `concurrently` does both at once."""

    def __init__(self, *calls: Callable[[], Any], timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self.results: list[Any] = [None] * len(calls)
        self.errors: list[BaseException] = []  # in the order they were raised
        self._barrier = threading.Barrier(len(calls), timeout=timeout)
        self._threads = [threading.Thread(target=self._run, args=(i, call), name=f"race-{i}") for i, call in enumerate(calls)]

    def _run(self, index: int, call: Callable[[], Any]) -> None:
        try:
            self._barrier.wait()
            self.results[index] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test by join()
            self.errors.append(exc)
        finally:
            connections.close_all()

    def start(self) -> Race:
        for thread in self._threads:
            thread.start()
        return self

    def join(self) -> list[Any]:
        deadline = time.monotonic() + self.timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.errors:
            first, *others = self.errors
            for other in others:
                first.add_note(f"another call of the race raised {other!r}")
            raise first
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        assert not stuck, f"still running after {self.timeout:g} s (a deadlock?): {stuck}"
        return self.results


def concurrently(*calls: Callable[[], Any], timeout: float = TIMEOUT) -> list[Any]:
    """Run `calls` at once, each in a thread with its own connection, and return their results
    in order; the first exception any of them raised is raised here."""
    return Race(*calls, timeout=timeout).start().join()
