"""REST API for pods and fragmentation (`/api/v1/pods/`, `/api/v1/pools/{name}/fragmentation/`).

Thin views over `pools.services.pods` and `pools.services.fragmentation`; objects come through
`for_user`, so another team's pod or pool is a 404. Errors use the pool views' shape and codes.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from pools import roles
from pools.api import chunking
from pools.api.serializers import BodySerializer, ErrorSerializer, StrictIntegerField, _iso
from pools.api.views import _errors, query_param
from pools.core.errors import query_flag
from pools.models.pods import Pod
from pools.selectors import pools as selectors
from pools.services import fragmentation as fragmentation_service
from pools.services import pods as pod_services

UNSUPPORTED = {415: OpenApiResponse(ErrorSerializer, description="Unsupported or malformed request media type")}


def pod_representation(pod: Pod) -> dict[str, Any]:
    """The pod as `kubectl get pod -o yaml` shows it: the document plus a status block."""
    document = pod.document or {}
    metadata = dict(document.get("metadata") or {})
    metadata.update(
        {
            "name": pod.name,
            "namespace": pod.namespace,
            "team": pod.team.slug if pod.team else "",
            "creationTimestamp": _iso(pod.submitted_at),
        }
    )
    scheduled = pod.node_id is not None and pod.phase == Pod.Phase.RUNNING
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": document.get("spec") or {},
        "status": {
            "phase": pod.phase,
            "reason": pod.reason,
            "nodeName": pod.node.name if pod.node_id else None,
            "pool": pod.node.pool.name if pod.node_id else None,
            "gpuIndices": pod.gpu_indices,
            "message": pod.explanation,
            "hints": pod.hints,
            "startTime": _iso(pod.started_at),
            "finishTime": _iso(pod.finished_at),
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True" if scheduled or pod.phase == Pod.Phase.SUCCEEDED else "False",
                    "reason": "" if scheduled else pod.reason,
                    "message": "" if scheduled else pod.explanation,
                }
            ],
        },
    }


class PodStatusSerializer(serializers.Serializer):
    phase = serializers.ChoiceField(choices=Pod.Phase.choices)
    reason = serializers.CharField(allow_blank=True, help_text="Unschedulable, Preempted, Evicted, NodeLost, TaintManagerEviction, Scheduled, Completed")
    nodeName = serializers.CharField(allow_null=True)
    pool = serializers.CharField(allow_null=True)
    gpuIndices = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=64))
    message = serializers.CharField(allow_blank=True, help_text="kube-scheduler style: 0/N nodes are available: ...")
    hints = serializers.ListField(child=serializers.CharField(), help_text="What to change, naming the pool")
    startTime = serializers.DateTimeField(allow_null=True)
    finishTime = serializers.DateTimeField(allow_null=True)
    conditions = serializers.ListField(child=serializers.DictField())


class PodMetadataSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=253)
    namespace = serializers.CharField(max_length=63, required=False, help_text="Defaults to the team's slug")
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    annotations = serializers.DictField(child=serializers.CharField(), required=False, help_text="ebcloud.io/gpu-models, checkpointable, duration")
    team = serializers.CharField(read_only=True)
    creationTimestamp = serializers.DateTimeField(read_only=True)


class PodSerializer(serializers.Serializer):
    """A Kubernetes-like Pod; validated by the server with field paths."""

    apiVersion = serializers.ChoiceField(choices=["v1"])
    kind = serializers.ChoiceField(choices=["Pod"])
    metadata = PodMetadataSerializer()
    spec = serializers.DictField(help_text="priorityClassName (the server sets priority and preemptionPolicy from it), tolerations, nodeSelector, affinity.nodeAffinity, containers[].resources.requests and limits (cpu, memory, nvidia.com/gpu, ebcloud.io/gpu-milli: a share of one GPU in thousandths)")
    status = PodStatusSerializer(read_only=True)


POD_FILTERS = [
    OpenApiParameter("namespace", str, description="Only this namespace"),
    OpenApiParameter("phase", str, enum=[p for p, _ in Pod.Phase.choices]),
    OpenApiParameter("team", str, description="Team slug"),
]


class PodListView(APIView):
    """Pods of the simulated cluster: submit (JSON or YAML) and list."""

    serializer_class = PodSerializer

    @extend_schema(parameters=[*POD_FILTERS, *chunking.PARAMETERS], responses={**chunking.listed(PodSerializer(many=True)), **_errors(400, 401)}, operation_id="pods_list")
    def get(self, request):
        phase = query_param(request, "phase", choices=Pod.Phase.values)
        filters = pod_services.PodFilters(namespace=query_param(request, "namespace"), phase=phase, team=query_param(request, "team"))
        pods = pod_services.pods_for_user(user=request.user, filters=filters)
        return chunking.chunked_response(request, pods, lambda chunk: [pod_representation(p) for p in chunk])

    @extend_schema(
        parameters=[OpenApiParameter("team", str, description="Team slug, for members of several teams")],
        request={"application/json": PodSerializer, "application/yaml": OpenApiTypes.STR},
        responses={201: PodSerializer, **_errors(400, 401, 403, 409), **UNSUPPORTED},
        operation_id="pods_create",
    )
    def post(self, request):
        pod = pod_services.pod_create(user=request.user, document=request.data, team_slug=request.query_params.get("team", ""))
        pod = pod_services.pod_get(user=request.user, namespace=pod.namespace, name=pod.name)
        return Response(pod_representation(pod), status=status.HTTP_201_CREATED)


class PodDetailView(APIView):
    """One pod; `status.message` and `status.hints` say why it is Pending."""

    serializer_class = PodSerializer

    @extend_schema(responses={200: PodSerializer, **_errors(401, 404)}, operation_id="pods_retrieve")
    def get(self, request, namespace: str, name: str):
        return Response(pod_representation(pod_services.pod_get(user=request.user, namespace=namespace, name=name)))

    @extend_schema(responses={204: None, **_errors(401, 403, 404)}, operation_id="pods_destroy")
    def delete(self, request, namespace: str, name: str):
        pod = pod_services.pod_get(user=request.user, namespace=namespace, name=name)
        pod_services.pod_delete(user=request.user, pod=pod)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FragmentationSerializer(serializers.Serializer):
    scope = serializers.CharField()
    nodes = serializers.ListField(child=serializers.DictField())
    totalGpus = serializers.FloatField()
    allocatedGpus = serializers.FloatField()
    unallocatedPct = serializers.FloatField()
    fragmentationGpus = serializers.FloatField()
    fragmentedShareOfFree = serializers.FloatField()
    underusedNodes = serializers.ListField(child=serializers.CharField())
    freeFragmentHistogram = serializers.DictField(child=serializers.IntegerField())
    plan = serializers.DictField(required=False, help_text="With ?plan=1: moves, freedNodes, gpuHoursSavedPerWeek; shareMoves, shareGpusFreed, sharePlacements")
    applied = serializers.ListField(child=serializers.CharField(), required=False, help_text="Pods moved by an apply")
    started = serializers.ListField(child=serializers.CharField(), required=False, help_text="Waiting pods an apply of the share packing started")


class ApplySerializer(BodySerializer):
    maxNodes = StrictIntegerField(required=False, min_value=1, max_value=100, help_text="Disruption budget: nodes drained at once (default 1)")
    shares = serializers.BooleanField(required=False, default=False, help_text="Apply the plan's second part instead: pack the GPU shares into fewer GPUs (shareMoves), freeing whole GPUs")


class PoolFragmentationView(APIView):
    """The pool's fragmentation report and, with `?plan=1`, its repack plan."""

    serializer_class = FragmentationSerializer

    @extend_schema(
        parameters=[OpenApiParameter("plan", bool, description="Include the repack plan")],
        responses={200: FragmentationSerializer, **_errors(401, 404)},
        operation_id="pools_fragmentation_retrieve",
    )
    def get(self, request, name: str):
        pool = selectors.pool_get(user=request.user, name=name)
        want_plan = query_flag(request.query_params, "plan")
        report = fragmentation_service.fragmentation_for(pools=[pool], scope=pool.name, with_plan=want_plan)
        return Response(fragmentation_service.report_document(report))


