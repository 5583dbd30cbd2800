"""Optimistic concurrency on a pool's document, as the Kubernetes API server's resourceVersion:
a replace (PUT, a PATCH that names the version, the web's edit form, `ebcloud node-pool apply`
of a `get -o yaml` file) made from an older read is refused with 409 and writes nothing, so that
one lead's save does not silently put back what another lead changed meanwhile (the brief's
"nothing is lost"); one that names no version stays unconditional."""

from __future__ import annotations

import html

import pytest
import yaml

from pools.models import GpuNodePool
from pools.services import pools as services
from tests.conftest import make_document
from tests.ebcloud.cli_helpers import live, one_error_line
from tests.pools.test_pool_form_unchanged_save import _as_shown
from tests.pools.test_views import FORM, db_state

pytestmark = pytest.mark.django_db

URL = "/api/v1/pools/resourcing/"


@pytest.fixture
def pool(actors):
    return services.pool_create(user=actors["lead"], document=make_document("resourcing", nodeCount={"min": 0, "max": 4}))


def _read(api) -> dict:
    return api("lead").get(URL).json()


def test_a_read_carries_the_version_and_a_replace_from_it_moves_it(api, pool):
    document = _read(api)
    assert document["metadata"]["resourceVersion"] == "1"
    document["spec"]["nodeCount"]["max"] = 5
    response = api("lead").put(URL, document, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["metadata"]["resourceVersion"] == "2"
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 5


def test_a_replace_from_an_older_read_is_refused_and_writes_nothing(api, actors, pool):
    document = _read(api)
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    before = db_state()
    document["spec"]["nodeCount"]["max"] = 5
    response = api("lead").put(URL, document, format="json")
    assert response.status_code == 409
    assert "has changed since it was read (resourceVersion 1, now 2)" in str(response.json())
    assert db_state() == before
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 6


def test_a_replace_without_a_version_is_unconditional(api, actors, pool):
    document = _read(api)
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    del document["metadata"]["resourceVersion"]
    document["spec"]["nodeCount"]["max"] = 5
    assert api("lead").put(URL, document, format="json").status_code == 200
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *(("resourceVersion", v) for v in ["abc", "-1", "1.0", "٣", True, [1], {"a": 1}, "9" * 19, 10**25, -1]),
        *(("uid", v) for v in [["x"], 0, 123, {"a": 1}, True, "   ", "u" * 65]),
    ],
)
def test_a_version_or_uid_that_no_read_returns_is_a_field_error(api, pool, field, value):
    document = _read(api)
    document["metadata"][field] = value
    before = db_state()
    response = api("lead").put(URL, document, format="json")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == [f"metadata.{field}"]
    assert db_state() == before


def test_a_patch_that_names_the_version_is_conditional_and_is_not_retried(api, actors, pool):
    assert api("lead").patch(URL, {"metadata": {"resourceVersion": "1"}, "spec": {"nodeCount": {"max": 5}}}, format="json").status_code == 200
    response = api("lead").patch(URL, {"metadata": {"resourceVersion": "1"}, "spec": {"nodeCount": {"max": 3}}}, format="json")
    assert response.status_code == 409
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 5
    assert api("lead").patch(URL, {"spec": {"nodeCount": {"max": 3}}}, format="json").status_code == 200


def _edit_form(pool: GpuNodePool, **changes) -> dict:
    form = {**FORM, "name": pool.name, "min_nodes": "0", "max_nodes": "4", **changes}
    return form


def test_a_form_posted_without_its_opened_document_is_refused_over_a_change_and_kept_as_sent(browser, actors, pool):
    """A post that lacks the document the page was opened at (a script's) cannot tell its own
    changes from the stale values: it is refused, kept as sent, and moved to the current version."""
    client = browser("lead")
    page = client.get(f"/pools/{pool.name}/edit/").content.decode()
    assert 'name="resource_version" value="1"' in page
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    before = db_state()
    response = client.post(f"/pools/{pool.name}/edit/", _edit_form(pool, resource_version="1", system_image="ubuntu-24.04-cuda-12.4"))
    assert response.status_code == 409
    error = response.context["outdated"]
    assert "admin: nodeCount.max 4 → 6" in error and "Nothing was saved" in error and error in html.unescape(response.content.decode())
    assert db_state() == before
    page = response.content.decode()
    assert 'name="resource_version" value="2"' in page and 'value="ubuntu-24.04-cuda-12.4"' in page
    again = client.post(f"/pools/{pool.name}/edit/", _edit_form(pool, resource_version="2", system_image="ubuntu-24.04-cuda-12.4"))
    assert again.status_code == 302, again.context["form"].errors
    saved = GpuNodePool.objects.get(pk=pool.pk)
    assert saved.document["spec"]["systemImage"] == "ubuntu-24.04-cuda-12.4" and saved.max_nodes == 4  # a choice made knowing


