"""Rows that change only through the product's services are shown in the Django admin, never
edited there (found by a QA sweep: an order rejected by an admin and then set to Approved in the
admin was paid and provisioned with no audit entry, no event and none of the approval's checks)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pools.models import PoolOrder
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pool_helpers import db_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(client, django_user_model):
    """The demo's `admin` is a superuser: no model permission holds it back, only the admin's own."""
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "x"))
    return client

VIEW_ONLY = ("pools/gpunodepool", "pools/poolorder", "pools/node", "pools/poolevent", "pools/auditentry", "billing/budget",
             "billing/budgetalert", "monitoring/gpuerrorevent", "monitoring/agentcommand", "monitoring/nodeagentstate",
             "monitoring/poolsample")  # fmt: skip


@pytest.mark.parametrize("model", VIEW_ONLY)
def test_the_admin_lists_them_and_adds_none(superuser, model):
    assert superuser.get(f"/admin/{model}/").status_code == 200
    assert superuser.get(f"/admin/{model}/add/").status_code == 403


def test_a_rejected_order_cannot_be_approved_in_the_admin(actors, superuser):
    pool = services.pool_create(user=actors["lead"], document=make_document("refused"))
    order = pool.orders.get()
    services.order_reject(user=actors["admin"], order=order, reason="no H100 this month")
    page = superuser.get(f"/admin/pools/poolorder/{order.pk}/change/").content.decode()
    assert 'name="_save"' not in page and "no H100 this month" in page
    before = db_state()
    response = superuser.post(f"/admin/pools/poolorder/{order.pk}/change/", {"status": "Approved"})
    assert response.status_code == 403 and db_state() == before
    assert PoolOrder.objects.get(pk=order.pk).status == "Rejected"
    assert superuser.post(f"/admin/pools/poolorder/{order.pk}/delete/", {"post": "yes"}).status_code == 403


def test_a_team_with_a_budget_is_still_deleted_with_it(superuser, actors):
    """Its budgets are view-only here, and Django asked for their delete permission on the
    team's cascade: the team could no longer be deleted (found by review)."""
    from billing.budget_admin import budget_team_set
    from pools.models import Team

    team = Team.objects.create(name="Short-lived", slug="short-lived")
    budget_team_set(user=actors["admin"], team=team, monthly_amount=Decimal("1000"))
    assert superuser.post(f"/admin/pools/team/{team.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Team.objects.filter(pk=team.pk).exists()
