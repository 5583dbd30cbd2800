"""Would the Eviction API refuse to evict this pod now? Its answer, decided from the
PodDisruptionBudgets as kube-apiserver decides it (policy/v1; issue 22 item 2: the repack's
moves are evictions, so a plan must not count on a move a budget refuses).

For a Running pod, kube-apiserver's eviction subresource takes the budgets of the pod's
namespace whose selector matches the pod's labels (a null selector matches nothing, an empty
one everything), and refuses when:
- more than one budget matches (it does not support that);
- the one budget is not processed yet (`status.observedGeneration` < `metadata.generation`);
- it allows no disruption now (`status.disruptionsAllowed` <= 0), or too many evictions are
  still unconfirmed (`status.disruptedPods`).

Each pod is judged alone, as the API judges one eviction; moving two pods of a budget that
allows one is refused at the second eviction, which a drain then waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MAX_DISRUPTED_PODS = 2000  # kube-apiserver's MaxDisruptedPodSize


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


def _refuses(budget: Mapping) -> bool:
    status = budget.get("status") or {}
    return (
        (status.get("observedGeneration") or 0) < (budget.get("metadata", {}).get("generation") or 0)
        or (status.get("disruptionsAllowed") or 0) <= 0
        or len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS
    )


def evictions_refused(budgets: Sequence[Mapping], pods: Mapping[tuple[str, str], Mapping[str, str]]) -> set[tuple[str, str]]:
    """The pods, (namespace, name) -> labels, whose eviction the budgets (PodDisruptionBudget
    documents, as the API returns them) refuse now."""
    by_namespace: dict[str, list[Mapping]] = {}
    for budget in budgets:
        by_namespace.setdefault(budget.get("metadata", {}).get("namespace", ""), []).append(budget)
    refused = set()
    for (namespace, name), labels in pods.items():
        matching = [b for b in by_namespace.get(namespace, ()) if selector_matches((b.get("spec") or {}).get("selector"), labels)]
        if len(matching) > 1 or (matching and _refuses(matching[0])):
            refused.add((namespace, name))
    return refused
