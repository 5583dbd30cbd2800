"""The pool list's phase filter offers only phases a listed pool can be in (QA: it offered
Deleted, which never matched: the list holds live pools, and a pool is Deleted once it has left
it). A pool being deleted is listed, and the filter finds it."""

from __future__ import annotations

import pytest

from pools.forms import PoolFilterForm
from pools.models import GpuNodePool, Node
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def deleting_and_deleted(actors):
    """draining: deleted with a live node, so Deleting; gone: deleted without nodes, so Deleted."""
    draining = services.pool_create(user=actors["lead"], document=make_document("draining"), now=T0)
    Node.objects.create(pool=draining, name="draining-0", zone=draining.zone, gpu_count=8, phase="Ready", billing="on_demand")
    draining = services.pool_delete(user=actors["lead"], pool=draining, now=T0)
    gone = services.pool_delete(user=actors["lead"], pool=services.pool_create(user=actors["lead"], document=make_document("gone"), now=T0), now=T0)
    services.pool_create(user=actors["lead"], document=make_document("pending"), now=T0)
    assert (draining.phase, gone.phase) == (GpuNodePool.Phase.DELETING, GpuNodePool.Phase.DELETED)


def test_the_page_filters_a_deleting_pool_and_offers_no_deleted_phase(browser, deleting_and_deleted):
    page = browser("lead").get("/pools/", {"phase": "Deleting"})
    assert [p.name for p in page.context["pools"]] == ["draining"]
    offered = [value for value, _ in page.context["filter_form"].fields["phase"].choices]
    assert "Deleting" in offered and "Deleted" not in offered
    assert not PoolFilterForm({"phase": "Deleted"}).is_valid()
    # An old bookmark's ?phase=Deleted says it is not applied, rather than listing live pools as if they matched.
    stale = browser("lead").get("/pools/", {"phase": "Deleted"}).content.decode()
    assert '<p class="error" role="alert">Select a valid choice. Deleted is not one of the available choices. This filter is not applied.</p>' in stale


def test_the_api_filters_a_deleting_pool_and_refuses_deleted_as_a_phase(api, deleting_and_deleted):
    lead = api("lead")
    assert [p["metadata"]["name"] for p in lead.get("/api/v1/pools/", {"phase": "Deleting"}).json()] == ["draining"]
    refused = lead.get("/api/v1/pools/", {"phase": "Deleted"})
    assert refused.status_code == 400 and [e["field"] for e in refused.json()["errors"]] == ["phase"]
