"""`ebcloud node-pool describe`: a pool as `kubectl describe` shows an object, events last."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ebcloud.output import (
    NONE,
    chronological,
    escape,
    event_age,
    event_source,
    parse_time,
    pool_zones,
    table_lines,
)

MAX_EVENTS = 20
# What the server reads for these spec fields when a pool leaves them out (the API reference's
# defaults; the server's own are pools.forms.SPEC_DEFAULTS): a pool that never set autoRepair
# has auto-repair on, and describe says so rather than `<none>`.
SPEC_DEFAULTS = {"leaseType": "monthly", "systemImage": "ubuntu-22.04-cuda-12.2", "autoRepair": True, "preemptible": False}


def _zones_field(spec: dict) -> tuple[int, str, Any]:
    """`Region: cn-east-2a` as the article writes it; with fallback zones, all of them in the
    order nodes are ordered in: `Zones: cn-east-2a (preferred), then cn-east-2b`."""
    zones = pool_zones(spec)
    if len(zones) < 2:
        return (2, "Region", zones[0] if zones else None)
    return (2, "Zones", f"{zones[0]} (preferred), then {', '.join(zones[1:])} when out of stock")


def describe_pool(pool: dict, events: list[dict], *, now: datetime | None = None) -> str:
    metadata, spec, status = (
        pool.get("metadata") or {},
        pool.get("spec") or {},
        pool.get("status") or {},
    )
    count = spec.get("nodeCount") or {}
    spec = {**SPEC_DEFAULTS, **spec}
    nodes = status.get("nodes") if isinstance(status.get("nodes"), dict) else None
    fields: list[tuple[int, str, Any]] = [
        (0, "Name", metadata.get("name")),
        (0, "Team", metadata.get("team")),
        (0, "Labels", _pairs(metadata.get("labels"))),
        (0, "Created", _timestamp(metadata.get("creationTimestamp"))),
        (0, "API Version", pool.get("apiVersion")),
        (0, "Kind", pool.get("kind")),
        (0, "Spec", None),
        (2, "Node Type", spec.get("nodeType")),
        (2, "GPU Model", spec.get("gpuModel")),
        (2, "Node Count", f"min {count.get('min', '?')}, max {count.get('max', '?')}"),
        _zones_field(spec),
        (2, "Lease Type", spec.get("leaseType")),
    ]
    if "autoRenew" in spec:
        fields.append((2, "Auto Renew", spec["autoRenew"]))
    fields += [
        (2, "System Image", spec.get("systemImage")),
        (2, "Auto Repair", spec.get("autoRepair")),
        (2, "Preemptible", spec.get("preemptible")),
        (2, "Node Labels", _pairs(spec.get("nodeLabels"))),
        (2, "Node Taints", _taints(spec.get("nodeTaints"))),
    ]
    if isinstance(spec.get("burst"), dict):
        burst = spec["burst"]
        fields.append(
            (
                2,
                "Burst",
                f"enabled={_bool(burst.get('enabled'))}, maxNodes={burst.get('maxNodes', 0)}",
            )
        )
    if isinstance(spec.get("budget"), dict):
        budget = spec["budget"]
        thresholds = ", ".join(f"{t}%" for t in budget.get("thresholds") or [])
        fields.append(
            (
                2,
                "Budget",
                f"{budget.get('monthly')} {budget.get('currency', '')}/month".replace(" /", "/")
                + (f" (alerts at {thresholds})" if thresholds else ""),
            )
        )
    if spec.get("schedulingPolicy"):
        fields.append((2, "Scheduling Policy", spec["schedulingPolicy"]))
    if isinstance(spec.get("scaling"), dict):
        fields.append((2, "Scaling", _scaling(spec["scaling"])))
    fields += [
        (0, "Status", None),
        (2, "Phase", status.get("phase")),
        (2, "Pending Reason", status.get("pendingReason")),
        (
            2,
            "Nodes",
            f"{nodes.get('ready', 0)} ready / {nodes.get('current', 0)} current"
            if nodes
            else "<unknown>",
        ),
        (
            2,
            "Generation",
            f"{metadata.get('generation', '?')} (observed {status.get('observedGeneration', '?')})",
        ),
    ]
    lines = _aligned(fields)
    by_billing = (nodes or {}).get("byBilling") or {}
    rows = [[kind, c.get("desired", 0), c.get("current", 0), c.get("ready", 0)] for kind, c in by_billing.items() if isinstance(c, dict) and any(c.values())]
    if rows:
        lines.append("  Nodes by billing:")
        lines += ["    " + line for line in table_lines(["Billing", "Desired", "Current", "Ready"], rows)]
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    if conditions:
        lines.append("  Conditions:")
        lines += ["    " + line for line in table_lines(
            ["Type", "Status", "Reason", "Message"],
            [[c.get("type"), c.get("status"), c.get("reason"), c.get("message")] for c in conditions],
        )]  # fmt: skip
    lines += _events(events, now)
    return "\n".join(lines)


def _events(events: list[dict], now: datetime | None) -> list[str]:
    if not events:
        return ["Events:  <none>"]
    recent = chronological(events)[-MAX_EVENTS:]
    rows = [
        [e.get("type"), e.get("reason"), event_age(e, now), event_source(e), e.get("message")]
        for e in recent
    ]
    headers = ["Type", "Reason", "Age", "From", "Message"]
    lines = table_lines(headers, [["-" * len(h) for h in headers], *rows])
    title = (
        "Events:" if len(events) <= MAX_EVENTS else f"Events (last {MAX_EVENTS} of {len(events)}):"
    )
    return [title, *("  " + line for line in lines)]


def _aligned(fields: list[tuple[int, str, Any]]) -> list[str]:
    """`Label:` then the value in one column per indent level; list values continue below it."""
    width = {
        indent: max(len(label) for i, label, _ in fields if i == indent) + 2
        for indent, _, _ in fields
    }
    lines = []
    for indent, label, value in fields:
        prefix = " " * indent + f"{label}:"
        if value is None and label in ("Spec", "Status"):
            lines.append(prefix)
            continue
        values = value if isinstance(value, list) else [value]
        values = [_text(v) for v in values] or [NONE]
        pad = " " * indent + " " * (width[indent] + 1)
        lines.append(prefix.ljust(len(pad)) + values[0])
        lines += [pad + v for v in values[1:]]
    return lines


def _text(value: Any) -> str:
    """One value on its line: every control character escaped (`\\x1b`), newlines too."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return _bool(value)
    return escape(str(value))


