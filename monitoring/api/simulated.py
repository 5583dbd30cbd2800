"""Agent API for the simulated cloud only: `POST /api/agent/v1/simulated-faults/` (issue 6).

The simulated GPU source on a node has no hardware to read Xids from, so it asks the control
plane for the faults the simulated cloud raised on its own machine (the node comes from the
credential, as for every agent call). Each fault is handed out once: the call changes state,
hence POST. With any other cloud provider the endpoint answers 404, like a path that does not
exist, and the agent stops asking.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from monitoring.api.views import ERROR, _AgentView
from pools.api.errors import error_response
from pools.providers.faults import simulated_faults_take


class SimulatedFaultsView(_AgentView):
    """The simulated GPU faults of the calling node's machine not yet fetched, oldest first."""

    @extend_schema(request=None, responses={200: inline_serializer("SimulatedFaults", {
        "faults": serializers.ListField(child=inline_serializer("SimulatedFault", {
            "id": serializers.IntegerField(), "gpu": serializers.IntegerField(), "xid": serializers.IntegerField(),
            "at": serializers.DateTimeField()}))}), 401: ERROR, 403: ERROR, 404: ERROR})  # fmt: skip
    def post(self, request):
        faults = simulated_faults_take(node=request.auth.node)
        if faults is None:
            return error_response(404, "not found: the control plane does not run the simulated cloud")
        return Response({"faults": faults})
