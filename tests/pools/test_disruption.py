"""How many of which pods the PodDisruptionBudgets let be evicted now, decided as
kube-apiserver's eviction subresource decides (issue 22 item 2: the repack's moves are
evictions). The agreement with a real API server is checked in
tests/k8s/test_kubernetes_cluster.py."""

from __future__ import annotations

import pytest

from pools.core.disruption import (
    MAX_DISRUPTED_PODS,
    BudgetPod,
    DisruptionBudget,
    budget_status,
    disruption_budgets,
    evictions,
    selector_matches,
)

TRAINER = {"app": "trainer", "tier": "gpu"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, False),  # a null selector selects nothing
        ({}, True),  # policy/v1: an empty one selects every pod of the namespace
        ({"matchLabels": {"app": "trainer"}}, True),
        ({"matchLabels": {"app": "trainer", "tier": "cpu"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer", "web"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["trainer"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),  # absent is not in
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        ({"matchLabels": {"app": "trainer"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),  # all must hold
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),  # invalid: matches nothing
    ],
)
def test_a_label_selector_matches_as_kubernetes_matches(selector, matches):
    assert selector_matches(selector, TRAINER) is matches


def budget(name="trainer", namespace="ml", selector=None, *, generation=1, observed=1, allowed=1, disrupted=0):
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}} if selector is None else selector},
        "status": {"observedGeneration": observed, "disruptionsAllowed": allowed, "disruptedPods": {f"p{i}": "t" for i in range(disrupted)}},
    }


POD = {"ml/p0": TRAINER}


@pytest.mark.parametrize(
    ("budgets", "allowed"),
    [
        ([], None),  # no budget: nothing limits its eviction
        ([budget()], 1),
        ([budget(allowed=3)], 3),
        ([budget(allowed=0)], 0),  # 429: it would violate the budget
        ([budget(allowed=-1)], 0),  # 403: a negative count
        ([budget(generation=2, observed=1)], 0),  # 429: not processed yet
        ([{"metadata": {"name": "new", "namespace": "ml", "generation": 1}, "spec": {"selector": {}}}], 0),  # no status yet
        ([budget(disrupted=MAX_DISRUPTED_PODS + 1)], 0),  # too many evictions unconfirmed
        ([budget(disrupted=MAX_DISRUPTED_PODS)], 1),
        ([budget(), budget("second", selector={})], 0),  # two budgets match: the API does not support it
        ([budget(namespace="other", allowed=0)], None),  # another namespace's budget
        ([budget(selector={"matchLabels": {"app": "web"}}, allowed=0)], None),  # selects other pods
    ],
)
def test_a_pods_budget_allows_what_the_eviction_api_allows(budgets, allowed):
    expected = [] if allowed is None else [DisruptionBudget(frozenset({"ml/p0"}), allowed)]
    assert disruption_budgets(budgets, POD) == expected


def test_a_budget_guards_every_pod_it_alone_selects_in_its_namespace():
    pods = {"ml/p0": TRAINER, "ml/p1": TRAINER, "ml/web": {"app": "web"}, "other/p0": TRAINER}
    assert disruption_budgets([budget(allowed=1)], pods) == [DisruptionBudget(frozenset({"ml/p0", "ml/p1"}), 1)]


def test_each_budget_is_named_for_the_plans_messages():
    """A plan says which budget keeps a pod in place: by namespace/name, or all of them where
    several select the pod (the Eviction API then refuses it)."""
    [one] = disruption_budgets([budget(allowed=0)], POD)
    assert one.named == "the disruption budget ml/trainer"
    [both] = disruption_budgets([budget(allowed=1), budget("everything", selector={})], POD)
    assert both.named == "more than one disruption budget (ml/trainer, ml/everything)" and both.allowed == 0


