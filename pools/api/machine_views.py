"""The base of the API views that programs call, not people: node agents (monitoring/api/) and
kube-scheduler (the scheduler extender). JSON in and out, bodies bounded before they are read."""

from __future__ import annotations

from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from pools.api.parsers import BodyJSONParser


class JsonOnly(BaseContentNegotiation):
    """Programs speak JSON only: skip DRF's Accept-header negotiation on every call (an agent's
    heartbeat, a scheduling cycle)."""

    def select_parser(self, request, parsers):
        return parsers[0] if request.content_type.split(";")[0].strip() == "application/json" else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class MachineView(APIView):
    parser_classes = [BodyJSONParser]  # bounded size (413) and nesting (400)
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnly
