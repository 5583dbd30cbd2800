"""REST API for PodDisruptionBudgets (`/api/v1/poddisruptionbudgets/`): policy/v1 documents with
the status the disruption controller computes. Thin views over `pools.services.disruption_budgets`
and `pools.selectors.disruption_budgets`; another team's budget is a 404. Errors use the pool
views' shape."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from pools.api import chunking
from pools.api.pod_views import UNSUPPORTED
from pools.api.views import _errors, query_param
from pools.selectors import disruption_budgets as selectors
from pools.selectors.disruption_status import budget_documents
from pools.services import disruption_budgets as services


class BudgetMetadataSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=253)
    namespace = serializers.CharField(max_length=63, required=False, help_text="Defaults to the team's slug")
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    annotations = serializers.DictField(child=serializers.CharField(), required=False)
    team = serializers.CharField(read_only=True)
    generation = serializers.IntegerField(read_only=True, help_text="Counts changes of the spec")
    creationTimestamp = serializers.DateTimeField(read_only=True)


class BudgetStatusSerializer(serializers.Serializer):
    observedGeneration = serializers.IntegerField()
    expectedPods = serializers.IntegerField()
    desiredHealthy = serializers.IntegerField()
    currentHealthy = serializers.IntegerField()
    disruptionsAllowed = serializers.IntegerField(help_text="How many of its pods may be evicted now (a repack move or a drain is an eviction)")
    disruptedPods = serializers.DictField()
    conditions = serializers.ListField(child=serializers.DictField(), help_text="DisruptionAllowed: True (SufficientPods) or False (InsufficientPods), with a message")


class BudgetSerializer(serializers.Serializer):
    """A Kubernetes PodDisruptionBudget (policy/v1); validated by the server with field paths."""

    apiVersion = serializers.ChoiceField(choices=["policy/v1"])
    kind = serializers.ChoiceField(choices=["PodDisruptionBudget"])
    metadata = BudgetMetadataSerializer()
    spec = serializers.DictField(help_text="selector (matchLabels, matchExpressions: the pods of its namespace it guards), minAvailable or maxUnavailable (an integer or a percent such as \"50%\"), unhealthyPodEvictionPolicy")
    status = BudgetStatusSerializer(read_only=True)


BODY = {"application/json": BudgetSerializer, "application/yaml": OpenApiTypes.STR}


class BudgetListView(APIView):
    """Disruption budgets: list them (a real cluster's as it reports them); create one in the
    simulated cluster (JSON or YAML)."""

    serializer_class = BudgetSerializer

    @extend_schema(
        description="The disruption budgets you may see (a real cluster's as it reports them), sorted by namespace and name.",
        parameters=[OpenApiParameter("namespace", str, description="Only this namespace"), *chunking.PARAMETERS],
        responses={**chunking.listed(BudgetSerializer(many=True)), **_errors(400, 401, 503)},
        operation_id="poddisruptionbudgets_list",
    )
    def get(self, request):
        budgets = selectors.budget_list(user=request.user, namespace=query_param(request, "namespace"))
        return chunking.chunked_response(request, budgets, list, ordering=("metadata__namespace", "metadata__name"))

    @extend_schema(
        parameters=[OpenApiParameter("team", str, description="Team slug, for members of several teams")],
        request=BODY,
        responses={201: BudgetSerializer, **_errors(400, 401, 403, 404, 409), **UNSUPPORTED},
        operation_id="poddisruptionbudgets_create",
    )
    def post(self, request):
        budget = services.budget_create(user=request.user, document=request.data, team_slug=query_param(request, "team"))
        return Response(budget_documents([budget])[0], status=status.HTTP_201_CREATED)


class BudgetDetailView(APIView):
    """One disruption budget; `status.disruptionsAllowed` says how many of its pods may go now."""

    serializer_class = BudgetSerializer

    @extend_schema(responses={200: BudgetSerializer, **_errors(401, 404, 503)}, operation_id="poddisruptionbudgets_retrieve")
    def get(self, request, namespace: str, name: str):
        return Response(selectors.budget_one(user=request.user, namespace=namespace, name=name))

    @extend_schema(request=BODY, responses={200: BudgetSerializer, **_errors(400, 401, 403, 404, 409), **UNSUPPORTED}, operation_id="poddisruptionbudgets_update")
    def put(self, request, namespace: str, name: str):
        budget = services.budget_replace(user=request.user, namespace=namespace, name=name, document=request.data)
        return Response(budget_documents([budget])[0])

    @extend_schema(responses={204: None, **_errors(401, 403, 404, 409)}, operation_id="poddisruptionbudgets_destroy")
    def delete(self, request, namespace: str, name: str):
        services.budget_delete(user=request.user, namespace=namespace, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
