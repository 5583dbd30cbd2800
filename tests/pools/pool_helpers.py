"""Helpers of the pool service, API and view tests: a snapshot of pool state and a batch of pools."""

from __future__ import annotations

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


def create_pools(actors, count: int, offset: int = 0) -> None:
    for index in range(offset, offset + count):
        services.pool_create(user=actors["lead"], document=make_document(f"pool-{index}", region="cn-north-1a", gpuModel="T4", nodeType="GPU_1_CARD", nodeCount={"min": 1, "max": 2}))
