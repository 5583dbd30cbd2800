"""A PodDisruptionBudget document (policy/v1) validated as kube-apiserver validates it, so that a
budget the simulated cluster accepts is one a real cluster accepts too, with the same field
paths (issue 22 item 2: the repack's moves are evictions, and the budgets say how many may go).

The rules are those of `ValidatePodDisruptionBudgetSpec` and `ValidateLabelSelector`:
- `spec.minAvailable` and `spec.maxUnavailable` are each an integer >= 0 or a percent string
  ("50%", at most 100%); not both; neither is allowed (such a budget allows no eviction); the
  integer is an IntOrString's, an int32, so kube-apiserver refuses a larger one;
- `spec.selector` is a LabelSelector (null selects nothing, {} every pod of the namespace);
- `spec.unhealthyPodEvictionPolicy` is IfHealthyBudget or AlwaysAllow.
Pure: no Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pools.core.errors import ValidationError
from pools.core.fields import (
    Checker,
    label_key_error,
    label_value_error,
)
from pools.core.priority import INT32_MAX

API_VERSION = "policy/v1"
KIND = "PodDisruptionBudget"
EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
PERCENT = re.compile(r"^[0-9]+%\Z")

_TOP = ("apiVersion", "kind", "metadata", "spec")
_METADATA = ("name", "namespace", "labels", "annotations")
_SPEC = ("minAvailable", "maxUnavailable", "selector", "unhealthyPodEvictionPolicy")
_SELECTOR = ("matchLabels", "matchExpressions")
_EXPRESSION = ("key", "operator", "values")

IntOrPercent = int | str


@dataclass(frozen=True)
class BudgetSpec:
    namespace: str
    name: str
    labels: dict[str, str]
    selector: dict | None
    min_available: IntOrPercent | None
    max_unavailable: IntOrPercent | None
    unhealthy_pod_eviction_policy: str  # "" when unset: kube-apiserver then acts as IfHealthyBudget

    def spec_document(self) -> dict[str, Any]:
        """`spec` as stored and returned: the fields given, nothing invented (a null selector is
        left out, as kube-apiserver leaves it out)."""
        spec: dict[str, Any] = {} if self.selector is None else {"selector": self.selector}
        if self.min_available is not None:
            spec["minAvailable"] = self.min_available
        if self.max_unavailable is not None:
            spec["maxUnavailable"] = self.max_unavailable
        if self.unhealthy_pod_eviction_policy:
            spec["unhealthyPodEvictionPolicy"] = self.unhealthy_pod_eviction_policy
        return spec


def parse_budget(document: Any, *, default_namespace: str = "") -> BudgetSpec:
    """Validate a PodDisruptionBudget document; raise ValidationError naming every bad field."""
    check = Checker()
    top, metadata = check.document(document, api_version=API_VERSION, kind=KIND, known=_TOP, required=_TOP[:3], metadata=_METADATA)
    name, namespace = check.namespaced_name(metadata, default_namespace=default_namespace, what="disruption budget")
    labels = check.labels(metadata.get("labels", {}), "metadata.labels")
    check.annotations(metadata.get("annotations", {}), "metadata.annotations")

    spec = check.mapping(top.get("spec", {}), "spec", _SPEC)
    min_available = _int_or_percent(check, spec.get("minAvailable"), "spec.minAvailable")
    max_unavailable = _int_or_percent(check, spec.get("maxUnavailable"), "spec.maxUnavailable")
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        check.error("spec", "minAvailable and maxUnavailable cannot be both set")
    selector = _selector(check, spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy") or ""
    if policy and policy not in EVICTION_POLICIES:
        check.error("spec.unhealthyPodEvictionPolicy", f"unsupported value {policy!r}: expected one of {', '.join(EVICTION_POLICIES)}")
    if check.errors:
        raise ValidationError(check.errors)
    return BudgetSpec(namespace, name, labels, selector, min_available, max_unavailable, policy)


def _int_or_percent(check: Checker, value: Any, path: str) -> IntOrPercent | None:
    """An IntOrString as `ValidateNonnegativeIntOrPercent` and `IsNotMoreThan100Percent` take it."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            check.error(path, "must be greater than or equal to 0")
            return None
        if value > INT32_MAX:
            check.error(path, f"must be at most {INT32_MAX} (a 32-bit integer)")
            return None
        return value
    if not isinstance(value, str):
        check.error(path, 'must be an integer or a percent string such as "50%"')
        return None
    if not PERCENT.match(value):
        check.error(path, f'invalid value {value!r}: a percent is a whole number followed by "%", such as "1%" or "93%"')
        return None
    if len(value[:-1].lstrip("0")) > 3 or int(value[:-1]) > 100:  # no int() of thousands of digits
        check.error(path, "must not be greater than 100%")
        return None
    return value


def _selector(check: Checker, value: Any, path: str) -> dict | None:
    """A metav1.LabelSelector: None stays None (it selects nothing)."""
    if value is None:
        return None
    selector = check.mapping(value, path, _SELECTOR)
    result: dict[str, Any] = {}
    if selector.get("matchLabels") is not None:
        result["matchLabels"] = check.labels(selector["matchLabels"], f"{path}.matchLabels")
    expressions = selector.get("matchExpressions")
    expressions = [] if expressions is None else expressions
    if not isinstance(expressions, list):
        check.error(f"{path}.matchExpressions", "must be a list of requirements")
        expressions = []
    clean = [_expression(check, entry, f"{path}.matchExpressions[{i}]") for i, entry in enumerate(expressions)]
    if expressions:
        result["matchExpressions"] = [entry for entry in clean if entry is not None]
    return result


def _expression(check: Checker, value: Any, path: str) -> dict | None:
    entry = check.mapping(value, path, _EXPRESSION, ("key", "operator"))
    key, operator, values = entry.get("key"), entry.get("operator"), entry.get("values")
    values = [] if values is None else values
    errors = len(check.errors)
    if "key" in entry and (problem := label_key_error(key)):
        check.error(f"{path}.key", problem)
    if "operator" in entry and operator not in SELECTOR_OPERATORS:
        check.error(f"{path}.operator", f"not a valid selector operator {operator!r}: expected one of {', '.join(SELECTOR_OPERATORS)}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        check.error(f"{path}.values", "must be a list of strings (quote numbers)")
    elif operator in ("In", "NotIn") and not values:
        check.error(f"{path}.values", f"must be specified when operator is {operator}")
    elif operator in ("Exists", "DoesNotExist") and values:
        check.error(f"{path}.values", f"may not be specified when operator is {operator}")
    else:
        for i, text in enumerate(values):
            if problem := label_value_error(text):
                check.error(f"{path}.values[{i}]", problem)
    if len(check.errors) > errors or key is None or operator is None:
        return None
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}
