"""Pool documents as text and back: safe YAML loading (no tags, no aliases, bounded size and nesting),
dumping, dataclasses -> document, JSON merge patches and the server-owned metadata fields.
Pure: no Django."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import yaml

from pools.core.alerting import DEFAULT_ALERTS, alerts_document
from pools.core.autoscaling import ScalingRules, ScalingSpec
from pools.core.durations import format_duration
from pools.core.errors import ValidationError
from pools.core.max_unhealthy import DEFAULT as DEFAULT_MAX_UNHEALTHY
from pools.core.nesting import DEFAULT_MAX_DEPTH
from pools.core.spec import API_VERSION, DEFAULT_SCHEDULING_POLICY, KIND, POOL_TOLERANCE, PoolSpec
from pools.core.yaml_loading import load_all, reader_error_at


def load_yaml(text: str | bytes, *, max_bytes: int = 64 * 1024, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """One YAML (or JSON) mapping, safely: no tags, no aliases, bounded size and nesting
    (pools/core/yaml_loading.py), in time linear in the size."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError("the document is not UTF-8 text") from exc
    if len(text.encode("utf-8")) > max_bytes:
        raise ValidationError(f"the document is larger than {max_bytes} bytes")
    try:
        documents = [d for d in load_all(text, max_depth=max_depth) if d is not None]
    except yaml.YAMLError as exc:
        raise ValidationError(yaml_problem(exc, text)) from exc
    if len(documents) != 1:
        raise ValidationError(f"expected one GpuNodePool document, found {len(documents)}")
    if not isinstance(documents[0], dict):
        raise ValidationError("the document must be a mapping with apiVersion, kind, metadata, spec")
    return documents[0]


def yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """What PyYAML refused and where, in one line. The reader's errors (a control character
    such as BEL) carry no problem or mark, only a reason and a position in the text: without
    them the answer was "malformed YAML: malformed YAML", with nothing to find in the file."""
    if isinstance(exc, yaml.reader.ReaderError):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        line, column = reader_error_at(exc, text)
        return f"malformed YAML at line {line}, column {column}: unacceptable character #x{code:04x}: {exc.reason}"
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or "the text is not YAML"
    return f"malformed YAML{where}: {problem}"


def dump_yaml(document: Mapping[str, Any]) -> str:
    return yaml.safe_dump(_plain(document), sort_keys=False, allow_unicode=True)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value



def to_document(spec: PoolSpec) -> dict[str, Any]:
    """The full document of a spec (every field explicit), e.g. for specs built by the web form."""
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    body: dict[str, Any] = {
        "nodeType": spec.node_type,
        "gpuModel": spec.gpu_model,
        "nodeCount": {"min": spec.min_nodes, "max": spec.max_nodes},
        **({"zones": list(spec.zones)} if len(spec.zones) > 1 else {"region": spec.region}),
        "leaseType": spec.lease_type,
        "systemImage": spec.system_image,
        "autoRepair": spec.auto_repair,
        "preemptible": spec.preemptible,
    }
    policy: dict[str, Any] = {"requireApproval": True} if spec.repair_requires_approval else {}
    if spec.repair_max_unhealthy != DEFAULT_MAX_UNHEALTHY:
        policy["maxUnhealthy"] = spec.repair_max_unhealthy
    if policy:
        body["autoRepairPolicy"] = policy
    if spec.auto_renew:
        body["autoRenew"] = True
    if spec.node_labels:
        body["nodeLabels"] = dict(spec.node_labels)
    if spec.node_taints:
        body["nodeTaints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.node_taints]
    if spec.scaling is not None:
        body["scaling"] = scaling_document(spec.scaling)
    if spec.burst.enabled is not None:
        body["burst"] = {"enabled": spec.burst.enabled, "maxNodes": spec.burst.max_nodes}
    elif spec.burst.max_nodes:
        body["burst"] = {"maxNodes": spec.burst.max_nodes}
    if spec.budget is not None:
        body["budget"] = {
            "monthly": str(spec.budget.monthly),
            "currency": spec.budget.currency,
            "thresholds": list(spec.budget.thresholds),
        }
    if spec.scheduling_policy != DEFAULT_SCHEDULING_POLICY:
        body["schedulingPolicy"] = spec.scheduling_policy
    if spec.alerts != DEFAULT_ALERTS:
        body["alerts"] = alerts_document(spec.alerts)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body}


