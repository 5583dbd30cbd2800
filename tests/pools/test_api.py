"""REST API /api/v1/: pools in the seed's shape (JSON and YAML), orders, events, errors, authorization."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.core.documents import dump_yaml
from pools.models import GpuNodePool, PoolEvent, PoolOrder
from pools.services import pools as services
from tests.conftest import EXAMPLES, assets_off_site, make_document
from tests.pools.pool_helpers import create_pools, db_state


@pytest.fixture
def algorithm_pool(actors, train_document):
    return services.pool_create(user=actors["lead"], document=train_document)


def fields(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def test_a_lead_creates_the_articles_pool_from_yaml(api):
    body = (EXAMPLES / "create-train-pool.yaml").read_bytes()
    response = api("lead").post("/api/v1/pools/", body, content_type="application/yaml")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["metadata"]["name"] == "train-pool-a" and data["metadata"]["team"] == "algorithm"
    assert data["spec"]["nodeTaints"] == [{"key": "pool", "value": "train", "effect": "NoSchedule"}]
    assert data["status"]["phase"] == "Pending"
    assert data["status"]["pendingReason"].startswith("OrderPending")


def test_a_lead_creates_a_pool_from_json_and_reads_it_back_unchanged(api, train_document):
    assert api("lead").post("/api/v1/pools/", train_document, format="json").status_code == 201
    data = api("lead").get("/api/v1/pools/train-pool-a/").json()
    assert {k: data[k] for k in ("apiVersion", "kind", "spec")} == {k: train_document[k] for k in ("apiVersion", "kind", "spec")}
    assert data["metadata"]["labels"] == train_document["metadata"]["labels"]


def test_get_then_create_again_works_like_kubectl(api, algorithm_pool):
    """Server fields (status, metadata.team/generation/creationTimestamp) are ignored on input."""
    exported = api("lead").get("/api/v1/pools/train-pool-a/").json()
    exported["metadata"]["name"] = "train-pool-b"
    exported["spec"]["region"] = "cn-north-1a"
    assert api("lead").post("/api/v1/pools/", exported, format="json").status_code == 201


def test_invalid_specs_get_400_with_field_paths_and_change_nothing(api, algorithm_pool):
    before = db_state()
    document = make_document("bad name", gpuModel="Z9", nodeCount={"min": 9, "max": 3})
    response = api("lead").post("/api/v1/pools/", document, format="json")
    assert response.status_code == 400
    assert set(fields(response)) == {"metadata.name", "spec.gpuModel", "spec.nodeCount.min"}
    assert db_state() == before


@pytest.mark.parametrize(
    ("body", "content_type", "fragment"),
    [
        (b"apiVersion: [", "application/yaml", "malformed YAML"),
        (b"a: &x 1\nb: *x\n", "application/yaml", "aliases"),
        (b"{not json", "application/json", "JSON parse error"),
        (b"x: " + b"y" * 70000, "application/yaml", "larger than"),
    ],
)
def test_unparseable_bodies_are_400_not_500(api, body, content_type, fragment):
    response = api("lead").post("/api/v1/pools/", body, content_type=content_type)
    assert response.status_code == 400
    assert fragment in response.json()["errors"][0]["message"]
    assert GpuNodePool.objects.count() == 0


def test_a_duplicate_name_is_409(api, algorithm_pool, train_document):
    response = api("other_lead").post("/api/v1/pools/", train_document, format="json")
    assert response.status_code == 409
    assert response.json()["errors"][0]["message"] == "a pool named 'train-pool-a' already exists (pool names are unique across all teams): choose another name"


def test_patch_is_a_merge_patch_and_raising_min_creates_an_order(api, actors, algorithm_pool):
    services.order_approve(user=actors["admin"], order=algorithm_pool.orders.get())
    response = api("lead").patch("/api/v1/pools/train-pool-a/", {"spec": {"nodeCount": {"min": 3}}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["nodeCount"] == {"min": 3, "max": 6}
    assert response.json()["metadata"]["generation"] == 2
    assert algorithm_pool.orders.filter(kind="grow", node_count=1, status="Pending").exists()


def test_patch_of_an_immutable_field_is_400(api, algorithm_pool):
    response = api("lead").patch("/api/v1/pools/train-pool-a/", {"spec": {"gpuModel": "H100_80G"}}, format="json")
    assert response.status_code == 400
    assert "immutable" in fields(response)["spec.gpuModel"]


def test_scale_sets_min_and_max(api, algorithm_pool):
    response = api("lead").post("/api/v1/pools/train-pool-a/scale/", {"max": 4}, format="json")
    assert response.status_code == 200
    assert response.json()["spec"]["nodeCount"] == {"min": 2, "max": 4}
    response = api("lead").post("/api/v1/pools/train-pool-a/scale/", {"min": 5}, format="json")
    assert response.status_code == 400
    assert "spec.nodeCount.min" in fields(response)
    for huge in (101, 10**27):  # the site's most, not a bound of the request's own
        response = api("lead").post("/api/v1/pools/train-pool-a/scale/", {"max": huge}, format="json")
        assert response.status_code == 400 and response.json()["errors"] == [{"field": "spec.nodeCount.max", "message": "must be at most 100"}], response.json()


def test_delete_withdraws_orders_and_removes_a_pool_without_nodes(api, algorithm_pool):
    assert api("lead").delete("/api/v1/pools/train-pool-a/").status_code == 204
    assert api("lead").get("/api/v1/pools/train-pool-a/").status_code == 404
    assert PoolOrder.objects.get().status == "Withdrawn"


def test_events_are_listed_newest_first(api, algorithm_pool):
    response = api("lead").get("/api/v1/pools/train-pool-a/events/")
    assert response.status_code == 200
    assert [e["reason"] for e in response.json()] == ["OrderRequested", "QuotaValidated", "PoolCreated"]


def test_admins_approve_and_reject_orders_through_the_api(api, actors, algorithm_pool):
    order = algorithm_pool.orders.get()
    assert api("admin").post(f"/api/v1/orders/{order.pk}/approve/").json()["status"] == "Approved"
    again = api("admin").post(f"/api/v1/orders/{order.pk}/approve/")
    assert again.status_code == 409 and "already decided" in again.json()["errors"][0]["message"]
    other = services.pool_create(user=actors["other_lead"], document=make_document("infer", region="cn-north-1a"))
    missing_reason = api("admin").post(f"/api/v1/orders/{other.orders.get().pk}/reject/", {}, format="json")
    assert missing_reason.status_code == 400 and "reason" in fields(missing_reason)
    rejected = api("admin").post(f"/api/v1/orders/{other.orders.get().pk}/reject/", {"reason": "no budget"}, format="json")
    assert rejected.json()["status"] == "Rejected" and rejected.json()["reason"] == "no budget"


def test_order_ids_that_are_not_numbers_are_400(api):
    assert api("admin").get("/api/v1/orders/abc/").status_code == 400


# --- authorization: own team / other team / member / finance / admin / anonymous ------------

READS = [
    ("get", "/api/v1/pools/train-pool-a/"),
    ("get", "/api/v1/pools/train-pool-a/events/"),
    ("get", "/api/v1/orders/{order}/"),
]
WRITES = [
    ("patch", "/api/v1/pools/train-pool-a/", {"spec": {"nodeCount": {"max": 5}}}),
    ("put", "/api/v1/pools/train-pool-a/", "document"),
    ("post", "/api/v1/pools/train-pool-a/scale/", {"max": 5}),
    ("delete", "/api/v1/pools/train-pool-a/", None),
]
READ_STATUS = {"lead": 200, "member": 200, "finance": 200, "admin": 200, "other_lead": 404, None: 401}
WRITE_STATUS = {"lead": (200, 204), "admin": (200, 204), "member": (403,), "finance": (403,), "other_lead": (404,), None: (401,)}


@pytest.mark.parametrize("role", list(READ_STATUS))
@pytest.mark.parametrize(("method", "url"), READS)
def test_reads_by_role(api, algorithm_pool, role, method, url):
    response = getattr(api(role), method)(url.format(order=algorithm_pool.orders.get().pk))
    assert response.status_code == READ_STATUS[role]


@pytest.mark.parametrize("role", list(WRITE_STATUS))
@pytest.mark.parametrize(("method", "url", "body"), WRITES)
def test_writes_by_role(api, algorithm_pool, train_document, role, method, url, body):
    before = db_state()
    payload = train_document if body == "document" else body
    response = getattr(api(role), method)(url, payload, format="json")
    assert response.status_code in WRITE_STATUS[role], response.content
    assert response.json()["errors"] if response.status_code >= 400 else True
    if response.status_code >= 400:
        assert db_state() == before


@pytest.mark.parametrize("role", ["lead", "member", "finance", "other_lead", None])
def test_only_admins_decide_orders_through_the_api(api, algorithm_pool, role):
    order = algorithm_pool.orders.get()
    expected = {None: 401, "other_lead": 404}.get(role, 403)
    assert api(role).post(f"/api/v1/orders/{order.pk}/approve/").status_code == expected
    assert api(role).post(f"/api/v1/orders/{order.pk}/reject/", {"reason": "x"}, format="json").status_code == expected
    order.refresh_from_db()
    assert order.status == "Pending"


@pytest.mark.parametrize(("role", "visible"), [("lead", {"train-pool-a"}), ("other_lead", {"infer"}), ("finance", {"train-pool-a", "infer"}), ("admin", {"train-pool-a", "infer"})])
def test_lists_show_only_what_the_user_may_see(api, actors, algorithm_pool, role, visible):
    services.pool_create(user=actors["other_lead"], document=make_document("infer", region="cn-north-1a"))
    assert {p["metadata"]["name"] for p in api(role).get("/api/v1/pools/").json()} == visible
    assert {o["pool"] for o in api(role).get("/api/v1/orders/").json()} == visible
    assert api(None).get("/api/v1/pools/").status_code == 401


def test_members_and_finance_cannot_create_pools(api, train_document):
    assert api("member").post("/api/v1/pools/", train_document, format="json").status_code == 403
    assert api("finance").post("/api/v1/pools/", train_document, format="json").status_code == 403


def test_a_lead_cannot_create_for_another_team(api, train_document):
    response = api("lead").post("/api/v1/pools/?team=inference", train_document, format="json")
    assert response.status_code == 400 and "team" in fields(response)
    train_document["metadata"]["team"] = "inference"
    assert api("lead").post("/api/v1/pools/", train_document, format="json").status_code == 400


def test_list_filters_and_ordering(api, actors, algorithm_pool):
    services.pool_create(user=actors["other_lead"], document=make_document("infer", region="cn-north-1a", gpuModel="T4", nodeType="GPU_4_CARD"))
    names = lambda query: [p["metadata"]["name"] for p in api("admin").get(f"/api/v1/pools/?{query}").json()]  # noqa: E731
    assert names("gpuModel=T4") == ["infer"]
    assert names("team=algorithm") == ["train-pool-a"]
    assert names("ordering=-name") == ["train-pool-a", "infer"]
    assert names("phase=Ready") == []


def test_the_pool_list_endpoint_does_not_grow_queries_with_pools(api, actors):
    client = api("lead")
    create_pools(actors, 2)
    with CaptureQueriesContext(connection) as few:
        assert len(client.get("/api/v1/pools/").json()) == 2
    create_pools(actors, 8, offset=2)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/v1/pools/").json()) == 10
    assert len(many) == len(few) <= 6


def test_the_order_list_endpoint_does_not_grow_queries_with_orders(api, actors):
    client = api("admin")
    create_pools(actors, 2)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/orders/")
    create_pools(actors, 8, offset=2)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/v1/orders/").json()) == 10
    assert len(many) == len(few) <= 6


def test_the_schema_and_docs_are_served(api, client):
    schema = api("lead").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/api/v1/pools/", "/api/v1/pools/{name}/", "/api/v1/orders/{id}/approve/", "/api/v1/pools/{name}/events/"} <= set(paths)
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
    assert assets_off_site(docs.content.decode()) == []


def test_a_token_is_issued_for_a_valid_login(client, actors):
    response = client.post("/api/v1/auth/token/", {"username": "lead", "password": "pw-lead"})
    assert response.status_code == 200 and response.json()["token"]
    bad = client.post("/api/v1/auth/token/", {"username": "lead", "password": "wrong"})
    assert bad.status_code == 400 and bad.json()["errors"]


def test_session_auth_requires_csrf(actors, train_document):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(actors["lead"])
    response = browser.post("/api/v1/pools/", dump_yaml(train_document), content_type="application/yaml")
    assert response.status_code == 403 and "CSRF" in response.json()["errors"][0]["message"]
    assert PoolEvent.objects.count() == 0
