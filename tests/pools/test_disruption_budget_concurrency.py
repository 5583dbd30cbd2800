"""Two workers evicting at once (a drain and a repack apply) never spend the same disruption:
the simulated cluster locks the budgets while it counts, as kube-apiserver's optimistic update
of the budget's status does. PostgreSQL only (SQLite has one writer)."""

from __future__ import annotations

from functools import partial

import pytest
from django.db import connection

from pools.controllers.scheduler import scheduler_pass
from pools.models.pods import Pod
from pools.providers import get_cluster_backend
from pools.services.disruption_budgets import budget_create
from tests.pools.pod_helpers import T0, pool_with_nodes, submit
from tests.race import concurrently

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)"),
    pytest.mark.django_db(transaction=True),
]


def test_two_workers_evicting_at_once_spend_the_one_disruption_allowed_once(actors):
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    names = [f"t{i}" for i in range(6)]
    for name in names:
        submit(actors["member"], name, gpus=1, cpu="1", labels={"app": "trainer"})
    scheduler_pass(now=T0)
    spec = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}
    budget_create(user=actors["member"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainers"}, "spec": spec})

    def worker(name: str) -> list:
        return get_cluster_backend().evict_pods(pods=[("algorithm", name)], reason="race")

    evicted = [pod for batch in concurrently(*[partial(worker, name) for name in names]) for pod in batch]  # raises what any met
    assert len(evicted) == 1 and Pod.objects.filter(phase=Pod.Phase.PENDING).count() == 1
