"""The bad-input corpus on the endpoints that take credentials rather than a session (issue #9
item 5): the node-agent API (join tokens, join, credential rotation, reports) and sign-in (the
login form, the admin login, the CLI's token endpoint). Each refusal is a 4xx naming the field,
issues no credential and writes nothing (`tests.corpus.db_state`); a refused login re-renders
its form, as Django's does. The agent API's generated-input fuzzing is
tests/monitoring/test_agent_api_fuzz.py; report semantics are tests/monitoring/test_reports.py.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.corpus import (
    OVERLONG,
    SCRIPT,
    SQL,
    api_fields,
    db_state,
    escaped,
    once_per_module,
    people,
    token_client,
)
from tests.monitoring.conftest import joined, report
from tests.pools.pod_helpers import pool_with_nodes

AGENT = "/api/agent/v1/"
pytestmark = pytest.mark.django_db


def _build() -> dict:
    actors = people()
    return {"actors": actors, "node": pool_with_nodes(actors["lead"], nodes=1).nodes.get()}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """The conftest actors and a pool with one Ready node, built once (each test rolls back to it)."""
    yield from once_per_module(django_db_blocker, _build)


@pytest.fixture
def node(world):
    return world["node"]


@pytest.fixture
def actors(world):
    return world["actors"]


@pytest.fixture
def api(world):
    return lambda role: token_client(world["actors"][role])


JOINS = {
    "malformed-token": ({"token": "abc", "node": "train-pool-a-0"}, 401, "token"),
    "script-token": ({"token": SCRIPT, "node": "train-pool-a-0"}, 401, "token"),
    "sql-token": ({"token": "' OR 1=1 --", "node": "train-pool-a-0"}, 401, "token"),
    "nul-token": ({"token": "abc\x00", "node": "train-pool-a-0"}, 400, "token"),
    "overlong-token": ({"token": "t" * 101, "node": "train-pool-a-0"}, 400, "token"),
    "list-token": ({"token": ["a"], "node": "train-pool-a-0"}, 400, "token"),
    "overlong-node": ({"token": "abc", "node": "n" * 101}, 400, "node"),
    "nul-node": ({"token": "abc", "node": "n\x00"}, 400, "node"),
    "unicode-node": ({"token": "abc", "node": "nöde-ä"}, 401, "token"),
    "not-an-object": ([1, 2], 400, ""),
}


@pytest.mark.parametrize("case", sorted(JOINS))
def test_a_bad_join_is_refused_and_issues_nothing(node, case):
    body, expected, field = JOINS[case]
    before = db_state()
    response = APIClient().post(AGENT + "join/", body, format="json")
    assert response.status_code == expected, response.content[:300]
    assert field in api_fields(response)
    assert db_state() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"node": "n" * 101}, "node"),
        ({"node": "a\x00"}, "node"),
        ({"node": ["train-pool-a-0"]}, "node"),
        ({"node": "train-pool-a-0", "ttlSeconds": -5}, "ttlSeconds"),
        ({"node": "train-pool-a-0", "ttlSeconds": 10**30}, "ttlSeconds"),
        ({"node": "train-pool-a-0", "ttlSeconds": 1.5}, "ttlSeconds"),
        ({"node": "train-pool-a-0", "ttlSeconds": "lots"}, "ttlSeconds"),
    ],
    ids=["overlong-node", "nul-node", "list-node", "negative-ttl", "beyond-int64-ttl", "float-ttl", "string-ttl"],
)
def test_a_bad_join_token_request_mints_nothing(api, node, body, field):
    client = api("admin")
    before = db_state()
    response = client.post(AGENT + "join-tokens/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert field in api_fields(response)
    assert db_state() == before


def test_a_join_token_for_a_hostile_node_name_is_a_404(api, node):
    client = api("admin")
    before = db_state()
    for name in (SCRIPT, SQL, "nöde-ä"):
        response = client.post(AGENT + "join-tokens/", {"node": name}, format="json")
        assert response.status_code == 404 and escaped(response)
    assert db_state() == before


@pytest.fixture
def agent(node, actors):
    """An APIClient speaking for the node with its credential."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {joined(node, actors['admin'])}")
    return client


