"""Offline replay of a workload through the pool's own cores (seed G4, O1, O4, D3, T6, C2).

A virtual-clock, discrete-event simulation of ONE node pool: a monthly baseline of
``PoolConfig.monthly_nodes`` nodes (leased, Ready all the time, paid whether used or not) plus
on-demand burst nodes up to ``max_nodes``. The same pure cores as the live controller decide:

- placement: :class:`pools.core.scheduling.cluster.ClusterScheduler` (policy ``bestfit`` by
  default; equal scores go to the smallest name, and monthly nodes are named ``m-NN`` before
  burst nodes ``od-NN``, so paid-for capacity fills first). Pending pods are retried in
  arrival (FIFO) order whenever capacity changes; a pod that does not fit does not block the
  ones behind it (kube-scheduler's queue, not a strict FIFO).
- scaling: :func:`pools.core.autoscaling.decide` every ``tick_seconds`` (30 s), with metrics taken
  from the simulated state: ``gpu-memory`` = GPU memory in use on Ready nodes, in percent
  (each pod uses ``SimPod.memory_use`` of the GPU memory it was allocated; 1.0 by default, so
  it is the allocated GPU share), ``queued_pods`` = pending pods. With no Ready node the
  utilisation is not reported (the core then abstains or holds).
- the decision changes BURST nodes only (``min_nodes`` = the monthly baseline, so the core
  never asks to go below it, and removal only ever picks ``od-*`` nodes):
  * scale-up runs Cluster Autoscaler's fit simulation first: pending pods are packed (FIFO,
    first fit) onto the nodes still provisioning and then onto template nodes of the pool;
    only the template nodes some pending pod needs are added (at most what ``decide``
    allowed). A pod that would not fit even an empty template is recorded
    (``NotTriggerScaleUp`` with the scheduler's reason) and never causes a node to be added.
  * scale-down removes, in this order: burst nodes still provisioning (newest first), empty
    Ready burst nodes, then Ready burst nodes whose pods all fit on the remaining Ready nodes
    (monthly nodes tried first: they are already paid). Such pods are *moved* (unbind + bind,
    counted in ``pods_moved``; modelled as instantaneous, the restart cost is not simulated).
    A node whose pods cannot move stays; the shortfall is recorded as ``ScaleDownBlocked``.
  * the history stored for the next tick holds the node change actually made, as the
    autoscaling docstring requires.
  * Cluster Autoscaler's unneeded-node rule (``remove_unneeded``, on by default): a Ready
    burst node that has held no pod for the whole scale-down stabilization window is removed
    even when HPA's arithmetic keeps the count (with big nodes it does: 2 busy nodes of 3 are
    66.7 % utilised, and ceil(3 x 66.7 / 85) = 3, so the idle third node would be paid for
    ever). The scale-down policies still limit the rate (``scale_down_limit``), and the
    removal is stored in the history like any scale event (``ScaleDownUnneeded``).
- a burst node becomes Ready ``provisioning_seconds`` (default 300 s, the article's O4
  "trigger -> node Ready -> pod Running 5-10 min") after it was requested and only then
  accepts pods (until then it carries the not-ready taint, exactly as in the live scheduler).

Billing (seed C2 prices by default: 20,000 a month, 100 an hour for an 8-card A100_80G node):
- monthly node-hours = baseline nodes x the whole window, priced at monthly price / 730 per
  hour (the amortised lease; ``PriceModel.hours_per_month``);
- on-demand node-hours run from the scale-up request (provisioning is billed, as clouds bill
  from instance launch) to removal or the end of the window; ``on_demand_billing="second"``
  bills exactly those seconds, ``"hour"`` rounds every node lifetime up to started hours;
- ``cost_exact`` is the exact Fraction  monthly_seconds/3600 x M/730 + billed_seconds/3600 x P;
  ``total_cost`` is that, rounded half-up to the cent (Decimal).

Time advances from event to event (arrival, departure, node Ready) plus the 30 s autoscaler
grid, and ticks that provably repeat the previous one are skipped: with nothing changed since
a tick that scaled nothing, later ticks see the same metrics, raw recommendation and fit/move
outcomes, and only the windows slide. They repeat it until a stored recommendation that
differs from the current one leaves the up or down window, a scale event leaves a policy
period, an empty burst node reaches its unneeded deadline, or the next event. Storing one
recommendation at the last skipped tick leaves every later window min/max as all of them
would; ``blocked`` still counts every skipped tick. ``replay(..., fast_forward=False)``
evaluates every tick, and the tests check that both give identical results. A pool with
``min == max`` has nothing to decide and runs no ticks. A 30-day replay takes seconds.

Pure: standard library plus the pools/billing cores; no Django, no wall clock.
"""


