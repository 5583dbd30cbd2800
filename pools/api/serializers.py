"""Shapes of the API: they only shape output and describe input for the schema (design §6).

A pool is returned in the seed's document shape, with server-set metadata (team, generation,
creationTimestamp) and a `status` block, like a Kubernetes object. Input is validated by
`pools.core.spec`, not here, so the web, the API and the CLI reject the same things with the same paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.settings import api_settings

from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder

NOT_A_MAPPING = "the request body must be a mapping (a JSON object)"


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def pool_representation(pool: GpuNodePool) -> dict[str, Any]:
    """The pool as `kubectl get -o yaml` would show it: the document plus server fields."""
    document = pool.document
    metadata = dict(document.get("metadata", {}))
    metadata.update(
        {
            "team": pool.team.slug,
            "generation": pool.generation,
            "resourceVersion": str(pool.generation),
            "uid": pool.uid,
            "creationTimestamp": _iso(pool.created_at),
        }
    )
    status: dict[str, Any] = {
        "phase": pool.phase,
        "pendingReason": pool.pending_reason,
        "observedGeneration": pool.observed_generation,
        "conditions": pool.conditions,
    }
    if hasattr(pool, "node_total"):
        status["nodes"] = {"current": pool.node_total, "ready": pool.node_ready, "byBilling": pool.node_counts}
    return {
        "apiVersion": document.get("apiVersion"),
        "kind": document.get("kind"),
        "metadata": metadata,
        "spec": document.get("spec", {}),
        "status": status,
    }


class PoolMetadataSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63, help_text="DNS-1123 label, unique among live pools")
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    team = serializers.CharField(read_only=True, help_text="Owning team (slug), set by the server")
    generation = serializers.IntegerField(read_only=True)
    resourceVersion = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="The version this document was read at; sent back with a PUT or a PATCH, the change is refused (409) if the pool has changed since. Left out, the change is unconditional",
    )
    uid = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="The pool's own id, never another's of the same name created after it was deleted; sent back with a PUT or a PATCH, the change is refused (409) if it names another pool",
    )
    creationTimestamp = serializers.DateTimeField(read_only=True)


class NodeCountSerializer(serializers.Serializer):
    desired = serializers.IntegerField()
    current = serializers.IntegerField()
    ready = serializers.IntegerField()


class PoolNodeCountsSerializer(serializers.Serializer):
    current = serializers.IntegerField()
    ready = serializers.IntegerField()
    byBilling = serializers.DictField(child=NodeCountSerializer(), help_text="monthly, on_demand, preemptible")


class PoolStatusSerializer(serializers.Serializer):
    phase = serializers.ChoiceField(choices=GpuNodePool.Phase.choices)
    pendingReason = serializers.CharField(allow_blank=True)
    observedGeneration = serializers.IntegerField()
    conditions = serializers.ListField(child=serializers.DictField())
    nodes = PoolNodeCountsSerializer(required=False)


class PoolSerializer(serializers.Serializer):
    """A GpuNodePool document. `spec` is validated by the server with field paths."""

    apiVersion = serializers.ChoiceField(choices=["ebcloud.io/v1"])
    kind = serializers.ChoiceField(choices=["GpuNodePool"])
    metadata = PoolMetadataSerializer()
    spec = serializers.DictField(help_text="nodeType, gpuModel, nodeCount{min,max}, region (the zone) or zones (preferred zone first, then fallback zones), leaseType, ...")
    status = PoolStatusSerializer(read_only=True)


def body_fields_check(data: Any, known: Iterable[str]) -> Mapping:
    """A request body that is a mapping of known fields, else a 400: a list, `null`, a string or
    a number is not taken for an empty body (which ran a repack with its defaults), and an
    unknown field is named (a typo such as `maxnodes` would otherwise be dropped silently), as
    the documents' validators name theirs."""
    if not isinstance(data, Mapping):
        raise serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [NOT_A_MAPPING]})
    known = set(known)
    unknown = {str(key): ["unknown field"] for key in data if key not in known}
    if unknown:
        raise serializers.ValidationError(unknown)
    return data


