"""`spec.alerts`: a pool's capacity (water-level) alert rules, their thresholds and durations.

The comparison table of the seed promises pool-level capacity water-level alerts (G "monitoring"
row). Four rules, each with the product's default when the spec leaves it out, so the seed's pool
YAML (which has no `alerts`) is watched as written:

- `allocationHigh` {percent: 90, for: 10m}: GPUs requested by Running pods above `percent` of the
  pool's capacity for the whole `for` window: the pool is full, pods will queue next.
- `utilizationLow` {percent: 30, for: 24h}: mean GPU utilisation below `percent` for the window
  (seed T4: IO-bound data loading or an oversized GPU spec).
- `pendingPods` {olderThan: 15m}: a Pending pod that would fit the pool has waited longer than
  `olderThan` since it last became Pending (`Pod.pending_since`: one put back to Pending waits
  afresh; seed O4: trigger -> pod Running takes 5-10 min; over 15 min points at image
  prewarming or stock).
- `nodesNotReady` {count: 1, for: 5m}: at least `count` joined nodes NotReady (heartbeat lost, or
  under repair) for the window; `count: any` is 1.

Each rule takes `enabled: false` to turn it off. Durations accept the Kubernetes forms (`10m`,
`24h`, `1h30m`). Spelling follows Kubernetes (`averageUtilization`). Pure: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pools.core.durations import format_duration, parse_duration
from pools.core.fields import Checker

MINUTE = 60
MAX_WINDOW_S = 7 * 24 * 3600  # samples are kept for weeks; a week is the longest window we look back


@dataclass(frozen=True)
class AlertRule:
    """One rule as the spec sets it: `threshold` is a percent or a node count; `window_s` is the
    `for` (or `olderThan`) duration in seconds."""

    enabled: bool
    threshold: int
    window_s: int


@dataclass(frozen=True)
class AlertRuleInfo:
    """What the rule is called in the spec, in events and notifications, and in plain words."""

    field: str  # spec.alerts.<field>
    reason: str  # the PoolEvent reason and Notification kind
    title: str  # plain words for pages
    threshold_field: str | None  # "percent" | "count" | None (pendingPods has only a duration)
    window_field: str  # "for" | "olderThan"
    default: AlertRule
    low: int = 1  # threshold bounds
    high: int = 100


RULES: tuple[AlertRuleInfo, ...] = (
    AlertRuleInfo("allocationHigh", "HighGpuAllocation", "GPU allocation high", "percent", "for", AlertRule(True, 90, 10 * MINUTE)),
    AlertRuleInfo("utilizationLow", "LowGpuUtilization", "GPU utilisation low", "percent", "for", AlertRule(True, 30, 24 * 3600)),
    AlertRuleInfo("pendingPods", "PodsPendingTooLong", "Pods waiting too long", None, "olderThan", AlertRule(True, 0, 15 * MINUTE)),
    AlertRuleInfo("nodesNotReady", "NodesNotReady", "Nodes not ready", "count", "for", AlertRule(True, 1, 5 * MINUTE), high=1000),
)  # fmt: skip
RULES_BY_FIELD = {info.field: info for info in RULES}
RULES_BY_REASON = {info.reason: info for info in RULES}


@dataclass(frozen=True)
class AlertRules:
    """The four rules of one pool, defaults filled in."""

    allocation_high: AlertRule = RULES[0].default
    utilization_low: AlertRule = RULES[1].default
    pending_pods: AlertRule = RULES[2].default
    nodes_not_ready: AlertRule = RULES[3].default

    def rule(self, reason: str) -> AlertRule:
        return getattr(self, _ATTRIBUTE[reason])


_ATTRIBUTE = {
    "HighGpuAllocation": "allocation_high",
    "LowGpuUtilization": "utilization_low",
    "PodsPendingTooLong": "pending_pods",
    "NodesNotReady": "nodes_not_ready",
}
DEFAULT_ALERTS = AlertRules()


def parse_alerts(check: Checker, value: Any, path: str = "spec.alerts") -> AlertRules:
    """Validate `spec.alerts`, every problem with its field path; missing rules get defaults."""
    entry = check.mapping(value, path, tuple(RULES_BY_FIELD))
    rules = {}
    for info in RULES:
        rules[_ATTRIBUTE[info.reason]] = _parse_rule(check, entry.get(info.field, {}), f"{path}.{info.field}", info)
    return AlertRules(**rules)


def _parse_rule(check: Checker, value: Any, path: str, info: AlertRuleInfo) -> AlertRule:
    known = ("enabled", info.window_field) + ((info.threshold_field,) if info.threshold_field else ())
    entry = check.mapping(value, path, known)
    enabled = check.boolean(entry.get("enabled", True), f"{path}.enabled")
    threshold = info.default.threshold
    if info.threshold_field and info.threshold_field in entry:
        raw = entry[info.threshold_field]
        if info.threshold_field == "count" and raw == "any":
            raw = 1
        parsed = check.integer(raw, f"{path}.{info.threshold_field}", minimum=info.low, maximum=info.high)
        threshold = parsed if parsed is not None else threshold
    window = info.default.window_s
    if info.window_field in entry:
        parsed = window_parse(check, entry[info.window_field], f"{path}.{info.window_field}")
        window = parsed if parsed is not None else window
    return AlertRule(enabled=enabled is not False, threshold=threshold, window_s=window)


def window_parse(check: Checker, value: Any, path: str) -> int | None:
    """A rule's duration: whole minutes (the samples are per minute), from 1m to 7 days."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        check.error(path, str(exc))
        return None
    if seconds % MINUTE or not MINUTE <= seconds <= MAX_WINDOW_S:
        check.error(path, f"must be whole minutes from 1m to {format_duration(MAX_WINDOW_S)}")
        return None
    return seconds


def describe(info: AlertRuleInfo, rule: AlertRule) -> str:
    """The rule in plain words, for the pool's alert page."""
    if not rule.enabled:
        return "off"
    span = format_duration(rule.window_s)
    if info.reason == "HighGpuAllocation":
        return f"allocated GPUs above {rule.threshold}% of capacity for {span}"
    if info.reason == "LowGpuUtilization":
        return f"mean GPU utilisation below {rule.threshold}% for {span}"
    if info.reason == "PodsPendingTooLong":
        return f"a pod that fits the pool waits longer than {span}"
    return f"{'a node' if rule.threshold == 1 else f'{rule.threshold} nodes or more'} not ready for {span}"


def alerts_document(alerts: AlertRules) -> dict[str, Any]:
    """`spec.alerts` for a spec built in code: only the rules that differ from the defaults."""
    body: dict[str, Any] = {}
    for info in RULES:
        rule = alerts.rule(info.reason)
        if rule == info.default:
            continue
        entry: dict[str, Any] = {} if rule.enabled else {"enabled": False}
        if info.threshold_field and rule.threshold != info.default.threshold:
            entry[info.threshold_field] = rule.threshold
        if rule.window_s != info.default.window_s:
            entry[info.window_field] = format_duration(rule.window_s)
        body[info.field] = entry
    return body
