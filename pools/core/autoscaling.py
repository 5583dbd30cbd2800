"""HPA-style autoscaling decisions for GPU node pools (pure core: standard library only).

`decide()` answers "how many nodes should this pool have now, and why" the way
kube-controller-manager's HorizontalPodAutoscaler does it with `behavior` set
(pkg/controller/podautoscaler/horizontal.go, `normalizeDesiredReplicasWithBehaviors`):

1. Bounds first: a pool above `max` goes to `max` (TooManyReplicas), below `min` to `min`
   (TooFewReplicas); no metrics are consulted and no recommendation is stored (as HPA).
2. One raw recommendation per metric (replica_calculator.go), combined (see below).
3. Stabilization: the raw recommendation is stored with its timestamp; the result is `current`
   pulled up to the lowest recommendation inside the scale-up window and down to the highest
   inside the scale-down window (windows are half-open: `(now - window, now]`).
4. Rate limits: for every policy the node count at the start of its period is rebuilt from the
   recorded scale events (`current - added + deleted` within `(now - period, now]`); `Pods`
   adds/removes `value`, `Percent` multiplies (ceil going up, truncation going down, in the same
   float arithmetic as Go); `selectPolicy` Max picks the largest change, Min the smallest,
   Disabled none. Then `[min, max]`.

Metrics (seed O4; `metrics` maps a metric name to its observed value):
- `Resource` (gpu-memory): average utilisation in percent against `targetAverageUtilization`;
  `ceil(current * value / target)` unless `value / target` is within tolerance.
- `Pods` (queued_pods): the value is the pool's *total* queue. By default it uses HPA's
  `target.type: Value` arithmetic (External/Object metrics): ratio = queue / target, so the
  article's "more than 10 waiting pods" is a threshold on the whole queue, and from zero nodes
  the recommendation is `ceil(ratio)`. HPA's per-pod `AverageValue` reading (desired =
  `ceil(queue / target)`, "one node per `target` queued pods") is available with
  `MetricTarget(target_type="AverageValue")`; it is not the default because with it a queue of
  30 on a 10-node pool would *ask for 3 nodes*, contradicting the article's rule.
- Tolerance is HPA's: 0.1 either side unless `ScalingRules.tolerance` (k8s 1.33
  `behavior.scaleUp/scaleDown.tolerance`) overrides it for that direction.
- A metric missing from `metrics` (or NaN) recommends `current`: it blocks scaling down (HPA
  never scales down on partial metrics) and, under `All`, scaling up. With zero nodes a
  utilisation has no meaning, so `Resource` metrics abstain.
- `combine="Any"` is HPA's own rule: the highest recommendation. `combine="All"` (the article:
  memory > 85% AND queue > 10) scales up only if every metric asks for more, by the smallest
  of their asks, and down only if every metric asks for less, by the smallest cut (the highest
  recommendation); otherwise it keeps `current`.

Deliberate differences from HPA: `current == 0` with `min > 0` is brought up to `min` (HPA
treats a zero-replica target as "autoscaling disabled"; a node pool at zero is legitimate);
utilisation is taken as a float (HPA truncates it to a whole percent); state lives in an
immutable, JSON-serialisable `ScalingHistory` instead of controller memory, so the decision
survives restarts (an explicit non-goal of KEP-853, but the pool controller needs it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pools.core.scaling_history import ScalingHistory, require_aware

DEFAULT_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance
_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)

SCALE_UP_LIMIT = "ScaleUpLimit"
SCALE_DOWN_LIMIT = "ScaleDownLimit"
SCALE_UP_STABILIZED = "ScaleUpStabilized"
SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
TOO_MANY_REPLICAS = "TooManyReplicas"
TOO_FEW_REPLICAS = "TooFewReplicas"
DESIRED_WITHIN_RANGE = "DesiredWithinRange"
SCALE_UP_DISABLED = "ScaleUpDisabled"
SCALE_DOWN_DISABLED = "ScaleDownDisabled"
WITHIN_TOLERANCE = "WithinTolerance"
READY_FOR_NEW_SCALE = "ReadyForNewScale"  # HPA's AbleToScale reason when nothing was stabilized

_MESSAGES = {
    SCALE_UP_LIMIT: "the desired node count is increasing faster than the maximum scale rate",
    SCALE_DOWN_LIMIT: "the desired node count is decreasing faster than the maximum scale rate",
    SCALE_UP_STABILIZED: "recent recommendations were lower than current one, applying the lowest recent recommendation",
    SCALE_DOWN_STABILIZED: "recent recommendations were higher than current one, applying the highest recent recommendation",
    TOO_MANY_REPLICAS: "the desired node count is more than the maximum node count",
    TOO_FEW_REPLICAS: "the desired node count is less than the minimum node count",
    DESIRED_WITHIN_RANGE: "the desired count is within the acceptable range",
    SCALE_UP_DISABLED: "scaling up is disabled (scaleUp.selectPolicy: Disabled)",
    SCALE_DOWN_DISABLED: "scaling down is disabled (scaleDown.selectPolicy: Disabled)",
    WITHIN_TOLERANCE: "every metric is within tolerance of its target",
}
REASONS = tuple(_MESSAGES)  # every reason a decision can carry


# ---------------------------------------------------------------------------------------------
# Spec (imported by pools/core/spec.py)


@dataclass(frozen=True)
class ScalingPolicy:  # HPA HPAScalingPolicy
    type: str  # "Pods" | "Percent"
    value: int
    period_seconds: int  # 1..1800


@dataclass(frozen=True)
class ScalingRules:  # HPA HPAScalingRules
    stabilization_window_seconds: int  # 0..3600
    policies: tuple[ScalingPolicy, ...]
    select_policy: str = "Max"  # "Max" | "Min" | "Disabled"
    tolerance: float | None = None  # k8s 1.33 per-direction tolerance; None = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        object.__setattr__(self, "policies", tuple(self.policies))


@dataclass(frozen=True)
class MetricTarget:  # one entry of spec.scaling.default.metrics
    type: str  # "Resource" | "Pods"
    name: str  # "gpu-memory" (Resource) | "queued_pods" (Pods)
    target: float  # targetAverageUtilization (percent) for Resource; target (count) for Pods
    target_type: str = ""  # "" = Utilization (Resource) / Value (Pods); or "AverageValue"

    @property
    def effective_target_type(self) -> str:
        if self.target_type:
            return self.target_type
        return "Utilization" if self.type == "Resource" else "Value"


@dataclass(frozen=True)
class ScalingSpec:
    metrics: tuple[MetricTarget, ...]
    scale_up: ScalingRules
    scale_down: ScalingRules
    combine: str = "All"  # "All" | "Any"

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))

    @property
    def retention_seconds(self) -> int:
        """How far back history matters: the longest stabilization window or policy period."""
        spans = [
            self.scale_up.stabilization_window_seconds,
            self.scale_down.stabilization_window_seconds,
        ]
        spans += [p.period_seconds for p in (*self.scale_up.policies, *self.scale_down.policies)]
        return max(spans)


# Seed D3/O4: memory > 85% AND > 10 queued pods; up in ~20% steps (at least one node) after a
# 5-minute window; down one node per 120 s after a 30-minute window (the T6 fix).
DEFAULT_SCALING_SPEC = ScalingSpec(
    metrics=(
        MetricTarget(type="Resource", name="gpu-memory", target=85.0),
        MetricTarget(type="Pods", name="queued_pods", target=10.0),
    ),
    scale_up=ScalingRules(
        stabilization_window_seconds=300,
        policies=(
            ScalingPolicy(type="Percent", value=20, period_seconds=60),
            ScalingPolicy(type="Pods", value=1, period_seconds=60),
        ),
        select_policy="Max",
    ),
    scale_down=ScalingRules(
        stabilization_window_seconds=1800,
        policies=(ScalingPolicy(type="Pods", value=1, period_seconds=120),),
        select_policy="Max",
    ),
    combine="All",
)


# ---------------------------------------------------------------------------------------------
# Metrics -> raw recommendation (replica_calculator.go)


@dataclass(frozen=True)
class MetricStatus:
    name: str
    type: str
    target_type: str
    target: float
    value: float | None  # None: not reported
    ratio: float | None  # usage ratio HPA compares with 1 +/- tolerance
    recommendation: int | None  # None: abstains (Resource metric on an empty pool)
    within_tolerance: bool


def _tolerances(spec: ScalingSpec) -> tuple[float, float]:
    down, up = spec.scale_down.tolerance, spec.scale_up.tolerance
    return (
        DEFAULT_TOLERANCE if down is None else down,
        DEFAULT_TOLERANCE if up is None else up,
    )


def evaluate_metric(
    metric: MetricTarget, value: float | None, *, current: int, tolerances: tuple[float, float]
) -> MetricStatus:
    """One metric's recommendation, in HPA's arithmetic for its target type."""
    kind = metric.effective_target_type
    if value is not None and math.isnan(value):
        value = None
    if metric.target <= 0:
        raise ValueError(f"metric {metric.name}: target must be positive")
    down, up = tolerances

    def status(ratio: float | None, rec: int | None, within: bool = False) -> MetricStatus:
        return MetricStatus(
            metric.name, metric.type, kind, metric.target, value, ratio, rec, within
        )

    if current == 0 and kind == "Utilization":
        return status(None, None)  # utilisation of no nodes means nothing: abstain
    if value is None:
        return status(None, current)  # unavailable: never a reason to scale down
    if kind == "AverageValue":
        ratio = value / (metric.target * current) if current else math.inf
        if (1.0 - down) <= ratio <= (1.0 + up):
            return status(ratio, current, True)
        return status(ratio, math.ceil(value / metric.target))
    if kind not in ("Utilization", "Value"):
        raise ValueError(f"metric {metric.name}: unknown target type {kind!r}")
    ratio = value / metric.target
    if current == 0:
        return status(ratio, math.ceil(ratio))  # HPA's scale from zero for Value targets
    if (1.0 - down) <= ratio <= (1.0 + up):
        return status(ratio, current, True)
    return status(ratio, math.ceil(ratio * current))


def combine_recommendations(combine: str, current: int, recommendations: list[int | None]) -> int:
    """`Any`: HPA's max. `All`: move only if every metric agrees on the direction."""
    votes = [r for r in recommendations if r is not None]
    if not votes:
        return current
    if combine == "Any":
        return max(votes)
    if all(r > current for r in votes):
        return min(votes)
    if all(r < current for r in votes):
        return max(votes)
    return current


