"""Capacity (water-level) alerts: each pool's `spec.alerts` rules, evaluated every minute
(issue 6 §6, issue 20; seed T4, O4, the comparison table's "capacity water-level alerts").

The rules and their defaults are in pools/core/alerting.py. How each is read:
- `HighGpuAllocation`, `LowGpuUtilization`, `NodesNotReady`: over the per-minute PoolSamples.
  A rule holds when every sample in its window satisfies it and the samples reach back to the
  window's start, so it fires when the condition has lasted the pool's `for`, not before.
- `PodsPendingTooLong`: over the Pending pods each pool would take (the autoscaler's
  `queued_pods`): one that has waited longer than the pool's `olderThan`.

Each rule is one aggregate query for all pools (windows that differ per pool are OR-ed into the
one statement), so the statements do not grow with the number of pools.

A rule that holds opens an *episode* (AlertEpisode), which lasts while later evaluations still
find it holding (a gap of EPISODE_GAP ends it: the next evaluation that finds the rule holding
marks it ended and opens another). A (pool, rule) has at most one open episode, whatever the
workers do, and opening one, its event and its notification commit together: one lasting
condition writes one Warning PoolEvent and tells the team once (pools.services.notifications). While a lead's AlertSilence
covers the rule the event is still written but nobody is told; when the silence ends and the
episode still lasts, the team is told then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, FloatField, Max, Min, Q
from django.db.models.functions import Cast
from django.utils import timezone

from monitoring.models import AlertEpisode, AlertSilence, PoolSample
from monitoring.selectors import pending_pods_by_pool
from pools.core.alerting import DEFAULT_ALERTS, RULES_BY_REASON, AlertRules, parse_alerts
from pools.core.durations import format_duration
from pools.core.fields import Checker
from pools.models import GpuNodePool, PoolEvent
from pools.services.events import WARNING, event_record
from pools.services.notifications import notification_raise

HIGH, LOW, PENDING, NOT_READY = "HighGpuAllocation", "LowGpuUtilization", "PodsPendingTooLong", "NodesNotReady"
LOOKBACK = timedelta(minutes=1)  # a window's first sample is stamped with the start of its minute
EPISODE_GAP = timedelta(minutes=5)  # not seen holding for this long: the episode is over


@dataclass(frozen=True)
class Firing:
    pool_id: int
    reason: str
    detail: str


def alert_rules_of(pools: Iterable[GpuNodePool]) -> dict[int, AlertRules]:
    """Each pool's rules from its stored (already validated) document."""
    out = {}
    for pool in pools:
        spec = pool.document.get("spec") if isinstance(pool.document, dict) else None
        check = Checker()
        rules = parse_alerts(check, spec.get("alerts", {}) if isinstance(spec, dict) else {})
        out[pool.pk] = DEFAULT_ALERTS if check.errors else rules
    return out


def alerts_evaluate(*, now: datetime | None = None) -> list[PoolEvent]:
    """Open an episode for every rule that holds now and was not holding; returns the events
    written (one per new episode)."""
    now = now or timezone.now()
    pools = {p.pk: p for p in GpuNodePool.objects.active().select_related("team", "gpu_model", "zone")}
    rules = alert_rules_of(pools.values())
    firings = [*sampled_firings(rules, now), *pending_firings(pools, rules, now)]
    if not firings:
        return []
    return episodes_record(firings, pools, rules, now)


def window_filter(rules: dict[int, AlertRules], reason: str, now: datetime) -> Q | None:
    """Each pool's window as one filter: pools that share a window share a clause."""
    by_window: dict[int, list[int]] = defaultdict(list)
    for pool_id, pool_rules in rules.items():
        rule = pool_rules.rule(reason)
        if rule.enabled:
            by_window[rule.window_s].append(pool_id)
    if not by_window:
        return None
    clauses = Q()
    for window_s, pool_ids in sorted(by_window.items()):
        clauses |= Q(pool_id__in=pool_ids, minute__gt=now - timedelta(seconds=window_s) - LOOKBACK)
    return clauses


def covers(first_minute: datetime, now: datetime, window_s: int) -> bool:
    return first_minute <= now - timedelta(seconds=window_s)


