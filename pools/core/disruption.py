"""How many of which pods the Eviction API lets go now, decided from the PodDisruptionBudgets
as kube-apiserver decides (policy/v1; issue 22 item 2: the repack's moves are evictions, so a
plan must not count on a move a budget refuses).

For a Running pod, kube-apiserver's eviction subresource takes the budgets of the pod's
namespace whose selector matches the pod's labels (a null selector matches nothing, an empty
one everything), and refuses when:
- more than one budget matches (it does not support that);
- the one budget is not processed yet (`status.observedGeneration` < `metadata.generation`);
- it allows no disruption now (`status.disruptionsAllowed` <= 0), or too many evictions are
  still unconfirmed (`status.disruptedPods`).

A budget that allows N disruptions lets N of its pods be evicted now, one by one, each
eviction counting down; so a plan moves at most N of them (:class:`DisruptionBudget`).

How many it allows is the disruption controller's arithmetic (`budget_status`), which the
simulated cluster runs on every read, so its budgets are never stale.

Preemption is not an eviction: kube-scheduler deletes its victims, and its preemption only
ranks by the budgets (it may violate them where no node avoids it), read its own way
(`PreemptionBudget`, `preemption_budgets`): every budget that selects a pod counts it, however
many do; an empty selector selects nothing there; `disruptionsAllowed` is taken as written.
Each budget of the Eviction API's list carries the budgets behind it read that way, so that one
reading of the cluster serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil

MAX_DISRUPTED_PODS = 2000  # kube-apiserver's MaxDisruptedPodSize
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
NODE_OPT_OUTS = (SCALE_DOWN_DISABLED, DO_NOT_DISRUPT)  # the annotations by which a Node keeps itself


def node_opted_out(name: str, annotations: Mapping[str, str]) -> str | None:
    """Why node `name`'s own annotations keep it from a scale-down, or None: Cluster Autoscaler
    never removes a node annotated `scale-down-disabled: "true"` (its FAQ's answer to "How can I
    prevent Cluster Autoscaler from scaling down a particular node?"), nor Karpenter one
    annotated `do-not-disrupt: "true"`. Both compare the value exactly, as here."""
    for key in NODE_OPT_OUTS:
        if annotations.get(key) == "true":
            return f'node {name} is annotated {key}: "true"'
    return None


def eviction_opted_out(key: str, annotations: Mapping[str, str]) -> str | None:
    """Why pod `key`'s own annotations keep it where it runs, or None. Cluster Autoscaler never
    evicts a pod annotated `safe-to-evict: "false"` to remove its node, nor Karpenter one
    annotated `do-not-disrupt: "true"` to consolidate; the scale-down and the repack, which move
    pods for the same reasons, honour both (a drain the team asked for, by deleting a pool or
    a node's lease ending, does not: the Eviction API knows neither)."""
    if str(annotations.get(SAFE_TO_EVICT, "")).lower() == "false":
        return f'pod {key} is annotated {SAFE_TO_EVICT}: "false"'
    if str(annotations.get(DO_NOT_DISRUPT, "")).lower() == "true":
        return f'pod {key} is annotated {DO_NOT_DISRUPT}: "true"'
    return None


def local_storage_kept(key: str, annotations: Mapping[str, str], spec: Mapping) -> str | None:
    """Why pod `key`'s local storage keeps its node from a scale-down, or None. Cluster
    Autoscaler (FAQ: "pods with local storage", --skip-nodes-with-local-storage, on by default)
    keeps a node whose pod has a hostPath or an emptyDir volume not in memory: what the pod wrote
    there is lost if it moves. The pod's `safe-to-evict-local-volumes` annotation names the
    volumes it may lose; `safe-to-evict: "true"` lets it go whatever it holds (the caller's)."""
    allowed = {name.strip() for name in str(annotations.get(SAFE_TO_EVICT_LOCAL_VOLUMES, "")).split(",")}
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping) or volume.get("name") in allowed:
            continue
        empty_dir = volume.get("emptyDir")
        if volume.get("hostPath") is not None or (isinstance(empty_dir, Mapping) and empty_dir.get("medium") != "Memory"):
            return (f"pod {key} keeps data in its local volume {volume.get('name')!r} (emptyDir or hostPath), lost if it moves; "
                    f'annotate it {SAFE_TO_EVICT_LOCAL_VOLUMES}: "{volume.get("name")}" to let its node go')  # fmt: skip
    return None


@dataclass(frozen=True)
class PreemptionBudget:
    """One PodDisruptionBudget as kube-scheduler's preemption counts it
    (`FilterVictimsWithPDBViolation`, pkg/scheduler/framework/preemption/util.go): `pods`, the
    pods ("namespace/name") it counts, those of its namespace that have labels and that its
    selector, neither null nor empty nor invalid, matches, less those already in its
    `status.disruptedPods`; `allowed`, its `status.disruptionsAllowed` as written."""

    name: str
    pods: frozenset[str]
    allowed: int


@dataclass(frozen=True)
class DisruptionBudget:
    """The pods ("namespace/name") one budget guards, and how many of them may be evicted now;
    `named` says which budget, in the words a plan's message uses; `preemption`, the
    PodDisruptionBudgets behind it as kube-scheduler's preemption reads them (one, or each of
    those selecting a pod that several select; none for a refusal of another kind)."""

    pods: frozenset[str]
    allowed: int
    named: str = field(default="a disruption budget", compare=False)
    preemption: tuple[PreemptionBudget, ...] = field(default=(), compare=False)


def preemption_budgets(budgets: Iterable[DisruptionBudget]) -> list[PreemptionBudget]:
    """The PodDisruptionBudgets behind these budgets as kube-scheduler's preemption reads them,
    each once, in order of name (kube-scheduler takes its cache's order, which only decides
    which of a pod's budgets it spends after one has none left: none)."""
    found: dict[str, PreemptionBudget] = {}
    for budget in budgets:
        for behind in budget.preemption:
            found.setdefault(behind.name, behind)
    return [found[name] for name in sorted(found)]


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against a pod's labels (matchLabels and matchExpressions with In,
    NotIn, Exists, DoesNotExist). None matches nothing; {} matches everything; an operator the
    API does not know makes the selector invalid, and an invalid one matches nothing."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for requirement in selector.get("matchExpressions") or ():
        key, operator, values = requirement.get("key"), requirement.get("operator"), requirement.get("values") or ()
        present = key in labels
        if operator == "In":
            matched = present and labels[key] in values
        elif operator == "NotIn":
            matched = not present or labels[key] not in values
        elif operator == "Exists":
            matched = present
        elif operator == "DoesNotExist":
            matched = not present
        else:
            return False
        if not matched:
            return False
    return True