def _edit_page(client, pool) -> dict[str, list[str]]:
    return _as_shown(client.get(f"/pools/{pool.name}/edit/").content.decode())


def test_a_save_over_a_change_made_while_the_form_was_open_comes_back_merged_and_keeps_both(browser, actors, pool):
    """Lead A opens the form; another lead lowers max meanwhile; A changes only the system image
    and saves: refused, and the form comes back as the pool is now with A's change on top (as
    `kubectl edit` does), so saving it again keeps both. Before, A's page still held the old
    max, and saving it again put that back without a word."""
    client = browser("lead")
    posted = {**_edit_page(client, pool), "system_image": ["ubuntu-24.04-cuda-12.4"]}
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}, "nodeLabels": {"rack": "r7"}}})
    before = db_state()
    response = client.post(f"/pools/{pool.name}/edit/", posted)
    assert response.status_code == 409 and db_state() == before
    assert "admin: nodeCount.max 4 → 6" in response.context["outdated"] and "your changes on top" in response.context["outdated"]
    shown = _as_shown(response.content.decode())
    assert shown["max_nodes"] == ["6"] and shown["system_image"] == ["ubuntu-24.04-cuda-12.4"] and shown["resource_version"] == ["2"]
    assert "rack" in shown["nodelabel_key"]  # a row the other change added is there too
    again = client.post(f"/pools/{pool.name}/edit/", shown)
    assert again.status_code == 302, again.context["form"].errors
    spec = GpuNodePool.objects.get(pk=pool.pk).document["spec"]
    assert spec["systemImage"] == "ubuntu-24.04-cuda-12.4" and spec["nodeCount"]["max"] == 6 and spec["nodeLabels"]["rack"] == "r7"


def test_a_value_both_changed_shows_the_leads_and_says_which_it_replaces(browser, actors, pool):
    client = browser("lead")
    posted = {**_edit_page(client, pool), "max_nodes": ["5"]}
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    response = client.post(f"/pools/{pool.name}/edit/", posted)
    assert response.status_code == 409
    assert "You and that change both set nodeCount.max: yours (5) is shown, not 6." in response.context["outdated"]
    assert _as_shown(response.content.decode())["max_nodes"] == ["5"]


LOCKED = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}, {"type": "Percent", "value": 20, "periodSeconds": 60}]}}  # more than the fields show
SIMPLE = {"default": {"metrics": [{"type": "Resource", "resource": "gpu-memory", "targetAverageUtilization": 70}], "combine": "All"}}


def _outdated_post(browser, actors, pool, change: dict, patch: dict):
    """Lead A opens the form and changes `change`; the admin patches `patch` meanwhile; A saves."""
    client = browser("lead")
    posted = {**_edit_page(client, pool), **change}
    posted = {k: v for k, v in posted.items() if v is not None}
    services.pool_patch(user=actors["admin"], pool=pool, patch=patch)
    response = client.post(f"/pools/{pool.name}/edit/", posted)
    assert response.status_code == 409
    return response, _as_shown(response.content.decode())


def test_bursting_switched_off_stays_off_when_the_other_change_adds_a_scaling_block(browser, actors):
    """A scaling block alone bursts: merging the admin's block beside the lead's unticked box
    turned bursting back on without a word (found by review). The lead's choice is said outright."""
    pool = services.pool_create(user=actors["lead"], document=make_document("bursting", nodeCount={"min": 0, "max": 4}, burst={"enabled": True, "maxNodes": 2}))
    response, shown = _outdated_post(browser, actors, pool, {"burst_enabled": None}, {"spec": {"scaling": SIMPLE}})
    assert "burst_enabled" not in shown and "both set burst.enabled: yours (false) is shown, not true" in response.context["outdated"]
    assert browser("lead").post(f"/pools/{pool.name}/edit/", shown).status_code == 302
    spec = GpuNodePool.objects.get(pk=pool.pk).document["spec"]
    assert spec["scaling"] == SIMPLE and spec["burst"]["enabled"] is False


