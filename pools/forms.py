"""Web forms: they shape browser input into a GpuNodePool document and map the spec's field paths
back onto the form (design §6: forms only validate and shape; `pools.core.spec` is the validator).
"""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from typing import Any

from django import forms

from billing.budget_selectors import RULE_IN_WORDS, PoolShape
from pools.alerts_form import (
    ALERT_FIELD_FOR_PATH,
    ALERT_FIELD_NAMES,
    ALERTS_SHOWN,
    AlertFields,
    alerts_block,
    alerts_initial,
)
from pools.core.errors import ValidationError
from pools.core.spec import (
    API_VERSION,
    DEFAULT_SCHEDULING_POLICY,
    DEFAULT_SYSTEM_IMAGE,
    KIND,
    LEASE_TYPES,
    SCHEDULING_POLICIES,
    SCHEDULING_POLICY_HELP,
    TAINT_EFFECTS,
    Catalog,
    parse_document,
    spec_autoscales,
)
from pools.core.spec_merge import Conflict, merge3
from pools.models import GpuModel, GpuNodePool, NodeType, PoolOrder, Zone
from pools.scaling_form import (
    SCALING_FIELD_FOR_PATH,
    SCALING_FIELD_NAMES,
    ScalingFields,
    scaling_block,
    scaling_initial,
)
from pools.selectors.pools import LISTED_POOL_PHASES
from pools.views import form_fields

ROW_KINDS = ("label", "nodelabel", "taint")

# Spec field path -> form field; rows are matched by their own prefixes below.
FIELD_FOR_PATH = {
    "metadata.name": "name",
    "spec.gpuModel": "gpu_model",
    "spec.nodeType": "node_type",
    "spec.region": "region",
    "spec.zones[0]": "region",
    "spec.zones": "fallback_zones",
    "spec.nodeCount": "min_nodes",
    "spec.nodeCount.min": "min_nodes",
    "spec.nodeCount.max": "max_nodes",
    "spec.leaseType": "lease_type",
    "spec.systemImage": "system_image",
    "spec.autoRepair": "auto_repair",
    "spec.autoRenew": "auto_renew",
    "spec.preemptible": "preemptible",
    "spec.burst.enabled": "burst_enabled",
    "spec.burst.maxNodes": "burst_max_nodes",
    "spec.budget.monthly": "budget_monthly",
    "spec.budget.currency": "budget_monthly",
    "spec.schedulingPolicy": "scheduling_policy",
    "spec.sharedWith": "shared_with",
    "team": "team",
    **SCALING_FIELD_FOR_PATH,
    **ALERT_FIELD_FOR_PATH,
}
ROW_PREFIXES = (("metadata.labels", "label"), ("spec.nodeLabels", "nodelabel"), ("spec.nodeTaints", "taint"))


