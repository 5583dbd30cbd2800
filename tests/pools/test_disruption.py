"""How many of which pods the PodDisruptionBudgets let be evicted now, decided as
kube-apiserver's eviction subresource decides (issue 22 item 2: the repack's moves are
evictions). The agreement with a real API server is checked in
tests/k8s/test_kubernetes_cluster.py."""

from __future__ import annotations

import pytest

from pools.core.disruption import (
    MAX_DISRUPTED_PODS,
    DisruptionBudget,
    disruption_budgets,
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
