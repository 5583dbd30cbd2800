"""The scheduler extender, `/api/scheduler/v1/` (kube-scheduler's extender protocol, design §1).

`filter` and `prioritize` take kube-scheduler's `ExtenderArgs` (`Pod`, and `NodeNames` with
`nodeCacheCapable: true` or `Nodes` without) and answer `ExtenderFilterResult` and
`HostPriorityList`; `preempt` takes `ExtenderPreemptionArgs` (`Pod` and the victims kube-scheduler
chose on each candidate node: `NodeNameToMetaVictims` with `nodeCacheCapable`, else
`NodeNameToVictims`) and answers `ExtenderPreemptionResult` with the candidates it keeps, their
victims as given. All from the read model (pools/selectors/extender.py) through the scheduling
core (pools/core/scheduling/extender.py). Field names are Go's, as kube-scheduler marshals them.

Bad input: a body that is not the verb's arguments is answered 400 with the field; a `Pod` that
cannot be read is a filter result with `Error` set (the protocol's way, which kube-scheduler
reports without our URL) and a 400 from `prioritize` and `preempt`, which have no such field; a
node the product does not know fails the filter with its reason where it must, and is a 400 in
`prioritize` then (kube-scheduler only asks there about nodes our filter passed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from pools.api.extender_auth import IsScheduler, SchedulerCredentialAuthentication
from pools.api.machine_views import MachineView
from pools.api.serializers import ErrorSerializer
from pools.core.errors import FieldError, ValidationError
from pools.core.scheduling.nodes import Pod as CorePod
from pools.selectors.extender import (
    extender_filter,
    extender_pod,
    extender_preemption,
    extender_scores,
)

ERROR = OpenApiResponse(ErrorSerializer, description="`{\"errors\": [{\"field\", \"message\"}]}`: not the verb's arguments")
REFUSED = OpenApiResponse(ErrorSerializer, description="Not kube-scheduler's credential")
INT64_MAX = 2**63 - 1  # NumPDBViolations is an int64 in kube-scheduler's MetaVictims


@dataclass(frozen=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    names: list[str]
    items: list[Mapping[str, Any]] | None  # `Nodes.items` when kube-scheduler sent whole nodes


def _pod_document(body: Any, kind: str) -> tuple[dict[str, str], Mapping[str, Any]]:
    """The body's keys by their lower case (Go's decoder matches them in any case) and its Pod."""
    if not isinstance(body, dict):
        raise ValidationError(f"the body must be a JSON object ({kind})")
    keys = {key.lower(): key for key in body}
    pod = body.get(keys.get("pod", "Pod"))
    if not isinstance(pod, dict):
        raise ValidationError("required: the Pod being scheduled, an object", field="Pod")
    return keys, pod


def extender_args(body: Any) -> ExtenderArgs:
    """kube-scheduler's ExtenderArgs, checked."""
    keys, pod = _pod_document(body, "ExtenderArgs")
    names = body.get(keys.get("nodenames", "NodeNames"))
    if names is not None:
        if not isinstance(names, list):
            raise ValidationError("must be a list of node names", field="NodeNames")
        errors = [FieldError(f"NodeNames[{i}]", "must be a node name (a string)") for i, name in enumerate(names) if not isinstance(name, str)]
        if errors:
            raise ValidationError(errors)
        return ExtenderArgs(pod, names, None)
    nodes = body.get(keys.get("nodes", "Nodes"))
    if nodes is None:
        raise ValidationError("required: NodeNames (nodeCacheCapable) or Nodes with items", field="NodeNames")
    if not isinstance(nodes, dict):
        raise ValidationError("must be a NodeList, an object with items", field="Nodes")
    if not isinstance(nodes.get("items"), list):
        raise ValidationError("must be a list of Nodes", field="Nodes.items")
    items = nodes["items"]
    names = []
    for i, item in enumerate(items):
        metadata = item.get("metadata") if isinstance(item, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None  # `"metadata": 5` was a 500
        if not isinstance(name, str):
            raise ValidationError("must be a Node with metadata.name", field=f"Nodes.items[{i}]")
        names.append(name)
    return ExtenderArgs(pod, names, items)


@dataclass(frozen=True)
class PreemptionArgs:
    pod: Mapping[str, Any]
    victims: dict[str, Any]  # node name -> MetaVictims ({"Pods": [{"UID"}], "NumPDBViolations"})


def preemption_args(body: Any) -> PreemptionArgs:
    """kube-scheduler's ExtenderPreemptionArgs, checked; `NodeNameToVictims` (whole pods, sent
    without nodeCacheCapable) is answered as the protocol wants it back: as MetaVictims."""
    keys, pod = _pod_document(body, "ExtenderPreemptionArgs")
    meta = body.get(keys.get("nodenametometavictims", "NodeNameToMetaVictims"))
    if meta is not None:
        return PreemptionArgs(pod, _victims_map(meta, "NodeNameToMetaVictims", _meta_victim))
    whole = body.get(keys.get("nodenametovictims", "NodeNameToVictims"))
    if whole is None:
        raise ValidationError("required: NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims", field="NodeNameToMetaVictims")
    return PreemptionArgs(pod, _victims_map(whole, "NodeNameToVictims", _meta_pod))


def _go_field(document: Mapping[str, Any], name: str) -> Any:
    """A struct field as Go's encoding/json finds it (kube-scheduler's side of the protocol):
    the key spelled as the field, else one that matches it but for case; None when absent."""
    if name in document:
        return document[name]
    folded = name.lower()
    return next((value for key, value in document.items() if key.lower() == folded), None)


def _victims_map(value: Any, field: str, meta_pod) -> dict[str, Any]:
    """The victims of each candidate node as the MetaVictims kube-scheduler reads back, every
    value of the type its Go struct declares (it decodes our answer into them): a victim's UID
    a string, NumPDBViolations an int64. A UID that is a list or an object was a 500 (it keyed
    the victims' team lookup); a wrong type elsewhere was echoed back to kube-scheduler."""
    if not isinstance(value, dict):
        raise ValidationError("must be an object of node names", field=field)
    victims = {}
    for node, entry in value.items():
        where = f"{field}.{node}"
        if not isinstance(entry, dict):
            raise ValidationError("must be an object with the victim Pods, a list", field=where)
        pods = _go_field(entry, "Pods")
        if not isinstance(pods, list):
            raise ValidationError("must be a list of the victim pods", field=f"{where}.Pods")
        violations = _go_field(entry, "NumPDBViolations")
        if violations is None:
            violations = 0
        elif type(violations) is not int or not 0 <= violations <= INT64_MAX:  # bool is not int here
            raise ValidationError(f"must be an integer from 0 to {INT64_MAX}", field=f"{where}.NumPDBViolations")
        victims[node] = {"Pods": [meta_pod(pod, f"{where}.Pods[{i}]") for i, pod in enumerate(pods)], "NumPDBViolations": violations}
    return victims


def _victim_uid(uid: Any, where: str) -> dict[str, str]:
    if not isinstance(uid, str):
        raise ValidationError("required: the victim pod's UID, a string", field=where)
    return {"UID": uid}


def _meta_victim(pod: Any, where: str) -> dict[str, str]:
    """A MetaPod as kube-scheduler sends it: an object with the victim's UID."""
    if not isinstance(pod, dict):
        raise ValidationError("must be a MetaPod, an object with the victim's UID", field=where)
    return _victim_uid(_go_field(pod, "UID"), f"{where}.UID")


def _meta_pod(pod: Any, where: str) -> dict[str, str]:
    """A MetaPod of a whole Pod: its UID, which kube-scheduler looks the victim up by."""
    metadata = _go_field(pod, "metadata") if isinstance(pod, dict) else None
    if not isinstance(metadata, dict):
        raise ValidationError("must be a Pod with its metadata, an object", field=where)
    return _victim_uid(_go_field(metadata, "uid"), f"{where}.metadata.uid")


def _pod_fields_check(pod: Mapping[str, Any]) -> None:
    """The Pod's fields that the extender keys on or counts with, of the types a v1.Pod has:
    its name, namespace and UID strings (a list or an object as the name or UID was taken as
    is, and placed), its priority an int32 (`true` and 1.5 were read as 1), its preemption
    policy a string. Missing ones are `extender_pod`'s to name; the rest of the Pod is read by
    the pod mirror's reader, which refuses what it cannot read."""
    metadata, spec = pod.get("metadata"), pod.get("spec")
    if isinstance(metadata, dict):
        for key in ("name", "namespace", "uid"):
            if key in metadata and not isinstance(metadata[key], str):
                raise ValidationError("must be a string", field=f"Pod.metadata.{key}")
    if isinstance(spec, dict):
        priority = spec.get("priority")
        if priority is not None and (type(priority) is not int or not -(2**31) <= priority < 2**31):
            raise ValidationError(f"must be an integer from {-(2**31)} to {2**31 - 1}", field="Pod.spec.priority")
        if spec.get("preemptionPolicy") is not None and not isinstance(spec["preemptionPolicy"], str):
            raise ValidationError("must be a string", field="Pod.spec.preemptionPolicy")


def pod_of(args: ExtenderArgs | PreemptionArgs) -> CorePod:
    _pod_fields_check(args.pod)
    try:
        return extender_pod(args.pod)
    except KeyError as exc:
        raise ValidationError(f"missing {exc.args[0]}", field="Pod") from exc
    except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:  # ArithmeticError: 1e999999 cores
        raise ValidationError(f"not a readable Pod: {exc}", field="Pod") from exc


class _ExtenderView(MachineView):
    authentication_classes = [SchedulerCredentialAuthentication]
    permission_classes = [IsScheduler]


def _schema(verb: str, answer: str, shape: str, asked: str = "ExtenderArgs (Pod, NodeNames)"):
    return extend_schema(
        request=OpenApiTypes.OBJECT, summary=f"kube-scheduler extender: {verb}",
        description=f"kube-scheduler's {asked} -> {answer} ({shape}).",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=answer), 400: ERROR, 401: REFUSED},
    )  # fmt: skip


