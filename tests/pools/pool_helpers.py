"""Helpers of the pool service, API and view tests: a snapshot of pool state and a batch of pools."""

from __future__ import annotations

import copy

from pools.models import AuditEntry, GpuNodePool, PoolEvent, PoolOrder
from pools.services import pools as services
from tests.conftest import make_document


def db_state():
    return (
        GpuNodePool.objects.count(),
        PoolOrder.objects.count(),
        PoolEvent.objects.count(),
        AuditEntry.objects.count(),
        list(GpuNodePool.objects.values_list("name", "min_nodes", "max_nodes", "phase", "generation")),
        list(PoolOrder.objects.values_list("status", "node_count")),
    )


def edit_spec(actors, pool, now, **spec):
    """The pool's lead replaces these fields of its spec (the rest as it is)."""
    pool = GpuNodePool.objects.get(pk=pool.pk)
    document = copy.deepcopy(pool.document)
    document["spec"].update(spec)
    return services.pool_update(user=actors["lead"], pool=pool, document=document, now=now)


def create_pools(actors, count: int, offset: int = 0) -> None:
    for index in range(offset, offset + count):
        services.pool_create(user=actors["lead"], document=make_document(f"pool-{index}", region="cn-north-1a", gpuModel="T4", nodeType="GPU_1_CARD", nodeCount={"min": 1, "max": 2}))
