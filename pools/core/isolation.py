"""Which team's pods may target which pool, and the admission rule that keeps a pod from
asking for another team's pool (design §3: a pod may use only its team's pools and pools whose
`spec.sharedWith` names its team).

Two guards, one rule each:
- placement: the scheduler (and on a real cluster our scheduler extender) never puts a pod on a
  node whose pool its team may not use (`pools.core.scheduling.nodes.may_use`); a toleration
  of the pool's taints does not change that;
- admission: a pod whose nodeSelector / required node affinity matches pools, none of which its
  team may use, is refused at once with a message that says why, instead of waiting Pending for
  ever. The simulated cluster's pod API applies `admission_error`; a real cluster applies the
  same rule as a ValidatingAdmissionPolicy (`admission_policy`), written in CEL from the same
  pools, so both front doors answer alike.

A pod with neither nodeSelector nor required node affinity targets no pool in particular and is
never refused here (placement keeps it on its team's pools). A pod created with `spec.nodeName`
skips both schedulers, and a kubelet admits it whatever NoSchedule taint its node has: on a real
cluster the policy refuses one that names a node of a pool its team may not use (the product's
own pod API takes no nodeName). So does a Binding of a pod to such a node: what a second
scheduler, one our extender does not advise, or anyone allowed to bind pods, would send.
Terms that only use `matchFields` (a DaemonSet's pods pin a node by name) are treated as
matching any pool, as both guards can tell nothing from them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pools.core.scheduling.nodes import NodeSelectorRequirement

POLICY_NAME = "ebcloud-pool-teams"
TEAM_LABEL = "ebcloud.io/team"


@dataclass(frozen=True)
class PoolAccess:
    """A pool as the admission rule sees it: the labels every node of it carries and the
    teams (slugs) whose pods may run there."""

    name: str
    labels: Mapping[str, str]
    teams: frozenset[str]
    nodes: frozenset[str] = frozenset()  # its nodes' names, for a pod that names its node (spec.nodeName)


def refusal(team: str) -> str:
    """The one message both guards give (the CEL policy builds the same text)."""
    return (
        f"pods of team {team!r} may not use the node pools their nodeSelector/affinity selects: they belong "
        "to other teams. A pool's nodes run only its own team's pods and those of teams it is shared with "
        "(spec.sharedWith, set by the pool's lead); tolerating its taints does not change that."
    )


def node_refusal(team: str, node: str) -> str:
    """Why a pod of `team` that names its node is refused (the CEL policy builds the same text)."""
    return (
        f"pods of team {team!r} may not run on node {node!r} (spec.nodeName): it belongs to a node pool of "
        "another team. A pool's nodes run only its own team's pods and those of teams it is shared with "
        "(spec.sharedWith, set by the pool's lead)."
    )


def _term_matches(term: Sequence[NodeSelectorRequirement], labels: Mapping[str, str]) -> bool:
    return all(req.matches(labels) for req in term)


def targeted_pools(
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Sequence[NodeSelectorRequirement]],
    pools: Sequence[PoolAccess],
) -> list[PoolAccess]:
    """The pools whose nodes satisfy the pod's nodeSelector and required node affinity (terms
    ORed, expressions ANDed; a term of matchFields only, here empty, matches)."""
    return [
        pool
        for pool in pools
        if all(pool.labels.get(k) == v for k, v in node_selector.items())
        and (not affinity_terms or any(_term_matches(term, pool.labels) for term in affinity_terms))
    ]


def admission_error(
    *,
    team: str,
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Sequence[NodeSelectorRequirement]],
    pools: Sequence[PoolAccess],
) -> str | None:
    """Why a pod of `team` with these constraints is refused, or None: it selects pools and
    none of them is its team's to use."""
    if not node_selector and not affinity_terms:
        return None
    matched = targeted_pools(node_selector, affinity_terms, pools)
    if matched and not any(team in pool.teams for pool in matched):
        return refusal(team)
    return None


