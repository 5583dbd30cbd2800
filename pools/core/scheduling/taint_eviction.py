"""NoExecute taints evict the running pods that do not tolerate them, as Kubernetes' taint
manager does (k8s.io/kubernetes pkg/controller/tainteviction; docs: concepts/scheduling-eviction/
taint-and-toleration). Pure: plain data in, a verdict out; no Django here.

The rules, Kubernetes' own:
- only NoExecute taints count (NoSchedule and PreferNoSchedule never move a running pod);
- each NoExecute taint is matched by the *first* of the pod's tolerations that tolerates it
  (``GetMatchingTolerations``); a taint no toleration tolerates evicts the pod at once;
- a matching toleration without ``tolerationSeconds`` tolerates the taint forever; with it, the
  pod may stay that many seconds, counted from when the taint was added, and zero or a negative
  number means at once (``getMinTolerationTime``); the soonest deadline over the node's taints wins;
- a pod bound after the taint was added has its full ``tolerationSeconds`` from its binding:
  the taint manager starts the pod's clock when it sees the pod on the tainted node.
These deletions are not Eviction-API evictions: PodDisruptionBudgets do not apply.

When a taint was added: Kubernetes' ``Taint.timeAdded`` (RFC 3339), kept here as the key
``timeAdded`` of the stored taint dict. A NoExecute taint stored without it (the pool's spec
rolled out by node_sync, a registration, an admin's edit of the Node row) is dated by the first
scheduler pass that sees it (:func:`with_time_added`): the taint manager also starts its clock
when it observes the node's update, and the simulated cluster observes once per pass. A taint
whose time is unknown, unreadable or in the future counts as added now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pools.core.scheduling.nodes import NO_EXECUTE, Taint, Toleration

TIME_ADDED = "timeAdded"  # Kubernetes' Taint.timeAdded, on the stored taint dicts
TOLERATION_SECONDS = "tolerationSeconds"  # Kubernetes' Toleration.tolerationSeconds, on the stored toleration dicts
EVICTION_REASON = "TaintManagerEviction"  # the taint manager's event reason


@dataclass(frozen=True)
class TimedTaint:
    """A node's taint and when it was added (None: unknown, counts as now)."""

    taint: Taint
    added: datetime | None = None


@dataclass(frozen=True)
class TimedToleration:
    """A pod's toleration and its ``tolerationSeconds`` (None: tolerates forever)."""

    toleration: Toleration
    seconds: int | None = None


@dataclass(frozen=True)
class Eviction:
    """When a pod must leave its node, and which NoExecute taint decides it. ``seconds`` is the
    ``tolerationSeconds`` of the toleration that ran out, None when no toleration tolerates the
    taint (then ``at`` is now)."""

    taint: Taint
    at: datetime
    seconds: int | None = None

    @property
    def tolerated(self) -> bool:
        return self.seconds is not None

    def due(self, now: datetime) -> bool:
        return self.at <= now


def noexecute_eviction(
    taints: Iterable[TimedTaint], tolerations: Sequence[TimedToleration], *, now: datetime, bound_at: datetime | None = None
) -> Eviction | None:
    """When a pod bound at ``bound_at`` on a node with ``taints`` must leave it (``due(now)``:
    now), or None when it may stay for ever (module docstring)."""
    soonest: Eviction | None = None
    for timed in taints:
        taint = timed.taint
        if taint.effect != NO_EXECUTE:
            continue
        used = next((t for t in tolerations if t.toleration.tolerates(taint)), None)
        if used is None:
            return Eviction(taint, now)
        if used.seconds is None:
            continue
        start = timed.added or now
        if bound_at is not None and bound_at > start:
            start = bound_at
        try:
            at = min(start, now) + timedelta(seconds=max(used.seconds, 0))
        except OverflowError:  # past the calendar's end (the API takes any int64): it stays for ever
            continue
        if soonest is None or at < soonest.at:
            soonest = Eviction(taint, at, used.seconds)
    return soonest


def eviction_message(pod: str, node: str, eviction: Eviction) -> str:
    """The event's message: the taint manager's words, then why."""
    taint = eviction.taint
    shown = f"{{{taint.key}: {taint.value}}}:{taint.effect}"
    if not eviction.tolerated:
        why = f"node {node} has taint {shown}, which the pod does not tolerate"
    else:
        why = f"node {node} has taint {shown}, which the pod tolerates for {eviction.seconds}s only"
    return f"Marking for deletion Pod {pod}: {why}"


def eviction_explanation(node: str, eviction: Eviction) -> str:
    """The pod's explanation once it left its node (words of the pod's DisruptionTarget condition)."""
    taint = eviction.taint
    tolerated = f", tolerated for {eviction.seconds}s only" if eviction.tolerated else ", not tolerated"
    return (
        f"Taint manager: deleting due to NoExecute taint {{{taint.key}: {taint.value}}} of node {node}{tolerated};"
        " the pod is Pending again."
    )


# --- stored shapes (the Node row's taint dicts, the Pod row's toleration dicts) -------------


def time_added_of(value: Any) -> datetime | None:
    """A stored ``timeAdded`` (RFC 3339) as an aware datetime, None when missing or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def time_added_text(moment: datetime) -> str:
    """RFC 3339 in UTC, as Kubernetes writes ``timeAdded``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def timed_taints(stored: Iterable[Mapping[str, Any]]) -> tuple[TimedTaint, ...]:
    """A Node row's taints with their times added."""
    return tuple(
        TimedTaint(Taint(t["key"], t.get("value") or "", t["effect"]), time_added_of(t.get(TIME_ADDED))) for t in stored
    )


def timed_tolerations(stored: Iterable[Mapping[str, Any]]) -> tuple[TimedToleration, ...]:
    """A Pod row's tolerations with their ``tolerationSeconds`` (an int when given)."""
    result = []
    for t in stored:
        toleration = Toleration.stored(t)
        if toleration is None:
            continue
        seconds = t.get(TOLERATION_SECONDS)
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            seconds = None
        result.append(TimedToleration(toleration, seconds))
    return tuple(result)


def has_noexecute(stored: Iterable[Mapping[str, Any]]) -> bool:
    return any(isinstance(t, Mapping) and t.get("effect") == NO_EXECUTE for t in stored)


def with_time_added(stored: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]] | None:
    """The node's taints with ``timeAdded`` set to ``now`` on each NoExecute taint that has no
    readable one (module docstring), or None when every NoExecute taint has one already."""
    if not any(t.get("effect") == NO_EXECUTE and time_added_of(t.get(TIME_ADDED)) is None for t in stored):
        return None
    stamp = time_added_text(now)
    return [
        {**t, TIME_ADDED: stamp} if t.get("effect") == NO_EXECUTE and time_added_of(t.get(TIME_ADDED)) is None else dict(t)
        for t in stored
    ]


def carried_time_added(before: Iterable[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The taints ``after`` with the ``timeAdded`` of the same taint (key, value, effect) in
    ``before``: rewriting a node's taints (a pool's spec changed) must not restart the
    countdown of a NoExecute taint that stays, as Kubernetes keeps timeAdded on an update."""
    times = {(t.get("key"), t.get("value", ""), t.get("effect")): t[TIME_ADDED] for t in before if t.get(TIME_ADDED)}
    return [
        {**t, TIME_ADDED: times[key]} if (key := (t.get("key"), t.get("value", ""), t.get("effect"))) in times else dict(t)
        for t in after
    ]