def sampled_firings(rules: dict[int, AlertRules], now: datetime) -> list[Firing]:
    out: list[Firing] = []
    if (where := window_filter(rules, LOW, now)) is not None:
        rows = (PoolSample.objects.filter(where, gpu_util_avg__isnull=False).values("pool_id")
                .annotate(first=Min("minute"), worst=Max("gpu_util_avg")).order_by())  # fmt: skip
        for row in rows:
            rule = rules[row["pool_id"]].utilization_low
            if row["worst"] < rule.threshold and covers(row["first"], now, rule.window_s):
                out.append(Firing(row["pool_id"], LOW, f"highest sample {row['worst']:.0f}%"))
    if (where := window_filter(rules, HIGH, now)) is not None:
        rows = (PoolSample.objects.filter(where, allocated_gpus__isnull=False, capacity_gpus__gt=0)
                .annotate(ratio=Cast(F("allocated_gpus"), FloatField()) / Cast(F("capacity_gpus"), FloatField()))
                .values("pool_id").annotate(first=Min("minute"), lowest=Min("ratio")).order_by())  # fmt: skip
        for row in rows:
            rule = rules[row["pool_id"]].allocation_high
            if row["lowest"] > rule.threshold / 100 and covers(row["first"], now, rule.window_s):
                out.append(Firing(row["pool_id"], HIGH, f"lowest sample {row['lowest']:.0%}"))
    if (where := window_filter(rules, NOT_READY, now)) is not None:
        rows = (PoolSample.objects.filter(where, not_ready_nodes__isnull=False).values("pool_id")
                .annotate(first=Min("minute"), fewest=Min("not_ready_nodes")).order_by())  # fmt: skip
        for row in rows:
            rule = rules[row["pool_id"]].nodes_not_ready
            if row["fewest"] >= rule.threshold and covers(row["first"], now, rule.window_s):
                out.append(Firing(row["pool_id"], NOT_READY, f"at least {row['fewest']} throughout"))
    return out