# ---------------------------------------------------------------------------------------------
# The same rule as a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1)

# One requirement of a nodeSelectorTerm against a pool's labels `p.labels`, as
# NodeSelectorRequirement.matches decides it (Gt/Lt compare integers and fail closed).
_REQUIREMENT = (
    "(e.operator == 'In' ? (e.key in p.labels && p.labels[e.key] in e.values) : "
    "e.operator == 'NotIn' ? !(e.key in p.labels && p.labels[e.key] in e.values) : "
    "e.operator == 'Exists' ? e.key in p.labels : "
    "e.operator == 'DoesNotExist' ? !(e.key in p.labels) : "
    "(e.key in p.labels && p.labels[e.key].matches('^-?[0-9]+$') && size(e.values) == 1 && "
    "(e.operator == 'Gt' ? int(p.labels[e.key]) > int(e.values[0]) : int(p.labels[e.key]) < int(e.values[0]))))"
)
_TEAM = (
    "object.metadata.namespace in variables.mapped ? variables.mapped[object.metadata.namespace] : "
    f"(has(namespaceObject.metadata.labels) && '{TEAM_LABEL}' in namespaceObject.metadata.labels ? "
    f"namespaceObject.metadata.labels['{TEAM_LABEL}'] : '')"
)
# A Binding (pods/binding, or the older namespaced bindings) puts an existing pod on a node: what
# a scheduler sends, kube-scheduler or a second one. It carries no pod spec, only its target.
_BINDING = "(request.kind.kind == 'Binding')"
_TERMS = (
    "has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && "
    "has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? "
    "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms : []"
)
# The pools the pod's constraints match, out of one variable's list `{pools}`.
_MATCHED = (
    "{pools}.filter(p, "
    "variables.selector.all(k, k in p.labels && p.labels[k] == variables.selector[k]) && "
    "(size(variables.terms) == 0 || variables.terms.exists(t, "
    f"!has(t.matchExpressions) || t.matchExpressions.all(e, {_REQUIREMENT}))))"
)
# kube-apiserver refuses a CEL expression longer than 100,000 code points: the pools are cut
# into variables of at most this many characters each.
CHUNK_CHARS = 90_000


def _cel(value) -> str:
    """A CEL literal for strings, lists and maps of them (CEL's string escapes are JSON's)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_cel(k)}: {_cel(v)}" for k, v in sorted(value.items())) + "}"
    return "[" + ", ".join(_cel(v) for v in value) + "]"


def _message_expression(text: str, *values: str) -> str:
    """A message as CEL: `text` with each quoted NUL placeholder replaced by a CEL value, quoted
    as the Python text quotes it (`refusal("\\x00")`)."""
    parts = text.split(repr("\x00"))
    pieces = [_cel(parts[0])]
    for value, part in zip(values, parts[1:], strict=True):
        pieces += [f"\"'\" + {value} + \"'\"", _cel(part)]
    return " + ".join(pieces)


def _chunks(entries: Sequence[str]) -> list[str]:
    """The entries joined into texts of at most CHUNK_CHARS each (one text at least, maybe
    empty): a variable's expression each."""
    chunks: list[list[str]] = [[]]
    size = 0
    for entry in entries:
        if chunks[-1] and size + len(entry) > CHUNK_CHARS:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += len(entry) + 2
    return [", ".join(chunk) for chunk in chunks]


