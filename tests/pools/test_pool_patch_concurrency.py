"""Resizes at once (`ebcloud node-pool scale` and the API's PATCH, each of its own field) all
take effect, as patches to a Kubernetes object do: each is merged into the document as it is
under the pool's lock, not into the one it read; replaces made from one read at once (two
leads' edit forms) are one saved and the others refused, as the API server's resourceVersion
precondition decides. PostgreSQL only (SQLite has one writer)."""

from __future__ import annotations

from functools import partial

import pytest
from django.db import close_old_connections, connection

from pools.core.errors import StaleVersion
from pools.models import GpuNodePool, PoolEvent
from pools.services import pools as services
from tests.conftest import make_document
from tests.race import concurrently

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)"),
    pytest.mark.django_db(transaction=True),
]


def test_resizes_of_min_and_max_at_once_both_take_effect(actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("race-pool", nodeCount={"min": 1, "max": 4}))

    def resize(**count) -> None:
        try:
            services.pool_resize(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), **count)
        finally:
            close_old_connections()

    concurrently(partial(resize, max_nodes=6), partial(resize, min_nodes=2), partial(resize, max_nodes=8))
    pool.refresh_from_db()
    assert pool.document["spec"]["nodeCount"]["min"] == 2 and pool.document["spec"]["nodeCount"]["max"] in (6, 8)
    assert PoolEvent.objects.filter(pool=pool, reason="SpecUpdated").count() == 3


def test_replaces_from_one_read_at_once_save_one_and_refuse_the_others(actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("race-pool", nodeCount={"min": 0, "max": 4}))
    read = {**pool.document, "metadata": {**pool.document["metadata"], "resourceVersion": str(pool.generation)}}
    outcomes = []

    def replace(max_nodes: int) -> None:
        document = {**read, "spec": {**read["spec"], "nodeCount": {"min": 0, "max": max_nodes}}}
        try:
            services.pool_update(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), document=document)
            outcomes.append(max_nodes)
        except StaleVersion:
            outcomes.append("refused")
        finally:
            close_old_connections()

    concurrently(partial(replace, 5), partial(replace, 6), partial(replace, 7))
    pool.refresh_from_db()
    saved = [o for o in outcomes if o != "refused"]
    assert len(saved) == 1 and outcomes.count("refused") == 2
    assert pool.max_nodes == saved[0] and pool.generation == 2
    assert PoolEvent.objects.filter(pool=pool, reason="SpecUpdated").count() == 1
