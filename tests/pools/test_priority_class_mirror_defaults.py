"""A real cluster holding several `globalDefault` PriorityClasses, mirrored into the read model.

kube-apiserver's admission check that keeps a second default out reads a cache that can lag, so
classes created at once can all be accepted; its Priority plugin then gives the pods that name
no class the default of lowest value (Kubernetes 1.37 `getDefaultPriorityClass`). The rows allow
one default at most (a unique constraint), and the mirror failed on it at every pass. The
documents here are what `ClusterPods.priority_classes` reads from such a cluster (the same state
made on a real kube-apiserver: tests/k8s/test_priority_classes.py)."""

from __future__ import annotations

import pytest

from pools.core.priority import default_class
from pools.models import PriorityClass
from pools.models.pods import priority_classes_for
from pools.services.pod_mirror import priority_classes_replace

pytestmark = pytest.mark.django_db


def cls(name: str, value: int, *, default: bool = True) -> dict:
    return {"name": name, "value": value, "preemption_policy": "PreemptLowerPriority", "global_default": default, "description": ""}


def defaults() -> list[str]:
    return list(PriorityClass.objects.filter(global_default=True).values_list("name", flat=True))


def test_of_several_defaults_the_rows_mark_the_one_of_lowest_value_as_kubernetes_resolves_it():
    changed = priority_classes_replace([cls("gold", 30), cls("bronze", 10), cls("silver", 20), cls("plain", 5, default=False)])
    assert changed == ["bronze", "gold", "plain", "silver"]
    assert defaults() == ["bronze"]
    assert PriorityClass.objects.count() == 4
    assert default_class(priority_classes_for("")).name == "bronze"  # what a pod that names no class gets, as on the cluster
    assert priority_classes_replace([cls("gold", 30), cls("bronze", 10), cls("silver", 20), cls("plain", 5, default=False)]) == []  # level reached


def test_defaults_of_equal_value_resolve_to_the_first_name_at_every_pass():
    """Kubernetes takes the first of its cache's list, which has no fixed order: the rows take the
    first name, so that passes do not move the default back and forth."""
    priority_classes_replace([cls("zeta", 10), cls("alpha", 10), cls("mid", 10)])
    assert defaults() == ["alpha"]
    assert priority_classes_replace([cls("mid", 10), cls("zeta", 10), cls("alpha", 10)]) == []
    assert defaults() == ["alpha"]


def test_a_new_default_of_lower_value_takes_over_from_the_mirrored_one_and_the_old_one_returns_when_it_goes():
    priority_classes_replace([cls("everyday", 50)])
    assert defaults() == ["everyday"]
    assert priority_classes_replace([cls("everyday", 50), cls("cheap", 7)]) == ["cheap", "everyday"]
    assert defaults() == ["cheap"]
    assert PriorityClass.objects.get(name="everyday").global_default is False
    assert priority_classes_replace([cls("everyday", 50)]) == ["cheap", "everyday"]  # cheap deleted: everyday is the default again
    assert defaults() == ["everyday"]


def test_no_default_among_the_classes_leaves_none():
    priority_classes_replace([cls("everyday", 50)])
    priority_classes_replace([cls("everyday", 50, default=False), cls("batch", 10, default=False)])
    assert defaults() == []
