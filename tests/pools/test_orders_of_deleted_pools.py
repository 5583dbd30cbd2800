"""A deleted pool's order is named as the cost reports name that pool (`GpuNodePool.ledger_name`,
`name#id`) in the orders list, page and API alike, and never links to the live pool that took
its name afterwards (QA: the list read and linked the old order as the new pool's)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def reused_name(actors):
    """train-pool-a ordered, then deleted (its order withdrawn), and a new train-pool-a ordered."""
    old = services.pool_create(user=actors["lead"], document=make_document(), now=T0)
    old = services.pool_delete(user=actors["lead"], pool=old, now=T0)
    assert old.deleted_at is not None
    new = services.pool_create(user=actors["lead"], document=make_document(), now=T0)
    return new, old


def test_the_api_names_a_deleted_pools_order_by_its_ledger_name(api, reused_name):
    new, old = reused_name
    listed = api("lead").get("/api/v1/orders/").json()
    assert {o["id"]: o["pool"] for o in listed} == {new.orders.get().pk: "train-pool-a", old.orders.get().pk: f"train-pool-a#{old.pk}"}
    assert api("admin").get(f"/api/v1/orders/{old.orders.get().pk}/").json()["pool"] == f"train-pool-a#{old.pk}"


def test_the_page_links_only_the_live_pools_order_to_the_pool(browser, reused_name):
    new, old = reused_name
    page = browser("admin").get(reverse("orders"), {"status": ""}).content.decode()
    link = f'<a href="{reverse("pools:detail", args=["train-pool-a"])}">'
    new_row = page.split(f'id="order-{new.orders.get().pk}"')[1].split("</tr>")[0]
    old_row = page.split(f'id="order-{old.orders.get().pk}"')[1].split("</tr>")[0]
    assert link in new_row
    assert link not in old_row and "<a " not in old_row.split("</td>")[1]
    assert f"train-pool-a#{old.pk} (deleted)" in old_row