class FilterView(_ExtenderView):
    @_schema("filter", "ExtenderFilterResult", "NodeNames, FailedNodes, Error")
    def post(self, request):
        args = extender_args(request.data)
        try:
            pod = pod_of(args)
        except ValidationError as exc:
            return Response({"NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": str(exc)})
        result = extender_filter(pod, args.names)
        answer: dict[str, Any] = {"FailedNodes": result.failed, "FailedAndUnresolvableNodes": result.unresolvable, "Error": ""}
        if args.items is None:
            answer["NodeNames"] = result.passed
        else:
            passed = set(result.passed)
            answer["Nodes"] = {"items": [item for item, name in zip(args.items, args.names, strict=True) if name in passed]}
        return Response(answer)


class PrioritizeView(_ExtenderView):
    @_schema("prioritize", "HostPriorityList", "[{Host, Score}], scores 0..10")
    def post(self, request):
        args = extender_args(request.data)
        pod = pod_of(args)
        scores = extender_scores(pod, args.names)
        if isinstance(scores, list):
            raise ValidationError([FieldError(f"NodeNames[{i}]", f"no live node {args.names[i]!r} in any pool") for i in scores])
        return Response([{"Host": name, "Score": scores[name]} for name in args.names])


class PreemptView(_ExtenderView):
    @_schema("preempt", "ExtenderPreemptionResult", "NodeNameToMetaVictims: the candidates kept",
             asked="ExtenderPreemptionArgs (Pod, NodeNameToMetaVictims or NodeNameToVictims)")  # fmt: skip
    def post(self, request):
        """Only the candidate nodes where the pod may run once pods are evicted are kept:
        kube-scheduler evicts the victims of the node it then picks among them."""
        args = preemption_args(request.data)
        kept = extender_preemption(pod_of(args), args.victims)
        return Response({"NodeNameToMetaVictims": {name: args.victims[name] for name in kept}})