from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

from billing.lease_costs import quantize_money
from pools.core.autoscaling import SCALE_DOWN_UNNEEDED, decide
from pools.core.scaling_history import ScalingHistory
from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.nodes import MILLI, NodeState, best_fit_gpus, filter_node
from pools.simulation.model import (
    EPOCH,
    HOUR,
    NO_PENDING_FIT,
    NOT_TRIGGER_SCALE_UP,
    SCALE_DOWN_BLOCKED,
    Activity,
    PoolConfig,
    PriceModel,
    Sample,
    SimPod,
    SimResult,
    cost_of,
    percentile,
)
from pools.simulation.scale_down import ScaleDown

_READY, _DEPART, _ARRIVE = 0, 1, 2  # event order at equal times: capacity first


class _Replay(ScaleDown):
    def __init__(
        self,
        workload: Sequence[SimPod],
        pool: PoolConfig,
        prices: PriceModel,
        duration_seconds: int,
        start: datetime,
        keep_timeline: bool,
        fast_forward: bool = True,
    ) -> None:
        if duration_seconds <= 0:
            raise ValueError("duration_seconds must be positive")
        self.pool, self.prices, self.end, self.start = pool, prices, duration_seconds, start
        self.keep_timeline, self.fast_forward = keep_timeline, fast_forward
        self.monthly_names = [f"m-{i:03d}" for i in range(pool.monthly_nodes)]
        self.burst_names = [f"od-{i:03d}" for i in range(pool.burst_slots)]
        nodes = [pool.node(n) for n in self.monthly_names + self.burst_names]
        for node in nodes[pool.monthly_nodes :]:
            node.ready, node.unschedulable = False, True  # absent until requested and Ready
        self.sched = ClusterScheduler(nodes, pool.policy)
        self.template = pool.node("template")
        # burst slot -> (requested_at, ready_at); absent slots are not in the dict
        self.burst: dict[str, tuple[int, int]] = {}
        self.lifetimes: list[int] = []
        self.pending: list[SimPod] = []
        self.running: dict[str, tuple[SimPod, str, int]] = {}  # pod -> (item, node, end)
        self.events: list[tuple[int, int, int, object]] = []
        self.seq = 0
        self.items = sorted(
            (w for w in workload if 0 <= w.arrival < duration_seconds),
            key=lambda w: (w.arrival, w.pod.name),
        )
        names = [w.pod.name for w in self.items]
        if len(set(names)) != len(names):
            raise ValueError("pod names must be unique within a workload")
        for item in self.items:
            self._push(item.arrival, _ARRIVE, item)
        self.history = ScalingHistory()
        self.waits: list[int] = []
        self.start_times: dict[str, int] = {}
        self.finished = 0
        self.served_milli_seconds = 0
        self.used_weighted = 0.0  # GPU milli x memory_use over running pods
        self.counters = Counter()
        self.blocked: Counter = Counter()
        self.activities: list[Activity] = []
        self.timeline: list[Sample] = []
        self.hourly = [0] * math.ceil(duration_seconds / HOUR)
        self.busy_hour, self.busy = 0, 0
        self.max_seen = pool.monthly_nodes
        self._last_key: tuple | None = None
        self._last_blocked = ""
        spec = pool.spec
        spans = (
            spec.scale_up.stabilization_window_seconds,
            spec.scale_down.stabilization_window_seconds,
        )
        self._windows = [(timedelta(seconds=w), w) for w in set(spans)]
        periods = {p.period_seconds for p in (*spec.scale_up.policies, *spec.scale_down.policies)}
        self._periods = [(timedelta(seconds=w), w) for w in periods]
        self.empty_since: dict[str, int] = {}  # Ready burst node -> when it last became empty

    # -- events -----------------------------------------------------------------------

    def _push(self, t: int, kind: int, data: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, data))

    def _start_pod(self, item: SimPod, node: str, gpus: tuple[int, ...], now: int) -> None:
        self.sched.bind(item.pod, node, gpus)
        self.empty_since.pop(node, None)
        end = now + item.duration
        self.running[item.pod.name] = (item, node, end)
        self.waits.append(now - item.arrival)
        self.start_times[item.pod.name] = now
        self.used_weighted += item.gpu_milli * item.memory_use
        self._push(end, _DEPART, item.pod.name)

    def _schedule(self, candidates: list[SimPod], now: int) -> None:
        """Place ``candidates`` (a FIFO-ordered part of the queue); the rest stay pending."""
        failed_shapes: set[tuple] = set()
        placed: set[str] = set()
        for item in candidates:
            key = item.pod.shape_key
            if key in failed_shapes:
                continue
            decision = self.sched.schedule(item.pod, explain_failure=False)
            if decision.node is None:
                failed_shapes.add(key)
                continue
            self._start_pod(item, decision.node, decision.gpu_indices, now)
            placed.add(item.pod.name)
        if placed:
            self.pending = [p for p in self.pending if p.pod.name not in placed]

    def _process_events(self, t: int) -> None:
        capacity_grew, arrived = False, []
        while self.events and self.events[0][0] == t:
            _, kind, _, data = heapq.heappop(self.events)
            if kind == _READY:
                name = data
                if name in self.burst and self.burst[name][1] == t:
                    node = self.sched.node(name)
                    node.ready, node.unschedulable = True, False
                    self.sched.touch(name)
                    self.empty_since[name] = t
                    capacity_grew = True
            elif kind == _DEPART:
                entry = self.running.pop(data, None)
                if entry is None:
                    continue
                item, node, _ = entry
                self.sched.unbind(item.pod.name, node)
                if node in self.burst and not self.sched.node(node).bound:
                    self.empty_since[node] = t
                self.finished += 1
                self.served_milli_seconds += item.gpu_milli * item.duration
                self.used_weighted -= item.gpu_milli * item.memory_use
                capacity_grew = True
            else:
                self.pending.append(data)
                arrived.append(data)
        if capacity_grew:
            self._schedule(list(self.pending), t)
        elif arrived:  # nothing freed: older pending pods still fit nowhere
            self._schedule(arrived, t)

    # -- metrics, sampling ----------------------------------------------------------------

    def _metrics(self) -> tuple[dict[str, float], float | None]:
        ready = sum(1 for n in self.sched.nodes if n.ready)
        util = None
        if ready:
            util = 100.0 * self.used_weighted / (ready * self.pool.gpus_per_node * MILLI)
        metrics = {"queued_pods": float(len(self.pending))}
        if util is not None:
            metrics["gpu-memory"] = util
        return metrics, util

    def _sample(self, t: int) -> None:
        busy = sum(1 for n in self.sched.nodes if n.bound)
        hour = min(t // HOUR, len(self.hourly) - 1)
        for h in range(self.busy_hour + 1, hour + 1):
            self.hourly[h] = max(self.hourly[h], self.busy)
        self.hourly[hour] = max(self.hourly[hour], busy)
        self.busy_hour, self.busy = hour, busy
        current = self.pool.monthly_nodes + len(self.burst)
        self.max_seen = max(self.max_seen, current)
        if not self.keep_timeline:
            return
        provisioning = sum(1 for _, ready_at in self.burst.values() if ready_at > t)
        _, util = self._metrics()
        sample = Sample(
            t=t,
            desired=current,
            ready=current - provisioning,
            monthly=self.pool.monthly_nodes,
            burst_ready=len(self.burst) - provisioning,
            provisioning=provisioning,
            gpu_memory_pct=None if util is None else round(util, 3),
            queued=len(self.pending),
            running=len(self.running),
        )
        key = (
            sample.desired,
            sample.ready,
            sample.provisioning,
            sample.gpu_memory_pct,
            sample.queued,
            sample.running,
        )
        if self.timeline and self.timeline[-1].t == t:
            self.timeline[-1] = sample
        elif key != self._last_key:
            self.timeline.append(sample)
        self._last_key = key

    # -- the autoscaler -------------------------------------------------------------------

    def _fit_new_nodes(self, wanted: int, now: int) -> tuple[int, str]:
        """Cluster Autoscaler's estimate: template nodes the pending pods need (<= wanted)."""
        upcoming = [
            self.sched.node(name).clone()
            for name, (_, ready_at) in self.burst.items()
            if ready_at > now
        ]
        for node in upcoming:
            node.ready, node.unschedulable = True, False
        templates: list[NodeState] = []
        reason = ""
        for item in self.pending:
            pod = item.pod
            target = next((n for n in upcoming if filter_node(pod, n) is None), None)
            if target is None:
                target = next((n for n in templates if filter_node(pod, n) is None), None)
            if target is None:
                fresh = self.template.clone()
                why = filter_node(pod, fresh)
                if why is not None:
                    reason = reason or f"pod {pod.name} didn't fit a new node: {why}"
                    continue
                if len(templates) >= wanted:
                    break
                fresh.name = f"template-{len(templates)}"
                templates.append(fresh)
                target = fresh
            target.bind(pod, best_fit_gpus(pod, target.gpu_free) or ())
        return len(templates), reason

    def _add_burst(self, count: int, now: int) -> int:
        free = [n for n in self.burst_names if n not in self.burst][:count]
        ready_at = now + self.pool.provisioning_seconds
        for name in free:
            self.burst[name] = (now, ready_at)
            self._push(ready_at, _READY, name)
        return len(free)

    def _tick(self, now: int) -> float:
        """One autoscaler pass. Returns the time before which every later tick would repeat
        it exactly while nothing else happens (``now`` when it changed something)."""
        pool, spec = self.pool, self.pool.spec
        current = pool.monthly_nodes + len(self.burst)
        metrics, _ = self._metrics()
        decision = decide(
            spec=spec,
            current=current,
            min_nodes=pool.monthly_nodes,
            max_nodes=pool.max_nodes,
            metrics=metrics,
            history=self.history,
            now=self.start + timedelta(seconds=now),
        )
        change, reason, message = 0, decision.reason, decision.message
        blocked = ""
        if decision.delta > 0:
            needed, why = self._fit_new_nodes(decision.delta, now)
            if needed == 0:
                blocked = NOT_TRIGGER_SCALE_UP if why else NO_PENDING_FIT
                message = why or "no pending pod needs a new node (they fit on nodes on the way)"
            else:
                change = self._add_burst(min(needed, decision.delta), now)
                if change < decision.delta:
                    message += f"; fit simulation: pending pods need {needed} new node(s)"
        elif decision.delta < 0:
            removed, moved = self._remove_burst(-decision.delta, now)
            change = -removed
            self.counters["pods_moved"] += moved
            if removed < -decision.delta:
                blocked = SCALE_DOWN_BLOCKED
                message = (
                    f"{-decision.delta - removed} burst node(s) kept: their pods cannot move "
                    f"to other Ready nodes; {decision.message}"
                )
        moment = self.start + timedelta(seconds=now)
        # decide() returned the pruned history plus this tick's recommendation and its own
        # change; keep the recommendation, store the change actually made instead.
        done = decision.history
        events = done.events[:-1] if decision.delta else done.events
        base = ScalingHistory(done.recommendations[:-1], events)
        unneeded = 0
        if pool.remove_unneeded and change <= 0:
            unneeded = self._remove_unneeded(current + change, base, change, moment, now)
            if unneeded:
                self.activities.append(
                    Activity(
                        now,
                        current + change,
                        current + change - unneeded,
                        SCALE_DOWN_UNNEEDED,
                        f"{unneeded} burst node(s) empty for the scale-down window removed",
                    )
                )
        if change > 0:
            self.counters["scale_ups"] += 1
            self.counters["nodes_added"] += change
        elif change < 0:
            self.counters["scale_downs"] += 1
            self.counters["nodes_removed"] -= change
        if blocked:
            self.blocked[blocked] += 1
        if change or blocked:
            activity = Activity(now, current, current + change, blocked or reason, message)
            last = self.activities[-1] if self.activities else None
            repeat = (
                not change
                and last is not None
                and (last.from_nodes, last.to_nodes, last.reason, last.message)
                == (activity.from_nodes, activity.to_nodes, activity.reason, activity.message)
            )
            if not repeat:  # a blocked decision repeated tick after tick is recorded once
                self.activities.append(activity)
        if unneeded:
            self.counters["scale_downs"] += 1
            self.counters["nodes_removed"] += unneeded
        self.history = ScalingHistory(
            done.recommendations, base.record(at=moment, change=change - unneeded).events
        )
        self._last_blocked = blocked
        if change or unneeded or self._unneeded_due(now):
            return now
        return self._horizon(decision.raw_recommendation)

    def _horizon(self, raw: int) -> float:
        """When the first stored entry that could change the outcome leaves its window.

        The state is unchanged, so a later tick has the same metrics, the same raw
        recommendation ``raw`` and the same fit/move outcomes; only the windows slide. An entry
        equal to ``raw`` leaving a window changes nothing (newer ``raw`` entries stay inside);
        any other recommendation leaving the up or down window, and any scale event leaving a
        policy period, may. Ticks strictly before the earliest such moment repeat this one.
        """
        start, horizon = self.start, math.inf
        recs, events = self.history.recommendations, self.history.events
        now = recs[-1][0]
        for span, seconds in self._windows:  # oldest entry still inside that differs
            cutoff = now - span
            for at, value in recs:
                if at > cutoff and value != raw:
                    horizon = min(horizon, (at - start).total_seconds() + seconds)
                    break
        for span, seconds in self._periods:  # oldest event still inside each period
            cutoff = now - span
            for at, _ in events:
                if at > cutoff:
                    horizon = min(horizon, (at - start).total_seconds() + seconds)
                    break
        return horizon

    # -- main loop --------------------------------------------------------------------

    def run(self) -> SimResult:
        tick = self.pool.tick_seconds
        next_tick = 0
        self._sample(0)
        while True:
            t_event = self.events[0][0] if self.events else math.inf
            if t_event <= next_tick and t_event < self.end:
                self._process_events(t_event)
                self._sample(t_event)
                continue
            if next_tick >= self.end:
                break
            if self.pool.monthly_nodes == self.pool.max_nodes:
                next_tick = math.inf  # min == max: nothing to decide, ever
                continue
            horizon = self._tick(next_tick)
            self._sample(next_tick)
            after = next_tick + tick
            target = min(t_event, self.end, horizon, self.next_unneeded_deadline(next_tick))
            if target > after and self.fast_forward:
                jump = int(-(-target // tick) * tick)  # first grid tick at or after target
                if jump > after:
                    # Skipped ticks repeat this one: one stored recommendation at the last of
                    # them leaves every later window min/max as all of them would.
                    last = jump - tick
                    rec = self.history.recommendations[-1][1]
                    self.history = self.history.record(
                        at=self.start + timedelta(seconds=last), recommendation=rec
                    )
                    if self._last_blocked:
                        self.blocked[self._last_blocked] += (last - next_tick) // tick
                after = jump
            next_tick = after
        return self._result()

    def _result(self) -> SimResult:
        end = self.end
        self._sample_end()
        lifetimes = self.lifetimes + [end - requested for requested, _ in self.burst.values()]
        od_seconds = sum(lifetimes)
        if self.prices.on_demand_billing == "hour":
            billed = sum(-(-s // HOUR) * HOUR for s in lifetimes)
        else:
            billed = od_seconds
        monthly_seconds = self.pool.monthly_nodes * end
        exact = cost_of(monthly_seconds, billed, self.prices)
        served = self.served_milli_seconds + sum(
            item.gpu_milli * (end - (e - item.duration)) for item, _, e in self.running.values()
        )
        demanded = sum(w.gpu_milli * min(w.duration, end - w.arrival) for w in self.items)
        waiting = [end - p.arrival for p in self.pending]
        return SimResult(
            duration_seconds=end,
            pods_total=len(self.items),
            pods_finished=self.finished,
            pods_running_at_end=len(self.running),
            pods_waiting_at_end=len(self.pending),
            gpu_hours_demanded=demanded / MILLI / HOUR,
            gpu_hours_served=served / MILLI / HOUR,
            waits=self.waits,
            start_times=self.start_times,
            wait_p50=percentile(self.waits, 50),
            wait_p95=percentile(self.waits, 95),
            max_wait_of_waiting=max(waiting, default=0),
            monthly_node_seconds=monthly_seconds,
            on_demand_node_seconds=od_seconds,
            on_demand_billed_seconds=billed,
            cost_exact=exact,
            total_cost=quantize_money(exact),
            prices=self.prices,
            scale_ups=self.counters["scale_ups"],
            scale_downs=self.counters["scale_downs"],
            nodes_added=self.counters["nodes_added"],
            nodes_removed=self.counters["nodes_removed"],
            pods_moved=self.counters["pods_moved"],
            max_nodes_seen=self.max_seen,
            blocked=self.blocked,
            timeline=self.timeline,
            hourly_busy_nodes=self.hourly,
            activities=self.activities,
        )

    def _sample_end(self) -> None:
        hour = len(self.hourly) - 1
        for h in range(self.busy_hour + 1, hour + 1):
            self.hourly[h] = max(self.hourly[h], self.busy)


def replay(
    workload: Sequence[SimPod],
    pool: PoolConfig,
    *,
    duration_seconds: int,
    prices: PriceModel | None = None,
    start: datetime = EPOCH,
    keep_timeline: bool = True,
    fast_forward: bool = True,
) -> SimResult:
    """Replay ``workload`` (pods arriving in ``[0, duration_seconds)``) on ``pool``.

    Pods still running at the end count as running (served GPU-hours up to the end), pods
    never started as waiting (``pods_waiting_at_end``, ``max_wait_of_waiting``); wait
    percentiles are over the pods that started. ``fast_forward=False`` evaluates every
    30 s tick instead of skipping provably repeated ones (for tests of that proof).
    """
    return _Replay(
        workload, pool, prices or PriceModel(), duration_seconds, start, keep_timeline, fast_forward
    ).run()
