"""The one claim mechanism of the controllers (design §5): a pool is worked on by one worker at a
time, claimed by a conditional UPDATE on `PoolClaim.version` (check the row count), so any
number of workers on any number of hosts can run the loops. Claims expire after
`EBCLOUD_RECONCILE_CLAIM_SECONDS` (wall clock), so a worker killed mid-pass does not hold a pool
for ever. One pool at a time (`claim_acquire` / `claim_release`) or many at once (`Claims`,
with `claims_seen` for the passes that write only to unclaimed pools).

A pass over every pool can also be split by pool id over workers (`Part`, issue 23): an hour's
metering, a tick of the lifecycle controller or of the autoscaler. Every worker splits the same
way, so the parts of one pass never share a pool and together are every pool, each once. Such a
pass runs with the garbage collector held off (`collector_paused`)."""

from __future__ import annotations

import gc
import os
import socket
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import BigIntegerField, F, Q, QuerySet
from django.db.models.functions import Mod
from django.utils import timezone

from pools.models import PoolClaim

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def claim_ttl() -> timedelta:
    """How long a claim holds before another worker may take the pool over (wall clock)."""
    return timedelta(seconds=settings.EBCLOUD_RECONCILE_CLAIM_SECONDS)


@dataclass(frozen=True)
class ClaimsSeen:
    """The claims of some pools at one moment: which are held, and every claim's version (it
    grows with each claim taken, so a write can tell that someone claimed a pool since)."""

    busy: frozenset[int]
    versions: dict[int, int]


def claims_seen(pool_ids: Iterable[int]) -> ClaimsSeen:
    wall = timezone.now()
    rows = list(PoolClaim.objects.filter(pool_id__in=list(pool_ids)).values_list("pool_id", "version", "claimed_until"))
    return ClaimsSeen(
        busy=frozenset(pk for pk, _, until in rows if until is not None and until > wall),
        versions={pk: version for pk, version, _ in rows},
    )


class Claims:
    """The pools one pass acts on: taken with one conditional UPDATE under a token unique to the
    pass (design §5), so a second worker running at the same moment gets none of them; an
    expired claim of a dead worker is taken over. Use as a context manager: released on exit.
    Pools where nothing is to be done are not claimed (their status is written by one UPDATE
    that skips claimed pools), so two passes at the same moment do not starve each other."""

    def __init__(self, pool_ids: Iterable[int], *, owner: str):
        self.token = f"{owner[:80]}:{uuid.uuid4().hex[:12]}"
        self.requested = list(pool_ids)
        self.versions: dict[int, int] = {}
        self.renewed_at: datetime | None = None

    def __enter__(self) -> Claims:
        if not self.requested:
            return self
        wall = timezone.now()
        have = set(PoolClaim.objects.filter(pool_id__in=self.requested).values_list("pool_id", flat=True))
        if missing := [pk for pk in self.requested if pk not in have]:
            PoolClaim.objects.bulk_create([PoolClaim(pool_id=pk) for pk in missing], ignore_conflicts=True)
        PoolClaim.objects.filter(pool_id__in=self.requested).filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=wall)).update(
            owner=self.token, claimed_until=wall + claim_ttl(), version=F("version") + 1
        )
        self.versions = dict(PoolClaim.objects.filter(pool_id__in=self.requested, owner=self.token).values_list("pool_id", "version"))
        self.renewed_at = wall
        return self

    def __exit__(self, *exc) -> None:
        if self.versions:
            PoolClaim.objects.filter(owner=self.token).update(owner="", claimed_until=None)

    def __contains__(self, pool_id: int) -> bool:
        return pool_id in self.versions

    def keep_alive(self) -> None:
        """Extend the claims when half their time is gone (a long pass keeps its pools)."""
        wall = timezone.now()
        if self.versions and self.renewed_at is not None and wall - self.renewed_at > claim_ttl() / 2:
            PoolClaim.objects.filter(owner=self.token).update(claimed_until=wall + claim_ttl())
            self.renewed_at = wall




def claim_acquire(*, pool_id: int, owner: str = WORKER_ID) -> int | None:
    """The claim's new version if this worker won it; None if another worker holds it.

    Claims expire (`EBCLOUD_RECONCILE_CLAIM_SECONDS`, wall-clock) so a worker killed mid-pass
    does not block the pool for ever.
    """
    wall = timezone.now()
    PoolClaim.objects.get_or_create(pool_id=pool_id)
    row = PoolClaim.objects.filter(pk=pool_id).values("version", "claimed_until").first()
    if row is None or (row["claimed_until"] is not None and row["claimed_until"] > wall):
        return None
    ttl = claim_ttl()
    won = (
        PoolClaim.objects.filter(pk=pool_id, version=row["version"])
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=wall))
        .update(owner=owner[:100], claimed_until=wall + ttl, version=row["version"] + 1)
    )
    return row["version"] + 1 if won else None


def claim_release(*, pool_id: int, version: int) -> None:
    PoolClaim.objects.filter(pk=pool_id, version=version).update(owner="", claimed_until=None)


@dataclass(frozen=True, order=True)
class Part:
    """The pools whose id is `index` modulo `count` (`Part()`: all of them)."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"part {self.index} of {self.count}: the index must be at least 0 and below the count")

    def of(self, rows: QuerySet, pool_field: str = "pool_id") -> QuerySet:
        """`rows` of this part's pools (all of them when the pass is one part)."""
        if self.count == 1:
            return rows
        # An integer modulo (Django's Mod is numeric by default: `mod(id, 2)::numeric = 1.0`).
        part = Mod(pool_field, self.count, output_field=BigIntegerField())
        return rows.alias(pool_part=part).filter(pool_part=self.index)

    @classmethod
    def all_of(cls, count: int) -> list[Part]:
        return [cls(index, count) for index in range(count)]


WHOLE = Part()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector for one pass over the pools (a decorator too).

    A pass allocates its objects by the hundred thousand (an hour's metering ~10^6: records,
    their dicts, allocation rows; a tick the rows of 1,000 pools) and keeps them to its end,
    and next to none form cycles (a tick over 500 pools leaves fewer than 20 unreachable); yet
    every 700 allocations the collector runs and, as the survivors pile up, rescans them and
    the worker's own long-lived objects: a third of metering's CPU time (issue 9) and a sixth
    of a tick's Python (issue 23). It is switched back on (if it was on) when the pass ends,
    whatever happens; what the pass left unreachable is collected then.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