def scaling_document(scaling: ScalingSpec) -> dict[str, Any]:
    metrics = []
    for metric in scaling.metrics:
        if metric.type == "Resource":
            metrics.append({"type": "Resource", "resource": metric.name, "targetAverageUtilization": int(metric.target)})
        else:
            metrics.append({"type": "Pods", "pods": metric.name, "target": int(metric.target)})
    default: dict[str, Any] = {"metrics": metrics}
    if scaling.combine != "All":
        default["combine"] = scaling.combine

    def rules(r: ScalingRules) -> dict[str, Any]:
        written = {
            "stabilizationWindow": format_duration(r.stabilization_window_seconds),
            "policies": [{"type": p.type, "value": p.value, "periodSeconds": p.period_seconds} for p in r.policies],
            "selectPolicy": r.select_policy,
        }
        if r.tolerance is not None and r.tolerance != POOL_TOLERANCE:
            written["tolerance"] = r.tolerance
        return written

    return {"default": default, "scaleUp": rules(scaling.scale_up), "scaleDown": rules(scaling.scale_down)}


def merge_patch(document: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(document) if isinstance(document, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_patch_bounded(document: dict[str, Any], patch: Any, *, max_bytes: int) -> dict[str, Any]:
    """A pool's document merged with a request's patch, which must be a mapping, held to
    `max_bytes` (`EBCLOUD_MAX_SPEC_BYTES`) as compact JSON, the smallest form a client can send
    it in: each patch's body was under the limit, and patches adding 300 labels each grew a
    document to 200 KB that its owner could no longer PUT back."""
    if not isinstance(patch, dict):
        raise ValidationError("a merge patch must be a mapping")
    merged = merge_patch(document, patch)
    size = len(json.dumps(merged, ensure_ascii=False, separators=(",", ":"), default=str).encode())
    if size > max_bytes:
        raise ValidationError(f"with this patch the document would be {size} bytes, larger than the {max_bytes} bytes a document may be")
    return merged


SERVER_METADATA = ("team", "generation", "creationTimestamp", "uid", "resourceVersion")


def split_server_fields(document: Any) -> tuple[Any, dict[str, Any]]:
    """Drop what the server sets (`status`, server metadata) from a document sent back to it.

    Like the Kubernetes API server, this lets `get -o yaml`, edit, `apply` work; the values are
    returned so that a caller can honour `metadata.team` as a choice on create.
    """
    if not isinstance(document, dict):
        return document, {}
    cleaned = {key: value for key, value in document.items() if key != "status"}
    metadata = cleaned.get("metadata")
    server: dict[str, Any] = {}
    if isinstance(metadata, dict):
        server = {key: metadata[key] for key in SERVER_METADATA if key in metadata}
        cleaned["metadata"] = {key: value for key, value in metadata.items() if key not in SERVER_METADATA}
    return cleaned, server


def read_version(server: dict[str, Any]) -> int | None:
    """The `metadata.resourceVersion` a client sent back with a document, or None where it sent
    none: as on the Kubernetes API server, a replace that carries the version it was read at is
    refused when the object has changed since, and one without is unconditional. A pool's version
    is its generation, which moves whenever its document does."""
    value = server.get("resourceVersion")
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**18:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    raise ValidationError("must be the resourceVersion a GET returned (a number as a string), or left out", field="metadata.resourceVersion")


def read_uid(server: dict[str, Any]) -> str | None:
    """The `metadata.uid` a client sent back with a document, or None where it sent none: a
    replace that names another object than the stored one of that name is refused."""
    value = server.get("uid")
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip() and len(value) <= 64:
        return value
    raise ValidationError("must be the uid a GET returned, or left out", field="metadata.uid")

