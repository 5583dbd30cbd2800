"""The pool form's scaling section: the `spec.scaling` block (seed O4) as fields, and back.

The form shows what most pools write: GPU-memory and queued-pod targets, how they combine, and
per direction a stabilization window, one rate-limit policy and a tolerance (a direction left
blank keeps the defaults: up within 5 minutes by 20% or a node a minute, down a node every 2
minutes after 30 quiet minutes). A stored block with
more than that (several policies in a direction, `selectPolicy: Disabled`) is kept as written and
shown read-only, to be edited as YAML: a form must never drop what it cannot show. The values are
passed to the spec parser as typed, so its errors (with their field paths) land beside the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms

from pools.core.spec import MAX_POLICY_VALUE
from pools.views import form_fields

POLICY_TYPES = [("", "default"), ("Pods", "nodes"), ("Percent", "percent of the nodes")]
DIRECTIONS = (("scale_up", "scaleUp"), ("scale_down", "scaleDown"))
DIRECTION_FIELDS = ("window", "value", "type", "period", "tolerance")


class ScalingFields(forms.Form):
    """Declared fields only: `pools.forms.PoolForm` inherits them."""

    scaling_custom = forms.BooleanField(
        label="Set the scaling rules", required=False,
        help_text="Off: a pool that bursts scales up above 85% GPU memory and more than 10 queued pods",
    )  # fmt: skip
    memory_target = form_fields.IntegerField(label="Target GPU memory used (%)", min_value=1, max_value=100, required=False,
                                       help_text="Above it the pool grows; blank: not a scaling metric")  # fmt: skip
    queue_target = form_fields.IntegerField(label="Target queued pods", min_value=1, required=False,
                                      help_text="More pods waiting than this grows the pool; blank: not a scaling metric")  # fmt: skip
    combine = forms.ChoiceField(label="Grow when", required=False, choices=[("All", "every target is exceeded (AND)"), ("Any", "any target is exceeded (OR)")])
    scale_up_window = forms.CharField(label="Scale-up window", max_length=16, required=False, help_text="How long the need must last, e.g. 5m; blank: the defaults")
    scale_up_value = form_fields.IntegerField(label="Add at most", min_value=1, max_value=MAX_POLICY_VALUE, required=False)
    scale_up_type = forms.ChoiceField(label="Unit (scale-up)", choices=POLICY_TYPES, required=False)
    scale_up_period = form_fields.IntegerField(label="Every (seconds, scale-up)", min_value=1, required=False)
    scale_up_tolerance = form_fields.FloatField(label="Scale-up tolerance", required=False, help_text="0 to 1: how far above its target a metric may be; blank: 0")
    scale_down_window = forms.CharField(label="Scale-down window", max_length=16, required=False, help_text="How long the pool must be quiet, e.g. 30m; blank: the defaults")
    scale_down_value = form_fields.IntegerField(label="Remove at most", min_value=1, max_value=MAX_POLICY_VALUE, required=False)
    scale_down_type = forms.ChoiceField(label="Unit (scale-down)", choices=POLICY_TYPES, required=False)
    scale_down_period = form_fields.IntegerField(label="Every (seconds, scale-down)", min_value=1, required=False)
    scale_down_tolerance = form_fields.FloatField(label="Scale-down tolerance", required=False, help_text="0 to 1: how far below its target; blank: 0")


SCALING_FIELD_NAMES = tuple(ScalingFields.base_fields)

# Spec field path -> form field (the metrics' indexes follow the order the form writes them in).
SCALING_FIELD_FOR_PATH = {
    "spec.scaling.default.metrics": "memory_target",
    "spec.scaling.default.combine": "combine",
    **{f"spec.scaling.default.metrics[{i}].targetAverageUtilization": "memory_target" for i in (0, 1)},
    **{f"spec.scaling.default.metrics[{i}].target": "queue_target" for i in (0, 1)},
    **{
        f"spec.scaling.{key}.{path}": f"{prefix}_{field}"
        for prefix, key in DIRECTIONS
        for path, field in (("stabilizationWindow", "window"), ("policies", "value"), ("policies[0].value", "value"),
                            ("policies[0].type", "type"), ("policies[0].periodSeconds", "period"), ("tolerance", "tolerance"))  # fmt: skip
    },
}


def scaling_initial(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The fields' values for a stored block (the article's targets when there is none), or None
    when the block has more than the fields can show."""
    values: dict[str, Any] = {"scaling_custom": bool(block), "combine": "All"}
    default = (block or {}).get("default") or {}
    metrics = default.get("metrics")
    if metrics is None:
        values.update(memory_target=85, queue_target=10)
    for metric in metrics or ():
        values["memory_target" if metric.get("type") == "Resource" else "queue_target"] = (
            metric.get("targetAverageUtilization") if metric.get("type") == "Resource" else metric.get("target")
        )
    values["combine"] = default.get("combine", "All")
    for prefix, key in DIRECTIONS:
        rules = (block or {}).get(key)
        if rules is None:
            continue  # blank: the defaults
        policies = rules.get("policies") or []
        if len(policies) > 1 or rules.get("selectPolicy", "Max") == "Disabled":
            return None
        policy = policies[0] if policies else {}
        values.update({
            f"{prefix}_window": rules.get("stabilizationWindow", ""), f"{prefix}_type": policy.get("type", ""),
            f"{prefix}_value": policy.get("value"), f"{prefix}_period": policy.get("periodSeconds"), f"{prefix}_tolerance": rules.get("tolerance"),
        })  # fmt: skip
    return values


def scaling_block(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `spec.scaling` block of the cleaned fields; None when the rules are not set. A
    direction whose fields are all blank is left out (its defaults apply); the others are written
    as typed, for the spec's checks to judge."""
    if not data.get("scaling_custom"):
        return None
    metrics = []
    if data.get("memory_target") is not None:
        metrics.append({"type": "Resource", "resource": "gpu-memory", "targetAverageUtilization": data["memory_target"]})
    if data.get("queue_target") is not None:
        metrics.append({"type": "Pods", "pods": "queued_pods", "target": data["queue_target"]})
    block: dict[str, Any] = {"default": {"metrics": metrics, "combine": data.get("combine") or "All"}}
    for prefix, key in DIRECTIONS:
        given = {name: data.get(f"{prefix}_{name}") for name in DIRECTION_FIELDS}
        if all(value in (None, "") for value in given.values()):
            continue
        rules: dict[str, Any] = {}
        if given["window"]:
            rules["stabilizationWindow"] = given["window"]
        if any(given[name] not in (None, "") for name in ("value", "type", "period")):
            policy = {"type": given["type"], "value": given["value"], "periodSeconds": given["period"]}
            rules["policies"] = [{k: v for k, v in policy.items() if v not in (None, "")}]
        if given["tolerance"] is not None:
            rules["tolerance"] = given["tolerance"]
        block[key] = rules
    return block