class PoolFragmentationApplyView(APIView):
    """Apply the repack plan: evict and re-place pods, at most `maxNodes` nodes at a time; with
    `shares`, its moves that pack GPU shares into fewer GPUs."""

    serializer_class = FragmentationSerializer

    @extend_schema(
        request=ApplySerializer,
        responses={200: FragmentationSerializer, **_errors(400, 401, 403, 404), **UNSUPPORTED},
        operation_id="pools_fragmentation_apply",
    )
    def post(self, request, name: str):
        body = ApplySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pool = selectors.pool_get(user=request.user, name=name)
        applied = fragmentation_service.repack_apply(user=request.user, pool=pool, max_nodes=body.validated_data.get("maxNodes", 1), shares=body.validated_data["shares"])
        return Response(fragmentation_service.report_document(applied))


class ClusterFragmentationView(APIView):
    """The whole cluster's fragmentation report (platform admins and finance)."""

    serializer_class = FragmentationSerializer

    @extend_schema(
        parameters=[OpenApiParameter("plan", bool, description="Include the repack plan")],
        responses={200: FragmentationSerializer, **_errors(401, 403)},
        operation_id="fragmentation_retrieve",
    )
    def get(self, request):
        if not roles.sees_all_teams(request.user):
            raise PermissionDenied("the cluster-wide report is for platform admins and finance")
        want_plan = query_flag(request.query_params, "plan")
        report = fragmentation_service.fragmentation_for(pools=None, scope="cluster", with_plan=want_plan)
        return Response(fragmentation_service.report_document(report))


class ClusterFragmentationApplyView(APIView):
    """Apply the cluster-wide repack plan (platform admins), at most `maxNodes` nodes at a time."""

    serializer_class = FragmentationSerializer

    @extend_schema(
        request=ApplySerializer,
        responses={200: FragmentationSerializer, **_errors(400, 401, 403), **UNSUPPORTED},
        operation_id="fragmentation_apply",
    )
    def post(self, request):
        body = ApplySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        applied = fragmentation_service.repack_apply(user=request.user, pool=None, max_nodes=body.validated_data.get("maxNodes", 1), shares=body.validated_data["shares"])
        return Response(fragmentation_service.report_document(applied))