def test_bursting_the_other_change_switched_on_stays_on_when_the_lead_left_it_alone(browser, actors):
    """The check above forced the lead's page's bursting back over an admin who switched it on,
    though the lead never touched it (found by a QA sweep)."""
    pool = services.pool_create(user=actors["lead"], document=make_document("quiet", nodeCount={"min": 0, "max": 4}))
    response, shown = _outdated_post(browser, actors, pool, {"budget_monthly": ["8000"]}, {"spec": {"burst": {"enabled": True, "maxNodes": 2}}})
    assert "both set" not in response.context["outdated"] and shown["burst_enabled"] == ["on"] and shown["burst_max_nodes"] == ["2"]
    assert browser("lead").post(f"/pools/{pool.name}/edit/", shown).status_code == 302
    spec = GpuNodePool.objects.get(pk=pool.pk).document["spec"]
    assert spec["burst"] == {"enabled": True, "maxNodes": 2} and spec["budget"]["monthly"] == "8000"


def test_the_change_is_said_to_be_its_authors_even_when_an_equal_one_came_before(browser, actors, pool):
    """An equal SpecUpdated event within minutes is folded into the first one, actor and all:
    the page told the lead they had made the admin's change (found by a QA sweep)."""
    for maximum in (5, 4):
        services.pool_patch(user=actors["lead"], pool=GpuNodePool.objects.get(pk=pool.pk), patch={"spec": {"nodeCount": {"max": maximum}}})
    pool.refresh_from_db()
    response, _ = _outdated_post(browser, actors, pool, {"system_image": ["ubuntu-24.04-cuda-12.4"]}, {"spec": {"nodeCount": {"max": 5}}})
    assert "(admin: nodeCount.max 4 → 5)" in response.context["outdated"]


def test_labels_both_sides_add_to_a_pool_that_had_none_are_all_kept(browser, actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("bare", nodeCount={"min": 0, "max": 4}))
    change = {"nodelabel_key": ["a"], "nodelabel_value": ["1"]}
    spec = {k: v for k, v in pool.document["spec"].items() if k != "nodeLabels"}
    services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": spec})  # no node labels at all
    pool.refresh_from_db()
    response, shown = _outdated_post(browser, actors, pool, change, {"spec": {"nodeLabels": {"b": "1"}}})
    assert "both set" not in response.context["outdated"] and sorted(shown["nodelabel_key"]) == ["a", "b"]


def test_a_scaling_block_the_page_could_not_show_is_not_the_leads_change(browser, actors):
    """The page locked a block its fields cannot show: read with the current, simple block's
    fields, the lead's post said "no scaling" and the merge blamed the lead for deleting the
    admin's new block (found by review)."""
    pool = services.pool_create(user=actors["lead"], document=make_document("locked", nodeCount={"min": 0, "max": 4}, scaling=LOCKED))
    response, shown = _outdated_post(browser, actors, pool, {"system_image": ["ubuntu-24.04-cuda-12.4"]}, {"spec": {"scaling": {**SIMPLE, "scaleUp": None}}})
    assert "both set" not in response.context["outdated"] and shown["system_image"] == ["ubuntu-24.04-cuda-12.4"]
    assert browser("lead").post(f"/pools/{pool.name}/edit/", shown).status_code == 302
    spec = GpuNodePool.objects.get(pk=pool.pk).document["spec"]
    assert spec["scaling"] == SIMPLE and spec["systemImage"] == "ubuntu-24.04-cuda-12.4"


def test_the_leads_scaling_edit_meets_a_block_the_page_cannot_show_as_a_conflict(browser, actors):
    pool = services.pool_create(user=actors["lead"], document=make_document("unlocked", nodeCount={"min": 0, "max": 4}))
    response, _ = _outdated_post(browser, actors, pool, {"scaling_custom": ["on"], "memory_target": ["60"]}, {"spec": {"scaling": LOCKED}})
    assert "both set scaling" in response.context["outdated"]  # the lead's block is kept and said, not dropped unseen


@pytest.mark.parametrize("base", ["", "not json", "[1]", "{\"spec\": 3}", "[" * 100_000, '{"apiVersion": "x"}'])
def test_a_tampered_opened_document_falls_back_to_keeping_what_was_sent(browser, actors, pool, base):
    client = browser("lead")
    posted = {**_edit_page(client, pool), "system_image": ["ubuntu-24.04-cuda-12.4"], "base": [base]}
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    response = client.post(f"/pools/{pool.name}/edit/", posted)
    assert response.status_code == 409 and "check your values against that change" in response.context["outdated"]


def test_a_form_posted_without_the_version_saves_as_before(browser, pool):
    response = browser("lead").post(f"/pools/{pool.name}/edit/", _edit_form(pool, max_nodes="5"))
    assert response.status_code == 302, response.context["form"].errors
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 5