def _allowed(budget: Mapping) -> int:
    """How many evictions the budget allows now: none while it is not processed yet or too
    many evictions are unconfirmed."""
    status = budget.get("status") or {}
    if (status.get("observedGeneration") or 0) < (budget.get("metadata", {}).get("generation") or 0):
        return 0
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        return 0
    return max(0, status.get("disruptionsAllowed") or 0)


def _lets_unready_go(budget: Mapping) -> bool:
    """Whether the budget lets a Running pod that is not Ready be evicted without spending a
    disruption: always under `unhealthyPodEvictionPolicy: AlwaysAllow`; under IfHealthyBudget
    (the default) while the budget is healthy (currentHealthy >= desiredHealthy > 0), processed
    or not, as a real kube-apiserver answers (tests/k8s/test_disruption_budgets_on_kubernetes.py)."""
    if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = budget.get("status") or {}
    desired = status.get("desiredHealthy") or 0
    return desired > 0 and (status.get("currentHealthy") or 0) >= desired


def _counted_by_preemption(budget: Mapping, key: str, labels: Mapping[str, str]) -> bool:
    """Whether kube-scheduler's preemption counts pod `key` against this budget of its
    namespace: the pod has labels, the selector is not empty ("a PDB with a nil or empty
    selector matches nothing") and matches them, and the pod is not in `status.disruptedPods`."""
    selector = (budget.get("spec") or {}).get("selector")
    if not labels or not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    return selector_matches(selector, labels) and key.partition("/")[2] not in ((budget.get("status") or {}).get("disruptedPods") or {})


