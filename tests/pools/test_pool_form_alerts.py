"""The pool form's capacity alert section (issue 20 item 3): the rules with the defaults filled
in, only what differs written to `spec.alerts`, the spec's errors beside the field, and a stored
block kept by an edit that does not change it."""

from __future__ import annotations

import pytest

from pools.models import GpuNodePool
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.test_views import FORM, db_state

pytestmark = pytest.mark.django_db

DEFAULTS = {
    "alerts_section": "1",
    "alert_allocationHigh_enabled": "on", "alert_allocationHigh_threshold": "90", "alert_allocationHigh_window": "10m",
    "alert_utilizationLow_enabled": "on", "alert_utilizationLow_threshold": "30", "alert_utilizationLow_window": "24h",
    "alert_pendingPods_enabled": "on", "alert_pendingPods_window": "15m",
    "alert_nodesNotReady_enabled": "on", "alert_nodesNotReady_threshold": "1", "alert_nodesNotReady_window": "5m",
}  # fmt: skip


def test_the_form_shows_the_defaults_and_a_pool_left_at_them_has_no_alerts_block(browser):
    page = browser("lead").get("/pools/new/").content.decode()
    assert 'id="alert-fields"' in page and 'name="alert_allocationHigh_threshold" value="90"' in page
    response = browser("lead").post("/pools/new/", {**FORM, **DEFAULTS})
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    assert "alerts" not in GpuNodePool.objects.get(name="form-pool").document["spec"]


def test_the_form_writes_only_what_differs(browser):
    changed = {**DEFAULTS, "alert_allocationHigh_threshold": "80", "alert_pendingPods_window": "30m"}
    del changed["alert_utilizationLow_enabled"]  # unticked: off
    response = browser("lead").post("/pools/new/", {**FORM, **changed})
    assert response.status_code == 302
    assert GpuNodePool.objects.get(name="form-pool").document["spec"]["alerts"] == {
        "allocationHigh": {"percent": 80}, "utilizationLow": {"enabled": False}, "pendingPods": {"olderThan": "30m"},
    }  # fmt: skip


def test_a_bad_duration_is_shown_beside_its_field_and_nothing_is_written(browser):
    before = db_state()
    response = browser("lead").post("/pools/new/", {**FORM, **DEFAULTS, "alert_nodesNotReady_window": "30s"})
    assert response.status_code == 400
    assert response.context["form"].errors["alert_nodesNotReady_window"] == ["must be whole minutes from 1m to 168h"]
    assert db_state() == before
    foreign = browser("lead").post("/pools/new/", {**FORM, **DEFAULTS, "alert_allocationHigh_threshold": "٩٠"})
    assert foreign.status_code == 400 and foreign.context["form"].errors["alert_allocationHigh_threshold"] == ["Enter a whole number."]
    assert db_state() == before


def test_editing_shows_the_stored_rules_and_keeps_what_it_wrote(browser, actors):
    alerts = {"nodesNotReady": {"count": 2, "for": "10m"}, "allocationHigh": {"percent": 90}}
    pool = services.pool_create(user=actors["lead"], document=make_document("alerting", nodeCount={"min": 0, "max": 4}, alerts=alerts))
    client = browser("lead")
    page = client.get(f"/pools/{pool.name}/edit/").content.decode()
    assert 'name="alert_nodesNotReady_threshold" value="2"' in page and 'name="alert_nodesNotReady_window" value="10m"' in page
    form = {**FORM, **DEFAULTS, "name": pool.name, "min_nodes": "0", "max_nodes": "5",
            "alert_nodesNotReady_threshold": "2", "alert_nodesNotReady_window": "10m"}  # fmt: skip
    response = client.post(f"/pools/{pool.name}/edit/", form)
    assert response.status_code == 302, response.context["form"].errors
    pool.refresh_from_db()
    assert pool.document["spec"]["alerts"] == alerts and pool.max_nodes == 5


def test_a_post_without_the_section_keeps_the_stored_block(browser, actors):
    alerts = {"utilizationLow": {"enabled": False}}
    pool = services.pool_create(user=actors["lead"], document=make_document("alerting", nodeCount={"min": 0, "max": 4}, alerts=alerts))
    response = browser("lead").post(f"/pools/{pool.name}/edit/", {**FORM, "name": pool.name, "min_nodes": "0", "max_nodes": "5"})
    assert response.status_code == 302, response.context["form"].errors
    pool.refresh_from_db()
    assert pool.document["spec"]["alerts"] == alerts
