"""The team-isolation ValidatingAdmissionPolicy and its binding on a real cluster
(admissionregistration.k8s.io/v1), kept as `pools.core.isolation.admission_policy` says.

Level-triggered like the node labels: every sync reads both objects (two GETs) and writes only
the one that differs from ours, whether our pools changed or someone edited or deleted it.

The spec decides who is admitted, so it must be exactly ours, not merely hold our fields: a
server-side apply never removes a field another manager owns, so a binding whose
`matchResources` someone narrowed to no namespace, or a policy with someone's extra
`matchConditions` entry `expression: "false"` (a map list keyed by name), would stay switched
off while every apply succeeds. So the live spec is compared with ours whole (`spec_drift`):
a field we set with another value, or a field we do not set with anything but the value the
API server defaults it to, is drift. A drifted spec is replaced (a JSON patch of the whole
spec, conditional on the object's resourceVersion; never a delete and create, which would leave
a moment without the policy), and what was changed back is reported (`restored`) for the caller to log as a
Warning. A field the server defaults that this module does not know yet is told apart by a
dry run of the replacement first: when the server would store what it holds already, nothing
was changed by anyone and nothing is written or reported.

Metadata does not decide admission: our labels, when missing, are applied server-side as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.providers.kubernetes import FIELD_MANAGER, api_client, request_timeout

APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
# What kube-apiserver v1.37 fills in when a field is left out (SetDefaults_* of
# pkg/apis/admissionregistration/v1/defaults.go): the same as leaving it out.
SERVER_DEFAULTS: dict[str, Any] = {"failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}, "scope": "*"}
SHOWN_CHARS = 160  # of a value in a drift report (a policy's pool list runs to 90,000 characters)


def covers(live: Any, ours: Any) -> bool:
    """Whether the live object holds every field we set, with our value (lists item by item)."""
    if isinstance(ours, Mapping):
        return isinstance(live, Mapping) and all(key in live and covers(live[key], value) for key, value in ours.items())
    if isinstance(ours, list):
        return isinstance(live, list) and len(live) == len(ours) and all(covers(a, b) for a, b in zip(live, ours, strict=True))
    return live == ours


def spec_drift(live: Any, ours: Any, path: str = "spec") -> list[str]:
    """How the live value differs from ours, one phrase per field (empty: the same, up to the
    server's defaults). Entries of a list of named items (variables, matchConditions) are told
    by name, so an entry someone added or removed is named."""
    if isinstance(ours, Mapping) and isinstance(live, Mapping):
        out = [f"{path}.{key} was removed" for key in ours if key not in live]
        out += [
            f"{path}.{key} was added: {_shown(value)}"
            for key, value in live.items()
            if key not in ours and not (key in SERVER_DEFAULTS and value == SERVER_DEFAULTS[key])
        ]
        for key in ours:
            if key in live:
                out += spec_drift(live[key], ours[key], f"{path}.{key}")
        return out
    if isinstance(ours, list) and isinstance(live, list):
        if _named(ours) and _named(live):
            mine, theirs = {i["name"]: i for i in ours}, {i["name"]: i for i in live}
            out = [f"{path}[{name}] was removed" for name in mine if name not in theirs]
            out += [f"{path}[{name}] was added: {_shown(item)}" for name, item in theirs.items() if name not in mine]
            for name in mine:
                if name in theirs:
                    out += spec_drift(theirs[name], mine[name], f"{path}[{name}]")
            if not out and [i["name"] for i in live] != [i["name"] for i in ours]:
                out.append(f"{path} was reordered")  # variables are evaluated in order
            return out
        if len(live) != len(ours):
            return [f"{path} is {_shown(live)}"]
        return [phrase for i, (a, b) in enumerate(zip(live, ours, strict=True)) for phrase in spec_drift(a, b, f"{path}[{i}]")]
    return [] if live == ours else [f"{path} is {_shown(live)}"]


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


class AdmissionPolicies:
    def __init__(self, api: client.ApiClient | None = None):
        self.api = client.AdmissionregistrationV1Api(api or api_client())
        self.restored: dict[str, list[str]] = {}  # kind -> what the last sync changed back

    def sync(self, policy: dict, binding: dict) -> list[str]:
        """Apply what differs; returns the kinds written (empty when both were in place). What
        someone else had changed in a spec, and this sync put back, is in `restored`."""
        self.restored = {}
        written = []
        for body, read, patch in (
            (policy, self.api.read_validating_admission_policy, self.api.patch_validating_admission_policy),
            (binding, self.api.read_validating_admission_policy_binding, self.api.patch_validating_admission_policy_binding),
        ):
            name = body["metadata"]["name"]
            live = self._read(read, name)
            if live is not None and spec_drift(live.get("spec"), body["spec"]):
                if self._replace(body, live, read, patch):
                    written.append(body["kind"])
            elif live is None or not covers(live.get("metadata"), body["metadata"]):
                patch(name, body, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY, _request_timeout=request_timeout())
                written.append(body["kind"])
        return written

    @staticmethod
    def _read(read, name: str) -> dict | None:
        try:
            return json.loads(read(name, _preload_content=False, _request_timeout=request_timeout()).data)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    def _replace(self, body: dict, live: dict, read, patch) -> bool:
        """Put our spec back over a drifted one: a JSON patch that replaces the whole spec and
        carries the object's resourceVersion, so that it applies only to the object compared (a
        change made meanwhile is a 409: read again and compared anew). False when a dry run
        shows the server would store what it has (a default this module does not know)."""
        name = body["metadata"]["name"]
        for _ in range(3):
            ops = [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": live["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/spec", "value": body["spec"]},
            ]
            try:
                trial = patch(name, ops, dry_run="All", field_manager=FIELD_MANAGER, _content_type=JSON_PATCH, _preload_content=False, _request_timeout=request_timeout())
                if json.loads(trial.data).get("spec") == live.get("spec"):
                    return False
                patch(name, ops, field_manager=FIELD_MANAGER, _content_type=JSON_PATCH, _preload_content=False, _request_timeout=request_timeout())
            except ApiException as exc:
                if exc.status != 409:
                    raise
                live = self._read(read, name)
                if live is None or not spec_drift(live.get("spec"), body["spec"]):
                    return False  # deleted or put right meanwhile: the next sync sees to it
                continue
            self.restored[body["kind"]] = spec_drift(live.get("spec"), body["spec"])
            return True
        raise ApiException(status=409, reason=f"{body['kind']} {name} kept changing while it was put back; the next sync retries")
