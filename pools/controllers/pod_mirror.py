"""The pod mirror: a real cluster's pods, kept in the read model the pages, the autoscaler,
metering and chargeback use (`pools.models.Pod`), by list + watch as client-go's informers do.

- No cursor yet, the API server answers 410 Gone (the resourceVersion is older than it
  keeps), or it has not reached the cursor (its etcd restored from a backup, or another
  cluster): list every pod (one consistent snapshot, paginated), state them all, mark deleted
  the mirrored pods the list lacks, and watch from the list's resourceVersion.
- Watch with bookmarks; after each batch of events the cursor (`WatchCursor`) stores the last
  resourceVersion in the same database, so a mirror that stops (or an API server that
  restarts mid-watch) resumes where it was: the events since then are delivered again or for
  the first time, and applying one twice changes nothing (pools/services/pod_mirror.py).
- Events are read on a thread and applied in batches (up to `BATCH` per transaction), so a
  burst of thousands of pods costs a few statements per batch, not per pod.
- A failure (an API server away or answering 5xx/429, a connection cut, a database error) is
  retried after a backoff like client-go's Reflector: 800 ms doubling up to 30 s, back to 800 ms
  once two minutes passed without one; one WARNING when a streak of failures starts (or fails
  differently), one INFO when it ends, not a line per retry. Every call is bounded in time
  (pools/providers/kubernetes_pods.py), a silent watch connection included, and `sync` returns
  by its deadline whatever the connection does.

Run it with `manage.py mirror_pods` (a long-running process) or the `pools.tasks.pod_mirror`
task; only in Kubernetes mode (`EBCLOUD_CLUSTER=kubernetes`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import urllib3
from django.db import DatabaseError
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from pools.providers.kubernetes import refusal_text
from pools.providers.kubernetes_pods import ClusterPods, CursorAhead, WatchExpired, pod_fields
from pools.services.pod_mirror import (
    ApplyStats,
    TeamOf,
    cursor_get,
    cursor_save,
    pod_teams_refresh,
    pods_apply,
    pods_replace,
)

logger = logging.getLogger("ebcloud.pod_mirror")
BATCH = 500
WATCH_SECONDS = 60  # the server ends each watch after this; the mirror watches again
RETRY_SECONDS = 0.8  # the first retry's delay; it doubles with each failure in a row
RETRY_MAX_SECONDS = 30.0
RETRY_RESET_SECONDS = 120.0  # a failure this long after the previous one starts a new streak
_END = object()


class _Backoff:
    """client-go's Reflector backoff (`wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0)`,
    without its jitter: one mirror per cluster), and what to log: a line when a streak of
    failures starts or fails differently, not one per retry."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failures = 0
        self.last = float("-inf")  # time.monotonic() of the last failure
        self.kind = ""

    def failed(self, exc: BaseException) -> float:
        """The delay before the next try, and the failure logged if it is news."""
        now = self.clock()
        if now - self.last > RETRY_RESET_SECONDS:
            self.failures, self.kind = 0, ""
        self.failures += 1
        self.last = now
        delay = min(RETRY_MAX_SECONDS, RETRY_SECONDS * 2 ** (self.failures - 1))
        kind = f"{type(exc).__name__} {getattr(exc, 'status', '') or ''}"
        level = logging.WARNING if kind != self.kind else logging.DEBUG
        self.kind = kind
        logger.log(
            level, "pod mirror interrupted (%s): retrying from the last stored resourceVersion in %.1f s (failure %d in a row; the delay doubles up to %d s)",
            refusal_text(exc), delay, self.failures, RETRY_MAX_SECONDS,
        )  # fmt: skip
        return delay

    def healthy(self) -> None:
        if self.kind:
            logger.info("pod mirror watching again after %d failed attempt(s)", self.failures)
        self.kind = ""


@dataclass
class MirrorStats:
    listed: int = 0
    relists: int = 0
    events: int = 0
    reconnects: int = 0
    applied: ApplyStats = field(default_factory=ApplyStats)


