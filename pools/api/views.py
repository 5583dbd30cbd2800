"""REST API `/api/v1/`: thin views over the services and selectors (design §4).

Objects are looked up through `for_user`, so another team's pool or order is a 404.
"""

from __future__ import annotations

from datetime import date

from django.utils import timezone
from django.utils.decorators import method_decorator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from pools.api import chunking
from pools.api.parsers import MergePatchJSONParser
from pools.api.serializers import (
    DiagnosisSerializer,
    ErrorSerializer,
    EventSerializer,
    NodeSerializer,
    OrderRejectSerializer,
    OrderSerializer,
    PoolScaleSerializer,
    PoolSerializer,
    body_fields_check,
    pool_representation,
)
from pools.core.errors import ValidationError
from pools.core.numbers import parse_whole_number
from pools.models import GpuNodePool, PoolOrder
from pools.selectors import diagnose as diagnose_service
from pools.selectors import pools as selectors
from pools.selectors import repairs
from pools.services import pools as services

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Invalid input; each error names its field path"),
    401: OpenApiResponse(ErrorSerializer, description="Not authenticated"),
    403: OpenApiResponse(ErrorSerializer, description="Authenticated but not allowed"),
    404: OpenApiResponse(ErrorSerializer, description="Not found (or another team's)"),
    409: OpenApiResponse(ErrorSerializer, description="Conflicts with the object's state"),
    503: OpenApiResponse(ErrorSerializer, description="A real cluster's API server cannot be reached now; try again"),
}


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: ERRORS[code] for code in codes}


def query_param(request, name: str, *, choices: list[str] | None = None) -> str:
    """A query parameter as a clean string: NUL bytes and unknown choices are a 400, not a 500
    (one given twice is refused before any view, `pools.api.errors.repeated_params`)."""
    value = request.query_params.get(name, "")
    if "\x00" in value:
        raise ValidationError("null characters are not allowed", field=name)
    if choices is not None and value and value not in choices:
        raise ValidationError(f"must be one of {', '.join(choices)}", field=name)
    return value[:200]


def _query_day(request, name: str) -> date | None:
    """A day given as `2026-12-01` (ASCII digits: `date.fromisoformat` alone takes other forms)."""
    value = query_param(request, name)
    if not value:
        return None
    try:
        if not (value.isascii() and len(value) == 10):
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise ValidationError("must be a date such as 2026-12-01", field=name) from None


POOL_FILTERS = [
    OpenApiParameter("team", str, description="Team slug"),
    OpenApiParameter("gpuModel", str, description="GPU model, e.g. A100_80G"),
    OpenApiParameter("phase", str, enum=[p.value for p in selectors.LISTED_POOL_PHASES], description="A deleted pool is not listed, so Deleted is no phase to filter by"),
    OpenApiParameter("q", str, description="Name contains"),
    OpenApiParameter("ordering", str, description="name, team, gpu, zone, min, max, phase, created; prefix - for descending"),
]


