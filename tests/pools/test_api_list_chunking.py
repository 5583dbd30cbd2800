"""Every list endpoint of /api/v1/ in chunks, the Kubernetes way (pools/api/chunking.py): complete
without `limit`; with it, at most N items and a `Link: <url>; rel="next"` header carrying a
keyset `continue` token, absent on the last chunk. Chunks concatenate to the full list, rows
added or removed between chunks neither skip nor repeat an item, bad input is a 400 naming
`limit` or `continue`, and a token never shows another team's objects."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import signing
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from monitoring.models import AlertSilence
from pools.api import chunking
from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from pools.services import disruption_budgets as budget_services
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.pools.pod_helpers import T0, pool_with_nodes, submit
from tests.pools.pool_helpers import create_pools, db_state

NEXT = re.compile(r'^<(?P<url>http://testserver/[^>]+)>; rel="next"$')

LISTS = [
    "/api/v1/pools/",
    "/api/v1/pools/?ordering=-min",  # every pool has min 1: the name breaks the ties
    "/api/v1/pools/?ordering=team&q=pool",
    "/api/v1/pools/?ordering=-created",
    "/api/v1/orders/",
    "/api/v1/orders/?status=Pending",
    "/api/v1/pods/",
    "/api/v1/pods/?namespace=algorithm&phase=Pending",
    "/api/v1/poddisruptionbudgets/",
    "/api/v1/pools/noded/events/",
    "/api/v1/pools/noded/nodes/",
    "/api/v1/pools/noded/alert-silences/",
]


@pytest.fixture
def world(actors):
    """Team algorithm: pools pool-0..4 (an order each) and `noded` with 5 nodes, 4 events and 4
    silences (ties on their sort times, so the id decides), 5 pods and 3 disruption budgets.
    Team inference: 2 pods, one pool."""
    create_pools(actors, 5)
    pool = pool_with_nodes(actors["lead"], name="noded", nodes=5, node_labels={"pool": "train"})
    pool.nodes.update(created_at=T0)
    for index in range(4):
        PoolEvent.objects.create(pool=pool, reason="Tested", message=f"event {index}", last_timestamp=T0)
    soon = timezone.now() + timedelta(days=1)
    for index, (rule, _) in enumerate(AlertSilence._meta.get_field("rule").choices[:4]):
        AlertSilence.objects.create(pool=pool, rule=rule, until=soon + timedelta(hours=index % 2), reason="tested")
    for name in ("pod-3", "pod-1", "pod-5", "pod-2", "pod-4"):
        submit(actors["member"], name)
    for name in ("b-2", "b-1", "b-3"):
        budget_services.budget_create(user=actors["member"], document=budget(name))
    for name in ("pod-1", "pod-9"):
        submit(actors["other_lead"], name, namespace="inference", pool_affinity=None, tolerate=None)
    pool_services.pool_create(user=actors["other_lead"], document=make_document("zpool", region="cn-north-1a", gpuModel="T4", nodeType="GPU_1_CARD", nodeCount={"min": 1, "max": 2}))
    return pool


def budget(name: str) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "algorithm"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}}  # fmt: skip


def with_params(url: str, **params: object) -> str:
    return url + ("&" if "?" in url else "?") + "&".join(f"{key}={value}" for key, value in params.items())


def walk(client, url: str, limit: int) -> tuple[list, list]:
    """Follow the `Link` headers from the first chunk to the last: (items, responses)."""
    items, responses, next_url = [], [], with_params(url, limit=limit)
    while next_url:
        response = client.get(next_url)
        assert response.status_code == 200, response.content
        assert len(response.json()) <= limit
        items += response.json()
        responses.append(response)
        link = response.headers.get("Link")
        next_url = NEXT.match(link)["url"] if link else None
        assert len(responses) <= 50
    return items, responses


def names(items: list[dict]) -> list[str]:
    return [item["metadata"]["name"] if "metadata" in item else str(item.get("name") or item["id"]) for item in items]


def fields(response) -> list[str]:
    return [error["field"] for error in response.json()["errors"]]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("limit", [1, 2, 1000])
def test_chunks_concatenate_to_the_full_list_of_every_list_endpoint(api, world, url, limit):
    client = api("lead")
    full = client.get(url)
    assert full.status_code == 200 and "Link" not in full.headers
    assert len(full.json()) >= 2
    items, responses = walk(client, url, limit)
    assert items == full.json()
    assert len(responses) == max(1, -(-len(items) // limit))  # ceil: the last chunk is not empty
    assert "Link" not in responses[-1].headers


def test_the_next_url_keeps_the_other_parameters(api, world):
    response = api("lead").get("/api/v1/pods/?namespace=algorithm&phase=Pending&limit=2")
    assert names(response.json()) == ["pod-1", "pod-2"]
    url = NEXT.match(response.headers["Link"])["url"]
    assert url.startswith("http://testserver/api/v1/pods/?")
    assert {"namespace=algorithm", "phase=Pending", "limit=2"} <= set(url.split("?", 1)[1].split("&"))
    assert re.search(r"[?&]continue=[^&]+", url)


def test_a_list_without_limit_or_within_it_has_no_link(api, world):
    client = api("lead")
    assert "Link" not in client.get("/api/v1/pods/").headers
    last = client.get("/api/v1/pods/?limit=5")
    assert len(last.json()) == 5 and "Link" not in last.headers
    assert "Link" not in client.get("/api/v1/pods/?limit=1000").headers


def test_continue_without_limit_returns_the_rest_of_the_list(api, world):
    client = api("lead")
    first = client.get("/api/v1/pods/?limit=2")
    token = re.search(r"continue=([^&>]+)", first.headers["Link"])[1]
    rest = client.get(f"/api/v1/pods/?continue={token}")
    assert names(rest.json()) == ["pod-3", "pod-4", "pod-5"] and "Link" not in rest.headers


def test_rows_added_or_removed_between_chunks_are_neither_skipped_nor_repeated(api, actors, world):
    client = api("lead")
    first = client.get("/api/v1/pods/?limit=2")
    assert names(first.json()) == ["pod-1", "pod-2"]
    submit(actors["member"], "pod-0")  # sorts before the cursor: an offset would repeat pod-2
    submit(actors["member"], "pod-6")  # after it: the walk meets it
    Pod.objects.filter(name="pod-2").update(deleted_at=T0)  # the cursor's own row is gone
    second = client.get(NEXT.match(first.headers["Link"])["url"])
    third = client.get(NEXT.match(second.headers["Link"])["url"])
    assert names(second.json()) == ["pod-3", "pod-4"]
    assert names(third.json()) == ["pod-5", "pod-6"] and "Link" not in third.headers


def test_pools_added_between_chunks_in_their_own_order_are_neither_skipped_nor_repeated(api, actors, world):
    client = api("lead")
    first = client.get("/api/v1/pools/?ordering=-name&limit=3")
    assert names(first.json()) == ["pool-4", "pool-3", "pool-2"]
    create_pools(actors, 1, offset=7)  # pool-7 sorts before the cursor
    create_pools(actors, 1, offset=15)  # pool-15 sorts after it
    rest, _ = walk(client, NEXT.match(first.headers["Link"])["url"].replace("&limit=3", ""), 2)
    assert names(rest) == ["pool-15", "pool-1", "pool-0", "noded"]


def test_a_list_cut_in_python_keeps_its_cursor_when_rows_are_added(api, world):
    """Nodes come from a selector's list (newest first): a newer node added between chunks
    sorts before the cursor and is not met again; every node is met once."""
    client = api("lead")
    first = client.get("/api/v1/pools/noded/nodes/?limit=2")
    assert names(first.json()) == ["noded-4", "noded-3"]  # the same time: the newest id first
    Node.objects.create(pool=world, name="noded-new", phase="Ready", zone=world.zone, gpu_count=1, created_at=T0 + timedelta(hours=1))
    rest, _ = walk(client, re.sub(r"limit=2&?", "", NEXT.match(first.headers["Link"])["url"]), 2)  # `walk` gives it again
    assert names(rest) == ["noded-2", "noded-1", "noded-0"]


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "1.5", "", "%D9%A3", "+5", "1e3", "99999999999999999999999"])
@pytest.mark.parametrize("url", ["/api/v1/pods/", "/api/v1/pools/", "/api/v1/pools/noded/events/", "/api/v1/poddisruptionbudgets/"])
def test_a_bad_limit_is_a_400_naming_it_and_changes_nothing(api, world, url, limit):
    before = db_state()
    response = api("lead").get(with_params(url, limit=limit))
    assert response.status_code == 400
    assert response.json() == {"errors": [{"field": "limit", "message": "must be a whole number from 1 to 1000"}]}
    assert db_state() == before


def token_of(response) -> str:
    return re.search(r"continue=([^&>]+)", response.headers["Link"])[1]


def signed(payload: object, path: str) -> str:
    """A token signed with the server's key but built by hand: a payload the server never gives."""
    return signing.Signer(salt=f"{chunking.SALT}:{path.rstrip('/')}").sign_object(payload)