# ---------------------------------------------------------------------------------------------
# Rate limits (calculateScaleUpLimitWithScalingRules / calculateScaleDownLimitWithBehaviors)


def _policy_limit(
    up: bool, current: int, rules: ScalingRules, history: ScalingHistory, now: datetime
) -> tuple[int, ScalingPolicy | None]:
    if rules.select_policy == "Disabled":
        return current, None
    # horizontal.go's sentinels: up+Max and down+Min keep the largest proposal.
    larger = (rules.select_policy == "Min") != up
    result, chosen = (_INT32_MIN if larger else _INT32_MAX), None
    for policy in rules.policies:
        added, removed = history.changes_within(now, policy.period_seconds)
        start = current - added + removed  # node count when this policy's period began
        if policy.type == "Pods":
            proposed = start + policy.value if up else start - policy.value
        elif policy.type == "Percent" and up:
            proposed = math.ceil(float(start) * (1 + policy.value / 100))
        elif policy.type == "Percent":
            proposed = int(float(start) * (1 - policy.value / 100))  # Go int32(): truncation
        else:
            raise ValueError(f"unknown scaling policy type {policy.type!r}")
        if chosen is None or (proposed > result if larger else proposed < result):
            result, chosen = proposed, policy
    return result, chosen


def scale_up_limit(
    *, current: int, rules: ScalingRules, history: ScalingHistory, now: datetime
) -> tuple[int, ScalingPolicy | None]:
    """The most nodes the scale-up policies allow now, and the policy that set it."""
    return _policy_limit(True, current, rules, history, now)