@method_decorator(name="list", decorator=extend_schema(parameters=[*POOL_FILTERS, *chunking.PARAMETERS], responses={**chunking.listed(PoolSerializer(many=True)), **_errors(400, 401)}))
@extend_schema_view(
    retrieve=extend_schema(responses={200: PoolSerializer, **_errors(401, 404)}),
    create=extend_schema(
        parameters=[OpenApiParameter("team", str, description="Team slug, for leads of several teams")],
        request={"application/json": PoolSerializer, "application/yaml": OpenApiTypes.STR},
        responses={201: PoolSerializer, **_errors(400, 401, 403, 409)},
    ),
    update=extend_schema(request=PoolSerializer, responses={200: PoolSerializer, **_errors(400, 401, 403, 404, 409)}),
    partial_update=extend_schema(
        request=OpenApiTypes.OBJECT,
        description="JSON merge patch (RFC 7386) of the GpuNodePool document, as `application/merge-patch+json` (what `kubectl patch --type merge` sends), `application/json` or `application/yaml`.",
        responses={200: PoolSerializer, **_errors(400, 401, 403, 404, 409)},
    ),
    destroy=extend_schema(responses={202: PoolSerializer, 204: None, **_errors(401, 403, 404, 409)}),
)
class PoolViewSet(viewsets.ViewSet):
    """GPU node pools, as GpuNodePool documents (JSON or YAML)."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    serializer_class = PoolSerializer

    def get_parsers(self):
        """PATCH (a JSON merge patch) also takes RFC 7386's own media type,
        `application/merge-patch+json`, which `kubectl patch --type merge` sends; the other
        methods do not (a document is not a patch)."""
        parsers = super().get_parsers()
        if getattr(getattr(self, "request", None), "method", "") == "PATCH":
            return [MergePatchJSONParser(), *parsers]
        return parsers

    def list(self, request):
        filters = selectors.PoolFilters(
            team=query_param(request, "team"),
            gpu_model=query_param(request, "gpuModel"),
            phase=query_param(request, "phase", choices=[p.value for p in selectors.LISTED_POOL_PHASES]),
            q=query_param(request, "q"),
            sort=query_param(request, "ordering", choices=list(selectors.POOL_ORDERINGS)) or "name",
        )
        pools = selectors.pools_for_user(user=request.user, filters=filters)
        return chunking.chunked_response(request, pools, lambda chunk: [pool_representation(p) for p in chunk])

    def retrieve(self, request, name=None):
        return Response(pool_representation(self._get(request, name)))

    def create(self, request):
        pool = services.pool_create(user=request.user, document=request.data, team_slug=request.query_params.get("team", ""))
        return Response(pool_representation(self._get(request, pool.name)), status=status.HTTP_201_CREATED)

    def update(self, request, name=None):
        pool = services.pool_update(user=request.user, pool=self._get(request, name), document=request.data)
        return Response(pool_representation(self._get(request, pool.name)))

    def partial_update(self, request, name=None):
        pool = services.pool_patch(user=request.user, pool=self._get(request, name), patch=request.data)
        return Response(pool_representation(self._get(request, pool.name)))

    def destroy(self, request, name=None):
        pool = services.pool_delete(user=request.user, pool=self._get(request, name))
        if pool.deleted_at is not None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(pool_representation(pool), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        description="The pool's latest 100 events, newest first.",
        operation_id="v1_pools_events_list",
        parameters=chunking.PARAMETERS,
        responses={**chunking.listed(EventSerializer(many=True)), **_errors(400, 401, 404)},
    )
    @action(detail=True, methods=["get"])
    def events(self, request, name=None):
        pool = self._get(request, name)
        return chunking.chunked_response(request, selectors.pool_events(pool=pool), lambda chunk: EventSerializer(chunk, many=True).data)

    @extend_schema(
        description="The pool's nodes, newest first (at most 500), each with the node that replaced it (`successor`) and the nodes it replaced (`replaces`).",
        operation_id="v1_pools_nodes_list",
        parameters=chunking.PARAMETERS,
        responses={**chunking.listed(NodeSerializer(many=True)), **_errors(400, 401, 404)},
    )
    @action(detail=True, methods=["get"])
    def nodes(self, request, name=None):
        pool = self._get(request, name)
        nodes = repairs.pool_nodes_linked(pool=pool)
        return chunking.chunked_response(request, nodes, lambda chunk: NodeSerializer(chunk, many=True).data, ordering=("-created_at", "-id"))

    @extend_schema(request=PoolScaleSerializer, responses={200: PoolSerializer, **_errors(400, 401, 403, 404, 409)})
    @action(detail=True, methods=["post"])
    def scale(self, request, name=None):
        body = PoolScaleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pool = services.pool_resize(
            user=request.user,
            pool=self._get(request, name),
            min_nodes=body.validated_data.get("min"),
            max_nodes=body.validated_data.get("max"),
        )
        return Response(pool_representation(self._get(request, pool.name)))

    @extend_schema(
        description="The self-check table run live against the pool: each check's status, what it found, the likely cause and the first action.",
        responses={200: DiagnosisSerializer, **_errors(401, 404)},
    )
    @action(detail=True, methods=["get"])
    def diagnose(self, request, name=None):
        diagnosis = diagnose_service.pool_diagnose(pool=self._get(request, name), now=timezone.now())
        return Response(DiagnosisSerializer(diagnosis).data)

    @staticmethod
    def _get(request, name: str) -> GpuNodePool:
        return selectors.pool_get(user=request.user, name=name)


ORDER_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="Order number")


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=[s for s, _ in PoolOrder.Status.choices]),
            OpenApiParameter("from", OpenApiTypes.DATE, description="Only orders paid on or after this day (UTC), e.g. 2026-12-01"),
            OpenApiParameter("to", OpenApiTypes.DATE, description="Only orders paid on or before this day (UTC, inclusive)"),
            *chunking.PARAMETERS,
        ],
        responses={**chunking.listed(OrderSerializer(many=True)), **_errors(400, 401)},
    ),
    retrieve=extend_schema(parameters=[ORDER_ID], responses={200: OrderSerializer, **_errors(400, 401, 404)}),
)
class OrderViewSet(viewsets.ViewSet):
    """Pool orders: requests for monthly capacity that platform admins approve or reject."""

    serializer_class = OrderSerializer
    lookup_value_regex = "[^/]+"  # a malformed id reaches the view and gets a JSON 400

    def list(self, request):
        first, last = (_query_day(request, name) for name in ("from", "to"))
        if first and last and last < first:
            raise ValidationError("must not be before from", field="to")
        orders = selectors.orders_for_user(
            user=request.user, status=query_param(request, "status", choices=PoolOrder.Status.values),
            paid_from=first, paid_to=last,
        )  # fmt: skip
        return chunking.chunked_response(request, orders, lambda chunk: OrderSerializer(chunk, many=True).data)

    def retrieve(self, request, pk=None):
        return Response(OrderSerializer(self._get(request, pk)).data)

    @extend_schema(parameters=[ORDER_ID], request=None, responses={200: OrderSerializer, **_errors(400, 401, 403, 404, 409)})
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        order = services.order_approve(user=request.user, order=self._get(request, pk))
        return Response(OrderSerializer(self._get(request, order.pk)).data)

    @extend_schema(parameters=[ORDER_ID], request=OrderRejectSerializer, responses={200: OrderSerializer, **_errors(400, 401, 403, 404, 409)})
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        order = self._get(request, pk)
        reason = body_fields_check(request.data, OrderRejectSerializer().fields).get("reason", "")
        order = services.order_reject(user=request.user, order=order, reason=reason)
        return Response(OrderSerializer(self._get(request, order.pk)).data)

    @staticmethod
    def _get(request, pk: str | int) -> PoolOrder:
        """The order of a path's id (ASCII digits: `1_0` and `١` are no ids) or of a known pk."""
        try:
            order_id = pk if isinstance(pk, int) else parse_whole_number(pk)
        except ValueError as exc:
            raise ValidationError("order ids are whole numbers in the digits 0-9", field="id") from exc
        return selectors.order_get(user=request.user, order_id=order_id)