@pytest.mark.parametrize("url", ["/api/v1/pods/", "/api/v1/orders/", "/api/v1/pools/noded/nodes/", "/api/v1/poddisruptionbudgets/"])
def test_a_tampered_malformed_or_foreign_continue_token_is_a_400_naming_it(api, world, url):
    client = api("lead")
    token = token_of(client.get(with_params(url, limit=1)))
    foreign = token_of(client.get("/api/v1/pools/?limit=1"))
    terms, wrong = {  # the list's order, and keys of the wrong type for it
        "/api/v1/pods/": (["namespace", "name", "pk"], [["s", "algorithm"], ["s", "pod-1"], ["s", "x"]]),
        "/api/v1/orders/": (["-created_at", "-id"], [["s", "x"], ["s", "x"]]),
        "/api/v1/pools/noded/nodes/": (["-created_at", "-id"], [["s", "x"], ["s", "x"]]),
        "/api/v1/poddisruptionbudgets/": (["metadata__namespace", "metadata__name"], [["i", 1], ["i", 1]]),
    }[url]
    bad = [
        "garbage",
        token[:-1] + ("A" if token[-1] != "A" else "B"),  # a changed signature
        token.replace(token[2], "x" if token[2] != "x" else "y", 1),  # a changed payload
        foreign,  # the pool list's
        "x" * 5000,
        "%00",
        signed({"o": terms, "k": wrong}, url),
        signed({"o": terms, "k": [["t", "not a time"]] * len(terms)}, url),
        signed({"o": terms, "k": [["q", 1]] * len(terms)}, url),  # an unknown type
        signed({"o": terms, "k": [["i", 1]]}, url),  # too few keys
        signed({"o": terms}, url),
        signed([1, 2], url),
        signed({"o": ["name"], "k": [["s", "pod-1"]]}, url),  # another order
    ]
    before = db_state()
    for value in bad:
        response = client.get(with_params(url, limit=1, **{"continue": value}))
        assert response.status_code == 400, (value, response.content)
        assert fields(response) == ["continue"]
    assert db_state() == before


