"""Fixtures for the node agent's side: a pool with nodes made directly, and joined agents."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from monitoring import services
from pools.models import Node
from pools.services import pools as pool_services
from tests.conftest import make_document


@pytest.fixture
def pool(actors):
    """The article's train pool, ordered by the lead and approved by the admin."""
    pool = pool_services.pool_create(user=actors["lead"], document=make_document("train-pool-a"))
    pool_services.order_approve(user=actors["admin"], order=pool.orders.get())
    return pool


@pytest.fixture
def make_node(pool):
    def make(name: str, *, phase: str = "Ready", billing: str = "monthly", gpu_count: int = 8, target=None) -> Node:
        target = target or pool
        return Node.objects.create(pool=target, name=name, zone=target.zone, gpu_count=gpu_count, phase=phase, billing=billing)

    return make


@pytest.fixture
def node(make_node):
    return make_node("train-pool-a-m-0")


def joined(node: Node, admin) -> str:
    """Mint a join token as the admin and exchange it: the node's credential."""
    _, token = services.join_token_create(user=admin, node=node)
    _, credential, _ = services.agent_join(token=token, node_name=node.name)
    return credential


@pytest.fixture
def agent(node, actors):
    """agent() -> an APIClient speaking for `node` with its credential."""

    def client_for(target: Node | None = None) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {joined(target or node, actors['admin'])}")
        return client

    return client_for


def report(seq: int, *, at: str = "2026-11-30T06:00:00Z", gpus: int = 2, xids=(), driver: str = "535.104.05", cuda: str = "12.2", used: int = 40000) -> dict:
    return {
        "seq": seq,
        "at": at,
        "driverVersion": driver,
        "cudaVersion": cuda,
        "gpus": [
            {"index": i, "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_TOTAL": 81920, "DCGM_FI_DEV_GPU_UTIL": 75,
             "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0}
            for i in range(gpus)
        ],
        "xids": [{"gpu": g, "xid": x, "at": at} for g, x in xids],
    }