def _bool(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def _pairs(mapping: Any) -> list[str]:
    if not isinstance(mapping, dict) or not mapping:
        return [NONE]
    return [f"{key}={value}" for key, value in sorted(mapping.items())]


def _taints(taints: Any) -> list[str]:
    if not isinstance(taints, list) or not taints:
        return [NONE]
    out = []
    for taint in taints:
        if isinstance(taint, dict):
            value = taint.get("value")
            out.append(
                f"{taint.get('key')}{'=' + str(value) if value not in (None, '') else ''}:{taint.get('effect')}"
            )
    return out or [NONE]


def _scaling(scaling: dict) -> list[str]:
    out = []
    for metric in (scaling.get("default") or {}).get("metrics") or []:
        if not isinstance(metric, dict):
            continue
        if metric.get("type") == "Resource":
            out.append(
                f"resource {metric.get('resource')} at {metric.get('targetAverageUtilization')}% average utilization"
            )
        elif metric.get("type") == "Pods":
            out.append(f"pods metric {metric.get('pods')} target {metric.get('target')}")
    for key, label in (("scaleUp", "scale up"), ("scaleDown", "scale down")):
        rules = scaling.get(key)
        if isinstance(rules, dict):
            policies = ", ".join(
                f"{p.get('value')} {str(p.get('type', '')).lower()} per {p.get('periodSeconds')}s"
                for p in rules.get("policies") or [] if isinstance(p, dict)
            )  # fmt: skip
            window = rules.get("stabilizationWindow")
            out.append(
                f"{label}: "
                + ", ".join(x for x in (f"stabilization {window}" if window else "", policies) if x)
            )
    return out or [NONE]


def _timestamp(value: Any) -> str:
    moment = parse_time(value)
    return moment.strftime("%a, %d %b %Y %H:%M:%S %z") if moment else NONE
