"""Bodies the API must refuse before it acts (tests/test_bad_input.py is the corpus of every
write path; these are the shapes of a body rather than its fields): a body that is not a
mapping, an unknown field, a key given twice, numbers in digits that are not ASCII, a lone
surrogate escape. Each is a 400 naming where, and nothing runs or changes."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from pools.core.documents import dump_yaml
from tests import bad_input_world
from tests.conftest import make_document
from tests.corpus import api_fields, db_state

pytestmark = pytest.mark.django_db

# The shared world's fixtures (pytest finds them as this module's names).
world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser


# --- bodies that are not a mapping, unknown fields, keys given twice, digits that are not ASCII --

NOT_MAPPINGS = {"list": b'[{"maxNodes": 999}]', "null": b"null", "string": b'"x"', "number": b"5", "true": b"true"}
NOT_A_MAPPING = [{"field": "", "message": "the request body must be a mapping (a JSON object)"}]
# The POST endpoints whose body is a few fields (not a document): url, who may post, a valid body
# but for one unknown field. A body that was not a mapping was taken for an empty one: the repack
# ran with maxNodes=1.
FIELD_ENDPOINTS = {
    "pool-repack": ("/api/v1/pools/train-pool-a/fragmentation/apply/", "admin", {"maxNodes": 1, "bogus": 1}),
    "cluster-repack": ("/api/v1/fragmentation/apply/", "admin", {"maxnodes": 2}),
    "scale": ("/api/v1/pools/train-pool-a/scale/", "lead", {"max": 3, "bogus": True}),
    "alert-silence": ("/api/v1/pools/train-pool-a/alert-silences/", "lead", {"rule": "NodesNotReady", "until": "{tomorrow}", "reason": "r", "bogus": 1}),
    "order-reject": ("/api/v1/orders/{order}/reject/", "admin", {"reason": "no capacity", "bogus": 1}),
    "auth-token": ("/api/v1/auth/token/", "lead", {"username": "lead", "password": "x", "bogus": 1}),
}


def _tomorrow() -> str:
    from django.utils import timezone

    return (timezone.now() + timezone.timedelta(days=1)).isoformat()


@pytest.mark.parametrize("endpoint", sorted(FIELD_ENDPOINTS))
@pytest.mark.parametrize("case", sorted(NOT_MAPPINGS))
def test_a_body_that_is_not_a_mapping_is_a_400_and_runs_nothing(api, world, endpoint, case):
    url, role, _ = FIELD_ENDPOINTS[endpoint]
    client = api(role)
    before = db_state()
    response = client.post(url.format(order=world["order"].pk), NOT_MAPPINGS[case], content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"] == NOT_A_MAPPING
    assert db_state() == before


@pytest.mark.parametrize("endpoint", sorted(FIELD_ENDPOINTS))
def test_an_unknown_field_is_a_400_naming_it(api, world, endpoint):
    url, role, body = FIELD_ENDPOINTS[endpoint]
    body = {key: _tomorrow() if value == "{tomorrow}" else value for key, value in body.items()}
    client = api(role)
    before = db_state()
    response = client.post(url.format(order=world["order"].pk), body, format="json")
    assert response.status_code == 400, response.content[:300]
    unknown = "maxnodes" if "maxnodes" in body else "bogus"
    assert response.json()["errors"] == [{"field": unknown, "message": "unknown field"}]
    assert db_state() == before


def _twice(text: str, line: str, again: str) -> str:
    assert line in text
    return text.replace(line, line + again, 1)


POOL_YAML = dump_yaml(make_document("dupy-a"))
# case -> (method, url, content type, body, the path of the key given twice). The last one won.
DUPLICATE_KEYS = {
    "yaml-create-node-type": ("post", "/api/v1/pools/", "application/yaml", _twice(POOL_YAML, "  nodeType: GPU_8_CARD\n", "  nodeType: GPU_4_CARD\n"), "spec.nodeType"),
    "json-create-name": ("post", "/api/v1/pools/", "application/json",
                         '{"apiVersion": "ebcloud.io/v1", "kind": "GpuNodePool", "metadata": {"name": "dupj-a", "name": "dupj-b"}, "spec": {}}', "metadata.name"),
    "yaml-replace-max": ("put", "/api/v1/pools/train-pool-a/", "application/yaml",
                         _twice(dump_yaml(make_document("train-pool-a")), "    max: 6\n", "    max: 2\n"), "spec.nodeCount.max"),
    "merge-patch-max": ("patch", "/api/v1/pools/train-pool-a/", "application/merge-patch+json", '{"spec": {"nodeCount": {"max": 3, "max": 4}}}', "spec.nodeCount.max"),
    "json-pod-label": ("post", "/api/v1/pods/", "application/json",
                       '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a", "app": "b"}}, "spec": {}}', "metadata.labels.app"),
    "yaml-pdb-name": ("post", "/api/v1/poddisruptionbudgets/", "application/yaml",
                      "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: a\n  name: b\nspec: {minAvailable: 1}\n", "metadata.name"),
}


@pytest.mark.parametrize("case", sorted(DUPLICATE_KEYS))
def test_a_key_given_twice_is_a_400_naming_its_path(api, world, case):
    method, url, content_type, body, path = DUPLICATE_KEYS[case]
    client = api("lead")
    before = db_state()
    response = getattr(client, method)(url, body.encode(), content_type=content_type)
    assert response.status_code == 400, response.content[:300]
    (error,) = response.json()["errors"]
    assert error["field"] == path and error["message"].startswith("duplicate key"), error
    assert db_state() == before


def _digits(text: str, zero: str) -> str:
    """`text`'s ASCII digits written in another script's (its zero given)."""
    return text.translate({ord("0") + i: ord(zero) + i for i in range(10)})


@pytest.mark.parametrize("variant", ["arabic-indic", "fullwidth", "underscore"])
def test_an_order_id_in_other_digits_is_a_400_not_that_order(api, browser, world, variant):
    """`int()` read `١` as 1 and `0_1` as 1: /orders/١/approve/ approved order 1."""
    pk = str(world["order"].pk)
    text = {"arabic-indic": _digits(pk, "٠"), "fullwidth": _digits(pk, "０"), "underscore": "0_" + pk}[variant]
    client, page = api("admin"), browser("admin")
    before = db_state()
    assert client.get(f"/api/v1/orders/{quote(text)}/").status_code == 400
    for action in ("approve", "reject"):
        response = client.post(f"/api/v1/orders/{quote(text)}/{action}/", {"reason": "r"}, format="json")
        assert response.status_code == 400 and api_fields(response) == ["id"], response.content[:300]
        if variant != "underscore":  # the web queue's URL takes [0-9]+ only: no such page
            assert page.post(f"/orders/{quote(text)}/{action}/", {"reason": "r"}).status_code == 404
    assert db_state() == before


@pytest.mark.parametrize(("url", "role", "body", "field"), [
    ("/api/v1/pools/train-pool-a/scale/", "lead", {"max": "٣"}, "max"),
    ("/api/v1/pools/train-pool-a/scale/", "lead", {"min": "1_0"}, "min"),
    ("/api/v1/pools/train-pool-a/fragmentation/apply/", "admin", {"maxNodes": "١"}, "maxNodes"),
    ("/api/v1/pools/train-pool-a/alert-silences/", "lead", {"rule": "NodesNotReady", "until": "{tomorrow}", "reason": "r"}, "until"),
], ids=["scale-arabic-indic", "scale-underscore", "repack-arabic-indic", "silence-until-arabic-indic"])  # fmt: skip
def test_numbers_in_other_digits_are_a_400_naming_the_field(api, world, url, role, body, field):
    body = {key: _digits(_tomorrow(), "٠") if value == "{tomorrow}" else value for key, value in body.items()}
    client = api(role)
    before = db_state()
    response = client.post(url, body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == [field]
    assert db_state() == before


def test_a_merge_patch_as_application_merge_patch_json_is_applied_like_json(api, world):
    """What `kubectl patch --type merge` sends (RFC 7386's media type) was a 415."""
    client = api("lead")
    response = client.patch("/api/v1/pools/train-pool-a/", b'{"spec": {"nodeCount": {"max": 5}}}', content_type="application/merge-patch+json")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["spec"]["nodeCount"]["max"] == 5
    removed = client.patch("/api/v1/pools/train-pool-a/", b'{"metadata": {"labels": null}}', content_type="application/merge-patch+json; charset=utf-8")
    assert removed.status_code == 200 and "labels" not in removed.json()["metadata"]
    before = db_state()
    for method, url in (("post", "/api/v1/pools/"), ("put", "/api/v1/pools/train-pool-a/")):  # a document is not a patch
        refused = getattr(client, method)(url, b'{"spec": {}}', content_type="application/merge-patch+json")
        assert refused.status_code == 415 and api_fields(refused) == [""], (method, refused.content[:300])
    assert db_state() == before


# case -> (role, url, the JSON body as text, the path refused). `"\ud800"` is half of a surrogate
# pair, alone: no text. It reached PostgreSQL, which cannot store it (a 500).
LONE_SURROGATES = {
    "reject-reason": ("admin", "/api/v1/orders/{order}/reject/", '{"reason": "late \\ud800"}', "reason"),
    "silence-reason": ("lead", "/api/v1/pools/train-pool-a/alert-silences/", '{"rule": "NodesNotReady", "until": "{tomorrow}", "reason": "\\udcff"}', "reason"),
    "pod-annotation": ("member", "/api/v1/pods/", '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"note": "a\\udbff"}}, "spec": {}}', "metadata.annotations.note"),
    "label-key": ("lead", "/api/v1/pools/", '{"apiVersion": "ebcloud.io/v1", "kind": "GpuNodePool", "metadata": {"name": "s", "labels": {"k\\ud800": "v"}}, "spec": {}}', "metadata.labels.k\\ud800"),
}


@pytest.mark.parametrize("case", sorted(LONE_SURROGATES))
def test_a_lone_surrogate_escape_in_json_is_a_400_naming_where(api, world, case):
    role, url, body, path = LONE_SURROGATES[case]
    client = api(role)
    before = db_state()
    body = body.replace("{tomorrow}", _tomorrow())
    response = client.post(url.format(order=world["order"].pk), body.encode(), content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    (error,) = response.json()["errors"]
    assert error["field"] == path and error["message"].startswith("not Unicode text"), error
    assert db_state() == before


def test_a_surrogate_pair_escape_is_text(api, world):
    response = api("admin").post(f"/api/v1/orders/{world['order'].pk}/reject/", b'{"reason": "\\ud83d\\ude00 no capacity"}', content_type="application/json")
    assert response.status_code == 200 and response.json()["reason"] == "\U0001f600 no capacity"
