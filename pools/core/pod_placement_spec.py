"""Where a pod may run, as its document says it: tolerations and node affinity, validated with
kube-apiserver's rules (k8s.io/kubernetes pkg/apis/core/validation `ValidateTolerations`,
`ValidateNodeSelectorTerm`, `ValidateNodeFieldSelectorRequirement` and the preferred terms'
weights), so that the product takes the documents a real API server takes and refuses the
others on the same fields. Pure: no Django.

What is stored is the validated document, the fields kept as written (a toleration's
`tolerationSeconds`, preferred terms); `affinity_terms` turns the required terms into the
scheduling core's requirements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pools.core.fields import DNS1123_SUBDOMAIN, Checker, label_key_error, label_value_error
from pools.core.scheduling.nodes import (
    NO_EXECUTE,
    NODE_SELECTOR_OPERATORS,
    TAINT_EFFECTS,
    NodeSelectorRequirement,
)

INT64 = 2**63
_TOLERATION = ("key", "operator", "value", "effect", "tolerationSeconds")
_EXPRESSION = ("key", "operator", "values")
_TERM = ("matchExpressions", "matchFields")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODE_NAME_FIELD = "metadata.name"  # the one field a node selector term may match (matchFields)


def tolerations(check: Checker, value: Any) -> tuple[dict, ...]:
    """`spec.tolerations`: an empty key needs operator Exists (it tolerates every taint);
    Equal compares a label value, Exists takes none; `tolerationSeconds` (an integer) only with
    effect NoExecute, where it says how long the pod stays once such a taint appears."""
    if not isinstance(value, list):
        check.error("spec.tolerations", "must be a list of {key, operator, value, effect}")
        return ()
    result = []
    for index, item in enumerate(value):
        path = f"spec.tolerations[{index}]"
        before = len(check.errors)
        entry = check.mapping(item, path, _TOLERATION)
        key, operator = entry.get("key", ""), entry.get("operator", "Equal")
        val, effect, seconds = entry.get("value", ""), entry.get("effect", ""), entry.get("tolerationSeconds")
        for name, text in (("key", key), ("operator", operator), ("value", val), ("effect", effect)):
            if not isinstance(text, str):
                check.error(f"{path}.{name}", "must be a string")
        if len(check.errors) > before:
            continue
        if key and (problem := label_key_error(key)):
            check.error(f"{path}.key", problem.replace("label key", "toleration key"))
        if not key and operator != "Exists":
            check.error(f"{path}.operator", 'must be Exists when key is empty, which means "match all values and all keys"')
        if operator in ("Equal", ""):
            if problem := label_value_error(val):
                check.error(f"{path}.value", problem.replace("label value", "toleration value"))
        elif operator == "Exists":
            if val:
                check.error(f"{path}.value", "must be empty when operator is Exists")
        else:
            check.error(f"{path}.operator", f"must be Equal or Exists, got {operator!r}")
        if effect and effect not in TAINT_EFFECTS:
            check.error(f"{path}.effect", f"must be empty or one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        if seconds is not None:
            check.integer(seconds, f"{path}.tolerationSeconds", minimum=-INT64, maximum=INT64 - 1)
            if effect != NO_EXECUTE:
                check.error(f"{path}.effect", "must be NoExecute when tolerationSeconds is set")
        if len(check.errors) == before:
            stored = {"key": key, "operator": operator or "Equal", "value": val, "effect": effect}
            result.append(stored | ({"tolerationSeconds": seconds} if seconds is not None else {}))
    return tuple(result)


def affinity(check: Checker, value: Any) -> dict:
    """`spec.affinity.nodeAffinity`: required terms (ORed; a term's expressions and fields
    ANDed; an empty term matches nothing) and preferred terms (weight 1-100 and a term), all
    validated; pod (anti-)affinity is not supported by the product's scheduler, so refused."""
    entry = check.mapping(value, "spec.affinity", ("nodeAffinity",))
    if "nodeAffinity" not in entry:
        return {}
    base = "spec.affinity.nodeAffinity"
    node_affinity = check.mapping(entry["nodeAffinity"], base, (_REQUIRED, _PREFERRED))
    result: dict[str, Any] = {}
    if _REQUIRED in node_affinity:
        path = f"{base}.{_REQUIRED}"
        required = check.mapping(node_affinity[_REQUIRED], path, ("nodeSelectorTerms",), ("nodeSelectorTerms",))
        terms = required.get("nodeSelectorTerms", [])
        if not isinstance(terms, list) or not terms:
            check.error(f"{path}.nodeSelectorTerms", "must have at least one node selector term")
        else:
            result[_REQUIRED] = {"nodeSelectorTerms": [_term(check, term, f"{path}.nodeSelectorTerms[{i}]") for i, term in enumerate(terms)]}
    if _PREFERRED in node_affinity:
        path = f"{base}.{_PREFERRED}"
        preferred = node_affinity[_PREFERRED]
        if not isinstance(preferred, list):
            check.error(path, "must be a list of {weight, preference}")
        else:
            result[_PREFERRED] = [_preferred(check, item, f"{path}[{i}]") for i, item in enumerate(preferred)]
    return {"nodeAffinity": result}


