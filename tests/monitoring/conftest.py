"""Fixtures for the node agent's side: a pool with nodes made directly, and joined agents."""

from __future__ import annotations

import httpx
import pytest
from django.core import signals
from django.db import close_old_connections
from rest_framework.test import APIClient

from config.wsgi import application
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


REQUEST_SIGNALS = (signals.request_started, signals.request_finished)


def in_this_transaction(environ, start_response):
    """The Django app, called in this process and this test's transaction: like Django's test
    client, a request must not close the test's database connection (it would on PostgreSQL)."""
    for signal in REQUEST_SIGNALS:
        signal.disconnect(close_old_connections)
    try:
        result = application(environ, start_response)
        try:
            return [b"".join(result)]
        finally:
            result.close()  # sends request_finished while the receiver is away
    finally:
        for signal in REQUEST_SIGNALS:
            signal.connect(close_old_connections)


@pytest.fixture
def wsgi():
    """An httpx client for the agent that reaches the control plane without a network."""
    client = httpx.Client(transport=httpx.WSGITransport(app=in_this_transaction), base_url="http://testserver")
    yield client
    client.close()