# The serializer of a request body: a mapping whose every field is one of its own. (A comment,
# not a docstring: the schema would give it to every subclass as its description.)
class BodySerializer(serializers.Serializer):
    def run_validation(self, data=empty):
        if data is not empty:
            body_fields_check(data, self.fields)
        return super().run_validation(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, as `spec.nodeCount` takes it (pools/core/fields.py): DRF's IntegerField
    took `"1"` and `1.0` for 1 (and `"٣"` for 3), so an endpoint accepted what the document
    refuses."""

    default_error_messages = {"invalid": "must be an integer"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class PoolScaleSerializer(BodySerializer):
    # The most is the site's (EBCLOUD_MAX_NODES_PER_POOL), which the pool's spec says on its field.
    min = StrictIntegerField(required=False, min_value=0)
    max = StrictIntegerField(required=False, min_value=1)


class OrderSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(
        source="pool.ledger_name",
        help_text="The pool's name; a deleted pool's is `name#id`, as the cost reports name it, so that it is never read as a later pool of the same name",
    )
    team = serializers.CharField(source="pool.team.slug")
    gpuModel = serializers.CharField(source="pool.gpu_model.name")
    nodeType = serializers.CharField(source="pool.node_type.name")
    region = serializers.CharField(source="pool.zone.region")
    zone = serializers.CharField(source="pool.zone.name")
    nodeCount = serializers.IntegerField(source="node_count")
    leaseType = serializers.CharField(source="lease_type")
    leaseMonths = serializers.IntegerField(source="lease_months")
    unitMonthlyPrice = serializers.DecimalField(source="unit_monthly_price", max_digits=14, decimal_places=2)
    requestedBy = serializers.CharField(source="requested_by.username", default=None, allow_null=True)
    decidedBy = serializers.CharField(source="decided_by.username", default=None, allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")
    decidedAt = serializers.DateTimeField(source="decided_at", allow_null=True)
    paidAt = serializers.DateTimeField(source="paid_at", allow_null=True, help_text="When the account was debited `amount`; null until then")

    class Meta:
        model = PoolOrder
        fields = [
            "id", "pool", "team", "kind", "status", "nodeCount", "gpus", "gpuModel", "nodeType",
            "region", "zone", "leaseType", "leaseMonths", "unitMonthlyPrice", "discount", "amount",
            "currency", "reason", "requestedBy", "decidedBy", "createdAt", "decidedAt", "paidAt",
        ]  # fmt: skip
        read_only_fields = fields


class OrderRejectSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, help_text="Why; the team lead reads it in the pool's events")


class EventSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", default=None, allow_null=True)
    firstTimestamp = serializers.DateTimeField(source="first_timestamp")
    lastTimestamp = serializers.DateTimeField(source="last_timestamp")
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True)

    class Meta:
        model = PoolEvent
        fields = ["id", "type", "reason", "message", "count", "node", "firstTimestamp", "lastTimestamp", "actor"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer):
    """A node of the pool. `successor` names the node that took its place (and its share of the
    lease) after it was replaced; `replaces` names the nodes it replaced: one slot, paid once."""

    zone = serializers.CharField(source="zone.name")
    gpus = serializers.IntegerField(source="gpu_count")
    leaseEnd = serializers.DateTimeField(source="lease_end", allow_null=True)
    releaseReason = serializers.CharField(source="release_reason", help_text="Why it is leaving: Repair, Reclaimed, LeaseExpired, ScaledIn, ...")
    successor = serializers.CharField(source="successor.name", default=None, allow_null=True)
    replaces = serializers.SlugRelatedField(source="predecessors", slug_field="name", many=True, read_only=True)

    class Meta:
        model = Node
        fields = ["name", "phase", "billing", "zone", "gpus", "unschedulable", "leaseEnd", "releaseReason", "successor", "replaces"]
        read_only_fields = fields


class ErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField(allow_blank=True)
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    errors = ErrorItemSerializer(many=True)


CHECK_STATUSES = ["ok", "warning", "failing", "unknown"]


class DiagnoseCheckSerializer(serializers.Serializer):
    """One row of the self-check table: what was checked, its status, what was found, the likely cause and the first action."""

    id = serializers.CharField(help_text="Stable check id, e.g. scale-up, pods-pending")
    title = serializers.CharField(help_text="The symptom the check looks for, in a few words")
    status = serializers.ChoiceField(choices=CHECK_STATUSES, help_text="unknown: no data to judge")
    found = serializers.CharField(help_text="What the check saw, with numbers and names")
    cause = serializers.CharField(allow_blank=True, help_text="The likely cause (empty when ok)")
    action = serializers.CharField(allow_blank=True, help_text="The first action: a command or a page")
    details = serializers.ListField(child=serializers.CharField(), help_text="One line per pod, node or event found")


class DiagnoseSummarySerializer(serializers.Serializer):
    # One enum component per choice set: the summary names the same values in words.
    status = serializers.CharField(help_text="The worst check's status: failing, warning, unknown or ok")
    failing = serializers.IntegerField()
    warning = serializers.IntegerField()
    unknown = serializers.IntegerField()
    ok = serializers.IntegerField()


class DiagnosisSerializer(serializers.Serializer):
    """A pool's self-check table: pools.selectors.diagnose.Diagnosis."""

    pool = serializers.CharField()
    checkedAt = serializers.DateTimeField(source="checked_at")
    summary = DiagnoseSummarySerializer()
    checks = DiagnoseCheckSerializer(many=True)
