"""The autoscaler's memory: raw recommendations and applied scale events with their times (HPA
keeps them in process; we store them in a JSONField on the pool), from which the stabilization
windows and the scaling policies' periods are read. Pure: standard library only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


def require_aware(moment: datetime, what: str) -> None:
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime")


@dataclass(frozen=True)
class ScalingHistory:
    """Raw recommendations and applied scale events, each `(timestamp, int)`, oldest first.

    An event's int is the signed node change (+2 = two nodes added, -1 = one removed).
    """

    recommendations: tuple[tuple[datetime, int], ...] = ()
    events: tuple[tuple[datetime, int], ...] = ()

    def record(
        self, *, at: datetime, recommendation: int | None = None, change: int | None = None
    ) -> ScalingHistory:
        """A new history with a raw recommendation and/or a scale event (change != 0) at `at`."""
        require_aware(at, "at")
        recs, events = self.recommendations, self.events
        if recommendation is not None:
            recs = (*recs, (at, int(recommendation)))
        if change:
            events = (*events, (at, int(change)))
        return ScalingHistory(recs, events)

    def prune(self, now: datetime, max_window: timedelta | int) -> ScalingHistory:
        """Drop entries that no window of `max_window` (seconds or timedelta) can see again."""
        require_aware(now, "now")
        span = max_window if isinstance(max_window, timedelta) else timedelta(seconds=max_window)
        cutoff = now - span
        return ScalingHistory(
            tuple(item for item in self.recommendations if item[0] > cutoff),
            tuple(item for item in self.events if item[0] > cutoff),
        )

    def recommendations_within(self, now: datetime, seconds: int) -> list[int]:
        cutoff = now - timedelta(seconds=seconds)
        return [value for at, value in self.recommendations if at > cutoff]

    def changes_within(self, now: datetime, seconds: int) -> tuple[int, int]:
        """(nodes added, nodes removed) by events after `now - seconds` (HPA's getReplicasChangePerPeriod)."""
        cutoff = now - timedelta(seconds=seconds)
        added = sum(change for at, change in self.events if at > cutoff and change > 0)
        removed = -sum(change for at, change in self.events if at > cutoff and change < 0)
        return added, removed

    def to_json(self) -> dict[str, list[list[Any]]]:
        """A JSON-safe dict (ISO 8601 timestamps with offsets) for a JSONField."""
        return {
            "recommendations": [[at.isoformat(), value] for at, value in self.recommendations],
            "events": [[at.isoformat(), change] for at, change in self.events],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | None) -> ScalingHistory:
        """Inverse of `to_json`; also accepts the JSON text, or None/{} for an empty history."""
        if isinstance(data, str):
            data = json.loads(data)
        data = data or {}

        def pairs(key: str) -> tuple[tuple[datetime, int], ...]:
            items = []
            for stamp, value in data.get(key, []):
                at = datetime.fromisoformat(stamp)
                require_aware(at, f"{key} timestamp {stamp!r}")
                items.append((at, int(value)))
            return tuple(sorted(items, key=lambda item: item[0]))

        return cls(pairs("recommendations"), pairs("events"))