def admission_policy(pools: Sequence[PoolAccess], namespaces: Mapping[str, str]) -> tuple[dict, dict]:
    """The ValidatingAdmissionPolicy and its binding that refuse, on pod create (and on an
    update that changes its nodeSelector or affinity, which a gated pod may), a pod of a team's
    namespace that selects only pools its team may not use, or that is created on a node
    (`spec.nodeName`, which only a create sets) of a pool its team may not use, or bound to one (a
    Binding: pods/binding, or the older namespaced bindings). `namespaces` is the admins'
    namespace -> team mapping (`namespace_teams`: the admins' mappings and each team's own
    namespace), which wins over the namespace's `ebcloud.io/team` label."""
    # Each pool is a map of mixed values (CEL map literals are of one value type, hence dyn()).
    pool_entries = [f"{{'teams': dyn({_cel(sorted(p.teams))}), 'labels': dyn({_cel(dict(p.labels))})}}" for p in sorted(pools, key=lambda p: p.name)]
    pool_variables = [{"name": f"pools{i}", "expression": f"[{chunk}]"} for i, chunk in enumerate(_chunks(pool_entries))]
    matched = " + ".join(_MATCHED.replace("{pools}", f"variables.{v['name']}") for v in pool_variables)
    # A named node's pool, then that pool's teams: maps looked up once per chunk, each entry of
    # a size of its own (a node's teams repeated per node grew with nodes x teams).
    pool_of = {node: p.name for p in pools for node in p.nodes}
    node_variables = [
        {"name": f"nodes{i}", "expression": f"{{{chunk}}}"}
        for i, chunk in enumerate(_chunks([f"{_cel(node)}: {_cel(name)}" for node, name in sorted(pool_of.items())]))
    ]
    team_variables = [
        {"name": f"teams{i}", "expression": f"{{{chunk}}}"}
        for i, chunk in enumerate(_chunks([f"{_cel(p.name)}: {_cel(sorted(p.teams))}" for p in sorted(pools, key=lambda p: p.name) if p.nodes]))
    ]
    placed = " + ".join(f"(variables.node in variables.{v['name']} ? [variables.{v['name']}[variables.node]] : [])" for v in node_variables)
    teams = " + ".join(f"(p in variables.{v['name']} ? variables.{v['name']}[p] : [])" for v in team_variables)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/managed-by": "ebcloud"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding", "bindings"]},
                ]
            },
            "variables": [
                {"name": "mapped", "expression": _cel(dict(namespaces))},
                {"name": "team", "expression": _TEAM},
                {"name": "selector", "expression": f"!{_BINDING} && has(object.spec.nodeSelector) ? object.spec.nodeSelector : {{}}"},
                {"name": "terms", "expression": f"!{_BINDING} && {_TERMS}"},
                {"name": "node", "expression": f"{_BINDING} ? object.target.name : has(object.spec.nodeName) ? object.spec.nodeName : ''"},
                *pool_variables,
                {"name": "matched", "expression": matched},
                *node_variables,
                *team_variables,
                {"name": "placed", "expression": f"variables.node == '' ? [] : {placed}"},
            ],
            "matchConditions": [
                {
                    "name": "constraints-set",
                    "expression": (
                        f"{_BINDING} || request.operation == 'CREATE' && has(object.spec.nodeName) || "
                        "(has(object.spec.nodeSelector) || has(object.spec.affinity)) && "
                        "(request.operation == 'CREATE' || !has(oldObject.spec) || "
                        "(has(oldObject.spec.nodeSelector) ? oldObject.spec.nodeSelector : {}) != "
                        "(has(object.spec.nodeSelector) ? object.spec.nodeSelector : {}) || "
                        "(has(oldObject.spec.affinity) ? oldObject.spec.affinity : {}) != "
                        "(has(object.spec.affinity) ? object.spec.affinity : {}))"
                    ),
                }
            ],
            "validations": [
                {
                    "expression": (
                        "variables.team == '' || size(variables.terms) == 0 && size(variables.selector) == 0 || "
                        "size(variables.matched) == 0 || variables.matched.exists(p, variables.team in p.teams)"
                    ),
                    "messageExpression": _message_expression(refusal("\x00"), "variables.team"),
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.team == '' || size(variables.placed) == 0 || variables.placed.exists(p, variables.team in ({teams}))",
                    "messageExpression": _message_expression(node_refusal("\x00", "\x00"), "variables.team", "variables.node"),
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/managed-by": "ebcloud"}},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }
    return policy, binding