def scale_down_limit(
    *, current: int, rules: ScalingRules, history: ScalingHistory, now: datetime
) -> tuple[int, ScalingPolicy | None]:
    """The fewest nodes the scale-down policies allow now, and the policy that set it."""
    return _policy_limit(False, current, rules, history, now)


SCALE_DOWN_UNNEEDED = "ScaleDownUnneeded"  # a removal by the unneeded-node rule, live and in the replay


def unneeded_removals(*, due: int, current: int, baseline: int, rules: ScalingRules, history: ScalingHistory, now: datetime) -> int:
    """How many of `due` burst nodes idle for the scale-down window (Cluster Autoscaler's
    unneeded-node rule) go now: within what the scale-down policies allow (`history` without
    this decision's change) and never below the `baseline` of monthly nodes. The live autoscaler
    and the offline replay both ask this."""
    limit, _ = scale_down_limit(current=current, rules=rules, history=history, now=now)
    return max(0, min(due, current - max(min(limit, current), baseline)))


# ---------------------------------------------------------------------------------------------
# The decision


@dataclass(frozen=True)
class ScalingDecision:
    current: int
    desired: int
    reason: str  # one of REASONS: the most useful single explanation
    message: str
    raw_recommendation: int  # combined metric recommendation, before stabilization
    stabilized: int  # after the stabilization windows, before rate limits and bounds
    metrics: tuple[MetricStatus, ...]
    able_to_scale_reason: str  # HPA's AbleToScale condition reason
    scaling_limited_reason: str  # HPA's ScalingLimited condition reason
    scale_limit: int | None = None  # what the policies allowed (when they were consulted)
    limiting_policy: ScalingPolicy | None = None  # the policy that set scale_limit
    history: ScalingHistory = field(default_factory=ScalingHistory)  # to store for next time

    @property
    def delta(self) -> int:
        return self.desired - self.current

    @property
    def changed(self) -> bool:
        return self.desired != self.current

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary for a ScalingActivity row or an event message (no history)."""
        return {
            "from": self.current,
            "to": self.desired,
            "reason": self.reason,
            "message": self.message,
            "rawRecommendation": self.raw_recommendation,
            "stabilized": self.stabilized,
            "scaleLimit": self.scale_limit,
            "limitingPolicy": asdict(self.limiting_policy) if self.limiting_policy else None,
            "conditions": {
                "AbleToScale": self.able_to_scale_reason,
                "ScalingLimited": self.scaling_limited_reason,
            },
            "metrics": [
                {
                    k: (None if isinstance(v, float) and math.isinf(v) else v)
                    for k, v in asdict(m).items()
                }
                for m in self.metrics
            ],
        }


def _stabilize(
    spec: ScalingSpec, current: int, raw: int, history: ScalingHistory, now: datetime
) -> tuple[int, str]:
    """stabilizeRecommendationWithBehaviors: clamp current into [min up-window, max down-window]."""
    up_window = history.recommendations_within(now, spec.scale_up.stabilization_window_seconds)
    down_window = history.recommendations_within(now, spec.scale_down.stabilization_window_seconds)
    up_rec = min([raw, *up_window])
    down_rec = max([raw, *down_window])
    stabilized = min(max(current, up_rec), down_rec)
    return stabilized, SCALE_UP_STABILIZED if raw >= current else SCALE_DOWN_STABILIZED


def _rate_and_bounds(
    spec: ScalingSpec,
    current: int,
    desired: int,
    min_nodes: int,
    max_nodes: int,
    history: ScalingHistory,
    now: datetime,
) -> tuple[int, str, str, int | None, ScalingPolicy | None]:
    """convertDesiredReplicasWithBehaviorRate -> (nodes, HPA reason, our reason, limit, policy)."""
    if desired == current:
        return desired, DESIRED_WITHIN_RANGE, DESIRED_WITHIN_RANGE, None, None
    up = desired > current
    rules = spec.scale_up if up else spec.scale_down
    limit, policy = _policy_limit(up, current, rules, history, now)
    # Never move the other way: wait until older events leave the period instead.
    limit = max(limit, current) if up else min(limit, current)
    bound = max_nodes if up else min_nodes
    if bound > limit if up else bound < limit:
        allowed, hpa_reason = limit, SCALE_UP_LIMIT if up else SCALE_DOWN_LIMIT
        disabled = SCALE_UP_DISABLED if up else SCALE_DOWN_DISABLED
        ours = disabled if rules.select_policy == "Disabled" else hpa_reason
    else:
        allowed, hpa_reason = bound, TOO_MANY_REPLICAS if up else TOO_FEW_REPLICAS
        ours = hpa_reason
    if desired > allowed if up else desired < allowed:
        return allowed, hpa_reason, ours, limit, policy
    return desired, DESIRED_WITHIN_RANGE, DESIRED_WITHIN_RANGE, limit, policy


def _describe_metrics(statuses: tuple[MetricStatus, ...]) -> str:
    parts = []
    for m in statuses:
        shown = "missing" if m.value is None else f"{m.value:g}"
        rec = "abstains" if m.recommendation is None else f"-> {m.recommendation}"
        parts.append(f"{m.name} {shown}/{m.target:g} {rec}")
    return "; ".join(parts)


def burst_ceiling(*, baseline: int, max_nodes: int, burst_max_nodes: int) -> int:
    """The most nodes a bursting pool may reach: its monthly `baseline` plus `spec.burst.maxNodes`
    on demand (0: no limit of its own), never above `nodeCount.max` and never below the baseline
    (monthly nodes are paid for; bursting never sheds them). The autoscaler's upper bound, and
    what Diagnose and the pending-pod hints call the burst limit, so the three never disagree."""
    return max(baseline, min(max_nodes, baseline + (burst_max_nodes or max_nodes)))


def decide(
    *,
    spec: ScalingSpec,
    current: int,
    min_nodes: int,
    max_nodes: int,
    metrics: dict[str, float],
    history: ScalingHistory,
    now: datetime,
) -> ScalingDecision:
    """How many nodes the pool should have at `now`, why, and the history to store next.

    The returned history holds this tick's raw recommendation and, when `desired != current`,
    the scale event; store it only if the resize was actually issued (as HPA records an event
    only after a successful scale), otherwise keep `history.record(at=now, recommendation=...)`.
    """
    require_aware(now, "now")
    if current < 0 or min_nodes < 0:
        raise ValueError("node counts cannot be negative")
    if min_nodes > max_nodes:
        raise ValueError(f"min_nodes {min_nodes} is above max_nodes {max_nodes}")
    history = history.prune(now, spec.retention_seconds)
    tolerances = _tolerances(spec)
    statuses = tuple(
        evaluate_metric(m, metrics.get(m.name), current=current, tolerances=tolerances)
        for m in spec.metrics
    )
    raw = combine_recommendations(spec.combine, current, [s.recommendation for s in statuses])
    detail = _describe_metrics(statuses)

    if current > max_nodes or current < min_nodes:
        desired = max_nodes if current > max_nodes else min_nodes
        reason = TOO_MANY_REPLICAS if current > max_nodes else TOO_FEW_REPLICAS
        bound = "above nodeCount.max" if current > max_nodes else "below nodeCount.min"
        return ScalingDecision(
            current=current,
            desired=desired,
            reason=reason,
            message=f"current node count {current} is {bound}: {current} -> {desired} nodes; {detail}",
            raw_recommendation=raw,
            stabilized=desired,
            metrics=statuses,
            able_to_scale_reason=READY_FOR_NEW_SCALE,
            scaling_limited_reason=reason,
            history=history.record(at=now, change=desired - current),
        )

    stabilized, stabilize_reason = _stabilize(spec, current, raw, history, now)
    able = stabilize_reason if stabilized != raw else READY_FOR_NEW_SCALE
    desired, limited, ours, limit, policy = _rate_and_bounds(
        spec, current, stabilized, min_nodes, max_nodes, history, now
    )
    if desired != stabilized:
        reason = ours
    elif stabilized != raw:
        reason = stabilize_reason
    elif raw == current and statuses and all(s.within_tolerance for s in statuses):
        reason = WITHIN_TOLERANCE
    else:
        reason = DESIRED_WITHIN_RANGE

    message = _MESSAGES[reason]
    if reason in (SCALE_UP_LIMIT, SCALE_DOWN_LIMIT) and policy is not None:
        message += f" ({policy.type} {policy.value} per {policy.period_seconds}s allows {limit})"
    elif reason == DESIRED_WITHIN_RANGE and raw == current and statuses:
        message = f"metrics disagree on a direction or are missing (combine {spec.combine})"
    message += f": {current} -> {desired} nodes; {detail}"

    new_history = history.record(at=now, recommendation=raw, change=desired - current)
    return ScalingDecision(
        current=current,
        desired=desired,
        reason=reason,
        message=message,
        raw_recommendation=raw,
        stabilized=stabilized,
        metrics=statuses,
        able_to_scale_reason=able,
        scaling_limited_reason=limited,
        scale_limit=limit,
        limiting_policy=policy if reason in (SCALE_UP_LIMIT, SCALE_DOWN_LIMIT) else None,
        history=new_history,
    )
