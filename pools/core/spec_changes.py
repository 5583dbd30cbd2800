"""What an update changed in a pool's spec, in the words of its document (the SpecUpdated event).
Pure: no Django."""

from __future__ import annotations

from pools.core.alerting import RULES as ALERT_RULES
from pools.core.alerting import AlertRules
from pools.core.durations import format_duration
from pools.core.spec import PoolSpec

# Every PoolSpec field an update may change, named as in the document; the others are immutable (IMMUTABLE_FIELDS of
# pools/services/pools.py, metadata.name). A field in neither changed pools as "formatting only", as `alerts` did (tests/pools/test_spec_changes.py).
DESCRIBED_FIELDS = (
    ("min_nodes", "nodeCount.min"), ("max_nodes", "nodeCount.max"), ("lease_type", "leaseType"),
    ("system_image", "systemImage"), ("auto_repair", "autoRepair"), ("auto_renew", "autoRenew"),
    ("repair_requires_approval", "autoRepairPolicy.requireApproval"),
    ("repair_max_unhealthy", "autoRepairPolicy.maxUnhealthy"),
    ("node_labels", "nodeLabels"), ("node_taints", "nodeTaints"), ("labels", "labels"),
    ("scaling", "scaling"), ("burst", "burst"), ("budget", "budget"), ("scheduling_policy", "schedulingPolicy"),
    ("shared_with", "sharedWith"), ("zones", "zones"), ("alerts", "alerts"),
)  # fmt: skip


def describe_change(old: PoolSpec, new: PoolSpec) -> str:
    """A SpecUpdated event's words: each field that changed, from what to what."""
    changes = []
    for attr, label in DESCRIBED_FIELDS:
        before, after = getattr(old, attr), getattr(new, attr)
        if before != after:
            if attr == "zones":
                changes.append(f"zones {', '.join(before)} → {', '.join(after)}")
            elif attr == "alerts":
                changes += _alerts_changes(before, after)
            elif isinstance(before, int | str | bool) and isinstance(after, int | str | bool):
                changes.append(f"{label} {before} → {after}")
            else:
                changes.append(f"{label} changed")
    return "Spec updated: " + (", ".join(changes) if changes else "formatting only")


def _alerts_changes(before: AlertRules, after: AlertRules) -> list[str]:
    """Each alert setting that changed; a dropped rule goes back to its defaults (`alerts.pendingPods.olderThan 30m → 15m`)."""
    out = []
    for info in ALERT_RULES:
        a, b, path = before.rule(info.reason), after.rule(info.reason), f"alerts.{info.field}"
        out += [f"{path}.enabled {str(a.enabled).lower()} → {str(b.enabled).lower()}"] if a.enabled != b.enabled else []
        out += [f"{path}.{info.threshold_field} {a.threshold} → {b.threshold}"] if info.threshold_field and a.threshold != b.threshold else []
        out += [f"{path}.{info.window_field} {format_duration(a.window_s)} → {format_duration(b.window_s)}"] if a.window_s != b.window_s else []
    return out
