"""REST API for a pool's capacity alert silences, the same operations as the pool's Alerts page:
list the silences in force, silence a rule until a time, end a silence. Another team's pool is a
404; the team's members and finance read, its leads and platform admins write (403 otherwise)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from monitoring import selectors as monitoring_selectors
from monitoring import silences
from monitoring.models import AlertSilence
from pools.api import chunking
from pools.api.pod_views import UNSUPPORTED
from pools.api.serializers import BodySerializer
from pools.api.views import _errors
from pools.core.alerting import RULES, RULES_BY_FIELD, RULES_BY_REASON
from pools.selectors import pools as selectors

# A rule is named two ways: its key under `spec.alerts` (allocationHigh, what the pool's YAML and
# the team lead's guide say) and its alert name (HighGpuAllocation, what events, notifications
# and the stored silence say). The API takes either and stores and answers the alert name.
RULE_FOR_NAME = {**{field: info.reason for field, info in RULES_BY_FIELD.items()}, **{reason: reason for reason in RULES_BY_REASON}}
RULE_CHOICES = list(RULE_FOR_NAME)
RULE_NAMES_TEXT = (
    f"{', '.join(info.field for info in RULES)} (the keys under spec.alerts) "
    f"or {', '.join(info.reason for info in RULES)} (the alert names)"
)


class AlertRuleField(serializers.ChoiceField):
    """Either name of an alert rule in, the alert name out (as stored, listed and in events)."""

    def __init__(self, **kwargs):
        super().__init__(choices=RULE_CHOICES, **kwargs)
        self.error_messages["invalid_choice"] = f'"{{input}}" is not an alert rule; expected one of {RULE_NAMES_TEXT}'

    def to_internal_value(self, data):
        return RULE_FOR_NAME[super().to_internal_value(data)]


class AlertRuleFieldSchema(OpenApiSerializerFieldExtension):
    """`AlertRuleField` in the schema: a request takes either name (the `RuleEnum` of its choices),
    an answer gives only the alert name (its own component: one property with two choice sets
    would get one enum name for both from drf-spectacular's enum post-processing)."""

    target_class = AlertRuleField

    def map_serializer_field(self, auto_schema, direction):
        if direction == "request":
            return auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        component = ResolvedComponent(
            name="AlertName", type=ResolvedComponent.SCHEMA, object="AlertName",
            schema={"type": "string", "enum": list(RULES_BY_REASON)},
        )  # fmt: skip
        auto_schema.registry.register_on_missing(component)
        return component.ref


class AsciiDateTimeField(serializers.DateTimeField):
    """DRF's DateTimeField, as Kubernetes' metav1.Time reads one: RFC 3339, its offset given (a
    time without one, or a bare date, was taken as UTC whatever zone its author meant), in the
    digits 0-9 only (Django's parser reads other scripts' digits: `٢٠٢٦-...` was 2026)."""

    def to_internal_value(self, value):
        if isinstance(value, str) and not (value.isascii() and _with_offset(value)):
            raise serializers.ValidationError("must be an RFC 3339 date and time with its offset, in the digits 0-9, e.g. 2026-12-01T08:00:00Z")
        return super().to_internal_value(value)


def _with_offset(value: str) -> bool:
    try:
        return getattr(parse_datetime(value), "tzinfo", None) is not None
    except ValueError:  # a well-formed but impossible time: DRF's own parse names it
        return True


class AlertSilenceSerializer(BodySerializer):
    id = serializers.IntegerField(read_only=True)
    rule = AlertRuleField(help_text="The alert rule silenced: its key under spec.alerts (utilizationLow) or the alert name "
                          "its events use (LowGpuUtilization); answers give the alert name")
    until = AsciiDateTimeField(help_text="Until when nobody is told: an RFC 3339 time with its offset, e.g. 2026-12-01T08:00:00Z; at most 90 days ahead")
    reason = serializers.CharField(max_length=silences.MAX_REASON, help_text="Why, for the team")
    createdBy = serializers.CharField(source="created_by.username", read_only=True, default=None)
    createdAt = serializers.DateTimeField(source="created_at", read_only=True)


def _pool(request, name: str):
    return selectors.pool_get(user=request.user, name=name)


class PoolAlertSilenceListView(APIView):
    serializer_class = AlertSilenceSerializer

    @extend_schema(parameters=chunking.PARAMETERS, responses={**chunking.listed(AlertSilenceSerializer(many=True)), **_errors(400, 401, 404)},
                   operation_id="pools_alert_silences_list", description="The pool's alert silences still in force, the soonest to end first.")  # fmt: skip
    def get(self, request, name: str):
        silences_in_force = monitoring_selectors.silences_active(pool=_pool(request, name), now=timezone.now())
        return chunking.chunked_response(request, silences_in_force, lambda chunk: AlertSilenceSerializer(chunk, many=True).data, ordering=("until", "pk"))

    @extend_schema(request=AlertSilenceSerializer, responses={201: AlertSilenceSerializer, **_errors(400, 401, 403, 404), **UNSUPPORTED},
                   operation_id="pools_alert_silences_create",
                   description="Silence one alert rule of the pool until a time: its events are still recorded, nobody is told.")  # fmt: skip
    def post(self, request, name: str):
        pool = _pool(request, name)
        if not silences.may_silence(request.user, pool):
            raise PermissionDenied("only the team's leads and platform admins silence its pools' alerts")
        body = AlertSilenceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        silence = silences.alert_silence_create(user=request.user, pool=pool, now=timezone.now(), **body.validated_data)
        return Response(AlertSilenceSerializer(silence).data, status=status.HTTP_201_CREATED)


class PoolAlertSilenceDetailView(APIView):
    serializer_class = AlertSilenceSerializer

    @extend_schema(responses={204: OpenApiResponse(description="Ended (or had already ended)"), **_errors(401, 403, 404)},
                   operation_id="pools_alert_silences_end", description="End the silence now: the rule is told again.")  # fmt: skip
    def delete(self, request, name: str, pk: int):
        pool = _pool(request, name)
        if not silences.may_silence(request.user, pool):
            raise PermissionDenied("only the team's leads and platform admins silence its pools' alerts")
        try:
            silence = AlertSilence.objects.select_related("pool").get(pk=pk, pool=pool)
        except AlertSilence.DoesNotExist:
            raise Http404("no such silence on this pool") from None
        silences.alert_silence_end(user=request.user, silence=silence, now=timezone.now())
        return Response(status=status.HTTP_204_NO_CONTENT)
