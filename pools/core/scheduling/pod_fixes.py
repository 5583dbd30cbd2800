"""What keeps a Pending pod off each pool of its team, every reason at once, and the one change
to the pod that lets it on (seed T2).

kube-scheduler names the first filter a node fails; a lead who adds the toleration it asked for
then meets the node selector, then the GPU model. Here every check that fails on a node is
listed and the change that answers all of them is computed as data (`PodFix`), so that the
hint's words and the change agree: :func:`apply_fix` makes the pod that the hint describes, and
that pod passes every filter on an empty node like the one the fix was computed for (the
property the tests check over generated pods and pools).

Checks on one node, in kube-scheduler's order: cordoned and not Ready (not the pod's to fix: the
node's), each untolerated NoSchedule/NoExecute taint (a toleration), each nodeSelector key the
node's labels do not match (the node's value, or the key removed where the node has no such
label; or the label given to the pool's nodes instead), the required node affinity (its first
term made to match: a value added to `In`, removed from `NotIn`, a requirement dropped where no
value can match), the GPU model (the node's model allowed too), and the requests an empty node
cannot hold (lowered to the node's size: the job split into smaller pods). Pure: no Django.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import yaml

from pools.core.node_labels import reserved_key_error
from pools.core.scheduling.nodes import (
    MILLI,
    NOT_READY_TAINT_KEY,
    NodeSelectorRequirement,
    NodeState,
    Pod,
    Taint,
    Toleration,
    effective_taints,
    go_int64,
    matches_affinity,
)
from pools.core.words import plural

CORDONED = "cordoned"
NOT_READY = "not Ready"


@dataclass(frozen=True)
class PodFix:
    """Every failing check of `pod` on `node` (of `pool`) and the changes that answer them.

    `node_selector` maps a key to its new value, None removing the key; `affinity_terms` is the
    pod's new required node affinity when it changes (an empty tuple removes it); `requests`
    holds the lowered `cpu_milli`, `memory_mib` or `gpu_count`. `node_problems` are checks only
    the node can answer (cordoned, not Ready): with them, no change to the pod is enough."""

    pool: str
    node: str
    checks: tuple[str, ...]
    node_problems: tuple[str, ...] = ()
    tolerations: tuple[Taint, ...] = ()
    node_selector: Mapping[str, str | None] = field(default_factory=dict)
    affinity_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] | None = None
    gpu_models: tuple[str, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)
    pool_labels: Mapping[str, str] = field(default_factory=dict)  # labels the pool spec could give instead

    @property
    def by_pod(self) -> bool:
        """Whether changing the pod alone gets it onto the node."""
        return not self.node_problems


def node_checks(pod: Pod, node: NodeState) -> PodFix | None:
    """Every check `pod` fails on `node` as if it were empty, with its fix; None when none fails
    (the node is only busy, or fits)."""
    problems = tuple(p for p, failing in ((CORDONED, node.unschedulable), (NOT_READY, not node.ready)) if failing)
    checks: list[str] = []
    tolerations = _missing_tolerations(pod, node)
    checks += [f"untolerated taint {_taint_text(t)}" for t in tolerations]
    selector, pool_labels = {}, {}
    for key, value in sorted(pod.node_selector.items()):
        have = node.labels.get(key)
        if have != value:
            checks.append(f"the pod's nodeSelector needs {key}={value} but " + (f"its nodes have {key}={have}" if have is not None else f"its nodes have no {key} label"))
            selector[key] = have
            if _pool_may_carry(node, key, value):
                pool_labels[key] = value
    terms = None
    if pod.affinity_terms and not matches_affinity(pod.affinity_terms, node.labels):
        failing = [r for r in pod.affinity_terms[0] if not r.matches(node.labels)]
        checks.append("required node affinity not met, failing " + " OR ".join(
            "(" + " AND ".join(_requirement_text(r) for r in term if not r.matches(node.labels)) + ")" for term in pod.affinity_terms
        ))  # fmt: skip
        terms = _affinity_matching(pod.affinity_terms[0], node.labels)
        pool_labels.update(label for r in failing if (label := _label_for(r, node)) is not None)
    models = ()
    if pod.gpu_count and pod.gpu_models and node.gpu_model not in pod.gpu_models:
        checks.append(f"the pod allows GPU models {', '.join(pod.gpu_models)} but these nodes offer {node.gpu_model or 'no GPU'}")
        models = (node.gpu_model,)
    requests = {}
    for name, asked, size, said in (
        ("gpu_count", pod.gpu_count, node.gpu_count, plural(pod.gpu_count, "GPU")),
        ("cpu_milli", pod.cpu_milli, node.cpu_milli, f"{pod.cpu_milli} milli-CPU"),
        ("memory_mib", pod.memory_mib, node.memory_mib, f"{pod.memory_mib} MiB of memory"),
    ):
        if asked > size:
            checks.append(f"the pod requests {said} and a node has {size}")
            requests[name] = size
    if not (checks or problems):
        return None
    return PodFix(
        pool=node.pool, node=node.name, checks=tuple(checks), node_problems=problems, tolerations=tolerations,
        node_selector=selector, affinity_terms=terms, gpu_models=models, requests=requests, pool_labels=pool_labels,
    )  # fmt: skip


def pool_fixes(pod: Pod, nodes: Sequence[NodeState]) -> list[PodFix]:
    """Per pool, the fix of its node that needs the least: a node the pod can be changed for
    before one only the node can answer, then the fewest checks, then the name. Pools with a
    node that needs nothing (where the pod only waits for room) have no fix."""
    by_pool: dict[str, list[NodeState]] = defaultdict(list)
    for node in nodes:
        by_pool[node.pool].append(node)
    fixes = []
    for _, members in sorted(by_pool.items()):
        found = [node_checks(pod, node) for node in members]
        if any(fix is None for fix in found):
            continue
        fixes.append(min(found, key=lambda f: (not f.by_pod, len(f.checks), f.node)))
    return fixes


def apply_fix(pod: Pod, fix: PodFix) -> Pod:
    """The pod with the fix's changes (what the hint tells its owner to write)."""
    selector = {k: v for k, v in {**pod.node_selector, **fix.node_selector}.items() if v is not None}
    tolerations = pod.tolerations + tuple(_toleration(t) for t in fix.tolerations)
    models = pod.gpu_models + fix.gpu_models if pod.gpu_models else ()
    terms = pod.affinity_terms if fix.affinity_terms is None else fix.affinity_terms
    requests = dict(fix.requests)
    if "gpu_count" in requests:  # the shares asked fit in the GPUs left: none on a node without GPUs
        requests["gpu_shares"] = min(pod.gpu_shares, requests["gpu_count"] * MILLI)
    if requests.get("gpu_count") == 0:
        requests["gpu_milli"] = 0
    return replace(pod, tolerations=tolerations, node_selector=selector, affinity_terms=terms, gpu_models=models, **requests)


