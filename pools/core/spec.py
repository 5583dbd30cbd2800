"""The `GpuNodePool` document (seed O2, O4): YAML/JSON <-> dataclasses, validated with field paths.

A pool is declared with the article's document (`apiVersion: ebcloud.io/v1`, `kind: GpuNodePool`).
`spec.region` names the pool's zone (seed O2); `spec.zones` (ours) lists it with fallback zones,
preferred first, where nodes are ordered when the preferred zone is out of stock (seed T1 "add a
fallback zone"); a document may give either, or both when `region` is the first of `zones`.
`autoRepair: true|false` stays the seed's switch; the optional `autoRepairPolicy:
{requireApproval: true}` beside it (ours) makes every repair wait for a platform admin's
approval (a pool without it, like the seed's YAML, repairs on its own), and its
`maxUnhealthy` (Cluster API's MachineHealthCheck field: `3` or `"40%"`) sets how many unhealthy
nodes the pool tolerates before auto repair pauses (20% without it: pools/core/max_unhealthy.py).
`parse_document` checks it the way `kubectl --validate=strict` and the API server would: unknown
fields are rejected and named, every problem carries its field path, and all problems are reported
at once. The document is stored as given, so export returns what the user wrote;
`pools.core.documents.to_document` goes the other way for specs built in code (the web form, tests).

Pure: no Django. What is sellable (GPU models, node types, zones, the node ceiling) comes in as a
`Catalog`, built by the services from the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from pools.core.alerting import DEFAULT_ALERTS, AlertRules, parse_alerts
from pools.core.autoscaling import (
    DEFAULT_SCALING_SPEC,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
    ScalingSpec,
)
from pools.core.errors import FieldError, ValidationError, listed_twice, repeats
from pools.core.fields import Checker, label_key_error, label_value_error, name_error
from pools.core.max_unhealthy import DEFAULT as DEFAULT_MAX_UNHEALTHY
from pools.core.max_unhealthy import MaxUnhealthy, max_unhealthy_error
from pools.core.node_labels import reserved_key_error, system_labels
from pools.core.priority import INT32_MAX
from pools.core.scheduling.nodes import TAINT_EFFECTS, Taint

API_VERSION = "ebcloud.io/v1"
KIND = "GpuNodePool"
LEASE_TYPES = ("monthly", "quarterly", "yearly")
SCHEDULING_POLICIES = ("binpack", "spread", "bestfit", "fgd", "fgd-cpu")
# FGD with CPU-aware ties: the least unallocated GPU on Alibaba's trace (docs/benchmarks.md)
DEFAULT_SCHEDULING_POLICY = "fgd-cpu"
# What each policy does, in one line of plain words: shown beside its name wherever a user picks
# one (the pool form). pools/core/scheduling/policies.py has the scores themselves.
SCHEDULING_POLICY_HELP = {
    "binpack": "fill the fullest node that fits first, keeping other nodes whole for big jobs",
    "spread": "put each pod on the emptiest node, for headroom and fewer pods lost with one node",
    "bestfit": "pick the node left with the least spare CPU and GPU after placing the pod",
    "fgd": "fragmentation-aware: pick the node and GPU that leave free GPUs most usable for the pod sizes seen here",
    "fgd-cpu": "like fgd, and among equal choices pick the node that leaves the fewest GPUs stuck without CPU (the default)",
}
RESOURCE_METRICS = ("gpu-memory",)
POD_METRICS = ("queued_pods",)
DEFAULT_SYSTEM_IMAGE = "ubuntu-22.04-cuda-12.2"

# The pools' scaling rules when the spec leaves them out: the article's (seed D3/O4), which fire at
# exactly its numbers (GPU memory above 85% and more than 10 queued pods): HPA's tolerance of 10%
# (the core's DEFAULT_SCALING_SPEC, kept as HPA's reference) would move them to about 94% and 12.
# `scaleUp.tolerance` / `scaleDown.tolerance` (Kubernetes 1.33's field) set another.
POOL_TOLERANCE = 0.0
POOL_SCALING_DEFAULTS = replace(
    DEFAULT_SCALING_SPEC,
    scale_up=replace(DEFAULT_SCALING_SPEC.scale_up, tolerance=POOL_TOLERANCE),
    scale_down=replace(DEFAULT_SCALING_SPEC.scale_down, tolerance=POOL_TOLERANCE),
)

_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]*\Z")
_CURRENCY = re.compile(r"^[A-Z]{3}\Z")
MAX_MONTHLY_BUDGET = Decimal("999999999999.99")  # billing.Budget.monthly_amount: 14 digits, 2 decimals
# A scaling policy's `value` (nodes or percent a period) is an int32 in Kubernetes' HPA behavior,
# whose rules these follow: a larger one was stored, and the autoscaler's limits are int32 too.
MAX_POLICY_VALUE = INT32_MAX


@dataclass(frozen=True)
class Catalog:
    """What the cloud sells: GPU models, node types (GPUs per node), zones (zone -> region)."""

    gpu_models: frozenset[str]
    node_types: Mapping[str, int]
    zones: Mapping[str, str]
    max_nodes: int = 100
    teams: frozenset[str] | None = None  # team slugs `spec.sharedWith` may name; None: not checked
    # A new or edited spec (the services' writes) is also refused what a stored one may hold from
    # before a rule existed (reserved label keys), so that no pass stalls on a stored spec.
    writing: bool = False


@dataclass(frozen=True)
class Burst:
    """On-demand fallback above the monthly baseline (seed G4). `enabled` is None when the spec
    does not say: a `scaling` block then turns it on."""

    enabled: bool | None = None
    max_nodes: int = 0


@dataclass(frozen=True)
class Budget:
    """Monthly budget of the pool; alerts at each threshold percent (seed T6: 80%)."""

    monthly: Decimal
    currency: str
    thresholds: tuple[int, ...] = (80, 100)


@dataclass(frozen=True)
class PoolSpec:
    name: str
    node_type: str
    gpu_model: str
    min_nodes: int
    max_nodes: int
    region: str  # the preferred zone (spec.region, or spec.zones[0])
    labels: Mapping[str, str] = field(default_factory=dict)
    lease_type: str = "monthly"
    system_image: str = DEFAULT_SYSTEM_IMAGE
    auto_repair: bool = True
    repair_requires_approval: bool = False  # spec.autoRepairPolicy.requireApproval
    repair_max_unhealthy: MaxUnhealthy = DEFAULT_MAX_UNHEALTHY  # spec.autoRepairPolicy.maxUnhealthy
    auto_renew: bool = False
    preemptible: bool = False
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    scaling: ScalingSpec | None = None
    burst: Burst = Burst()
    budget: Budget | None = None
    scheduling_policy: str = DEFAULT_SCHEDULING_POLICY
    shared_with: tuple[str, ...] = ()  # teams (slugs) whose pods may also run on the pool's nodes
    zones: tuple[str, ...] = ()  # where nodes may be ordered, preferred first; () means (region,)
    alerts: AlertRules = DEFAULT_ALERTS  # spec.alerts: capacity alert thresholds (pools.core.alerting)

    def __post_init__(self) -> None:
        if not self.zones:  # a spec built with only `region` (the form, tests) has that one zone
            object.__setattr__(self, "zones", (self.region,))

    @property
    def autoscaling(self) -> ScalingSpec | None:
        """The policy the autoscaler follows, or None when it leaves the pool alone. It adds and
        removes on-demand burst nodes above the monthly baseline, so a `scaling` block is enough
        (the article's pool autoscales as written); `burst.enabled: true` without one follows
        the defaults (`POOL_SCALING_DEFAULTS`), and `burst.enabled: false` turns it off either way."""
        if self.burst.enabled is False:
            return None
        if self.scaling is not None:
            return self.scaling
        return POOL_SCALING_DEFAULTS if self.burst.enabled else None


def spec_autoscales(spec: Mapping[str, Any]) -> bool:
    """`PoolSpec.autoscaling is not None` read from a stored (validated) document's `spec`, without
    parsing it against the catalog (the pool list, the hints)."""
    burst = spec.get("burst")
    enabled = burst.get("enabled") if isinstance(burst, Mapping) else None
    return enabled is True or (enabled is None and "scaling" in spec)


def spec_burst_max_nodes(spec: Mapping[str, Any]) -> int:
    """`PoolSpec.burst.max_nodes` read from a stored (validated) document's `spec`, as
    `spec_autoscales` reads whether it bursts: 0 when unset (no limit of its own)."""
    burst = spec.get("burst")
    return (burst.get("maxNodes") or 0) if isinstance(burst, Mapping) else 0


_TOP = ("apiVersion", "kind", "metadata", "spec")
_METADATA = ("name", "labels")
_SPEC = (
    "nodeType", "gpuModel", "nodeCount", "region", "leaseType", "systemImage", "autoRepair",
    "autoRepairPolicy", "autoRenew", "preemptible", "nodeLabels", "nodeTaints", "scaling", "burst", "budget",
    "schedulingPolicy", "sharedWith", "zones", "alerts",
)  # fmt: skip
_SPEC_REQUIRED = ("nodeType", "gpuModel", "nodeCount")  # and `region` or `zones` (_parse_zones)


def parse_document(document: Any, catalog: Catalog) -> PoolSpec:
    """Validate a GpuNodePool document; raise ValidationError naming every bad field."""
    check = Checker()
    top, metadata = check.document(document, api_version=API_VERSION, kind=KIND, known=_TOP, required=_TOP, metadata=_METADATA)
    name = metadata.get("name")
    if "name" in metadata and (problem := name_error(name)):
        check.error("metadata.name", problem)
    labels = _node_labels(check, metadata.get("labels", {}), "metadata.labels", catalog.writing)

    spec = check.mapping(top.get("spec", {}), "spec", _SPEC, _SPEC_REQUIRED)
    node_type = check.choice(spec["nodeType"], "spec.nodeType", catalog.node_types, "node type") if "nodeType" in spec else None
    gpu_model = check.choice(spec["gpuModel"], "spec.gpuModel", catalog.gpu_models, "GPU model") if "gpuModel" in spec else None
    zones = _parse_zones(check, spec, catalog)
    min_nodes, max_nodes = _parse_node_count(check, spec, catalog)
    lease_type = check.choice(spec.get("leaseType", "monthly"), "spec.leaseType", LEASE_TYPES, "lease type")
    system_image = check.string(spec.get("systemImage", DEFAULT_SYSTEM_IMAGE), "spec.systemImage")
    if system_image and (len(system_image) > 128 or not _IMAGE.match(system_image)):
        check.error("spec.systemImage", "must be an image name of at most 128 characters")
    flags = {
        key: check.boolean(spec.get(key, default), f"spec.{key}")
        for key, default in (("autoRepair", True), ("autoRenew", False), ("preemptible", False))
    }
    require_approval, max_unhealthy = _parse_repair_policy(check, spec.get("autoRepairPolicy", {}))
    node_labels = _node_labels(check, spec.get("nodeLabels", {}), "spec.nodeLabels", catalog.writing)
    taints = _parse_taints(check, spec.get("nodeTaints", []), catalog.writing)
    scaling = _parse_scaling(check, spec["scaling"]) if "scaling" in spec else None
    burst = _parse_burst(check, spec.get("burst", {}), max_nodes, min_nodes, catalog.max_nodes)
    budget = _parse_budget(check, spec["budget"]) if "budget" in spec else None
    policy = check.choice(spec.get("schedulingPolicy", DEFAULT_SCHEDULING_POLICY), "spec.schedulingPolicy", SCHEDULING_POLICIES, "scheduling policy")
    shared_with = _parse_shared_with(check, spec.get("sharedWith", []), catalog.teams)
    alerts = parse_alerts(check, spec.get("alerts", {}))

    if check.errors:
        raise ValidationError(check.errors)
    return PoolSpec(
        name=name,
        labels=labels,
        node_type=node_type,
        gpu_model=gpu_model,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        region=zones[0] if zones else None,
        zones=zones,
        lease_type=lease_type,
        system_image=system_image,
        auto_repair=flags["autoRepair"],
        repair_requires_approval=require_approval,
        repair_max_unhealthy=max_unhealthy,
        auto_renew=flags["autoRenew"],
        preemptible=flags["preemptible"],
        node_labels=node_labels,
        node_taints=taints,
        scaling=scaling,
        burst=burst,
        budget=budget,
        scheduling_policy=policy,
        shared_with=shared_with,
        alerts=alerts,
    )


def _parse_shared_with(check: Checker, value: Any, teams: frozenset[str] | None) -> tuple[str, ...]:
    """`spec.sharedWith`: the teams the owning lead lends the pool to, by slug, each once."""
    if not isinstance(value, list):
        check.error("spec.sharedWith", "must be a list of team names, e.g. [inference]")
        return ()
    slugs: list[str] = []
    for i, slug in enumerate(value):
        path = f"spec.sharedWith[{i}]"
        if not isinstance(slug, str) or not slug:
            check.error(path, "must be a team name such as inference")
        elif slug in slugs:
            check.error(path, listed_twice(f"team {slug!r}"))
        elif teams is not None and slug not in teams:
            check.error(path, f"no team named {slug!r}")
        else:
            slugs.append(slug)
    return tuple(slugs)


def _parse_zones(check: Checker, spec: dict, catalog: Catalog) -> tuple[str, ...]:
    """`spec.region` (one zone) or `spec.zones` (preferred first, then the fallbacks the
    controller orders in when a zone is out of stock). Every zone must be sold and listed once,
    and all in one region: quotas are per region, and a fallback is a neighbouring zone, where
    only cross-zone traffic costs extra (D4). Returns () when invalid."""
    region = check.choice(spec["region"], "spec.region", catalog.zones, "zone") if "region" in spec else None
    if "zones" not in spec:
        if "region" not in spec:
            check.error("spec.region", "required field is missing (or give spec.zones, preferred zone first)")
        return (region,) if region else ()
    value = spec["zones"]
    if not isinstance(value, list) or not value:
        check.error("spec.zones", "must be a non-empty list of zones, preferred first, e.g. [cn-east-2a, cn-east-2b]")
        return ()
    zones: list[str] = []
    valid = True
    for index, item in enumerate(value):
        path = f"spec.zones[{index}]"
        name = check.choice(item, path, catalog.zones, "zone")
        if name is None:
            valid = False
        elif name in zones:
            check.error(path, listed_twice(f"zone {name!r}"))
            valid = False
        elif zones and catalog.zones[name] != catalog.zones[zones[0]]:
            check.error(path, f"zone {name!r} is in region {catalog.zones[name]}, not {catalog.zones[zones[0]]} like {zones[0]}: fallback zones stay in the preferred zone's region")
            valid = False
        else:
            zones.append(name)
    if "region" in spec and region is not None and zones and region != zones[0]:
        check.error("spec.region", f"must be the first of spec.zones ({zones[0]}) or left out")
        valid = False
    return tuple(zones) if valid else ()


def _parse_node_count(check: Checker, spec: dict, catalog: Catalog) -> tuple[int | None, int | None]:
    if "nodeCount" not in spec:
        return None, None
    count = check.mapping(spec["nodeCount"], "spec.nodeCount", ("min", "max"), ("min", "max"))
    low = check.integer(count["min"], "spec.nodeCount.min", minimum=0, maximum=catalog.max_nodes) if "min" in count else None
    high = (
        check.integer(count["max"], "spec.nodeCount.max", minimum=1, maximum=catalog.max_nodes)
        if "max" in count
        else None
    )
    if low is not None and high is not None and low > high:
        check.error("spec.nodeCount.min", f"must not exceed spec.nodeCount.max ({low} > {high})")
    return low, high


def _parse_repair_policy(check: Checker, value: Any) -> tuple[bool, MaxUnhealthy]:
    """`spec.autoRepairPolicy` (optional): `requireApproval: true` turns each repair the ladder
    chooses into a request a platform admin approves or rejects (pools/services/repair.py);
    `maxUnhealthy` (a number of nodes or "N%") is how many unhealthy nodes the pool tolerates
    before auto repair pauses. Kept beside the seed's boolean `autoRepair` instead of replacing
    it, so every existing document keeps its meaning; with `autoRepair: false` the policy
    changes nothing (the pool only alerts)."""
    entry = check.mapping(value, "spec.autoRepairPolicy", ("requireApproval", "maxUnhealthy"))
    approval = bool(check.boolean(entry.get("requireApproval", False), "spec.autoRepairPolicy.requireApproval"))
    max_unhealthy = entry.get("maxUnhealthy", DEFAULT_MAX_UNHEALTHY)
    if problem := max_unhealthy_error(max_unhealthy):
        check.error("spec.autoRepairPolicy.maxUnhealthy", problem)
        max_unhealthy = DEFAULT_MAX_UNHEALTHY
    return approval, max_unhealthy


def _node_labels(check: Checker, value: Any, path: str, writing: bool) -> dict[str, str]:
    """A pool's labels, which every node of it carries: label syntax, and (when written) none
    of the keys Kubernetes or the control plane keep for themselves."""
    labels = check.labels(value, path)
    for key in list(labels):
        if writing and (problem := reserved_key_error(key)):
            check.error(f"{path}.{key}", problem)
            del labels[key]
    return labels


def _parse_taints(check: Checker, value: Any, writing: bool) -> tuple[Taint, ...]:
    if not isinstance(value, list):
        check.error("spec.nodeTaints", "must be a list of {key, value, effect}")
        return ()
    taints: list[Taint] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(value):
        path = f"spec.nodeTaints[{index}]"
        entry = check.mapping(item, path, ("key", "value", "effect"), ("key", "effect"))
        key, val, effect = entry.get("key"), entry.get("value", ""), entry.get("effect")
        if "key" in entry and (problem := label_key_error(key) or (writing and reserved_key_error(key, what="taint"))):
            check.error(f"{path}.key", problem.replace("label key", "taint key"))
            continue
        if problem := label_value_error(val):
            check.error(f"{path}.value", problem.replace("label value", "taint value"))
            continue
        if "effect" in entry and effect not in TAINT_EFFECTS:
            check.error(f"{path}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
            continue
        if key is None or effect is None:
            continue
        if (key, effect) in seen:
            check.error(f"{path}", f"duplicate taint {key}:{effect}")
            continue
        seen.add((key, effect))
        taints.append(Taint(key=key, value=val, effect=effect))
    return tuple(taints)


def _parse_burst(check: Checker, value: Any, max_nodes: int | None, min_nodes: int | None, ceiling: int) -> Burst:
    """`ceiling` (the catalog's node ceiling) bounds the limit when nodeCount is itself invalid."""
    entry = check.mapping(value, "spec.burst", ("enabled", "maxNodes"))
    enabled = check.boolean(entry["enabled"], "spec.burst.enabled") if "enabled" in entry else None
    limit = check.integer(entry.get("maxNodes", 0), "spec.burst.maxNodes", minimum=0, maximum=ceiling)
    if limit and max_nodes is not None and min_nodes is not None and limit > max_nodes - min_nodes:
        check.error(
            "spec.burst.maxNodes",
            f"must not exceed nodeCount.max - nodeCount.min ({max(max_nodes - min_nodes, 0)}): lower it to "
            f"{max(max_nodes - min_nodes, 0)}, or raise nodeCount.max to {min_nodes + limit}",
        )
    return Burst(enabled=enabled, max_nodes=limit or 0)


def thresholds_repeated(document: Any, *, stored: Any = None) -> list[FieldError]:
    """A budget threshold given twice in a document being written (as a zone or team given twice
    is refused): it was stored and echoed as sent, though it alerts once. Not when the stored
    document (`stored`) lists the same thresholds: one kept from before never blocks a resize
    that does not touch the budget. The parse reads such a spec as the set it alerts on."""
    given = _raw_thresholds(document)
    if stored is not None and given == _raw_thresholds(stored):
        return []
    return [FieldError(f"spec.budget.thresholds[{i}]", listed_twice(t)) for i, t in repeats(given)]


def _raw_thresholds(document: Any) -> list:
    spec = document.get("spec") if isinstance(document, dict) else None
    budget = spec.get("budget") if isinstance(spec, dict) else None
    thresholds = budget.get("thresholds") if isinstance(budget, dict) else None
    return [t for t in thresholds if isinstance(t, int) and not isinstance(t, bool)] if isinstance(thresholds, list) else []


def _parse_budget(check: Checker, value: Any) -> Budget | None:
    """`spec.budget`; thresholds given twice are read as the set they alert on (a document
    being written is refused them: `thresholds_repeated`)."""
    entry = check.mapping(value, "spec.budget", ("monthly", "currency", "thresholds"), ("monthly",))
    amount: Decimal | None = None
    if "monthly" in entry:
        raw = entry["monthly"]
        try:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str) or (isinstance(raw, str) and not raw.isascii()):
                raise InvalidOperation  # Decimal() also reads other scripts' digits ("١٠٠")
            amount = Decimal(str(raw))
            if not amount.is_finite() or amount <= 0 or amount.as_tuple().exponent < -2:
                raise InvalidOperation
        except InvalidOperation:
            check.error("spec.budget.monthly", "must be a positive amount with at most 2 decimals")
            amount = None
        if amount is not None and amount > MAX_MONTHLY_BUDGET:
            check.error("spec.budget.monthly", f"must be at most {MAX_MONTHLY_BUDGET}")
            amount = None
    currency = entry.get("currency", "CNY")
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        check.error("spec.budget.currency", "must be an ISO 4217 code such as CNY or USD")
    thresholds = entry.get("thresholds", [80, 100])
    if not isinstance(thresholds, list) or not thresholds:
        check.error("spec.budget.thresholds", "must be a list of percentages")
        thresholds = []
    before = len(check.errors)
    for index, item in enumerate(thresholds):
        check.integer(item, f"spec.budget.thresholds[{index}]", minimum=1, maximum=1000)
    if amount is None or len(check.errors) > before:  # refused: the thresholds are not all numbers to sort
        return None
    return Budget(monthly=amount, currency=currency, thresholds=tuple(sorted(set(thresholds))))


def _parse_scaling(check: Checker, value: Any) -> ScalingSpec:
    entry = check.mapping(value, "spec.scaling", ("default", "scaleUp", "scaleDown"))
    profile = check.mapping(entry.get("default", {}), "spec.scaling.default", ("metrics", "combine"))
    metrics = POOL_SCALING_DEFAULTS.metrics
    if "metrics" in profile:
        metrics = _parse_metrics(check, profile["metrics"])
    combine = check.choice(profile.get("combine", POOL_SCALING_DEFAULTS.combine), "spec.scaling.default.combine", ("All", "Any"), "combine mode")
    scale_up = POOL_SCALING_DEFAULTS.scale_up
    scale_down = POOL_SCALING_DEFAULTS.scale_down
    if "scaleUp" in entry:
        scale_up = _parse_rules(check, entry["scaleUp"], "spec.scaling.scaleUp", scale_up)
    if "scaleDown" in entry:
        scale_down = _parse_rules(check, entry["scaleDown"], "spec.scaling.scaleDown", scale_down)
    return ScalingSpec(metrics=metrics, scale_up=scale_up, scale_down=scale_down, combine=combine or "All")


def _parse_metrics(check: Checker, value: Any) -> tuple[MetricTarget, ...]:
    if not isinstance(value, list) or not value:
        check.error("spec.scaling.default.metrics", "must be a non-empty list")
        return ()
    metrics: list[MetricTarget] = []
    for index, item in enumerate(value):
        path = f"spec.scaling.default.metrics[{index}]"
        if not isinstance(item, dict) or item.get("type") not in ("Resource", "Pods"):
            check.error(f"{path}.type", "must be Resource or Pods")
            continue
        if item["type"] == "Resource":
            entry = check.mapping(item, path, ("type", "resource", "targetAverageUtilization"), ("resource", "targetAverageUtilization"))
            name = check.choice(entry.get("resource"), f"{path}.resource", RESOURCE_METRICS, "resource metric") if "resource" in entry else None
            target = check.integer(entry.get("targetAverageUtilization"), f"{path}.targetAverageUtilization", minimum=1, maximum=100) if "targetAverageUtilization" in entry else None
        else:
            entry = check.mapping(item, path, ("type", "pods", "target"), ("pods", "target"))
            name = check.choice(entry.get("pods"), f"{path}.pods", POD_METRICS, "pods metric") if "pods" in entry else None
            target = check.integer(entry.get("target"), f"{path}.target", minimum=1, maximum=100000) if "target" in entry else None
        if name is not None and target is not None:
            metrics.append(MetricTarget(type=item["type"], name=name, target=float(target)))
    return tuple(metrics)


def _parse_rules(check: Checker, value: Any, path: str, default: ScalingRules) -> ScalingRules:
    entry = check.mapping(value, path, ("stabilizationWindow", "policies", "selectPolicy", "tolerance"))
    window = default.stabilization_window_seconds
    tolerance = default.tolerance
    if "tolerance" in entry:
        raw = entry["tolerance"]
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 1:
            check.error(f"{path}.tolerance", "must be a number from 0 to 1: how far above (or below) its target a metric may be before the pool scales (0.1 is HPA's)")
        else:
            tolerance = float(raw)
    if "stabilizationWindow" in entry:
        window = check.duration(entry["stabilizationWindow"], f"{path}.stabilizationWindow")
    select = check.choice(entry.get("selectPolicy", default.select_policy), f"{path}.selectPolicy", ("Max", "Min", "Disabled"), "selectPolicy")
    policies = default.policies
    if "policies" in entry:
        policies = ()
        raw = entry["policies"]
        if not isinstance(raw, list) or not raw:
            check.error(f"{path}.policies", "must be a non-empty list")
            raw = []
        parsed: list[ScalingPolicy] = []
        for index, item in enumerate(raw):
            item_path = f"{path}.policies[{index}]"
            policy = check.mapping(item, item_path, ("type", "value", "periodSeconds"), ("type", "value", "periodSeconds"))
            kind = check.choice(policy.get("type"), f"{item_path}.type", ("Pods", "Percent"), "policy type") if "type" in policy else None
            amount = check.integer(policy.get("value"), f"{item_path}.value", minimum=1, maximum=MAX_POLICY_VALUE) if "value" in policy else None
            period = check.integer(policy.get("periodSeconds"), f"{item_path}.periodSeconds", minimum=1, maximum=1800) if "periodSeconds" in policy else None
            if kind and amount and period:
                parsed.append(ScalingPolicy(type=kind, value=amount, period_seconds=period))
        policies = tuple(parsed)
    return ScalingRules(
        stabilization_window_seconds=window if window is not None else default.stabilization_window_seconds,
        policies=policies,
        select_policy=select or "Max",
        tolerance=tolerance,
    )


def effective_node_labels(spec: PoolSpec, *, zone: str, billing: str, team: str) -> dict[str, str]:
    """Labels every node of the pool carries: pool labels, then nodeLabels, then the system
    labels (pool, team, GPU model, node type, billing kind, zone).

    nodeLabels win over pool labels, so a team can override a pool label per node class (seed
    C4: cost labels are inherited by every node and pod). A written spec may not name the
    system labels (`pools.core.node_labels.reserved_key_error`); one stored before that rule
    does not override them either.
    """
    system = system_labels(pool=spec.name, team=team, gpu_model=spec.gpu_model, node_type=spec.node_type, billing=billing, zone=zone)
    return {**spec.labels, **spec.node_labels, **system}
