"""The world the bad-input tests spoil (tests/test_bad_input.py, tests/test_bad_input_bodies.py),
built once per module: the conftest actors, the lead's pool with two Ready nodes (no order), a
pool whose order is Pending, a pod."""

from __future__ import annotations

import pytest

from pools.services import pools as services
from tests.conftest import make_document
from tests.corpus import once_per_module, people, token_client
from tests.pools.pod_helpers import pool_with_nodes, submit


def build_world() -> dict:
    actors = people()
    pool = pool_with_nodes(actors["lead"])
    ordered = services.pool_create(user=actors["lead"], document=make_document("ordered-pool"))
    submit(actors["lead"], "good-pod")
    return {"actors": actors, "pool": pool, "order": ordered.orders.get(), "node": pool.nodes.order_by("name").first()}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """The world, built once for the module (each test rolls back to it)."""
    yield from once_per_module(django_db_blocker, build_world)


@pytest.fixture
def api(world):
    return lambda role: token_client(world["actors"][role])


@pytest.fixture
def browser(client, world):
    def login(role):
        client.force_login(world["actors"][role])
        return client

    return login