def _preferred(check: Checker, value: Any, path: str) -> dict:
    entry = check.mapping(value, path, ("weight", "preference"), ("weight", "preference"))
    weight = check.integer(entry.get("weight", 1), f"{path}.weight", minimum=1, maximum=100)
    return {"weight": weight, "preference": _term(check, entry.get("preference", {}), f"{path}.preference")}


def _term(check: Checker, value: Any, path: str) -> dict:
    entry = check.mapping(value, path, _TERM)
    term: dict[str, list] = {}
    for name, requirement in (("matchExpressions", _expression), ("matchFields", _field)):
        items = entry.get(name, [])
        if not isinstance(items, list):
            check.error(f"{path}.{name}", "must be a list of {key, operator, values}")
            continue
        term[name] = [requirement(check, item, f"{path}.{name}[{i}]") for i, item in enumerate(items)]
    return {name: [r for r in requirements if r is not None] for name, requirements in term.items() if requirements}


def _parts(check: Checker, value: Any, path: str) -> tuple[Any, Any, list]:
    entry = check.mapping(value, path, _EXPRESSION, ("key", "operator"))
    for required in ("key", "operator"):
        if required in entry and entry[required] is None:  # present but null: as missing
            check.error(f"{path}.{required}", "must not be null")
    values = entry.get("values", [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        check.error(f"{path}.values", "must be a list of strings (quote numbers)")
        values = None
    return entry.get("key"), entry.get("operator"), values


def _expression(check: Checker, value: Any, path: str) -> dict | None:
    """A label requirement: In/NotIn need values, Exists/DoesNotExist none, Gt/Lt exactly one;
    every value a label value (a Gt/Lt value that is no integer is valid and matches no node)."""
    before = len(check.errors)
    key, operator, values = _parts(check, value, path)
    if key is not None and (problem := label_key_error(key)):
        check.error(f"{path}.key", problem)
    if operator is not None and operator not in NODE_SELECTOR_OPERATORS:
        check.error(f"{path}.operator", f"must be one of {', '.join(NODE_SELECTOR_OPERATORS)}, got {operator!r}")
    if values is not None:
        if operator in ("In", "NotIn") and not values:
            check.error(f"{path}.values", f"must be specified when operator is {operator}")
        elif operator in ("Exists", "DoesNotExist") and values:
            check.error(f"{path}.values", f"may not be specified when operator is {operator}")
        elif operator in ("Gt", "Lt") and len(values) != 1:
            check.error(f"{path}.values", f"must be a single value when operator is {operator}")
        for i, text in enumerate(values):
            if problem := label_value_error(text):
                check.error(f"{path}.values[{i}]", problem)
    if len(check.errors) > before:
        return None
    return {"key": key, "operator": operator, "values": list(values)}


def _field(check: Checker, value: Any, path: str) -> dict | None:
    """A field requirement: only metadata.name, with In or NotIn and exactly one node name."""
    before = len(check.errors)
    key, operator, values = _parts(check, value, path)
    if key is not None and key != NODE_NAME_FIELD:
        check.error(f"{path}.key", f"not a valid field selector key: only {NODE_NAME_FIELD}")
    if operator is not None and operator not in ("In", "NotIn"):
        check.error(f"{path}.operator", f"must be In or NotIn, got {operator!r}")
    if values is not None:
        if len(values) != 1:
            check.error(f"{path}.values", "must be only one value when operator is In or NotIn for node field selector")
        for i, text in enumerate(values):
            if not (len(text) <= 253 and DNS1123_SUBDOMAIN.match(text)):
                check.error(f"{path}.values[{i}]", f"invalid node name {text[:80]!r}: a DNS-1123 subdomain")
    if len(check.errors) > before:
        return None
    return {"key": key, "operator": operator, "values": list(values)}


def affinity_terms(stored: Mapping[str, Any]) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    """The required node-affinity terms of a stored (validated) affinity, expressions and fields."""
    node_affinity = (stored or {}).get("nodeAffinity") or {}
    required = node_affinity.get(_REQUIRED) or {}
    return tuple(
        tuple(NodeSelectorRequirement(e["key"], e["operator"], tuple(e.get("values") or ())) for e in term.get("matchExpressions") or ())
        + tuple(NodeSelectorRequirement(e["key"], e["operator"], tuple(e.get("values") or ()), field=True) for e in term.get("matchFields") or ())
        for term in required.get("nodeSelectorTerms") or ()
    )


def preferred_terms(stored: Mapping[str, Any]) -> tuple[tuple[int, tuple[NodeSelectorRequirement, ...]], ...]:
    """The preferred node-affinity terms of a stored affinity, as (weight, term). Pods stored
    before these terms were validated may hold anything there: such an item is skipped, so that
    one old pod cannot stop the scheduler."""
    node_affinity = (stored or {}).get("nodeAffinity") or {}
    terms = []
    for item in node_affinity.get(_PREFERRED) or ():
        if isinstance(item, dict) and isinstance(item.get("weight"), int) and isinstance(item.get("preference"), dict):
            try:
                terms.append((item["weight"], affinity_terms({"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [item["preference"]]}}})[0]))
            except (KeyError, TypeError, ValueError):  # a requirement that was never validated
                continue
    return tuple(terms)
