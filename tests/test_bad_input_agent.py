"""The bad-input corpus on the endpoints that take credentials rather than a session (issue #9
item 5): the node-agent API (join tokens, join, credential rotation, reports) and sign-in (the
login form, the admin login, the CLI's token endpoint). Each refusal is a 4xx naming the field,
issues no credential and writes nothing (`tests.corpus.db_state`) but, for a refused report
batch, the node's `ReportRejected` Warning event; a refused login re-renders its form, as
Django's does. Reports are also checked against physics and the columns (PHYSICS below; the
ranges are in docs/operator.md). The agent API's generated-input fuzzing is
tests/monitoring/test_agent_api_fuzz.py; report semantics are tests/monitoring/test_reports.py.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from monitoring.api.views import ReportsView
from pools.models import PoolEvent
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
        ({"node": "train-pool-a-0", "ttlSeconds": "600"}, "ttlSeconds"),  # a JSON integer, as the scale endpoint takes
    ],
    ids=["overlong-node", "nul-node", "list-node", "negative-ttl", "beyond-int64-ttl", "float-ttl", "string-ttl", "quoted-ttl"],
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


def _gpu(**changes) -> dict:
    """One GPU of a report with some fields changed (report(1)'s GPU 0: 40000 of 81920 MiB)."""
    return {**report(1)["gpus"][0], **changes}


FB_USED, UTIL = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"
# Telemetry against physics and the columns (issue "no 500 on hostile input" item 2): each was a
# 500 (IntegrityError, OverflowError on SQLite) or was stored and shown on /metrics and the node page.
PHYSICS = {
    "negative-memory": ([_gpu(**{FB_USED: -5000})], f"gpus[0].{FB_USED}"),
    "float-1e308-memory": ([_gpu(**{FB_USED: 1e308})], f"gpus[0].{FB_USED}"),
    "beyond-int64-memory": ([_gpu(**{FB_USED: 10**30})], f"gpus[0].{FB_USED}"),
    "used-above-total": ([_gpu(**{FB_USED: 81921})], f"gpus[0].{FB_USED}"),
    "free-above-total": ([_gpu(DCGM_FI_DEV_FB_FREE=10**6)], "gpus[0].DCGM_FI_DEV_FB_FREE"),
    "util-1e308": ([_gpu(**{UTIL: 1e308})], f"gpus[0].{UTIL}"),
    "util-above-100": ([_gpu(**{UTIL: 101})], f"gpus[0].{UTIL}"),
    "negative-util": ([_gpu(**{UTIL: -0.5})], f"gpus[0].{UTIL}"),
    "hot-temperature": ([_gpu(DCGM_FI_DEV_GPU_TEMP=1000)], "gpus[0].DCGM_FI_DEV_GPU_TEMP"),
    "negative-temperature": ([_gpu(DCGM_FI_DEV_GPU_TEMP=-273)], "gpus[0].DCGM_FI_DEV_GPU_TEMP"),
    "huge-power": ([_gpu(DCGM_FI_DEV_POWER_USAGE=1e6)], "gpus[0].DCGM_FI_DEV_POWER_USAGE"),
    "float-ecc": ([_gpu(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0.5)], "gpus[0].DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    "beyond-int64-any-metric": ([_gpu(DCGM_FI_DEV_NEW_FIELD=2**63)], "gpus[0].DCGM_FI_DEV_NEW_FIELD"),
    "negative-any-metric": ([_gpu(DCGM_FI_DEV_NEW_FIELD=-1)], "gpus[0].DCGM_FI_DEV_NEW_FIELD"),
    "gpu-index-beyond-the-node": ([_gpu(index=64)], "gpus[0].index"),
    "fourth-gpu": ([_gpu(index=i) for i in range(3)] + [_gpu(index=3, **{FB_USED: -5000})], f"gpus[3].{FB_USED}"),
}
REPORT_BODIES = {
    **{case: ({"reports": [report(1), _report(seq=2, gpus=gpus)]}, f"reports[1].{field}") for case, (gpus, field) in PHYSICS.items()},
    "escape-in-gpu-name": ({"reports": [_report(gpus=[_gpu(name="\x1b]0;PWNED\x07")])]}, "reports[0].gpus[0].name"),
    "c1-in-driver": ({"reports": [_report(driverVersion="535\x9b31m")]}, "reports[0].driverVersion"),
    "escape-in-ack": ({"reports": [_report()], "acks": [{"id": 1, "ok": True, "message": "\x1b[2J"}]}, "acks[0].message"),
    "negative-time": ({"reports": [_report(at=-1)]}, "reports[0].at"),
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


def only_a_rejection_was_recorded(before: dict, node) -> None:
    """Nothing stored but the node's `ReportRejected` Warning event (the server records each
    refusal of an authenticated agent's batch)."""
    after = db_state()
    old_events = {row[0] for row in before.pop("pools.PoolEvent")}
    new_events = [e for e in PoolEvent.objects.filter(node=node) if e.pk not in old_events]
    after.pop("pools.PoolEvent")
    assert after == before
    assert [(e.type, e.reason) for e in new_events] == [("Warning", "ReportRejected")]


@pytest.mark.parametrize("case", sorted(REPORT_BODIES))
def test_bad_reports_are_a_400_naming_the_field_and_store_nothing(agent, node, case):
    body, field = REPORT_BODIES[case]
    before = db_state()
    response = agent.post(AGENT + "reports/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(field) for f in api_fields(response)), response.json()
    only_a_rejection_was_recorded(before, node)


@pytest.mark.parametrize("number", ["1e309", "-1e309", "1E400"])
def test_a_number_json_turns_into_infinity_is_a_400_in_any_field(agent, node, number):
    before = db_state()
    for field in ('"DCGM_FI_DEV_FB_USED"', '"DCGM_FI_DEV_GPU_UTIL"', '"DCGM_FI_DEV_NEW_FIELD"'):
        body = f'{{"reports": [{{"seq": 1, "at": 1764547200, "gpus": [{{"index": 0, {field}: {number}}}]}}]}}'
        response = agent.generic("POST", AGENT + "reports/", body, content_type="application/json")
        assert response.status_code == 400 and api_fields(response) == [f"reports[0].gpus[0].{field.strip(chr(34))}"]
    for body in (f'{{"reports": [{{"seq": 1, "at": {number}}}]}}', f'{{"reports": [{{"seq": {number}, "at": 1764547200}}]}}'):
        assert agent.generic("POST", AGENT + "reports/", body, content_type="application/json").status_code == 400
    after = db_state()
    after.pop("pools.PoolEvent"), before.pop("pools.PoolEvent")
    assert after == before


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


@pytest.mark.parametrize("body", [b"null", b"[]", b"0", b'""', b"false", b'{"node": "train-pool-a-0", "bogus": 1}'],
                         ids=["null", "empty-list", "zero", "empty-string", "false", "unknown-field"])  # fmt: skip
def test_a_rotation_whose_body_is_not_a_mapping_of_its_fields_keeps_the_credential(agent, body):
    """`null`, `[]`, `0` were taken for an empty body (`request.data or {}`) and rotated it."""
    before = db_state()
    response = agent.post(AGENT + "credential/rotate/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == (["bogus"] if b"bogus" in body else [""])
    assert db_state() == before


@pytest.mark.parametrize("ttl", ["٣٦٠٠", "3_600", "３６００"])
def test_a_join_token_ttl_in_other_digits_mints_nothing(api, node, ttl):
    client = api("admin")
    before = db_state()
    response = client.post(AGENT + "join-tokens/", {"node": "train-pool-a-0", "ttlSeconds": ttl}, format="json")
    assert response.status_code == 400 and api_fields(response) == ["ttlSeconds"], response.content[:300]
    assert db_state() == before


def test_a_lone_surrogate_in_a_report_is_a_400_naming_where(agent, node):
    """`"\\ud800"` is no text (half of a surrogate pair): the fast path hands it to DRF's, which refuses it."""
    import json

    body = json.dumps({"reports": [_report(gpus=[_gpu(name="A100\ud800")])]})
    before = db_state()
    response = agent.post(AGENT + "reports/", body.encode(), content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == ["reports[0].gpus[0].name"]
    assert db_state() == before


# --- JSON types: every list, object and text field of the agent's documents ------------------
# (reviewer's defect: `"acks": 5` was a 500, `'int' object is not iterable`, on both paths; a
# string or an object was walked character by character or key by key; `{"node": 5}` on
# rotation was looked up as node "5" and answered 403.) Every wrong type is a 400 on its field
# and stores nothing, through the fast path and through DRF's (a charset the fast path does not
# read); `null` in an optional list is no list, as an absent one.

WRONG_TYPES = {"int": 5, "true": True, "false": False, "zero": 0, "string": "ab", "empty-string": "", "object": {"x": 1}}
VIA_DRF = "application/json; charset=iso-8859-1"  # DRF's JSONParser reads it; the fast path hands it over
REPORT_PATHS = {"fast": "application/json", "drf": VIA_DRF}


def _list_fields(value) -> dict:
    """The body with `value` as each optional list of the batch, and the field it is refused on."""
    return {
        "acks": ({"reports": [_report()], "acks": value}, "acks"),
        "gpus": ({"reports": [_report(gpus=value)]}, "reports[0].gpus"),
        "xids": ({"reports": [_report(xids=value)]}, "reports[0].xids"),
    }


TYPE_BODIES = {
    **{f"{name}-{kind}": case for kind, value in WRONG_TYPES.items() for name, case in _list_fields(value).items()},
    **{f"reports-{kind}": ({"reports": value}, "reports") for kind, value in {**WRONG_TYPES, "null": None}.items()},
    **{f"node-{kind}": ({"reports": [_report()], "node": value}, "node") for kind, value in {**WRONG_TYPES, "list": ["n"]}.items() if kind not in ("string", "empty-string")},
    **{f"ack-{kind}": ({"reports": [_report()], "acks": [value]}, "acks[0]") for kind, value in {**WRONG_TYPES, "list": [], "null": None}.items() if kind != "object"},
    **{f"ack-ok-{kind}": ({"reports": [_report()], "acks": [{"id": 1, "ok": value}]}, "acks[0].ok") for kind, value in {"string": "false", "int": 1, "list": [], "object": {}}.items()},
    **{f"oldest-seq-{kind}": ({"reports": [_report()], "oldestSeq": value}, "oldestSeq") for kind, value in {**WRONG_TYPES, "list": [1]}.items() if kind != "int"},
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(REPORT_PATHS))
@pytest.mark.parametrize("case", sorted(TYPE_BODIES))
def test_a_report_field_of_the_wrong_json_type_is_a_400_on_it_on_both_paths(agent, node, case, path):
    body, field = TYPE_BODIES[case]
    before = db_state()
    response = agent.post(AGENT + "reports/", json.dumps(body), content_type=REPORT_PATHS[path])
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == [field], response.json()
    if field in ("acks", "reports[0].gpus", "reports[0].xids"):
        assert response.json()["errors"][0]["message"].startswith("must be a list"), response.json()
    only_a_rejection_was_recorded(before, node)


def test_acks_as_a_number_is_refused_by_drf_too(agent, node, monkeypatch):
    """The reviewer's request, `"acks": 5`, through each path: the fast one answers it itself
    (no DRF post; a declared UTF-8 charset too), the other is DRF's `post`; all 400 `acks: must
    be a list`."""
    drf_posts, drf_post = [], ReportsView.post
    monkeypatch.setattr(ReportsView, "post", lambda view, request: drf_posts.append(1) or drf_post(view, request))
    body = json.dumps({"reports": [{"seq": 34, "at": "2026-12-05T21:30:00Z"}], "acks": 5})
    for content_type, via_drf in (("application/json", 0), ("application/json; charset=utf-8", 0), (VIA_DRF, 1)):
        response = agent.post(AGENT + "reports/", body, content_type=content_type)
        assert response.status_code == 400 and response.json() == {"errors": [{"field": "acks", "message": "must be a list"}]}
        assert len(drf_posts) == via_drf


@pytest.mark.parametrize("path", sorted(REPORT_PATHS))
def test_null_optional_lists_are_none_and_the_report_is_stored(agent, node, path):
    body = {"reports": [{"seq": 1, "at": "2026-12-05T21:30:00Z", "gpus": None, "xids": None}], "acks": None, "oldestSeq": None, "node": None}
    response = agent.post(AGENT + "reports/", json.dumps(body), content_type=REPORT_PATHS[path])
    assert response.status_code == 200 and response.json()["stored"] == 1, response.content[:300]


TEXT_FIELD_TYPES = {"int": 5, "float": 1.5, "true": True, "list": ["n"], "object": {"x": 1}, "null": None}


@pytest.mark.parametrize("kind", sorted(TEXT_FIELD_TYPES))
def test_a_rotation_naming_no_string_is_a_400_on_node(agent, kind):
    """`{"node": 5}` was looked up as node "5": a 403 ("not '5'")."""
    before = db_state()
    response = agent.post(AGENT + "credential/rotate/", {"node": TEXT_FIELD_TYPES[kind]}, format="json")
    assert response.status_code == 400 and api_fields(response) == ["node"], response.content[:300]
    if kind != "null":
        assert response.json()["errors"][0]["message"] == "must be a string"
    assert db_state() == before


@pytest.mark.parametrize("kind", sorted(TEXT_FIELD_TYPES))
def test_a_join_or_join_token_naming_no_string_is_a_400_on_the_field(api, node, kind):
    admin = api("admin")
    value, before = TEXT_FIELD_TYPES[kind], db_state()
    for body, field in (({"token": value, "node": node.name}, "token"), ({"token": "abc", "node": value}, "node")):
        response = APIClient().post(AGENT + "join/", body, format="json")
        assert response.status_code == 400 and api_fields(response) == [field], (body, response.content[:300])
    response = admin.post(AGENT + "join-tokens/", {"node": value}, format="json")
    assert response.status_code == 400 and api_fields(response) == ["node"], response.content[:300]
    assert db_state() == before
