"""Agent API `/api/agent/v1/` (design §4): thin views over monitoring.services."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.utils import json as drf_json
from rest_framework.views import APIView

from monitoring import services
from monitoring.api.authentication import AgentCredentialAuthentication, IsAgent, bearer_secret
from monitoring.report_parse import batch_parse
from pools.api.errors import declared_length, error_response, exception_handler
from pools.api.machine_views import MachineView
from pools.api.parsers import BodyJSONParser
from pools.api.serializers import BodySerializer, ErrorSerializer, StrictIntegerField
from pools.core.errors import ConflictError, FieldError
from pools.core.errors import ValidationError as DomainValidationError
from pools.core.json_loading import refuse_lone_surrogates
from pools.core.nesting import json_too_deep
from pools.models import Node

ERROR = OpenApiResponse(ErrorSerializer, description='`{"errors": [{"field", "message"}]}`')


class StringField(serializers.CharField):
    """DRF's CharField, but only a string: DRF's turns a number into its text, so a rotation
    with `{"node": 5}` looked for node "5" and answered 403 ("not '5'") instead of a 400 on
    the field, and a join or a join token named node "5" the same way."""

    default_error_messages = {"invalid": "must be a string"}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class JoinTokenCreateSerializer(BodySerializer):
    node = StringField(max_length=100)
    ttlSeconds = StrictIntegerField(required=False, min_value=60, max_value=7 * 24 * 3600)  # noqa: N815


class JoinSerializer(BodySerializer):
    token = StringField(max_length=100)
    node = StringField(max_length=100)


class NodeOptionalSerializer(BodySerializer):
    node = StringField(max_length=100, required=False)


class _AgentView(MachineView):
    authentication_classes = [AgentCredentialAuthentication]
    permission_classes = [IsAgent]
    throttle_classes: list = []


def _valid(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class JoinTokenCreateView(APIView):
    """Platform admins mint a single-use join token for one node (shown once)."""

    @extend_schema(request=JoinTokenCreateSerializer, responses={201: inline_serializer("JoinTokenCreated", {
        "token": serializers.CharField(), "node": serializers.CharField(), "expiresAt": serializers.DateTimeField()}),
        400: ERROR, 401: ERROR, 403: ERROR, 404: ERROR, 409: ERROR})
    def post(self, request):
        data = _valid(JoinTokenCreateSerializer, request.data)
        node = get_object_or_404(Node.objects.for_user(request.user).select_related("pool"), name=data["node"])
        row, token = services.join_token_create(user=request.user, node=node, ttl_seconds=data.get("ttlSeconds"))
        return Response({"token": token, "node": node.name, "expiresAt": row.expires_at}, status=status.HTTP_201_CREATED)


class JoinView(APIView):
    """An agent exchanges its join token for the node's credential (returned once)."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    parser_classes = [BodyJSONParser]  # bounded size (413) and nesting (400)
    renderer_classes = [JSONRenderer]

    @extend_schema(request=JoinSerializer, responses={201: inline_serializer("AgentJoined", {
        "node": serializers.CharField(), "credential": serializers.CharField(), "ackedSeq": serializers.IntegerField(),
        "gpuCount": serializers.IntegerField(help_text="The node's GPUs: each report's GPU indices are 0 to gpuCount - 1")}),
        400: ERROR, 401: ERROR, 403: ERROR, 409: ERROR})
    def post(self, request):
        data = _valid(JoinSerializer, request.data)
        try:
            credential, secret, acked = services.agent_join(token=data["token"], node_name=data["node"])
        except services.InvalidToken as exc:
            return error_response(status.HTTP_401_UNAUTHORIZED, str(exc), "token")
        return Response({"node": credential.node.name, "credential": secret, "ackedSeq": acked, "gpuCount": credential.node.gpu_count},
                        status=status.HTTP_201_CREATED)


class CredentialRotateView(_AgentView):
    """The agent replaces its credential; the new one is returned once. The old one keeps
    working until the new one is first used, for at most 10 minutes: an agent that lost the
    answer keeps reporting and retries with the old one, and gets another new credential (the
    one it never received is revoked)."""

    @extend_schema(request=NodeOptionalSerializer, responses={200: inline_serializer("AgentCredentialRotated", {
        "node": serializers.CharField(), "credential": serializers.CharField(),
        "gpuCount": serializers.IntegerField(help_text="The node's GPUs, as the join answers them")}), 400: ERROR, 401: ERROR, 403: ERROR, 409: ERROR})
    def post(self, request):
        data = _valid(NodeOptionalSerializer, request.data)  # `null` or `[]` is no empty body
        credential, secret = services.credential_rotate(credential=request.auth, node_name=data.get("node"))
        return Response({"node": credential.node.name, "credential": secret, "gpuCount": credential.node.gpu_count})