def yaml_value(text: str) -> str:
    """`text` as YAML that reads back as this string: quoted where YAML would read something else
    (`yes` is true, `1.0` a number, `~` null), as a label value that is read back as a boolean
    is refused (the hint's `nodeLabels: {lend: yes}` was, pasted as written)."""
    try:
        plain = yaml.safe_load(text) == text
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text)


def fix_text(fix: PodFix, *, where: str, lent: bool = False) -> str:
    """One hint: every check and the change, in the words a pod's owner writes. On a pool `lent`
    to the pod's team, the pool's spec is its owner's to change (a 404 to the pod's team)."""
    count = len(fix.checks)
    head = f"{where}: " + ("; ".join(fix.checks) if count == 1 else f"{count} checks fail: " + "; ".join(fix.checks)) + "."
    changes = []
    for key, value in sorted(fix.node_selector.items()):
        changes.append(f"remove {key} from the nodeSelector" if value is None else f"set nodeSelector {key}: {yaml_value(value)}")
    if fix.affinity_terms is not None:
        changes.append("remove the required node affinity" if not fix.affinity_terms else "change the required node affinity to " + " OR ".join(
            "(" + " AND ".join(_requirement_text(r) for r in term) + ")" for term in fix.affinity_terms
        ))  # fmt: skip
    if fix.gpu_models:
        changes.append(f"allow GPU model {', '.join(fix.gpu_models)} (annotation ebcloud.io/gpu-models)")
    for name, size in fix.requests.items():
        changes.append({"gpu_count": f"ask for at most {plural(size, 'GPU')} per pod (split the job, e.g. into data-parallel workers)"
                                     if size else "ask for no GPU",
                        "cpu_milli": f"lower the cpu request to at most {size}m",
                        "memory_mib": f"lower the memory request to at most {size}Mi"}[name])  # fmt: skip
    text = head + (" To run there, " + "; ".join(changes) + "." if changes else "")
    if fix.pool_labels:
        labels = ", ".join(f"{k}: {yaml_value(v)}" for k, v in sorted(fix.pool_labels.items()))
        who = "ask the lead of the team that lends it to add" if lent else "add"
        text += f" (Or, instead of changing the pod's node selection, {who} nodeLabels: {{{labels}}} to the pool spec.)"
    if fix.tolerations:
        text += (" Also add" if changes else " To run there, add") + " to the pod spec:\n" + tolerations_yaml(fix.tolerations)
    return text


