"""Bad input the reviewer found accepted in silence or refused without a word (issue #9 item 5's
rule: a 4xx naming the field, nothing written):

- API query parameters: `ordering` outside the pool list's columns (`bogus`, `-`, `--name`) was
  sorted by name; a parameter given twice kept its last value (`?team=algorithm&team=inference`
  created the pool for inference, `?from=..&from=..` summed another range). Every endpoint
  now refuses a repeat naming it (pools/api/errors.py `repeated_params`); the web pages keep
  Django's last value and never fail on it.
- The import page refused a tampered team (a single-team lead's hidden picker) with a 400 and no
  message: errors of fields a page does not show are shown (templates/partials/form_errors.html).
- YAML keys `1` and `true` (equal once read) were called a duplicate key; the problem is that
  keys must be strings.
- A merge patch could grow a pool's document past `EBCLOUD_MAX_SPEC_BYTES`, each patch's body
  under it, until the owner could no longer PUT it back.
(The scale endpoint's `"1"`, `1.0` and `true`: tests/corpus.py SCALES.)
"""

from __future__ import annotations

import json

import pytest

from pools.core import yaml_loading
from pools.core.documents import dump_yaml
from pools.core.errors import ValidationError
from pools.models import GpuNodePool
from tests import bad_input_world
from tests.conftest import make_document
from tests.corpus import api_fields, db_state

pytestmark = pytest.mark.django_db

world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser


# --- API: `ordering` of the pool list --------------------------------------------------------


@pytest.mark.parametrize("ordering", ["bogus", "-", "--name", "name-", "-bogus", " name", "Name"])
def test_an_unknown_pool_ordering_is_a_400_naming_it(api, world, ordering):
    response = api("lead").get("/api/v1/pools/", {"ordering": ordering})
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == ["ordering"]
    assert response.json()["errors"][0]["message"].startswith("must be one of name, team, gpu")


@pytest.mark.parametrize(("ordering", "first"), [("name", "ordered-pool"), ("-name", "train-pool-a"), ("-created", "ordered-pool"), ("", "ordered-pool")])
def test_a_known_pool_ordering_sorts(api, world, ordering, first):
    response = api("lead").get("/api/v1/pools/", {"ordering": ordering} if ordering else {})
    assert response.status_code == 200, response.content[:300]
    assert response.json()[0]["metadata"]["name"] == first


# --- API: a single-valued parameter given twice ----------------------------------------------