def pending_firings(pools: dict[int, GpuNodePool], rules: dict[int, AlertRules], now: datetime) -> list[Firing]:
    watched = [pools[pk] for pk, r in rules.items() if r.pending_pods.enabled]
    out = []
    for pool_id, waiting in pending_pods_by_pool(watched).items():
        older_than = timedelta(seconds=rules[pool_id].pending_pods.window_s)
        late = [pod for pod in waiting if pod.pending_since <= now - older_than]
        if late:
            oldest = late[0]
            waited = format_duration(int((now - oldest.pending_since).total_seconds()) // 60 * 60)
            out.append(Firing(pool_id, PENDING, f"{len(late)} waiting; the oldest, {oldest.namespace}/{oldest.name}, for {waited}"))
    return out


# What adds nodes to a pool that does not burst: raising nodeCount.max alone adds none.
NO_BURST_ADVICE = "raise nodeCount.min for more monthly nodes, or enable burst (with nodeCount.max above the min) to add on-demand nodes"


def rule_message(reason: str, rules: AlertRules, *, bursts: bool, burst_max_nodes: int = 0) -> str:
    """What the rule means and what to do, in plain words with the pool's own numbers; the
    advice on capacity follows whether the pool bursts (`GpuNodePool.bursts`) and the cap on
    its burst nodes (`spec.burst.maxNodes`, which nodeCount.max does not lift), as Diagnose's."""
    rule = rules.rule(reason)
    span = format_duration(rule.window_s)
    if reason == HIGH:
        cap = f" (and spec.burst.maxNodes, which holds it to {burst_max_nodes} burst node(s))" if burst_max_nodes else ""
        grow = (f"raise nodeCount.max{cap} so the autoscaler may add burst nodes, or nodeCount.min for more monthly nodes" if bursts
                else f"the pool does not burst: {NO_BURST_ADVICE}")  # fmt: skip
        return f"allocated GPUs above {rule.threshold}% of capacity for {span}: {grow}"
    if reason == LOW:
        return (f"mean GPU utilisation below {rule.threshold}% for {span}: look for IO-bound data loading or an "
                "oversized GPU spec; pack work with the fragmentation report and shrink the pool")  # fmt: skip
    if reason == PENDING:
        waited = f"pods that fit the pool have waited more than {span}"
        if not bursts:
            return (f"{waited}: the pool does not burst, so no node is added for them; {NO_BURST_ADVICE}. "
                    "If its nodes are on their way, check the pool's events for stock, quota or payment")  # fmt: skip
        return (f"{waited} (a new node usually takes 5 to 10 minutes): "
                "check the pool's events for stock, quota or payment, and prewarm the system image")  # fmt: skip
    nodes = "a node" if rule.threshold == 1 else f"{rule.threshold} or more nodes"
    return f"{nodes} not ready for {span} (heartbeat lost or under repair): check the nodes' events and the node agent"


def episodes_record(firings: list[Firing], pools: dict[int, GpuNodePool], rules: dict[int, AlertRules], now: datetime) -> list[PoolEvent]:
    """Continue the open episodes, open new ones (event + notification), and tell the team about
    open episodes whose silence has ended. Statements per evaluation: a fixed few, plus a few
    per new episode and per notification sent.

    An episode opens in one transaction with its event and its notification, so a worker that
    dies half-way leaves nothing and the next evaluation opens it again. At most one episode
    per (pool, rule) is open (a partial unique constraint): of two workers opening one at once,
    even in different minutes, the second's insert waits for the first and fails."""
    pool_ids = {f.pool_id for f in firings}
    reasons = {f.reason for f in firings}
    open_episodes, over = {}, []
    for e in AlertEpisode.objects.filter(pool_id__in=pool_ids, rule__in=reasons, ended_at__isnull=True):
        if e.last_seen_at >= now - EPISODE_GAP:
            open_episodes[(e.pool_id, e.rule)] = e
        else:
            over.append(e.pk)
    if over:  # not seen holding for EPISODE_GAP: ended, so that the next one may open
        AlertEpisode.objects.filter(pk__in=over, ended_at__isnull=True).update(ended_at=F("last_seen_at"))
    silenced = set(AlertSilence.objects.filter(pool_id__in=pool_ids, rule__in=reasons, until__gt=now).values_list("pool_id", "rule"))
    continuing = [open_episodes[(f.pool_id, f.reason)] for f in firings if (f.pool_id, f.reason) in open_episodes]
    if continuing:
        AlertEpisode.objects.filter(pk__in=[e.pk for e in continuing]).update(last_seen_at=now)
    for episode in continuing:
        if episode.notified_at is None and (episode.pool_id, episode.rule) not in silenced:
            with transaction.atomic():  # told once, by whichever worker marks it
                if AlertEpisode.objects.filter(pk=episode.pk, notified_at__isnull=True).update(notified_at=now):
                    episode_tell(episode, pools[episode.pool_id], rules[episode.pool_id], now, detail="still holding after a silence ended")
    events = []
    for firing in firings:
        if (firing.pool_id, firing.reason) in open_episodes:
            continue
        pool = pools[firing.pool_id]
        tell = (firing.pool_id, firing.reason) not in silenced
        message = f"{rule_message(firing.reason, rules[pool.pk], bursts=pool.bursts, burst_max_nodes=pool.burst_max_nodes)} ({firing.detail})"
        try:
            with transaction.atomic():
                episode = AlertEpisode.objects.create(
                    pool=pool, rule=firing.reason, started_at=now.replace(second=0, microsecond=0), last_seen_at=now,
                    notified_at=now if tell else None,
                )  # fmt: skip
                event = event_record(pool=pool, type=WARNING, reason=firing.reason, now=now, message=message)
                if tell:
                    episode_tell(episode, pool, rules[pool.pk], now, detail=firing.detail)
        except IntegrityError:  # another worker opened it meanwhile
            continue
        events.append(event)
    return events


def episode_tell(episode: AlertEpisode, pool: GpuNodePool, rules: AlertRules, now: datetime, *, detail: str) -> None:
    info = RULES_BY_REASON[episode.rule]
    rule = rules.rule(episode.rule)
    notification_raise(
        team=pool.team, pool=pool, kind=episode.rule, now=now,
        key=f"capacity:{episode.rule}:{pool.pk}:{episode.started_at:%Y%m%dT%H%M}",
        message=f"Pool {pool.name}: {rule_message(episode.rule, rules, bursts=pool.bursts, burst_max_nodes=pool.burst_max_nodes)} ({detail})",
        payload={"rule": info.field, "threshold": rule.threshold, "window": format_duration(rule.window_s),
                 "since": episode.started_at.isoformat()},
    )  # fmt: skip
