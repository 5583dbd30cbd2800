"""Alert forms: the pool form's capacity alert section (the `spec.alerts` block as fields, and
back) and the form that silences one rule of a pool until a time.

The section shows every rule with its numbers, the defaults filled in, so a lead sees what the
pool is watched for. Only what differs from the defaults, or what the stored block already
wrote, goes back into the document: a pool created without `alerts` stays without it, and its
YAML round-trips unchanged. Values are passed to the spec parser as typed, so its errors (with
their field paths) land beside the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms

from monitoring.silences import MAX_REASON
from pools.core.alerting import MAX_WINDOW_S, RULES
from pools.core.durations import format_duration
from pools.views import form_fields

ALERTS_SHOWN = "alerts_section"  # the form's hidden marker: the section was on the page (its unticked boxes mean off)


def _name(info, part: str) -> str:
    return f"alert_{info.field}_{part}"


class AlertFields(forms.Form):
    """Declared fields only: `pools.forms.PoolForm` inherits them (built from RULES below)."""


for _info in RULES:
    AlertFields.base_fields[_name(_info, "enabled")] = forms.BooleanField(label=f"{_info.title}: on", required=False, initial=True)
    if _info.threshold_field:
        unit = "%" if _info.threshold_field == "percent" else "nodes"
        AlertFields.base_fields[_name(_info, "threshold")] = form_fields.IntegerField(
            label=f"{_info.title}: {'percent' if unit == '%' else 'at least (nodes)'}", required=False,
            initial=_info.default.threshold, min_value=_info.low, max_value=_info.high,
        )  # fmt: skip
    AlertFields.base_fields[_name(_info, "window")] = forms.CharField(
        label=f"{_info.title}: {'waiting longer than' if _info.window_field == 'olderThan' else 'for'}", max_length=16,
        required=False, initial=format_duration(_info.default.window_s),
        help_text=f"A duration such as 10m or 1h30m, up to {format_duration(MAX_WINDOW_S)}",
    )  # fmt: skip

ALERT_FIELD_NAMES = tuple(AlertFields.base_fields)
ALERT_FIELD_FOR_PATH = {
    **{f"spec.alerts.{info.field}.enabled": _name(info, "enabled") for info in RULES},
    **{f"spec.alerts.{info.field}.{info.threshold_field}": _name(info, "threshold") for info in RULES if info.threshold_field},
    **{f"spec.alerts.{info.field}.{info.window_field}": _name(info, "window") for info in RULES},
}


def alerts_initial(block: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields' values for a stored block (the defaults where it says nothing)."""
    values: dict[str, Any] = {}
    for info in RULES:
        entry = (block or {}).get(info.field) or {}
        values[_name(info, "enabled")] = entry.get("enabled", True) is not False
        if info.threshold_field:
            threshold = entry.get(info.threshold_field, info.default.threshold)
            values[_name(info, "threshold")] = 1 if threshold == "any" else threshold
        values[_name(info, "window")] = entry.get(info.window_field, format_duration(info.default.window_s))
    return values


def alerts_block(data: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `spec.alerts` block of the cleaned fields, or None when every rule is the default and
    the stored block said nothing. A key the stored block wrote stays written."""
    block: dict[str, Any] = {}
    for info in RULES:
        stored = (base or {}).get(info.field) or {}
        entry: dict[str, Any] = {}
        enabled = bool(data.get(_name(info, "enabled")))
        if not enabled or "enabled" in stored:
            entry["enabled"] = enabled
        if info.threshold_field:
            threshold = data.get(_name(info, "threshold"))
            threshold = info.default.threshold if threshold is None else threshold
            if threshold != info.default.threshold or info.threshold_field in stored:
                entry[info.threshold_field] = threshold
        window = (data.get(_name(info, "window")) or "").strip() or format_duration(info.default.window_s)
        if window != format_duration(info.default.window_s) or info.window_field in stored:
            entry[info.window_field] = window
        if entry:
            block[info.field] = entry
    return block or None


class SilenceForm(forms.Form):
    rule = forms.ChoiceField(label="Alert", choices=[(info.reason, info.title) for info in RULES])
    until = form_fields.DateTimeField(label="Silence until (UTC)", input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"))  # fmt: skip
    reason = forms.CharField(label="Why", max_length=MAX_REASON,
                             help_text="e.g. planned maintenance of the storage; the team reads it on this page")  # fmt: skip
