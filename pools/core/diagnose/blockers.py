"""Every check a Pending pod fails on an empty node of a pool, each with its fix, in the order
kube-scheduler runs its filters (TaintToleration, NodeAffinity, then our GPU-model check and
NodeResourcesFit): what the self-checks (`pools.core.diagnose.checks`, seeds T2 and T5) list, so
that a lead makes every change at once instead of fixing the taint, waiting, and meeting the
node selector next.

kube-scheduler's FailedScheduling message counts each node once, under its first failing filter
(`pools.core.scheduling.explain`, unchanged); the checks themselves are `pod_fixes.node_checks`,
in the words of the pod's own hints. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, Taint
from pools.core.scheduling.pod_fixes import node_checks, yaml_value
from pools.core.words import plural

# Why a Pending pod cannot use a pool (`snapshot.pending_pod_facts`).
FITS, TAINT, AFFINITY, GPU_MODEL, TOO_LARGE = "fits", "taint", "affinity", "gpu-model", "too-large"
INVALID_SPEC = "invalid-spec"  # the scheduling core cannot read the pod (a node affinity stored before its check)

# A Pending pod's cause (its blocker kind, or what it waits for: `checks.PENDING_ORDER`) as the
# Diagnose page and CLI say it: the codes are for code, these words for its lead (QA).
CAUSE_WORDS = {
    TAINT: "a taint it does not tolerate", AFFINITY: "a node selector or affinity no node matches",
    GPU_MODEL: "another GPU model asked for", TOO_LARGE: "larger than a node", INVALID_SPEC: "a spec the scheduler cannot read",
    "node-unavailable": "room only on nodes out of use", "scheduler-skew": "placing now", "nodes-on-the-way": "nodes ordered or starting",
    "at-max": "the pool at its maximum", "no-burst": "the pool does not burst", "waiting": "waiting for room",
}  # fmt: skip


def cause_words(cause: str) -> str:
    return CAUSE_WORDS.get(cause, cause)


@dataclass(frozen=True)
class Blocker:
    """One failing check of a pod on a pool's nodes and the change that answers it."""

    kind: str  # TAINT, AFFINITY, GPU_MODEL or TOO_LARGE
    check: str  # what fails, as the pod's hints word it
    fix: str  # the change: to the pod, or to the pool's spec where a label would do
    taint: str = ""  # for TAINT, the taint ("key=value:Effect")


def pool_blockers(pod: Pod, template: NodeState) -> tuple[Blocker, ...]:
    """Every check `pod` fails on `template` (an empty node of the pool) with its fix, in
    kube-scheduler's order; empty when the pod fits an empty node (it only waits for room)."""
    found = node_checks(pod, template)
    if found is None:
        return ()
    checks = iter(found.checks)  # node_checks lists them in this same order
    blockers = [Blocker(TAINT, next(checks), f"add the toleration {_toleration(t)} to the pod spec", _taint(t)) for t in found.tolerations]
    for key, have in found.node_selector.items():
        change = f"remove {key} from the pod's nodeSelector" if have is None else f"set the pod's nodeSelector {key}: {yaml_value(have)}"
        label = f"add {key}: {yaml_value(found.pool_labels[key])} to the pool's spec.nodeLabels, or " if key in found.pool_labels else ""
        blockers.append(Blocker(AFFINITY, next(checks), label + change))
    if found.affinity_terms is not None:
        labels = ", ".join(f"{k}: {yaml_value(v)}" for k, v in sorted(found.pool_labels.items()) if k not in found.node_selector)
        change = ("remove the pod's required node affinity" if not found.affinity_terms
                  else "change the pod's required node affinity to " + _terms(found.affinity_terms))  # fmt: skip
        blockers.append(Blocker(AFFINITY, next(checks), (f"add {labels} to the pool's spec.nodeLabels, or " if labels else "") + change))
    if found.gpu_models:
        blockers.append(Blocker(GPU_MODEL, next(checks), f"allow {template.gpu_model} too in the pod's ebcloud.io/gpu-models annotation"))
    for name, size in found.requests.items():
        fix = {"gpu_count": f"ask for at most {plural(size, 'GPU')} per pod (split the job)" if size else "ask for no GPU",
               "cpu_milli": f"lower the pod's cpu request to at most {size}m",
               "memory_mib": f"lower the pod's memory request to at most {size}Mi"}[name]  # fmt: skip
        blockers.append(Blocker(TOO_LARGE, next(checks), fix))
    return tuple(blockers)


def blockers_finding(blockers: Sequence[Blocker]) -> str:
    """The checks, numbered, as one sentence (after the finding that names the first)."""
    listed = "; ".join(f"{i}) {b.check}" for i, b in enumerate(blockers, 1))
    return (f" On this pool's nodes {len(blockers)} checks fail, in the order kube-scheduler runs them (its message counts each "
            f"node under the first only): {listed}.")  # fmt: skip


def blockers_fixes(blockers: Sequence[Blocker]) -> str:
    """The fix of each check, numbered as `blockers_finding` numbers the checks."""
    return "; ".join(f"{i}) {b.fix}" for i, b in enumerate(blockers, 1)) + "."


def _taint(taint: Taint) -> str:
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def _toleration(taint: Taint) -> str:
    value = f', operator: "Equal", value: "{taint.value}"' if taint.value else ', operator: "Exists"'
    return f'{{key: "{taint.key}"{value}, effect: "{taint.effect}"}}'


def _terms(terms: Sequence[Sequence[NodeSelectorRequirement]]) -> str:
    return " OR ".join("(" + " AND ".join(f"{r.key} {r.operator}" + (f" [{', '.join(r.values)}]" if r.values else "") for r in term) + ")" for term in terms)