def test_a_token_of_another_ordering_is_a_400(api, world):
    client = api("lead")
    token = token_of(client.get("/api/v1/pools/?ordering=name&limit=1"))
    response = client.get(f"/api/v1/pools/?ordering=-min&limit=1&continue={token}")
    assert response.status_code == 400 and fields(response) == ["continue"]
    assert "another order" in response.json()["errors"][0]["message"]


def test_another_teams_token_shows_only_your_own_objects(api, world):
    """The token carries sort keys only: the inference lead, given the algorithm lead's token,
    gets the inference pods after those keys; and a pool-scoped list of another team's pool is
    still a 404."""
    lead, other = api("lead"), api("other_lead")
    token = token_of(lead.get("/api/v1/pods/?limit=1"))  # after algorithm/pod-1
    theirs = other.get(f"/api/v1/pods/?continue={token}")
    assert theirs.status_code == 200
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in theirs.json()] == [("inference", "pod-1"), ("inference", "pod-9")]
    items, _ = walk(other, "/api/v1/pods/", 1)
    assert {item["metadata"]["team"] for item in items} == {"inference"}
    events_token = token_of(lead.get("/api/v1/pools/noded/events/?limit=1"))
    assert other.get(f"/api/v1/pools/noded/events/?limit=1&continue={events_token}").status_code == 404
    pools_token = token_of(lead.get("/api/v1/pools/?limit=1"))  # after noded
    assert names(other.get(f"/api/v1/pools/?continue={pools_token}").json()) == ["zpool"]


def test_a_chunk_costs_the_same_queries_however_long_the_list(api, actors, world):
    client = api("lead")
    with CaptureQueriesContext(connection) as few:
        assert len(client.get("/api/v1/pools/?limit=2").json()) == 2
    create_pools(actors, 20, offset=10)
    with CaptureQueriesContext(connection) as many:
        response = client.get("/api/v1/pools/?limit=2")
        client.get(NEXT.match(response.headers["Link"])["url"])
    assert len(many) == 2 * len(few)


LIST_OPERATIONS = [
    "/api/v1/pools/",
    "/api/v1/orders/",
    "/api/v1/pods/",
    "/api/v1/poddisruptionbudgets/",
    "/api/v1/pools/{name}/events/",
    "/api/v1/pools/{name}/nodes/",
    "/api/v1/pools/{name}/alert-silences/",
]


def test_the_schema_declares_limit_continue_and_the_link_header_on_every_list(api):
    paths = api("lead").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    arrays = {path for path, item in paths.items() if path.startswith("/api/v1/") and "get" in item
              and item["get"]["responses"].get("200", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("type") == "array"}  # fmt: skip
    assert arrays == set(LIST_OPERATIONS)  # a new list endpoint is chunked too
    for path in LIST_OPERATIONS:
        operation = paths[path]["get"]
        parameters = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        assert parameters["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}, path
        assert parameters["continue"]["schema"]["type"] == "string", path
        assert "Link" in operation["responses"]["200"]["headers"], path
        assert "400" in operation["responses"], path