def test_a_team_given_twice_creates_no_pool(api, world):
    client = api("admin")
    before = db_state()
    response = client.post("/api/v1/pools/?team=algorithm&team=inference", make_document("twice-pool"), format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"] == [{"field": "team", "message": "given more than once: give it once"}]
    assert db_state() == before
    assert not GpuNodePool.objects.filter(name="twice-pool").exists()


@pytest.mark.parametrize(
    ("url", "fields"),
    [
        ("/api/v1/costs/?from=2026-12-01&from=2026-11-01", ["from"]),
        ("/api/v1/costs/?format=json&format=csv&to=2026-12-01&to=2026-12-02", ["format", "to"]),
        ("/api/v1/pools/?limit=1&limit=2", ["limit"]),
        ("/api/v1/pools/?continue=a&continue=b", ["continue"]),
        ("/api/v1/pools/?ordering=name&ordering=-name", ["ordering"]),
        ("/api/v1/pools/?q=a&q=a", ["q"]),
        ("/api/v1/pods/?phase=Running&phase=Pending", ["phase"]),
        ("/api/v1/orders/?status=Pending&status=Paid", ["status"]),
        ("/api/v1/poddisruptionbudgets/?namespace=a&namespace=b", ["namespace"]),
        ("/api/v1/pools/train-pool-a/fragmentation/?plan=1&plan=0", ["plan"]),
    ],
)
def test_a_parameter_given_twice_is_a_400_naming_it_on_every_endpoint(api, world, url, fields):
    response = api("admin").get(url)
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == fields
    assert all(e["message"] == "given more than once: give it once" for e in response.json()["errors"])


def test_a_chunked_list_s_next_link_gives_each_parameter_once(api, world):
    response = api("admin").get("/api/v1/pools/", {"limit": 1, "ordering": "name"})
    assert response.status_code == 200
    next_url = response["Link"].split(">")[0].lstrip("<")
    assert next_url.count("continue=") == 1
    following = api("admin").get(next_url)
    assert following.status_code == 200 and following.json()[0]["metadata"]["name"] == "train-pool-a"


@pytest.mark.parametrize(
    "url",
    [
        "/pools/?page=2&page=3&sort=name&sort=-team&q=a&q=b&team=x&team=algorithm",
        "/pools/train-pool-a/?type=Warning&type=Normal&part=status&part=timeline",
        "/pools/new/?team=algorithm&team=inference",
        "/pods/?phase=Running&phase=bogus&namespace=a&namespace=b",
        "/orders/?status=Pending&status=Paid",
        "/audit/?page=2&page=1&action=a&action=b",
        "/notifications/?page=2&page=1&show=open&show=all",
        "/costs/?from=2026-12-01&from=2026-11-01&by=team&by=project",
        "/costs/budgets/?team=a&team=b",
    ],
)
def test_a_page_given_a_parameter_twice_keeps_the_last_and_never_fails(browser, world, url):
    """Pages are followed links and typed URLs, not a client's contract: the last value wins,
    as Django's QueryDict gives it, and the page answers (no 400, no 500)."""
    assert browser("admin").get(url).status_code == 200, url


# --- web: the import page's team, tampered with ----------------------------------------------


def test_a_tampered_team_on_the_import_page_is_shown(browser, world):
    """A lead of one team has no team picker (tests/pools/test_views.py); posting another team
    anyway was a 400 with nothing said."""
    client = browser("lead")
    before = db_state()
    response = client.post("/pools/import/", {"document": dump_yaml(make_document("tampered-pool")), "team": "inference"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'role="alert">Team: Select a valid choice. inference is not one of the available choices.' in page
    assert db_state() == before


# --- YAML: keys that are not strings ---------------------------------------------------------

NOT_STRING_KEYS = "apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nmetadata: {name: keys-pool}\nspec:\n  nodeLabels: {1: 2, true: x}\n"


def test_yaml_keys_equal_once_read_are_refused_as_not_strings_not_as_a_duplicate(api, browser, world):
    rest, web = api("lead"), browser("lead")
    before = db_state()
    response = rest.post("/api/v1/pools/", NOT_STRING_KEYS.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    [error] = response.json()["errors"]
    assert error["field"] == "spec.nodeLabels.true"
    assert error["message"].startswith("keys must be strings (quote numbers and booleans)") and "duplicate" not in error["message"]
    page = web.post("/pools/import/", {"document": NOT_STRING_KEYS})
    assert page.status_code == 400 and "keys must be strings" in page.content.decode()
    assert db_state() == before


# --- API: merge patches and the document size limit -----------------------------------------


def test_merge_patches_cannot_grow_a_document_past_the_size_limit(api, world, settings):
    """Each patch adds 300 labels (about 18 KB, a body well under 64 KiB): the fourth would make
    the document 72 KB, and is refused with nothing stored; what is stored can be PUT back."""
    client = api("lead")
    statuses = []
    for batch in range(4):
        labels = {f"k{batch}-{i:03d}": "v" * 50 for i in range(300)}
        before = db_state()
        response = client.patch("/api/v1/pools/train-pool-a/", json.dumps({"metadata": {"labels": labels}}),
                                 content_type="application/merge-patch+json")  # fmt: skip
        statuses.append(response.status_code)
    assert statuses == [200, 200, 200, 400]
    [error] = response.json()["errors"]
    assert error["message"].endswith(f"larger than the {settings.EBCLOUD_MAX_SPEC_BYTES} bytes a document may be")
    assert db_state() == before
    stored = GpuNodePool.objects.get(name="train-pool-a").document
    assert len(json.dumps(stored, separators=(",", ":")).encode()) <= settings.EBCLOUD_MAX_SPEC_BYTES
    got = client.get("/api/v1/pools/train-pool-a/")
    assert client.put("/api/v1/pools/train-pool-a/", got.content, content_type="application/json").status_code == 200


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("m: {1: a, true: b}", "m.true", "keys must be strings"),
        ("m: {1.0: a, 1: b}", "m.1", "keys must be strings"),
        ("m: {true: a, yes: b}", "m.True", "duplicate key"),  # both the boolean true: the same key twice
        ("m: {0x1: a, 1: b}", "m.1", "duplicate key"),
    ],
)
def test_the_loader_tells_keys_equal_once_read_from_a_key_given_twice(text, field, says):
    with pytest.raises(ValidationError) as refused:
        yaml_loading.load_all(text)
    [error] = refused.value.errors
    assert (error.field, error.message.split(" (")[0].split(":")[0]) == (field, says)