class PodMirror:
    def __init__(
        self, source: ClusterPods | None = None, *, clock: Callable[[], datetime] = timezone.now
    ):
        self.source = source or ClusterPods()
        self.clock = clock
        self.stats = MirrorStats()
        self.team_of = TeamOf(self.source.namespace_team)
        self.backoff = _Backoff()

    def relist(self) -> str:
        """List every pod and state them all; the resourceVersion to watch from."""
        now = self.clock()
        self.team_of = TeamOf(self.source.namespace_team, self.source.namespace_teams())
        pods, resource_version = self.source.list()
        applied = pods_replace(
            [pod_fields(p, now=now) for p in pods], team_of=self.team_of, now=now
        )
        pod_teams_refresh(team_of=self.team_of)
        cursor_save(resource_version, now=now, listed=True)
        self.stats.relists += 1
        self.stats.listed += len(pods)
        self.stats.applied.add(applied)
        return resource_version

    def teams_refresh(self) -> None:
        """Read the namespaces' labels and the admins' mapping again and move the pods of a
        namespace whose team changed (before each watch, so within `WATCH_SECONDS`)."""
        self.team_of = TeamOf(self.source.namespace_team, self.source.namespace_teams())
        pod_teams_refresh(team_of=self.team_of)

    def sync(self, *, seconds: float, stop: threading.Event | None = None) -> MirrorStats:
        """Mirror for about `seconds` (forever with `seconds=float('inf')` until `stop`).

        Nothing stops it but `stop`, the deadline or a refusal no retry can mend (a 4xx other
        than 410 and 429: e.g. the role lacks a verb): an API server that goes away, a
        connection cut or a database error mid-batch (that batch rolled back) are logged and
        the watch starts again from the cursor, i.e. from what was committed."""
        deadline = time.monotonic() + seconds
        stop = stop or threading.Event()
        relist = not cursor_get().resource_version
        while not stop.is_set() and time.monotonic() < deadline:
            timeout = max(1, int(min(WATCH_SECONDS, deadline - time.monotonic())))  # an infinite deadline: WATCH_SECONDS
            try:
                resource_version = self.relist() if relist else cursor_get().resource_version
                relist = False
                self.teams_refresh()
                self._watch(resource_version, timeout, stop, deadline)
                self.backoff.healthy()
            except CursorAhead as exc:
                logger.warning("pod watch cannot resume from the stored cursor (%s): listing again", exc)
                relist = True
            except WatchExpired:
                logger.info("pod watch expired (410 Gone): listing again")
                relist = True
            except (urllib3.exceptions.HTTPError, ConnectionError, ApiException, DatabaseError) as exc:
                if isinstance(exc, ApiException) and exc.status and exc.status < 500 and exc.status != 429:
                    raise
                self.stats.reconnects += 1
                delay = self.backoff.failed(exc)
                stop.wait(max(0.0, min(delay, deadline - time.monotonic())))
        return self.stats

    def _watch(self, resource_version: str, timeout: int, stop: threading.Event, deadline: float = float("inf")) -> str:
        """One watch until the server ends it (or `stop`, or the deadline: a link gone silent
        is left to its read timeout on the reader's thread); the resourceVersion reached. Events
        the reader holds when it stops are dropped: the next watch starts from the cursor."""
        events: queue.Queue = queue.Queue(maxsize=BATCH * 4)
        done = threading.Event()  # the reader stops handing events over
        reader = threading.Thread(target=self._read, args=(resource_version, timeout, events, done), daemon=True)
        reader.start()
        try:
            return self._drain(events, reader, resource_version, stop, deadline)
        finally:
            done.set()

    def _drain(self, events: queue.Queue, reader: threading.Thread, resource_version: str, stop: threading.Event, deadline: float) -> str:
        """Apply the reader's events in batches until it ends (or `stop`, or the deadline)."""
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                batch = [events.get(timeout=min(1.0, max(0.01, deadline - time.monotonic())))]
            except queue.Empty:
                continue
            while len(batch) < BATCH and not events.empty():
                batch.append(events.get_nowait())
            ended = next((item for item in batch if item is _END or isinstance(item, BaseException)), None)
            changes = [item for item in batch if not (item is _END or isinstance(item, BaseException))]
            resource_version = self._apply(changes) or resource_version
            if ended is not None:
                reader.join()
                if isinstance(ended, BaseException):
                    raise ended
                return resource_version
        return resource_version

    def _read(self, resource_version: str, timeout: int, events: queue.Queue, done: threading.Event) -> None:
        try:
            for event in self.source.watch(
                resource_version=resource_version, timeout_seconds=timeout
            ):
                if not _hand_over(events, event, done):
                    return
            _hand_over(events, _END, done)
        except BaseException as exc:  # handed to the applying thread, which decides
            _hand_over(events, exc, done)

    def _apply(self, changes: list) -> str:
        if not changes:
            return ""
        now = self.clock()
        pods = [(e.type, pod_fields(e.pod, now=now)) for e in changes if e.type != "BOOKMARK"]
        self.stats.applied.add(pods_apply(pods, team_of=self.team_of, now=now))
        self.stats.events += len(pods)
        last = changes[-1].resource_version
        cursor_save(last, now=now)
        return last


def _hand_over(events: queue.Queue, item: object, done: threading.Event) -> bool:
    """Put the item for the applying thread; False once that one stopped listening (a full queue
    would otherwise keep the reader, and its connection, for ever)."""
    while not done.is_set():
        try:
            events.put(item, timeout=1)
            return True
        except queue.Full:
            continue
    return False