def tolerations_yaml(taints: Sequence[Taint]) -> str:
    """The tolerations that tolerate exactly these taints, as pod-spec YAML."""
    lines = ["tolerations:"]
    for taint in taints:
        lines.append(f'- key: "{taint.key}"')
        lines += ['  operator: "Equal"', f'  value: "{taint.value}"'] if taint.value else ['  operator: "Exists"']
        lines.append(f'  effect: "{taint.effect}"')
    return "\n".join(lines)


def _missing_tolerations(pod: Pod, node: NodeState) -> tuple[Taint, ...]:
    """The node's NoSchedule/NoExecute taints no toleration of the pod tolerates (the not-ready
    taint aside: that one is the node's to clear)."""
    return tuple(
        t for t in effective_taints(node)
        if t.key != NOT_READY_TAINT_KEY and t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in pod.tolerations)
    )  # fmt: skip


def _toleration(taint: Taint) -> Toleration:
    return Toleration(taint.key, "Equal" if taint.value else "Exists", taint.value, taint.effect)


def _affinity_matching(term: Sequence[NodeSelectorRequirement], labels: Mapping[str, str]) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    """The first term changed to match `labels`: a failing `In` takes the node's value, a failing
    `NotIn` loses it, any other failing requirement is dropped. A term left empty would match
    nothing (Kubernetes), so the affinity is then removed."""
    kept = []
    for req in term:
        if req.matches(labels):
            kept.append(req)
        elif req.operator == "In" and req.key in labels:
            kept.append(NodeSelectorRequirement(req.key, "In", (*req.values, labels[req.key])))
        elif req.operator == "NotIn" and (values := tuple(v for v in req.values if v != labels.get(req.key))):
            kept.append(NodeSelectorRequirement(req.key, "NotIn", values))
    return (tuple(kept),) if kept else ()


def _label_for(req: NodeSelectorRequirement, node: NodeState) -> tuple[str, str] | None:
    """A node label that would satisfy `req` and that `node`'s pool may carry, where adding one
    can (In, Exists, Gt, Lt)."""
    if req.operator == "In":
        return next(((req.key, v) for v in req.values if _pool_may_carry(node, req.key, v)), None)
    if req.operator == "Exists":
        return (req.key, "") if _pool_may_carry(node, req.key, "") else None
    if req.operator in ("Gt", "Lt") and req.values:
        bound = go_int64(req.values[0])  # as the requirement is matched: "1_0" or "١٠" is no number
        if bound is None:
            return None
        return req.key, str(bound + 1 if req.operator == "Gt" else bound - 1)  # quoted as YAML by `yaml_value`
    return None


# Label keys whose value names a GPU model: ours and the usual ones (NVIDIA's GPU feature
# discovery, GKE, Karpenter on AWS). Other keys with "gpu" in them (`nvidia.com/gpu.present`,
# `gpu-pool`) say nothing of the model.
GPU_MODEL_LABEL_KEYS = frozenset({
    "gpu-class", "gpu-model", "gpu-type", "nvidia.com/gpu.product", "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
})  # fmt: skip
_MEMORY = re.compile(r"^(\d+)g(?:b)?$")  # 80g, 80gb: a GPU's memory in a model's name


def _pool_may_carry(node: NodeState, key: str, value: str) -> bool:
    """Whether the hint may offer `key: value` as a label for `node`'s pool instead of a change to
    the pod: never a key the spec refuses (`ebcloud.io/pool`, `kubernetes.io/hostname`). A label that names the GPU model (`GPU_MODEL_LABEL_KEYS`) only where its value
    names the node's own: a pod that asks for `gpu-class: l40s` wants L40S GPUs, and a T4 pool
    labelled so would only take it onto the wrong card. The value names the model when it has
    the model's number (`a100` of A100_80G, in `nvidia-a100-80gb` or `NVIDIA-A100-SXM4-80GB`)
    and no other memory size than the model's (`nvidia-a100-80gb` is no 40 GB A100)."""
    if reserved_key_error(key):  # the control plane's or Kubernetes' own: the spec refuses it
        return False
    if key.lower() not in GPU_MODEL_LABEL_KEYS:
        return True
    model = [w for w in re.split(r"[^a-z0-9]+", (node.gpu_model or "").lower()) if w]
    words = [w for w in re.split(r"[^a-z0-9]+", value.lower()) if w]
    number = next((w for w in model if any(c.isdigit() for c in w) and not _MEMORY.match(w)), None)
    memory = {m.group(1) for w in model if (m := _MEMORY.match(w))}
    said = {m.group(1) for w in words if (m := _MEMORY.match(w))}
    return number is not None and number in words and said <= memory


def _requirement_text(req: NodeSelectorRequirement) -> str:
    values = f" [{', '.join(req.values)}]" if req.values else ""
    return f"{req.key} {req.operator}{values}"


def _taint_text(taint: Taint) -> str:
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