@pytest.mark.parametrize("body", [{"node": "n" * 101}, {"node": ["a"]}, {"node": "a\x00"}], ids=["overlong", "list", "nul"])
def test_a_bad_rotation_keeps_the_credential(agent, body):
    """(Naming another node is refused too, and recorded as a Warning event: tests/monitoring/test_join.py.)"""
    before = db_state()
    response = agent.post(AGENT + "credential/rotate/", body, format="json")
    assert response.status_code == 400 and api_fields(response) == ["node"]
    assert db_state() == before


def _report(**changes) -> dict:
    return {**report(1), **changes}


REPORT_BODIES = {
    "string-seq": ({"reports": [_report(seq="1")]}, "reports[0].seq"),
    "negative-seq": ({"reports": [_report(seq=-1)]}, "reports[0].seq"),
    "bad-time": ({"reports": [_report(at="yesterday")]}, "reports[0].at"),
    "gpus-not-a-list": ({"reports": [_report(gpus="many")]}, "reports[0].gpus"),
    "string-metric": ({"reports": [_report(gpus=[{"index": 0, "DCGM_FI_DEV_GPU_TEMP": "hot"}])]}, "reports[0].gpus[0]"),
    "script-gpu-name": ({"reports": [_report(gpus=[{"index": 0, "name": SCRIPT * 10}])]}, "reports[0].gpus[0].name"),
    "string-xid": ({"reports": [_report(xids=[{"gpu": 0, "xid": "79"}])]}, "reports[0].xids[0].xid"),
    "overlong-driver": ({"reports": [_report(driverVersion="9" * 100)]}, "reports[0].driverVersion"),
    "no-reports": ({"reports": []}, "reports"),
    "reports-not-a-list": ({"reports": {"seq": 1}}, "reports"),
    "not-an-object": ([_report()], ""),
}


@pytest.mark.parametrize("case", sorted(REPORT_BODIES))
def test_reports_of_the_wrong_types_are_a_400_naming_the_field(agent, case):
    body, field = REPORT_BODIES[case]
    before = db_state()
    response = agent.post(AGENT + "reports/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(field) for f in api_fields(response))
    assert db_state() == before


BEYOND_INT64 = [
    pytest.param({"reports": [_report()], "oldestSeq": 10**30}, "oldestSeq", id="oldest-seq"),
    pytest.param({"reports": [_report(xids=[{"gpu": 0, "xid": 10**30}])]}, "reports[0].xids[0].xid", id="xid"),
    pytest.param({"reports": [_report(xids=[{"gpu": 10**30, "xid": 79}])]}, "reports[0].xids[0].gpu", id="xid-gpu"),
    pytest.param({"reports": [_report(seq=10**30)]}, "reports[0].seq", id="seq"),
    pytest.param({"reports": [_report()], "acks": [{"id": 10**30, "ok": True}]}, "acks[0].id", id="ack-id"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), BEYOND_INT64)
def test_integers_beyond_the_database_range_in_reports_are_a_400(agent, body, field):
    """Every integer of a report is stored in an integer column: one beyond its range is bad
    input like any other (it was a 500, or a silently ignored value)."""
    response = agent.post(AGENT + "reports/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert field in api_fields(response)


def test_a_malformed_content_length_is_not_a_500(agent):
    response = agent.generic("POST", AGENT + "reports/", '{"reports": []}', content_type="application/json", CONTENT_LENGTH="abc")
    assert response.status_code == 400


# --- sign-in: the login form, the admin login and the token endpoint ---------------------------


@pytest.mark.parametrize("username", [SCRIPT, "a\x00b", OVERLONG * 10, "' OR 1=1 --"], ids=["script", "nul", "overlong", "sql"])
def test_hostile_usernames_sign_nobody_in(client, actors, username):
    """An overlong name was a 500 on PostgreSQL: django-axes stored it verbatim in a varchar(255)
    (config/login_attempts.py bounds it)."""
    before = db_state()
    for url in ("/login/", "/admin/login/"):
        page = client.post(url, {"username": username, "password": "x"}, REMOTE_ADDR="10.7.7.7")
        assert page.status_code == 200 and escaped(page) and not page.context["form"].is_valid(), url
    token = client.post("/api/v1/auth/token/", {"username": username, "password": "x"}, REMOTE_ADDR="10.7.7.8")
    assert token.status_code == 400 and token.json()["errors"]
    assert db_state() == before