class PoolForm(ScalingFields, AlertFields):
    team = forms.ChoiceField(required=False, help_text="The team that owns and pays for the pool")
    name = forms.CharField(max_length=63, help_text="DNS-1123 name, e.g. train-pool-a")
    gpu_model = forms.ChoiceField(label="GPU model")
    node_type = forms.ChoiceField(label="Node type")
    region = forms.ChoiceField(label="Zone", help_text="Preferred zone: the one nearest the data the jobs read")
    fallback_zones = forms.CharField(
        label="Fallback zones", required=False, max_length=500,
        help_text=(
            "Zones to buy nodes in, in this order, when the preferred zone has none left, comma-separated "
            "(e.g. cn-east-2b); same region only. Jobs there read their data across zones, which is billed per GB"
        ),
    )  # fmt: skip
    min_nodes = form_fields.IntegerField(label="Minimum nodes (monthly baseline)", min_value=0)
    max_nodes = form_fields.IntegerField(label="Maximum nodes", min_value=1)
    lease_type = forms.ChoiceField(label="Lease", choices=[(t, t.capitalize()) for t in LEASE_TYPES])
    system_image = forms.CharField(label="System image", max_length=128, initial="ubuntu-22.04-cuda-12.2")
    auto_repair = forms.BooleanField(label="Auto-repair broken nodes", required=False, initial=True)
    auto_renew = forms.BooleanField(label="Renew leases automatically", required=False)
    preemptible = forms.BooleanField(label="Preemptible (cheaper, may be reclaimed)", required=False)
    burst_enabled = forms.BooleanField(
        label="Burst with on-demand nodes above the baseline", required=False,
        help_text="When pods queue: by the pool's scaling block (which turns this on), else GPU memory above 85% and more than 10 queued pods",
    )
    burst_max_nodes = form_fields.IntegerField(label="Most burst nodes", min_value=0, required=False)
    budget_monthly = form_fields.DecimalField(
        label="Monthly budget (CNY)", min_value=Decimal("0.01"), max_digits=14, decimal_places=2, required=False,
        help_text=RULE_IN_WORDS,
    )  # fmt: skip
    scheduling_policy = forms.ChoiceField(
        label="Scheduling policy", initial=DEFAULT_SCHEDULING_POLICY,
        choices=[(p, f"{p}: {SCHEDULING_POLICY_HELP[p]}") for p in SCHEDULING_POLICIES],
        help_text="How the scheduler picks a node (and GPUs) for each pod on this pool",
    )  # fmt: skip

    shared_with = forms.CharField(
        label="Share with teams", required=False, max_length=1000,
        help_text="Other teams whose pods may also run on this pool's nodes, comma-separated (e.g. inference); your team still pays for it",
    )  # fmt: skip

    # The pool's version when the form was opened (its generation) and the pool it was (a pool
    # of the same name created since has a generation of its own): saving it is refused if the
    # pool has changed since, rather than silently putting back what another lead just changed.
    resource_version = forms.IntegerField(widget=forms.HiddenInput, required=False, min_value=0)
    uid = forms.CharField(widget=forms.HiddenInput, required=False, max_length=36)
    # The document at that version: the lead's changes since it are what a save refused as
    # outdated puts onto the pool as it is now (`merged_onto`).
    base = forms.CharField(widget=forms.HiddenInput, required=False, strip=False)

    def __init__(self, *args, teams=None, editing: GpuNodePool | None = None, budget_hint: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = editing
        if budget_hint:  # what an empty budget means for this pool (billing.budget_selectors)
            self.fields["budget_monthly"].help_text = budget_hint
        self.fields["gpu_model"].choices = [(m, m) for m in GpuModel.objects.order_by("name").values_list("name", flat=True)]
        self.fields["node_type"].choices = [(t, t) for t in NodeType.objects.order_by("gpu_count").values_list("name", flat=True)]
        self.fields["region"].choices = [(z.name, f"{z.name} ({z.region})") for z in Zone.objects.order_by("name")]
        if editing is not None:
            self.initial.setdefault("resource_version", editing.generation)
            self.initial.setdefault("uid", editing.uid)
            self.initial.setdefault("base", json.dumps(editing.document))
            del self.fields["team"]
            for immutable in ("name", "gpu_model", "node_type", "region", "preemptible"):
                self.fields[immutable].disabled = True
        else:
            team_list = list(teams or [])
            self.fields["team"].choices = [(t.slug, t.name) for t in team_list]
            self.fields["team"].required = len(team_list) > 1
        self.rows: dict[str, list[dict[str, str]]] = {kind: [] for kind in ROW_KINDS}
        self.row_errors: dict[str, list[str]] = {kind: [] for kind in ROW_KINDS}
        stored = scaling_initial(editing.document.get("spec", {}).get("scaling") if editing is not None else None)
        self.scaling_locked = stored is None  # a block with more than the fields show: kept, edited as YAML
        for name, value in (stored or {}).items():
            self.initial.setdefault(name, value)
        for name in SCALING_FIELD_NAMES:
            self.fields[name].disabled = self.scaling_locked
        for name, value in alerts_initial(editing.document.get("spec", {}).get("alerts") if editing is not None else None).items():
            self.initial.setdefault(name, value)

    def chosen_shape(self) -> PoolShape | None:
        """The pool the form's choices describe (its initial ones, or those sent back with an
        error), for the budget hint (`billing.budget_selectors.pool_form_budget_hint`); None when
        they are not yet a pool's shape. Only a value among the field's choices is taken: a raw
        one (a NUL byte, say) would fail a query on PostgreSQL before the field could refuse it."""

        def chosen(name: str, fallback: Any = None) -> Any:
            if self.is_bound:
                value = self.fields[name].widget.value_from_datadict(self.data, self.files, self.add_prefix(name))
                return fallback if value in (None, "") else value
            value = self.initial.get(name, self.fields[name].initial)
            return fallback if value is None else value

        def offered(name: str) -> Any:
            keys = [key for key, _ in self.fields[name].choices]
            value = chosen(name, keys[0] if keys else None)
            return value if any(key == value for key in keys) else None  # `==`: a list sent as the value is no choice

        try:  # the fields' own rules (digits 0-9, bounds): a refused count has no shape
            min_nodes, max_nodes = (self.fields[name].clean(chosen(name)) for name in ("min_nodes", "max_nodes"))
        except forms.ValidationError:
            return None
        gpu_model, node_type, lease_type = offered("gpu_model"), offered("node_type"), chosen("lease_type", LEASE_TYPES[0])
        if gpu_model is None or node_type is None or lease_type not in LEASE_TYPES or max_nodes < min_nodes:
            return None
        preemptible = bool(chosen("preemptible", False))
        return PoolShape(gpu_model, node_type, lease_type, preemptible, min_nodes, max_nodes, sent=self.is_bound)

    @property
    def main_fields(self) -> list:
        return [f for f in self.visible_fields() if f.name not in SCALING_FIELD_NAMES and f.name not in ALERT_FIELD_NAMES]

    @property
    def scaling_fields(self) -> list:
        return [f for f in self.visible_fields() if f.name in SCALING_FIELD_NAMES]

    @property
    def alert_fields(self) -> list:
        return [f for f in self.visible_fields() if f.name in ALERT_FIELD_NAMES]

    # -- rows (labels, node labels, taints) are repeated inputs: label_key, label_value, ...

    def read_rows(self) -> None:
        data = self.data
        for kind in ROW_KINDS:
            keys = data.getlist(f"{kind}_key")
            values = data.getlist(f"{kind}_value")
            effects = data.getlist(f"{kind}_effect") if kind == "taint" else []
            rows = []
            for index, key in enumerate(keys):
                row = {"key": key.strip(), "value": values[index].strip() if index < len(values) else ""}
                if kind == "taint":
                    row["effect"] = effects[index] if index < len(effects) else "NoSchedule"
                if row["key"] or row["value"]:
                    rows.append(row)
            self.rows[kind] = rows

    def to_document(self, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """The GpuNodePool document the form describes; fields the form lacks keep their base value."""
        data = self.cleaned_data
        document = copy.deepcopy(base) if base else {"apiVersion": API_VERSION, "kind": KIND, "metadata": {}, "spec": {}}
        metadata = document.setdefault("metadata", {})
        spec = document.setdefault("spec", {})
        metadata["name"] = data["name"]
        _set_or_drop(metadata, "labels", {r["key"]: r["value"] for r in self.rows["label"]})
        fallbacks = [zone.strip() for zone in data.get("fallback_zones", "").split(",") if zone.strip()]
        spec.pop("region" if fallbacks else "zones", None)  # one zone is the article's `region`
        zones = {"zones": [data["region"], *fallbacks]} if fallbacks else {"region": data["region"]}
        spec.update(
            {
                "nodeType": data["node_type"],
                "gpuModel": data["gpu_model"],
                "nodeCount": {"min": data["min_nodes"], "max": data["max_nodes"]},
                **zones,
            }
        )
        for key, value in (("leaseType", data["lease_type"]), ("systemImage", data["system_image"]),
                           ("autoRepair", data["auto_repair"]), ("preemptible", data["preemptible"])):  # fmt: skip
            if key in spec or value != SPEC_DEFAULTS[key]:  # a field left at its default stays unwritten
                spec[key] = value
        _set_or_drop(spec, "autoRenew", data["auto_renew"])
        _set_or_drop(spec, "nodeLabels", {r["key"]: r["value"] for r in self.rows["nodelabel"]})
        _set_or_drop(spec, "nodeTaints", [dict(r) for r in self.rows["taint"]])
        burst = {"enabled": True, "maxNodes": data.get("burst_max_nodes") or 0} if data["burst_enabled"] else None
        if not self.scaling_locked:
            _set_or_drop(spec, "scaling", scaling_block(data))
        if burst is None and "scaling" in spec:  # a scaling block alone bursts: unticked says no
            burst = {"enabled": False}
        elif burst == {"enabled": True, "maxNodes": 0} and "scaling" in spec and "burst" not in spec:
            burst = None  # ticked without a limit says what the scaling block alone does
        _set_or_drop(spec, "burst", burst)
        budget, stored = data.get("budget_monthly"), spec.get("budget") or {}
        if not budget:
            spec.pop("budget", None)
        elif not _same_amount(stored.get("monthly"), budget):  # an unchanged amount stays as stored (a number a number)
            spec["budget"] = {**stored, "monthly": str(budget), "currency": stored.get("currency", "CNY")}
        _set_or_drop(spec, "schedulingPolicy", data["scheduling_policy"] if data["scheduling_policy"] != DEFAULT_SCHEDULING_POLICY else None)
        _set_or_drop(spec, "sharedWith", [team.strip() for team in data.get("shared_with", "").split(",") if team.strip()])
        if self.data.get(ALERTS_SHOWN):  # a post without the section (a script) keeps the stored block
            _set_or_drop(spec, "alerts", alerts_block(data, spec.get("alerts") if isinstance(spec.get("alerts"), dict) else None))
        return document

    def to_update(self, pool: GpuNodePool, catalog: Catalog) -> dict[str, Any]:
        """The document for an edit of `pool`, carrying the version the form was opened at (the
        preview and the export show the document alone). A save that changes nothing the spec
        means (the form writes its own shape: a default, a block's layout) keeps the document as
        written, so that Export YAML gives it back and its version does not move."""
        document = self.to_document(base=pool.document)
        if _same_spec(document, pool.document, catalog):
            document = copy.deepcopy(pool.document)
        if self.cleaned_data.get("resource_version") is not None:
            document["metadata"]["resourceVersion"] = str(self.cleaned_data["resource_version"])
        if self.cleaned_data.get("uid"):
            document["metadata"]["uid"] = self.cleaned_data["uid"]
        return document

    def merged_onto(self, pool: GpuNodePool, catalog: Catalog) -> tuple[dict[str, Any], list[Conflict]] | None:
        """The pool's document as it is now with this form's changes since the version it was
        opened at put on top (`pools.core.spec_merge`), and the values both changed; None when
        the post carries no document of that version that reads as a pool's (a script's post,
        a tampered page): then there is nothing to tell the lead's changes by.

        The lead's changes are read as the page showed that version: which fields it locked (a
        scaling block the fields cannot show) is that version's, not the current one's. A
        scaling block bursts unless `burst.enabled` says no, so the merge of the two keys is
        checked as one choice: the lead's, where the lead made it and the merge would undo it,
        said outright."""
        try:
            base = json.loads(self.cleaned_data.get("base") or "null")
            parse_document(base, catalog)
        except (ValueError, RecursionError, ValidationError):
            return None
        as_opened = PoolForm.editing(pool, self.data, document=base)
        as_opened.read_rows()
        if not as_opened.is_valid():
            return None
        mine = _as_written(as_opened.to_document(base=base), base, catalog)
        merged, conflicts = merge3(base, mine, pool.document)
        bursts = spec_autoscales(mine["spec"])
        if spec_autoscales(base["spec"]) != bursts != spec_autoscales(merged["spec"]):  # the lead's own choice, undone
            merged["spec"]["burst"] = {**(merged["spec"].get("burst") or {}), "enabled": bursts}
            conflicts = [*(c for c in conflicts if c.path != "spec.burst.enabled"), Conflict("spec.burst.enabled", bursts, not bursts)]
        return merged, conflicts

    def add_spec_errors(self, error: ValidationError) -> None:
        """Show each spec error beside its field (or its row section)."""
        for item in error.errors:
            field = FIELD_FOR_PATH.get(item.field) or FIELD_FOR_PATH.get(re.sub(r"\[[0-9]+\]$", "", item.field))
            if field in self.fields:
                self.add_error(field, item.message)
                continue
            for prefix, kind in ROW_PREFIXES:
                if item.field.startswith(prefix):
                    where = item.field[len(prefix) :].lstrip(".")
                    match = re.match(r"\[([0-9]+)\]\.?(.*)", where)
                    label = f"row {int(match.group(1)) + 1} {match.group(2)}".strip() if match else where
                    self.row_errors[kind].append(f"{label}: {item.message}" if label else item.message)
                    break
            else:
                self.add_error(None, str(item))

    @classmethod
    def editing(cls, pool: GpuNodePool, data=None, *, document: dict | None = None, base: dict | None = None, budget_hint: str = "") -> PoolForm:
        """The edit form of `pool` as `document` shows it (the pool's own by default; the
        version a page was opened at, or a merge), its fields and rows read from that one
        document, so that what a page shows and what a post is compared to never differ.
        `base`: the version a save is made from, when it is not `document` (a merge's)."""
        if document is not None:
            pool = copy.copy(pool)
            pool.document = document
        initial, rows = cls.initial_from(pool)
        if base is not None:
            initial["base"] = json.dumps(base)
        form = cls(data, editing=pool, initial=initial, budget_hint=budget_hint)
        form.rows = rows
        return form

    @classmethod
    def initial_from(cls, pool: GpuNodePool) -> tuple[dict[str, Any], dict[str, list[dict[str, str]]]]:
        spec = pool.document.get("spec", {})
        burst = spec.get("burst", {})
        initial = {
            "name": pool.name,
            "gpu_model": spec.get("gpuModel"),
            "node_type": spec.get("nodeType"),
            "region": spec.get("region") or (spec.get("zones") or [None])[0],
            "fallback_zones": ", ".join(spec.get("zones", [])[1:]),
            "min_nodes": spec.get("nodeCount", {}).get("min"),
            "max_nodes": spec.get("nodeCount", {}).get("max"),
            "lease_type": spec.get("leaseType", "monthly"),
            "system_image": spec.get("systemImage", "ubuntu-22.04-cuda-12.2"),
            "auto_repair": spec.get("autoRepair", True),
            "auto_renew": spec.get("autoRenew", False),
            "preemptible": spec.get("preemptible", False),
            "burst_enabled": pool.bursts,
            "burst_max_nodes": burst.get("maxNodes", 0),
            "budget_monthly": spec.get("budget", {}).get("monthly"),
            "scheduling_policy": spec.get("schedulingPolicy", DEFAULT_SCHEDULING_POLICY),
            "shared_with": ", ".join(spec.get("sharedWith", [])),
        }
        rows = {
            "label": [{"key": k, "value": v} for k, v in pool.document.get("metadata", {}).get("labels", {}).items()],
            "nodelabel": [{"key": k, "value": v} for k, v in spec.get("nodeLabels", {}).items()],
            "taint": [dict(t) for t in spec.get("nodeTaints", [])],
        }
        return initial, rows


# What the spec reads for these when they are left out (pools.core.spec.parse_document).
SPEC_DEFAULTS = {"leaseType": "monthly", "systemImage": DEFAULT_SYSTEM_IMAGE, "autoRepair": True, "preemptible": False}


def _same_spec(document: dict[str, Any], stored: dict[str, Any], catalog: Catalog) -> bool:
    try:
        return parse_document(document, catalog) == parse_document(stored, catalog)
    except ValidationError:  # the update says what is wrong with it
        return False


def _as_written(mine: dict[str, Any], base: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    """`mine` with each spec field, and the pool's labels, that means what `base`'s means put
    back as `base` writes it. The form writes its own shape (a default dropped or spelled out, a
    taint's empty value, a block's layout), and a merge must not read that as the lead's change:
    it kept the page's `autoRenew` and taints over an admin's new ones, undoing them (found by
    review). Each field is judged alone, the others as in `base`."""
    mine = copy.deepcopy(mine)
    fields = [("spec", key) for key in {**base["spec"], **mine["spec"]}] + [("metadata", "labels")]
    for part, key in fields:
        if mine[part].get(key, _ABSENT) == base[part].get(key, _ABSENT):
            continue
        probe = copy.deepcopy(base)
        _put(probe[part], key, mine[part].get(key, _ABSENT))
        if _same_spec(probe, base, catalog):
            _put(mine[part], key, base[part].get(key, _ABSENT))
    return mine


_ABSENT = object()


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value is _ABSENT:
        mapping.pop(key, None)
    else:
        mapping[key] = copy.deepcopy(value)


def _same_amount(stored: Any, amount: Decimal) -> bool:
    try:
        return Decimal(str(stored)) == amount
    except ArithmeticError:
        return False


def _set_or_drop(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value:
        mapping[key] = value
    else:
        mapping.pop(key, None)


class PoolImportForm(forms.Form):
    team = forms.ChoiceField(required=False, help_text="The team that owns the pool")
    document = forms.CharField(label="GpuNodePool YAML", widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false"}), required=False)
    upload = forms.FileField(label="…or upload a YAML file", required=False)

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        team_list = list(teams or [])
        self.fields["team"].choices = [(t.slug, t.name) for t in team_list]
        self.fields["team"].required = len(team_list) > 1

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("upload")
        if upload:
            cleaned["text"] = upload.read(1024 * 1024 + 1)
        else:
            cleaned["text"] = cleaned.get("document", "")
        if not cleaned["text"]:
            raise forms.ValidationError("Paste a GpuNodePool document or upload a YAML file.")
        return cleaned


class OrderRejectForm(forms.Form):
    reason = forms.CharField(max_length=500, label="Reason", widget=forms.TextInput(attrs={"placeholder": "why (the lead will read it)"}))


class PoolFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Name contains")
    team = forms.ChoiceField(required=False, label="Team")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")
    phase = forms.ChoiceField(required=False, label="Phase", choices=[("", "any phase"), *[(p.value, p.label) for p in LISTED_POOL_PHASES]])
    sort = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "any team"), *[(t.slug, t.name) for t in teams]]
        self.fields["gpu_model"].choices = [("", "any GPU"), *[(m, m) for m in GpuModel.objects.order_by("name").values_list("name", flat=True)]]


ORDER_STATUSES = PoolOrder.Status.choices
TAINT_EFFECT_CHOICES = TAINT_EFFECTS
