"""The `GpuNodePool` document (seed O2, O4): YAML/JSON <-> dataclasses, validated with field paths.

A pool is declared with the article's document (`apiVersion: ebcloud.io/v1`, `kind: GpuNodePool`).
`autoRepair: true|false` stays the seed's switch; the optional `autoRepairPolicy:
{requireApproval: true}` beside it (ours) makes every repair wait for a platform admin's
approval (a pool without it, like the seed's YAML, repairs on its own).
`parse_document` checks it the way `kubectl --validate=strict` and the API server would: unknown
fields are rejected and named, every problem carries its field path, and all problems are reported
at once. The document is stored as given, so export returns what the user wrote; `to_document`
goes the other way for specs built in code (the web form, tests).

Pure: no Django. What is sellable (GPU models, node types, zones, the node ceiling) comes in as a
`Catalog`, built by the services from the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from pools.autoscaling import (
    DEFAULT_SCALING_SPEC,
    MetricTarget,
    ScalingPolicy,
    ScalingRules,
    ScalingSpec,
)
from pools.durations import format_duration, parse_duration
from pools.errors import FieldError, ValidationError
from pools.scheduling import TAINT_EFFECTS, Taint

API_VERSION = "ebcloud.io/v1"
KIND = "GpuNodePool"
LEASE_TYPES = ("monthly", "quarterly", "yearly")
SCHEDULING_POLICIES = ("binpack", "spread", "bestfit", "fgd")
RESOURCE_METRICS = ("gpu-memory",)
POD_METRICS = ("queued_pods",)
DEFAULT_SYSTEM_IMAGE = "ubuntu-22.04-cuda-12.2"

# Kubernetes' own syntax rules (apimachinery validation), so whatever we put on nodes the
# cluster will accept.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]*$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
MAX_MONTHLY_BUDGET = Decimal("999999999999.99")  # billing.Budget.monthly_amount: 14 digits, 2 decimals


@dataclass(frozen=True)
class Catalog:
    """What the cloud sells: GPU models, node types (GPUs per node), zones (zone -> region)."""

    gpu_models: frozenset[str]
    node_types: Mapping[str, int]
    zones: Mapping[str, str]
    max_nodes: int = 100


@dataclass(frozen=True)
class Burst:
    """On-demand fallback above the monthly baseline (seed G4)."""

    enabled: bool = False
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
    region: str
    labels: Mapping[str, str] = field(default_factory=dict)
    lease_type: str = "monthly"
    system_image: str = DEFAULT_SYSTEM_IMAGE
    auto_repair: bool = True
    repair_requires_approval: bool = False  # spec.autoRepairPolicy.requireApproval
    auto_renew: bool = False
    preemptible: bool = False
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    scaling: ScalingSpec | None = None
    burst: Burst = Burst()
    budget: Budget | None = None
    scheduling_policy: str = "binpack"

    @property
    def autoscaling(self) -> ScalingSpec | None:
        """The policy the autoscaler follows, or None when it leaves the pool alone: it only adds
        and removes burst nodes, so without `burst.enabled` there is none; with it, the
        `scaling` block, else the defaults an empty `scaling: {}` gets (seed D3/O4). Ticking
        "burst" in the form, which has no scaling fields, is then enough for the pool to burst."""
        if not self.burst.enabled:
            return None
        return self.scaling if self.scaling is not None else DEFAULT_SCALING_SPEC


# ---------------------------------------------------------------------------------------------
# YAML


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, so entity expansion ("billion laughs") cannot happen."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not accepted", event.start_mark)
        return super().compose_node(parent, index)


def load_yaml(text: str | bytes, *, max_bytes: int = 64 * 1024) -> dict[str, Any]:
    """One YAML (or JSON) mapping, safely: no tags, no aliases, bounded size."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError("the document is not UTF-8 text") from exc
    if len(text.encode("utf-8")) > max_bytes:
        raise ValidationError(f"the document is larger than {max_bytes} bytes")
    try:
        documents = [d for d in yaml.load_all(text, Loader=_NoAliasLoader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise ValidationError(f"malformed YAML{where}: {problem}") from exc
    if len(documents) != 1:
        raise ValidationError(f"expected one GpuNodePool document, found {len(documents)}")
    if not isinstance(documents[0], dict):
        raise ValidationError("the document must be a mapping with apiVersion, kind, metadata, spec")
    return documents[0]


def dump_yaml(document: Mapping[str, Any]) -> str:
    return yaml.safe_dump(_plain(document), sort_keys=False, allow_unicode=True)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


# ---------------------------------------------------------------------------------------------
# Parsing


class _Checker:
    """Collects field errors while walking the document."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, value: Any, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping")
            return {}
        for key in value:
            if key not in known:
                self.error(f"{path}.{key}" if path else str(key), "unknown field")
        for key in required:
            if key not in value:
                self.error(f"{path}.{key}" if path else key, "required field is missing")
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, "must be an integer")
            return None
        if minimum is not None and value < minimum:
            self.error(path, f"must be at least {minimum}")
            return None
        if maximum is not None and value > maximum:
            self.error(path, f"must be at most {maximum}")
            return None
        return value

    def boolean(self, value: Any, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, "must be true or false")
            return None
        return value

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.error(path, "must be a non-empty string")
            return None
        return value

    def choice(self, value: Any, path: str, choices: tuple[str, ...] | frozenset[str] | Mapping, what: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if text not in choices:
            self.error(path, f"unknown {what} {text!r}; expected one of {', '.join(sorted(choices))}")
            return None
        return text

    def labels(self, value: Any, path: str) -> dict[str, str]:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping of label keys to values")
            return {}
        result: dict[str, str] = {}
        for key, val in value.items():
            key_error = label_key_error(key)
            if key_error:
                self.error(f"{path}.{key}", key_error)
                continue
            value_error = label_value_error(val)
            if value_error:
                self.error(f"{path}.{key}", value_error)
                continue
            result[key] = val
        return result

    def duration(self, value: Any, path: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = value
        else:
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                self.error(path, str(exc))
                return None
        if not 0 <= seconds <= 3600:
            self.error(path, "must be between 0s and 1h (the HPA bound)")
            return None
        return seconds


def label_key_error(key: Any) -> str | None:
    """Kubernetes' rule for label (and taint) keys: optional DNS-1123 prefix, '/', a name ≤ 63."""
    if not isinstance(key, str) or not key:
        return "label keys must be non-empty strings"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return f"invalid label key {key!r}: the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"invalid label key {key!r}: the prefix must be a DNS-1123 subdomain"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            f"invalid label key {key!r}: the name must be at most 63 characters of alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def label_value_error(value: Any) -> str | None:
    """Kubernetes' rule for label (and taint) values: empty, or ≤ 63 of [A-Za-z0-9-_.]."""
    if not isinstance(value, str):
        return "label values must be strings (quote numbers and booleans)"
    if value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
        return (
            f"invalid label value {value!r}: at most 63 characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


RESERVED_NAMES = frozenset({"new", "import"})  # they name pages of the web console


def name_error(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "required: a DNS-1123 name such as train-pool-a"
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved; choose another name"
    if len(name) > 63 or not _DNS1123_LABEL.match(name):
        return (
            f"invalid name {name!r}: a DNS-1123 label must be at most 63 lower-case alphanumerics "
            "or '-', starting and ending with an alphanumeric"
        )
    return None


_TOP = ("apiVersion", "kind", "metadata", "spec")
_METADATA = ("name", "labels")
_SPEC = (
    "nodeType", "gpuModel", "nodeCount", "region", "leaseType", "systemImage", "autoRepair",
    "autoRepairPolicy", "autoRenew", "preemptible", "nodeLabels", "nodeTaints", "scaling", "burst", "budget",
    "schedulingPolicy",
)  # fmt: skip
_SPEC_REQUIRED = ("nodeType", "gpuModel", "nodeCount", "region")


def parse_document(document: Any, catalog: Catalog) -> PoolSpec:
    """Validate a GpuNodePool document; raise ValidationError naming every bad field."""
    check = _Checker()
    top = check.mapping(document, "", _TOP, _TOP)
    if "apiVersion" in top and top["apiVersion"] != API_VERSION:
        check.error("apiVersion", f"must be {API_VERSION}")
    if "kind" in top and top["kind"] != KIND:
        check.error("kind", f"must be {KIND}")
    metadata = check.mapping(top.get("metadata", {}), "metadata", _METADATA, ("name",))
    name = metadata.get("name")
    if "name" in metadata and (problem := name_error(name)):
        check.error("metadata.name", problem)
    labels = check.labels(metadata.get("labels", {}), "metadata.labels")

    spec = check.mapping(top.get("spec", {}), "spec", _SPEC, _SPEC_REQUIRED)
    node_type = check.choice(spec["nodeType"], "spec.nodeType", catalog.node_types, "node type") if "nodeType" in spec else None
    gpu_model = check.choice(spec["gpuModel"], "spec.gpuModel", catalog.gpu_models, "GPU model") if "gpuModel" in spec else None
    region = check.choice(spec["region"], "spec.region", catalog.zones, "zone") if "region" in spec else None
    min_nodes, max_nodes = _parse_node_count(check, spec, catalog)
    lease_type = check.choice(spec.get("leaseType", "monthly"), "spec.leaseType", LEASE_TYPES, "lease type")
    system_image = check.string(spec.get("systemImage", DEFAULT_SYSTEM_IMAGE), "spec.systemImage")
    if system_image and (len(system_image) > 128 or not _IMAGE.match(system_image)):
        check.error("spec.systemImage", "must be an image name of at most 128 characters")
    flags = {
        key: check.boolean(spec.get(key, default), f"spec.{key}")
        for key, default in (("autoRepair", True), ("autoRenew", False), ("preemptible", False))
    }
    require_approval = _parse_repair_policy(check, spec.get("autoRepairPolicy", {}))
    node_labels = check.labels(spec.get("nodeLabels", {}), "spec.nodeLabels")
    taints = _parse_taints(check, spec.get("nodeTaints", []))
    scaling = _parse_scaling(check, spec["scaling"]) if "scaling" in spec else None
    burst = _parse_burst(check, spec.get("burst", {}), max_nodes, min_nodes)
    budget = _parse_budget(check, spec["budget"]) if "budget" in spec else None
    policy = check.choice(spec.get("schedulingPolicy", "binpack"), "spec.schedulingPolicy", SCHEDULING_POLICIES, "scheduling policy")

    if check.errors:
        raise ValidationError(check.errors)
    return PoolSpec(
        name=name,
        labels=labels,
        node_type=node_type,
        gpu_model=gpu_model,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        region=region,
        lease_type=lease_type,
        system_image=system_image,
        auto_repair=flags["autoRepair"],
        repair_requires_approval=require_approval,
        auto_renew=flags["autoRenew"],
        preemptible=flags["preemptible"],
        node_labels=node_labels,
        node_taints=taints,
        scaling=scaling,
        burst=burst,
        budget=budget,
        scheduling_policy=policy,
    )


def _parse_node_count(check: _Checker, spec: dict, catalog: Catalog) -> tuple[int | None, int | None]:
    if "nodeCount" not in spec:
        return None, None
    count = check.mapping(spec["nodeCount"], "spec.nodeCount", ("min", "max"), ("min", "max"))
    low = check.integer(count["min"], "spec.nodeCount.min", minimum=0) if "min" in count else None
    high = (
        check.integer(count["max"], "spec.nodeCount.max", minimum=1, maximum=catalog.max_nodes)
        if "max" in count
        else None
    )
    if low is not None and high is not None and low > high:
        check.error("spec.nodeCount.min", f"must not exceed spec.nodeCount.max ({low} > {high})")
    return low, high


def _parse_repair_policy(check: _Checker, value: Any) -> bool:
    """`spec.autoRepairPolicy` (optional): `requireApproval: true` turns each repair the ladder
    chooses into a request a platform admin approves or rejects (pools/repair_approvals.py).
    Kept beside the seed's boolean `autoRepair` instead of replacing it, so every existing
    document keeps its meaning; with `autoRepair: false` the policy changes nothing (the pool
    only alerts)."""
    entry = check.mapping(value, "spec.autoRepairPolicy", ("requireApproval",))
    return bool(check.boolean(entry.get("requireApproval", False), "spec.autoRepairPolicy.requireApproval"))


def _parse_taints(check: _Checker, value: Any) -> tuple[Taint, ...]:
    if not isinstance(value, list):
        check.error("spec.nodeTaints", "must be a list of {key, value, effect}")
        return ()
    taints: list[Taint] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(value):
        path = f"spec.nodeTaints[{index}]"
        entry = check.mapping(item, path, ("key", "value", "effect"), ("key", "effect"))
        key, val, effect = entry.get("key"), entry.get("value", ""), entry.get("effect")
        if "key" in entry and (problem := label_key_error(key)):
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


def _parse_burst(check: _Checker, value: Any, max_nodes: int | None, min_nodes: int | None) -> Burst:
    entry = check.mapping(value, "spec.burst", ("enabled", "maxNodes"))
    enabled = check.boolean(entry.get("enabled", False), "spec.burst.enabled")
    limit = check.integer(entry.get("maxNodes", 0), "spec.burst.maxNodes", minimum=0)
    if limit and max_nodes is not None and min_nodes is not None and limit > max_nodes - min_nodes:
        check.error(
            "spec.burst.maxNodes",
            f"must not exceed nodeCount.max - nodeCount.min ({max_nodes - min_nodes})",
        )
    return Burst(enabled=bool(enabled), max_nodes=limit or 0)


def _parse_budget(check: _Checker, value: Any) -> Budget | None:
    entry = check.mapping(value, "spec.budget", ("monthly", "currency", "thresholds"), ("monthly",))
    amount: Decimal | None = None
    if "monthly" in entry:
        raw = entry["monthly"]
        try:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise InvalidOperation
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
    for index, item in enumerate(thresholds):
        check.integer(item, f"spec.budget.thresholds[{index}]", minimum=1, maximum=1000)
    if amount is None:
        return None
    return Budget(monthly=amount, currency=currency, thresholds=tuple(sorted(set(thresholds))))


def _parse_scaling(check: _Checker, value: Any) -> ScalingSpec:
    entry = check.mapping(value, "spec.scaling", ("default", "scaleUp", "scaleDown"))
    profile = check.mapping(entry.get("default", {}), "spec.scaling.default", ("metrics", "combine"))
    metrics = DEFAULT_SCALING_SPEC.metrics
    if "metrics" in profile:
        metrics = _parse_metrics(check, profile["metrics"])
    combine = check.choice(profile.get("combine", DEFAULT_SCALING_SPEC.combine), "spec.scaling.default.combine", ("All", "Any"), "combine mode")
    scale_up = DEFAULT_SCALING_SPEC.scale_up
    scale_down = DEFAULT_SCALING_SPEC.scale_down
    if "scaleUp" in entry:
        scale_up = _parse_rules(check, entry["scaleUp"], "spec.scaling.scaleUp", scale_up)
    if "scaleDown" in entry:
        scale_down = _parse_rules(check, entry["scaleDown"], "spec.scaling.scaleDown", scale_down)
    return ScalingSpec(metrics=metrics, scale_up=scale_up, scale_down=scale_down, combine=combine or "All")


def _parse_metrics(check: _Checker, value: Any) -> tuple[MetricTarget, ...]:
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


def _parse_rules(check: _Checker, value: Any, path: str, default: ScalingRules) -> ScalingRules:
    entry = check.mapping(value, path, ("stabilizationWindow", "policies", "selectPolicy"))
    window = default.stabilization_window_seconds
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
            amount = check.integer(policy.get("value"), f"{item_path}.value", minimum=1) if "value" in policy else None
            period = check.integer(policy.get("periodSeconds"), f"{item_path}.periodSeconds", minimum=1, maximum=1800) if "periodSeconds" in policy else None
            if kind and amount and period:
                parsed.append(ScalingPolicy(type=kind, value=amount, period_seconds=period))
        policies = tuple(parsed)
    return ScalingRules(
        stabilization_window_seconds=window if window is not None else default.stabilization_window_seconds,
        policies=policies,
        select_policy=select or "Max",
    )


# ---------------------------------------------------------------------------------------------
# Dataclasses -> document


def to_document(spec: PoolSpec) -> dict[str, Any]:
    """The full document of a spec (every field explicit), e.g. for specs built by the web form."""
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    body: dict[str, Any] = {
        "nodeType": spec.node_type,
        "gpuModel": spec.gpu_model,
        "nodeCount": {"min": spec.min_nodes, "max": spec.max_nodes},
        "region": spec.region,
        "leaseType": spec.lease_type,
        "systemImage": spec.system_image,
        "autoRepair": spec.auto_repair,
        "preemptible": spec.preemptible,
    }
    if spec.repair_requires_approval:
        body["autoRepairPolicy"] = {"requireApproval": True}
    if spec.auto_renew:
        body["autoRenew"] = True
    if spec.node_labels:
        body["nodeLabels"] = dict(spec.node_labels)
    if spec.node_taints:
        body["nodeTaints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.node_taints]
    if spec.scaling is not None:
        body["scaling"] = scaling_document(spec.scaling)
    if spec.burst != Burst():
        body["burst"] = {"enabled": spec.burst.enabled, "maxNodes": spec.burst.max_nodes}
    if spec.budget is not None:
        body["budget"] = {
            "monthly": str(spec.budget.monthly),
            "currency": spec.budget.currency,
            "thresholds": list(spec.budget.thresholds),
        }
    if spec.scheduling_policy != "binpack":
        body["schedulingPolicy"] = spec.scheduling_policy
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body}


def scaling_document(scaling: ScalingSpec) -> dict[str, Any]:
    metrics = []
    for metric in scaling.metrics:
        if metric.type == "Resource":
            metrics.append({"type": "Resource", "resource": metric.name, "targetAverageUtilization": int(metric.target)})
        else:
            metrics.append({"type": "Pods", "pods": metric.name, "target": int(metric.target)})
    default: dict[str, Any] = {"metrics": metrics}
    if scaling.combine != "All":
        default["combine"] = scaling.combine

    def rules(r: ScalingRules) -> dict[str, Any]:
        return {
            "stabilizationWindow": format_duration(r.stabilization_window_seconds),
            "policies": [{"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in r.policies],
            "selectPolicy": r.select_policy,
        }

    return {"default": default, "scaleUp": rules(scaling.scale_up), "scaleDown": rules(scaling.scale_down)}


def effective_node_labels(spec: PoolSpec, *, zone: str, billing: str) -> dict[str, str]:
    """Labels every node of the pool carries: system labels, then pool labels, then nodeLabels.

    Later sources win, so a team can override a pool label per node class (seed C4: cost labels
    are inherited by every node and pod).
    """
    labels = {
        "ebcloud.io/pool": spec.name,
        "ebcloud.io/gpu-model": spec.gpu_model,
        "ebcloud.io/node-type": spec.node_type,
        "ebcloud.io/billing": billing,
        "topology.kubernetes.io/zone": zone,
    }
    labels.update(spec.labels)
    labels.update(spec.node_labels)
    return labels


def merge_patch(document: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(document) if isinstance(document, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


SERVER_METADATA = ("team", "generation", "creationTimestamp", "uid", "resourceVersion")


def split_server_fields(document: Any) -> tuple[Any, dict[str, Any]]:
    """Drop what the server sets (`status`, server metadata) from a document sent back to it.

    Like the Kubernetes API server, this lets `get -o yaml`, edit, `apply` work; the values are
    returned so that a caller can honour `metadata.team` as a choice on create.
    """
    if not isinstance(document, dict):
        return document, {}
    cleaned = {key: value for key, value in document.items() if key != "status"}
    metadata = cleaned.get("metadata")
    server: dict[str, Any] = {}
    if isinstance(metadata, dict):
        server = {key: metadata[key] for key in SERVER_METADATA if key in metadata}
        cleaned["metadata"] = {key: value for key, value in metadata.items() if key not in SERVER_METADATA}
    return cleaned, server
