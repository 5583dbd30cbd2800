"""A budget threshold given twice was stored as sent (a hostile-input probe of the demo): a
merge patch of `spec.budget.thresholds: [80, 80, 50]` answered 200 echoing it, and finance's
team budget form saved `80,80`. Both are refused naming the entry, in the words a zone given
twice gets; a stored spec holding one from before is still read."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest

from billing import budget_admin
from billing.models import Budget
from pools.core.errors import ValidationError, repeats
from pools.core.spec import parse_document
from pools.models import GpuNodePool
from pools.selectors.pools import catalog_current
from tests import bad_input_world
from tests.conftest import make_document
from tests.corpus import api_fields, db_state

pytestmark = pytest.mark.django_db

world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser

BUDGET = {"monthly": "100", "currency": "CNY", "thresholds": [80, 80, 50]}


def test_a_merge_patch_with_a_threshold_twice_is_refused(api, world):
    client = api("lead")
    before = db_state()
    response = client.patch("/api/v1/pools/train-pool-a/", json.dumps({"spec": {"budget": BUDGET}}),
                            content_type="application/merge-patch+json")  # fmt: skip
    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"] == [{"field": "spec.budget.thresholds[1]", "message": "80 is listed twice"}]
    assert db_state() == before


def test_a_created_pool_with_a_threshold_twice_is_refused(api, world):
    document = make_document("twice-budget")
    document["spec"]["budget"] = {"monthly": "100", "thresholds": [50, 90, 50]}
    response = api("lead").post("/api/v1/pools/", document, format="json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == ["spec.budget.thresholds[2]"]


def test_a_spec_full_of_repeated_thresholds_is_refused_in_one_pass(api, world):
    """A 64 KiB spec holds some 32,000 thresholds of 1: finding the repeats scanned each entry's
    prefix, seconds of a worker per request (review). One pass takes milliseconds."""
    started = time.perf_counter()
    assert len(repeats([1] * 32_000)) == 31_999
    assert time.perf_counter() - started < 0.5
    document = make_document("many-thresholds")
    document["spec"]["budget"] = {"monthly": "100", "thresholds": [1] * 20_000}
    response = api("lead").post("/api/v1/pools/", document, format="json")
    assert response.status_code == 400 and api_fields(response)[0] == "spec.budget.thresholds[1]"


def test_a_stored_spec_with_a_threshold_twice_is_still_read_and_blocks_no_resize(api, world):
    """A pool stored before the check, with `thresholds: [80, 80]`: a merge patch of only
    nodeCount.max was refused for a budget its lead never touched (found by review)."""
    document = make_document("stored-budget")
    document["spec"]["budget"] = BUDGET
    assert parse_document(document, catalog_current()).budget.thresholds == (50, 80)
    pool = world["pool"]
    GpuNodePool.objects.filter(pk=pool.pk).update(document={**pool.document, "spec": {**pool.document["spec"], "budget": BUDGET}})
    client = api("lead")
    patch = client.patch(f"/api/v1/pools/{pool.name}/", json.dumps({"spec": {"nodeCount": {"max": pool.max_nodes + 1}}}),
                         content_type="application/merge-patch+json")  # fmt: skip
    assert patch.status_code == 200, patch.content[:300]
    again = client.patch(f"/api/v1/pools/{pool.name}/", json.dumps({"spec": {"budget": {**BUDGET, "thresholds": [80, 80, 90]}}}),
                         content_type="application/merge-patch+json")  # fmt: skip
    assert again.status_code == 400 and api_fields(again) == ["spec.budget.thresholds[1]"]


def test_the_team_budget_form_refuses_a_threshold_twice(browser, world):
    response = browser("finance").post("/costs/budgets/teams/new/", {"team": "algorithm", "monthly": "100", "currency": "CNY", "thresholds": "80,80"})
    assert response.status_code == 400
    assert response.context["form"].errors["thresholds"] == ["80 is listed twice"]
    assert not Budget.objects.filter(pool=None).exists()


def test_the_team_budget_service_refuses_a_threshold_twice(world):
    with pytest.raises(ValidationError) as refused:
        budget_admin.budget_team_set(user=world["actors"]["admin"], team=world["pool"].team, monthly_amount=Decimal("100"), thresholds=[90, 50, 90])
    assert [(e.field, e.message) for e in refused.value.errors] == [("thresholds", "90 is listed twice")]
