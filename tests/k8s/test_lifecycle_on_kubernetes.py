"""The lifecycle controller on a real cluster: the article's pool is created and approved, its
machines' kubelets register the Nodes, and the controller labels and taints them there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.models import PoolEvent
from tests.pools.lifecycle_helpers import (
    T0,
    TICK,
    approved_pool,
    live_nodes,
    reasons,
    reconcile,
    run_until,
)

pytestmark = pytest.mark.django_db


def test_the_articles_pool_gets_real_nodes_with_its_labels_and_taints(on_kubernetes, actors, train_document, core, unique):
    train_document["metadata"]["name"] = f"train-{unique}"
    pool = approved_pool(actors, train_document)
    run_until(pool, T0)
    nodes = live_nodes(pool)
    assert [n.phase for n in nodes] == ["Ready", "Ready"]
    for node in nodes:
        assert reasons(pool, node)[-4:] == ["NodeRegistered", "NodeLabeled", "NodeTainted", "NodeReady"]
        real = core.read_node(node.name)
        labels = real.metadata.labels
        assert labels["ebcloud.io/pool"] == pool.name and labels["ebcloud.io/team"] == "algorithm"
        assert labels["ebcloud.io/billing"] == "monthly" and labels["gpu-class"] == "a100"
        assert labels["kubernetes.io/hostname"] == node.name  # the kubelet's own label stays
        assert [(t.key, t.value, t.effect) for t in real.spec.taints] == [("pool", "train", "NoSchedule")]
        assert real.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.labels == {k: v for k, v in labels.items() if k != "kubernetes.io/hostname"}


def test_a_node_whose_kubelet_never_joins_is_reported_and_retried(on_kubernetes, actors, train_document, monkeypatch, unique):
    from pools.providers import simulated

    monkeypatch.setattr(simulated, "_kubelet_join", lambda machine, now: None)  # the kubelet never comes up
    train_document["metadata"]["name"] = f"lost-{unique}"
    train_document["spec"]["nodeCount"] = {"min": 1, "max": 1}
    pool = approved_pool(actors, train_document)
    now = T0
    while not PoolEvent.objects.filter(pool=pool, reason="NodeNotRegistered").exists() and now < T0 + timedelta(minutes=30):
        reconcile(pool, now)
        now += TICK
    warning = PoolEvent.objects.get(pool=pool, reason="NodeNotRegistered")
    assert warning.type == "Warning" and "has not registered with the cluster yet" in warning.message and "retrying in" in warning.message
    node = live_nodes(pool)[0]
    assert (node.phase, node.attempts) == ("Initializing", 1) or node.phase != "Ready"
