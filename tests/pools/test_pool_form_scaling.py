"""The pool form edits the scaling block: metrics, targets, combine, windows, policies and
tolerance, with the spec's errors beside each field and a preview of the YAML it sends (issue 20
item 4; seed O4)."""

from __future__ import annotations

import pytest

from pools.core.documents import load_yaml
from pools.models import GpuNodePool
from pools.services import pools as services
from tests.conftest import EXAMPLES
from tests.pools.test_views import FORM, algorithm_pool, db_state  # noqa: F401 - algorithm_pool is a fixture

pytestmark = pytest.mark.django_db

ARTICLE_FIELDS = {
    "scaling_custom": "on", "memory_target": "85", "queue_target": "10", "combine": "All",
    "scale_down_window": "30m", "scale_down_type": "Pods", "scale_down_value": "1", "scale_down_period": "120",
}  # fmt: skip


def test_the_form_writes_the_articles_scaling_block_as_the_article_does(browser):
    response = browser("lead").post("/pools/new/", {**FORM, **ARTICLE_FIELDS})
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    article = load_yaml((EXAMPLES / "train-pool-with-scaling.yaml").read_text())["spec"]["scaling"]
    written = GpuNodePool.objects.get(name="form-pool").document["spec"]["scaling"]
    assert written["default"]["metrics"] == article["default"]["metrics"]
    assert written["scaleDown"] == article["scaleDown"] and "scaleUp" not in written  # a blank direction keeps its defaults


@pytest.mark.usefixtures("algorithm_pool")
def test_the_spec_errors_land_beside_the_scaling_fields_and_nothing_is_written(browser):
    before = db_state()
    bad = {**FORM, **ARTICLE_FIELDS, "scale_down_window": "30 minutes", "scale_up_tolerance": "2", "memory_target": "", "queue_target": ""}
    response = browser("lead").post("/pools/new/", bad)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "not a duration" in errors["scale_down_window"][0]
    assert "from 0 to 1" in errors["scale_up_tolerance"][0]
    assert "non-empty list" in errors["memory_target"][0]
    assert db_state() == before


def test_editing_keeps_a_block_the_fields_cannot_show_and_says_so(browser, actors):
    document = load_yaml((EXAMPLES / "train-pool-with-scaling.yaml").read_text())
    document["spec"]["scaling"]["scaleUp"] = {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}, {"type": "Percent", "value": 50, "periodSeconds": 60}]}
    pool = services.pool_create(user=actors["lead"], document=document)
    client = browser("lead")
    page = client.get(f"/pools/{pool.name}/edit/").content.decode()
    assert "it is kept as written" in page
    form = {**FORM, "name": pool.name, "min_nodes": "2", "max_nodes": "7", "scaling_custom": ""}
    response = client.post(f"/pools/{pool.name}/edit/", form)
    assert response.status_code == 302, (response.context["form"].errors, response.context["form"].row_errors)
    pool.refresh_from_db()
    assert pool.document["spec"]["scaling"] == document["spec"]["scaling"] and pool.max_nodes == 7


@pytest.mark.usefixtures("algorithm_pool")
def test_the_preview_is_the_yaml_the_form_sends(browser):
    client = browser("lead")
    preview = client.post("/pools/new/preview/", {**FORM, **ARTICLE_FIELDS}).content.decode()
    assert "targetAverageUtilization: 85" in preview and "stabilizationWindow: 30m" in preview and "name: form-pool" in preview
    assert "fix the form first" in client.post("/pools/new/preview/", {**FORM, "min_nodes": "lots"}).content.decode()
    # Each problem is named by its field's label, one without a label of its own too (not "None").
    unnamed = client.post("/pools/new/preview/", {**FORM, "name": ""}).content.decode()
    assert unnamed == "(fix the form first: Name: This field is required.)", unnamed
    edited = client.post("/pools/new/preview/?pool=train-pool-a", {**FORM, "name": "train-pool-a", "max_nodes": "9"}).content.decode()
    assert "max: 9" in edited
    assert browser("other_lead").post("/pools/new/preview/?pool=train-pool-a", FORM).status_code == 404  # another team's pool
    # a NUL in the query string's name: PostgreSQL refuses even to compare such text (a 500)
    for name in ("%00", "train-pool-a%00", "a%0Ab"):
        assert client.post(f"/pools/new/preview/?pool={name}", FORM).status_code == 404, name


@pytest.mark.usefixtures("algorithm_pool")
@pytest.mark.parametrize(("fields", "where"), [
    ({"scale_up_type": "Pods", "scale_up_value": "1180591620717411303424", "scale_up_period": "60"}, "scale_up_value"),
    ({"scale_down_type": "Percent", "scale_down_value": "2147483648", "scale_down_period": "60"}, "scale_down_value"),
])  # fmt: skip
def test_a_policy_value_beyond_an_int32_is_refused_beside_its_field(browser, fields, where):
    """HPA's policy value is an int32: a larger one was stored."""
    before = db_state()
    form = {**FORM, "name": "train-pool-a", "scaling_custom": "on", "memory_target": "85", **fields}
    response = browser("lead").post("/pools/train-pool-a/edit/", form)
    assert response.status_code == 400 and "2147483647" in response.context["form"].errors[where][0]
    assert db_state() == before