@live
def test_applying_an_outdated_get_is_one_line_and_changes_nothing(ebcloud, login_as, actors, pool, tmp_path):
    login_as("lead")
    saved = tmp_path / "pool.yaml"
    saved.write_text(ebcloud("node-pool", "get", pool.name, "-o", "yaml").stdout)
    services.pool_patch(user=actors["admin"], pool=pool, patch={"spec": {"nodeCount": {"max": 6}}})
    edited = yaml.safe_load(saved.read_text())
    edited["spec"]["nodeCount"]["max"] = 5
    saved.write_text(yaml.safe_dump(edited))
    line = one_error_line(ebcloud("node-pool", "apply", "-f", str(saved)))
    assert "has changed since it was read (resourceVersion 1, now 2)" in line
    assert GpuNodePool.objects.get(pk=pool.pk).max_nodes == 6


def test_a_document_read_from_a_pool_deleted_since_does_not_replace_the_one_made_after_it(api, actors, browser, pool):
    """A pool made again under the same name starts at generation 1 again: its uid, as a
    Kubernetes object's, tells the two apart (found by review)."""
    document = _read(api)
    form = browser("lead").get(f"/pools/{pool.name}/edit/").content.decode()
    assert f'name="uid" value="{pool.uid}"' in form
    services.pool_delete(user=actors["lead"], pool=pool)
    again = services.pool_create(user=actors["lead"], document=make_document("resourcing", nodeCount={"min": 0, "max": 2}))
    assert (again.generation, again.uid != pool.uid) == (1, True)
    document["spec"]["nodeCount"]["max"] = 7
    response = api("lead").put(URL, document, format="json")
    assert response.status_code == 409 and "was deleted and created again since it was read" in str(response.json())
    posted = browser("lead").post(f"/pools/{pool.name}/edit/", _edit_form(again, resource_version="1", uid=pool.uid, max_nodes="7"))
    assert posted.status_code == 409 and "deleted and created again" in " ".join(posted.context["form"].non_field_errors())
    assert GpuNodePool.objects.get(pk=again.pk).max_nodes == 2


def test_a_uid_no_pool_of_that_name_ever_had_is_said_to_be_another_objects(api, pool):
    """"Deleted and created again" was said of any uid (a typo, another pool's): found by a
    hostile-input probe."""
    document = _read(api)
    for uid in ("x", pool.uid.upper()):
        document["metadata"]["uid"] = uid
        response = api("lead").put(URL, document, format="json")
        assert response.status_code == 409, response.json()
        assert f"pool 'resourcing' is not the object of metadata.uid '{uid}' (its metadata.uid is {pool.uid})" in str(response.json())


@pytest.mark.parametrize(
    ("written", "patch", "kept"),
    [
        ({"autoRenew": False}, {"spec": {"autoRenew": True}}, ("autoRenew", True)),
        ({"nodeTaints": [{"key": "dedicated", "effect": "NoSchedule"}]},
         {"spec": {"nodeTaints": [{"key": "dedicated", "effect": "NoSchedule"}, {"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}},
         ("nodeTaints", [{"key": "dedicated", "effect": "NoSchedule"}, {"key": "gpu", "value": "a100", "effect": "NoSchedule"}])),
        ({"sharedWith": []}, {"spec": {"sharedWith": ["inference"]}}, ("sharedWith", ["inference"])),
    ],
    ids=["a-default-spelled-out", "a-taint-without-value", "an-empty-list"],
)
def test_what_the_form_rewrites_without_the_lead_is_not_the_leads_change(browser, actors, written, patch, kept):
    """The form writes its own shape: it drops `autoRenew: false` and an empty list, and gives a
    taint an empty value. Read as the lead's change, it replaced the admin's new value, and
    saving the merged page undid the admin's change (found by review)."""
    document = make_document("shaped", nodeCount={"min": 0, "max": 4})
    document["spec"] = {k: v for k, v in document["spec"].items() if k not in ("nodeTaints", "sharedWith")} | written
    pool = services.pool_create(user=actors["lead"], document=document)
    response, shown = _outdated_post(browser, actors, pool, {"system_image": ["ubuntu-24.04-cuda-12.4"]}, patch)
    assert "both set" not in response.context["outdated"]
    assert browser("lead").post(f"/pools/{pool.name}/edit/", shown).status_code == 302
    spec = GpuNodePool.objects.get(pk=pool.pk).document["spec"]
    key, value = kept
    if key == "nodeTaints":  # the saved form spells out the empty value
        value = [{"value": "", **taint} for taint in value]
    assert spec["systemImage"] == "ubuntu-24.04-cuda-12.4" and spec[key] == value