def pods(healthy: int, pending: int = 0, finished: int = 0) -> list[BudgetPod]:
    return [BudgetPod(True, True)] * healthy + [BudgetPod(False, True)] * pending + [BudgetPod(False, False)] * finished


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "selected", "expected"),
    [
        # (expectedPods, desiredHealthy, currentHealthy, disruptionsAllowed)
        (2, None, pods(3), (3, 2, 3, 1)),
        (2, None, pods(2, pending=1), (3, 2, 2, 0)),  # an integer minAvailable: every selected pod is expected
        (2, None, pods(3, finished=1), (4, 2, 3, 1)),
        (5, None, pods(3), (3, 5, 3, 0)),  # more than there are: never negative
        (0, None, pods(3), (3, 0, 3, 3)),
        (None, 1, pods(3), (3, 2, 3, 1)),
        (None, 1, pods(3, finished=2), (3, 2, 3, 1)),  # the owners' scale: finished pods are not wanted
        (None, 1, pods(2, pending=1), (3, 2, 2, 0)),  # one already down spends the one allowed
        (None, 5, pods(3), (3, 0, 3, 3)),
        (None, "34%", pods(3), (3, 1, 3, 2)),  # 34% of 3 = 1.02, rounded up to 2 unavailable
        ("50%", None, pods(3), (3, 2, 3, 1)),  # 1.5 rounded up: 2 must stay
        ("100%", None, pods(4), (4, 4, 4, 0)),
        ("0%", None, pods(4), (4, 0, 4, 4)),
        (None, "0%", pods(4), (4, 4, 4, 0)),
        (1, None, [], (0, 1, 0, 0)),
        (None, 1, [], (0, 0, 0, 0)),  # a budget that expects no pod allows nothing
        (None, None, pods(3), (0, 0, 3, 0)),  # neither bound: nothing may go
    ],
)
def test_a_budgets_status_is_the_disruption_controllers_arithmetic(min_available, max_unavailable, selected, expected):
    status = budget_status(min_available=min_available, max_unavailable=max_unavailable, pods=selected)
    assert (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"], status["disruptionsAllowed"]) == expected
    condition = status["conditions"][0]
    assert condition["type"] == "DisruptionAllowed"
    assert (condition["status"], condition["reason"]) == (("True", "SufficientPods") if expected[3] else ("False", "InsufficientPods"))
    assert condition["message"]


def test_a_budgets_status_reads_back_as_what_the_eviction_api_allows():
    status = budget_status(min_available=1, max_unavailable=None, pods=pods(3))
    document = {"metadata": {"namespace": "algorithm", "generation": 2}, "spec": {"selector": {}}, "status": {"observedGeneration": 2, **status}}
    assert disruption_budgets([document], {"algorithm/a": {}, "algorithm/b": {}}) == [DisruptionBudget(frozenset({"algorithm/a", "algorithm/b"}), 2)]


def test_evictions_asked_in_order_spend_each_guarding_budget_and_skip_the_refused():
    budgets = [DisruptionBudget(frozenset({"ns/a", "ns/b", "ns/c"}), 1), DisruptionBudget(frozenset({"ns/c", "ns/d"}), 2)]
    assert evictions(["ns/a", "ns/b", "ns/d", "ns/c", "ns/free"], budgets) == ["ns/a", "ns/d", "ns/free"]
    asked = []
    refused = lambda pod: asked.append(pod) or pod == "ns/a"  # noqa: E731
    assert evictions(["ns/a", "ns/b", "ns/c"], budgets, refused=refused) == ["ns/b"]  # the refused one spent nothing
    assert asked == ["ns/a", "ns/b"]  # asked only where the budgets allow


@pytest.mark.parametrize(
    ("policy", "current", "desired", "free"),
    [
        (None, 2, 2, True),  # healthy: an unready pod goes without spending
        (None, 1, 2, False),
        (None, 2, 0, False),  # a budget that wants none healthy is not "healthy" here
        ("IfHealthyBudget", 3, 2, True),
        ("AlwaysAllow", 1, 2, True),  # unready pods go whatever the budget says
        ("AlwaysAllow", 2, 0, True),
    ],
)
def test_an_unready_pod_goes_without_spending_as_the_policy_says(policy, current, desired, free):
    """The rules a real kube-apiserver follows (the agreement is in tests/k8s/test_kubernetes_cluster.py)."""
    document = budget(allowed=0)
    document["status"] |= {"currentHealthy": current, "desiredHealthy": desired}
    if policy:
        document["spec"]["unhealthyPodEvictionPolicy"] = policy
    pods = {"ml/p0": TRAINER, "ml/sick": TRAINER}
    [guard] = disruption_budgets([document], pods, unready={"ml/sick"})
    assert guard.pods == ({"ml/p0"} if free else {"ml/p0", "ml/sick"}) and guard.allowed == 0
    assert disruption_budgets([document], pods)[0].pods == {"ml/p0", "ml/sick"}  # Ready: always guarded
