"""The team-isolation ValidatingAdmissionPolicy and its binding on a real cluster
(admissionregistration.k8s.io/v1), kept as `pools.core.isolation.admission_policy` says.

Level-triggered like the node labels: every sync reads both objects (two GETs) and applies
(server-side, our field manager, forced) only the one whose fields differ from ours, whether
our pools changed or someone edited or deleted it. The API server adds defaults to what we
apply (`matchPolicy`, empty selectors, rule scopes), so "differs" means: a field we set is
missing or has another value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.providers.kubernetes import FIELD_MANAGER, api_client

APPLY = "application/apply-patch+yaml"


def covers(live: Any, ours: Any) -> bool:
    """Whether the live object holds every field we set, with our value (lists item by item)."""
    if isinstance(ours, Mapping):
        return isinstance(live, Mapping) and all(key in live and covers(live[key], value) for key, value in ours.items())
    if isinstance(ours, list):
        return isinstance(live, list) and len(live) == len(ours) and all(covers(a, b) for a, b in zip(live, ours, strict=True))
    return live == ours


class AdmissionPolicies:
    def __init__(self, api: client.ApiClient | None = None):
        self.api = client.AdmissionregistrationV1Api(api or api_client())

    def sync(self, policy: dict, binding: dict) -> list[str]:
        """Apply what differs; returns the kinds applied (empty when both were in place)."""
        applied = []
        for body, read, patch in (
            (policy, self.api.read_validating_admission_policy, self.api.patch_validating_admission_policy),
            (binding, self.api.read_validating_admission_policy_binding, self.api.patch_validating_admission_policy_binding),
        ):
            name = body["metadata"]["name"]
            try:
                live = json.loads(read(name, _preload_content=False).data)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                live = None
            if live is None or not covers(live.get("spec"), body["spec"]) or not covers(live.get("metadata"), body["metadata"]):
                patch(name, body, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY)
                applied.append(body["kind"])
        return applied