def disruption_budgets(budgets: Sequence[Mapping], pods: Mapping[str, Mapping[str, str]], *, unready: Collection[str] = ()) -> list[DisruptionBudget]:
    """The budgets (PodDisruptionBudget documents, as the API returns them) over these pods,
    "namespace/name" -> labels: each with the pods it alone guards; a pod two budgets match
    may not be evicted at all, so it gets a budget of its own that allows none. A pod in
    `unready` (Running, not Ready) that its budget lets go without spending is guarded by none.
    Each carries the budgets behind it as preemption reads them (see the module docstring); a
    budget whose pods preemption counts but the Eviction API lets go (unready ones) is listed
    guarding none, for that alone."""
    in_namespace: dict[str, list[int]] = {}
    for i, budget in enumerate(budgets):
        in_namespace.setdefault(budget.get("metadata", {}).get("namespace", ""), []).append(i)
    names = [f"{(b.get('metadata') or {}).get('namespace')}/{(b.get('metadata') or {}).get('name')}" for b in budgets]
    guarded: dict[int, set[str]] = {}
    counted: dict[int, set[str]] = {}
    several: list[tuple[str, list[int]]] = []
    for key, labels in pods.items():
        candidates = in_namespace.get(key.split("/", 1)[0], ())
        matching = [i for i in candidates if selector_matches((budgets[i].get("spec") or {}).get("selector"), labels)]
        for i in matching:
            if _counted_by_preemption(budgets[i], key, labels):
                counted.setdefault(i, set()).add(key)
        if len(matching) > 1:
            several.append((key, matching))
        elif matching and not (key in unready and _lets_unready_go(budgets[matching[0]])):
            guarded.setdefault(matching[0], set()).add(key)
    behind = {i: PreemptionBudget(names[i], frozenset(keys), (budgets[i].get("status") or {}).get("disruptionsAllowed") or 0) for i, keys in counted.items()}
    named = [
        DisruptionBudget(frozenset(guarded.get(i, ())), _allowed(budgets[i]), f"the disruption budget {names[i]}", (behind[i],) if i in behind else ())
        for i in sorted(guarded.keys() | (behind.keys() - {i for _, matching in several for i in matching}))
    ]  # fmt: skip
    alone = [
        DisruptionBudget(frozenset({key}), 0, f"more than one disruption budget ({', '.join(names[i] for i in matching)})", tuple(behind[i] for i in matching if i in behind))
        for key, matching in several
    ]  # fmt: skip
    return named + alone


def evictions(pods: Iterable[str], budgets: Sequence[DisruptionBudget], *, refused: Callable[[str], bool] = lambda pod: False) -> list[str]:
    """The pods the Eviction API lets go when asked one by one in this order: each spends one
    disruption of every budget guarding it; one whose budget has none left stays, and so does
    one `refused` refuses (asked only when the budgets allow it)."""
    guarding: dict[str, list[int]] = {}
    for i, budget in enumerate(budgets):
        for pod in budget.pods:
            guarding.setdefault(pod, []).append(i)
    left = [budget.allowed for budget in budgets]
    evicted = []
    for pod in pods:
        mine = guarding.get(pod, ())
        if any(left[i] <= 0 for i in mine) or refused(pod):
            continue
        for i in mine:
            left[i] -= 1
        evicted.append(pod)
    return evicted


def refused(pods: Sequence[str], budgets: Sequence[DisruptionBudget]) -> list[str]:
    """The pods the Eviction API would refuse if asked for these in this order (`evictions`'s
    complement), in order: what a plan may not count on moving."""
    if not budgets:
        return []
    evicted = set(evictions(pods, budgets))
    return [pod for pod in pods if pod not in evicted]


@dataclass(frozen=True)
class BudgetPod:
    """A pod a budget selects, as the disruption controller counts it: `healthy` when Running
    and Ready; `wanted` when its owner still wants it (it counts one replica in the expected
    scale; a Succeeded or Failed pod's owner is done with it)."""

    healthy: bool
    wanted: bool


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    return value if isinstance(value, int) else ceil(int(value[:-1]) * total / 100)


def budget_status(*, min_available: int | str | None, max_unavailable: int | str | None, pods: Sequence[BudgetPod]) -> dict:
    """A budget's `status` as kube-controller-manager's disruption controller computes it
    (`getExpectedPodCount`, `countHealthyPods`, `updatePdbStatus`): an integer minAvailable
    counts every selected pod as expected, a percentage or maxUnavailable the owners' scale;
    a budget that expects no pod, or sets neither bound, allows nothing, so that pods appearing
    before the next count are safe."""
    current = sum(1 for pod in pods if pod.healthy)
    wanted = sum(1 for pod in pods if pod.wanted)
    if max_unavailable is not None:
        expected, desired = wanted, max(0, wanted - _scaled(max_unavailable, wanted))
    elif isinstance(min_available, int):
        expected, desired = len(pods), min_available
    elif min_available is not None:
        expected, desired = wanted, _scaled(min_available, wanted)
    else:
        expected = desired = 0
    allowed = current - desired if expected > 0 and current > desired else 0
    if allowed:
        condition = ("True", "SufficientPods", f"{current} healthy, at least {desired} must stay: {allowed} may be evicted now")
    elif min_available is None and max_unavailable is None:
        condition = ("False", "InsufficientPods", "it sets neither minAvailable nor maxUnavailable, so it allows no eviction")
    elif expected <= 0:
        condition = ("False", "InsufficientPods", "the budget selects no pod it expects, so it allows no eviction")
    else:
        condition = ("False", "InsufficientPods", f"{current} healthy, at least {desired} must stay: no pod may be evicted now")
    status, reason, message = condition
    return {
        "expectedPods": expected, "desiredHealthy": desired, "currentHealthy": current, "disruptionsAllowed": allowed,
        "disruptedPods": {}, "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason, "message": message}],
    }  # fmt: skip