_COMPACT = {"separators": (",", ":")}  # as DRF's JSONRenderer


def _reports_acked(credential, data, batch=None) -> dict:
    """The answer to a batch from an authenticated agent; `batch`: `data` already parsed."""
    if batch is None:
        try:
            batch = batch_parse(data, max_batch=settings.EBCLOUD_AGENT_MAX_BATCH, received_at=timezone.now())
        except DomainValidationError as exc:  # a Warning event on the node, then the 400
            services.report_batch_refused(credential=credential, errors=exc.errors)
            raise
    return _acked(services.reports_ingest(credential=credential, batch=batch))


def _acked(result: services.IngestResult) -> dict:
    return {"ackedSeq": result.acked_seq, "stored": result.stored, "duplicates": result.duplicates,
            "rejected": result.rejected, "commands": result.commands}


def _body(request):
    """The JSON body as DRF's JSONParser reads it (UTF-8, no NaN or Infinity; too deep or a
    lone surrogate: BodyJSONParser's 400), or None where DRF would answer an error."""
    try:
        if json_too_deep(request.body, settings.EBCLOUD_MAX_DOCUMENT_DEPTH):
            return None
        text = request.body.decode("utf-8")
        document = drf_json.loads(text)
        refuse_lone_surrogates(text, document)
        return document
    except (ValueError, DomainValidationError):
        return None


def _batch(data):
    """The parsed batch, or None where it is refused or its node's clock is off (reports_ingest's
    path answers it, with the node's event, once the agent is authenticated)."""
    try:
        batch = batch_parse(data, max_batch=settings.EBCLOUD_AGENT_MAX_BATCH, received_at=timezone.now())
    except DomainValidationError:
        return None
    return None if batch.clock_off else batch


class ReportsView(_AgentView):
    """Heartbeat plus a batch of reports; replays are acknowledged without being stored twice.

    Every node posts here every 15 s (~670 requests/s at 10,000 nodes), so a
    well-formed request skips DRF's request and response machinery (a quarter of the
    request's instructions in Django, docs/benchmarks.md): `reports_answered_fast` parses,
    authenticates and answers it directly, with the same answers (on PostgreSQL the steady state's next
    report is stored by the authentication's statement). Anything else goes to DRF (`post`),
    so every error a client can cause is answered as by the rest of the API; errors raised
    once the service has started (a body naming another node) are answered here, in the same
    shape, so that nothing runs twice."""

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: inline_serializer("ReportsAcked", {
        "ackedSeq": serializers.IntegerField(), "stored": serializers.IntegerField(),
        "duplicates": serializers.IntegerField(), "rejected": serializers.ListField(child=serializers.IntegerField()),
        "commands": serializers.ListField(child=serializers.DictField())}), 400: ERROR, 401: ERROR, 403: ERROR, 409: ERROR, 415: ERROR})
    def post(self, request):
        try:
            data = request.data
        except ParseError as exc:  # not JSON (or NaN, Infinity): refused like a bad report
            services.report_batch_refused(credential=request.auth, errors=[FieldError("", str(exc.detail))])
            raise
        return Response(_reports_acked(request.auth, data))

    def dispatch(self, request, *args, **kwargs):
        return reports_answered_fast(request) or super().dispatch(request, *args, **kwargs)


def reports_answered_fast(request) -> JsonResponse | None:
    """ReportsView's answer to a well-formed report from an active credential, without DRF; None
    for anything else, which DRF then answers (`ReportsView.post`). Called by the view, and
    before it by the agents' WSGI handler (config/lean_handler.py), which skips Django's chain
    for these answers; a request it was tried on is not tried again."""
    if getattr(request, "reports_fast_tried", False):
        return None
    request.reports_fast_tried = True
    secret = data = None
    if (request.method == "POST" and request.content_type == "application/json"
            and request.content_params.get("charset", "utf-8").lower() in ("utf-8", "utf8")
            and declared_length(request) in range(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)):  # malformed: DRF answers
        secret = bearer_secret(request)  # None: DRF says what is wrong (401)
    if secret is not None:
        data = _body(request)  # None: DRF answers its 400
    if data is None:
        return None
    # the steady state's next report is stored by the authentication's own statement
    batch = _batch(data)
    credential, result = services.credential_authenticate_storing_next(secret, batch)
    if credential is None:
        return None
    try:
        return JsonResponse(_acked(result) if result is not None else _reports_acked(credential, data, batch),
                            json_dumps_params=_COMPACT)
    except (DomainValidationError, PermissionDenied, ConflictError) as exc:  # in the API's error shape
        error = exception_handler(exc, {})
        return JsonResponse(error.data, status=error.status_code, json_dumps_params=_COMPACT)
