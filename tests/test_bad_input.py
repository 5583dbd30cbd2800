"""A bad-input corpus for every write path (issue #9 acceptance item 5): malformed YAML, entity
expansion, documents over the size limit, unicode and overlong names, negative, huge and
non-integer sizes, `<script>` in labels, SQL-like (and NUL) strings in filters. Each gets a 4xx
(forms: re-rendered with the error beside the field, status 400) with a message naming the
field, nothing is written (every row of every product table compared, `tests.corpus.db_state`)
and nothing renders unescaped.

The write paths, and where each is covered:

web (session + CSRF)
  POST /pools/new/ (form with htmx label, node-label and taint rows)     here
  POST /pools/<name>/edit/                                               here
  POST /pools/import/ (YAML paste and upload)                            here, tests/pools/test_security.py
  POST /pools/<name>/delete/, /pods/<ns>/<name>/delete/                  here (hostile names: 404)
  POST /disruption-budgets/new/ (PodDisruptionBudget YAML), .../delete/  here, tests/pools/test_views_disruption_budgets.py
  POST /orders/<id>/approve|reject/                                      here
  POST /pods/new/ (Pod YAML)                                             here
  POST /pools/<name>/fragmentation/apply/, /fragmentation/apply/         here
  POST /pools/<name>/nodes/<node>/ action=approve|reject|revoke|join-token|inject-fault   here
  POST /login/ (and /admin/login/)                                       tests/test_bad_input_agent.py
  POST /logout/ takes no input
  reads with query strings: /pools/ /pools/new/row/ (the htmx row) /pods/ /orders/ /audit/
  /costs/ /costs/budgets/                                                here
  POST /pools/new/preview/?pool=NAME (the form's YAML)                   here (hostile names: 404)
  budgets: a pool's budget is `spec.budget` (form `budget_monthly`, API `spec.budget.monthly`),
  covered with the pools; finance's forms: POST /costs/budgets/teams/new/  here,
  /costs/budgets/pools/<name>/ and .../teams/<slug>/    tests/billing/test_budget_sources.py
  (team budgets have no API write path).
REST API /api/v1/
  POST /pools/ (JSON, YAML)                                              here, tests/pools/test_security.py
  PUT and PATCH /pools/<name>/ (JSON, YAML), POST /pools/<name>/scale/, DELETE /pools/<name>/   here
  POST /orders/<id>/approve|reject/                                      here
  POST /pods/ (JSON, YAML), DELETE /pods/<ns>/<name>/                    here
  POST /poddisruptionbudgets/, PUT and DELETE /poddisruptionbudgets/<ns>/<name>/   here (names),
                                                                         tests/pools/test_api_disruption_budgets.py
  POST /pools/<name>/fragmentation/apply/, /fragmentation/apply/         here
  POST /auth/token/                                                      tests/test_bad_input_agent.py
  GET /costs/, /pools/, /pods/, /orders/ filters                         here, tests/pools/test_security.py
  every operation with generated input                                   tests/test_api_fuzz.py
  bodies that are no mapping, unknown fields, keys given twice, non-ASCII digits   tests/test_bad_input_bodies.py
node-agent API /api/agent/v1/
  POST join-tokens/, join/, credential/rotate/, reports/                 tests/test_bad_input_agent.py,
                                                                         tests/monitoring/test_agent_api_fuzz.py
  POST simulated-faults/ (no body; the node comes from the credential)   tests/monitoring/test_sim_faults.py
CLI `ebcloud`
  node-pool create|apply -f, scale, delete, fragmentation --apply; pod create -f, delete;
  order approve|reject; cost export -o FILE; login                       tests/test_bad_input_cli.py
Django admin /admin/ (platform admins)
  node prices, lease terms, price book entries                           tests/billing/test_price_admin.py
  the account (top-up and correction)                                    tests/billing/test_account_admin.py
  quotas                                                                 tests/pools/test_quota_admin.py
management commands (the operator's)
  loop `--interval`, demo_fleet's seconds, meter --hour                  tests/test_bad_input_commands.py
query parameters given twice, pool `ordering`, YAML keys not strings,
  merge patches past the size limit, the import page's tampered team    tests/test_bad_input_params.py
Not covered: the admin site's other model forms (Django's own validation).

Conventions: the action buttons that post and redirect on success (repack, node page) answer a
refusal with their page again, the error shown ("field: message"), and a 400 (409 for a state
conflict), the order queue included; the login form re-renders with 200, as Django's does.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile

from pools.core.documents import dump_yaml
from pools.models import Node
from pools.models.cloud import SimMachine
from pools.models.repair import RepairApproval
from tests import bad_input_world
from tests.conftest import make_document
from tests.corpus import (
    BAD_IDS,
    COST_PARAMS,
    DOCUMENT_CORPUS,
    DOCUMENT_FIELDS,
    FORM,
    FORM_CORPUS,
    HOSTILE_NAMES,
    HOSTILE_VALUES,
    MAX_NODES,
    NODE_ACTIONS,
    OVERLONG,
    PATCHES,
    POD_CORPUS,
    POD_FIELDS,
    REASONS,
    SCALES,
    SCRIPT,
    SQL,
    TEAM_BUDGET_FORM,
    TEAM_BUDGETS,
    YAML_CORPUS,
    api_fields,
    db_state,
    escaped,
    pod_document,
)

pytestmark = pytest.mark.django_db

# The shared world's fixtures (pytest finds them as this module's names).
world, api, browser = bad_input_world.world, bad_input_world.api, bad_input_world.browser


def flashed(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# --- web: the pool form (create and edit), with htmx label/taint rows ------------------------

EDIT_CASES = [c for c, (fields, _) in FORM_CORPUS.items() if not {"name", "team", "region", "gpu_model"} & set(fields)]


def assert_form_refused(response, where: str, before: dict) -> None:
    assert response.status_code == 400, response.content[:300]
    form = response.context["form"]
    if where in form.fields:
        assert form.errors.get(where), (where, form.errors, form.row_errors)
    else:
        assert form.row_errors[where], (where, form.errors, form.row_errors)
    assert escaped(response)
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(FORM_CORPUS))
def test_the_pool_form_refuses_bad_input_beside_the_field(browser, world, case):
    changes, where = FORM_CORPUS[case]
    client = browser("lead")
    before = db_state()
    assert_form_refused(client.post("/pools/new/", {**FORM, **changes}), where, before)


@pytest.mark.parametrize("case", sorted(EDIT_CASES))
def test_the_edit_form_refuses_bad_input_and_keeps_the_pool(browser, world, case):
    changes, where = FORM_CORPUS[case]
    client = browser("lead")
    before = db_state()
    assert_form_refused(client.post("/pools/train-pool-a/edit/", {**FORM, "name": "train-pool-a", **changes}), where, before)


# --- web: YAML import (paste and upload; the reverse pairs are in test_security.py) ------------


@pytest.mark.parametrize("case", sorted(YAML_CORPUS))
def test_bad_yaml_pasted_into_the_import_page_is_refused(browser, world, case):
    client = browser("lead")
    before = db_state()
    response = client.post("/pools/import/", {"document": YAML_CORPUS[case]})
    assert response.status_code == 400
    assert response.context["spec_errors"] or response.context["form"].errors
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(DOCUMENT_CORPUS))
def test_bad_documents_uploaded_to_the_import_page_name_the_field(browser, world, case):
    client = browser("lead")
    before = db_state()
    upload = SimpleUploadedFile("pool.yaml", dump_yaml(DOCUMENT_CORPUS[case]).encode())
    response = client.post("/pools/import/", {"upload": upload})
    assert response.status_code == 400
    assert any(e.field.startswith(DOCUMENT_FIELDS[case]) for e in response.context["spec_errors"])
    assert DOCUMENT_FIELDS[case].encode() in response.content and escaped(response)
    assert db_state() == before


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"upload": SimpleUploadedFile("pool.yaml", b"\xff\xfe\x00binary")}, "not UTF-8"),
        ({"upload": SimpleUploadedFile("pool.yaml", b"a: '" + b"y" * (2 * 1024 * 1024) + b"'\n")}, "larger than"),
        ({"document": "y" * (3 * 1024 * 1024)}, ""),  # over DATA_UPLOAD_MAX_MEMORY_SIZE: Django's 400
    ],
    ids=["not-utf8", "upload-over-limit", "paste-over-request-limit"],
)
def test_unreadable_and_oversized_imports_are_a_400(browser, world, payload, message):
    client = browser("lead")
    before = db_state()
    response = client.post("/pools/import/", payload)
    assert response.status_code == 400
    assert message.encode() in response.content
    assert db_state() == before


# --- API: pools (create, replace, merge patch, scale, delete) -----------------------------------


@pytest.mark.parametrize("case", sorted(DOCUMENT_CORPUS))
def test_bad_documents_as_yaml_bodies_are_a_400_naming_the_field(api, world, case):
    client = api("lead")
    before = db_state()
    response = client.post("/api/v1/pools/", dump_yaml(DOCUMENT_CORPUS[case]).encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(DOCUMENT_FIELDS[case]) for f in api_fields(response))
    assert db_state() == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"apiVersion": "ebcloud.io/v1", "kind": ', "application/json"),
        (b"\xff\xfe\x00binary", "application/yaml"),
        (b"\xff\xfe\x00binary", "application/json"),
        (b"apiVersion: ebcloud.io/v1\n", "text/html"),
        (b"apiVersion: ebcloud.io/v1\n", "application/x-yaml"),
        (b"apiVersion=ebcloud.io%2Fv1&kind=GpuNodePool&metadata=x", "application/x-www-form-urlencoded"),
    ],
    ids=["truncated-json", "binary-yaml", "binary-json", "text-html", "x-yaml", "form-encoded"],
)
def test_unparseable_bodies_are_a_4xx_in_the_error_shape(api, world, body, content_type):
    client = api("lead")
    before = db_state()
    response = client.post("/api/v1/pools/", body, content_type=content_type)
    assert response.status_code in (400, 415), response.content[:300]
    api_fields(response)
    assert db_state() == before


@pytest.mark.parametrize("kind", ["pools", "pods"])
@pytest.mark.parametrize("team", [SCRIPT, SQL, "a\x00b", OVERLONG, "inference"], ids=["script", "sql", "nul", "overlong", "not-yours"])
def test_a_team_parameter_naming_no_team_of_yours_is_a_400(api, world, kind, team):
    document = make_document("team-pool") if kind == "pools" else pod_document("team-pod")
    client = api("lead")
    before = db_state()
    response = client.post(f"/api/v1/{kind}/?{urlencode({'team': team})}", document, format="json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == ["team"]
    assert db_state() == before


@pytest.mark.parametrize("kind", ["pools", "pods"])
def test_a_json_body_over_the_size_limit_is_a_400_like_a_yaml_one(api, world, kind):
    """EBCLOUD_MAX_SPEC_BYTES (64 KiB) bounded YAML bodies only; JSON was a way around it."""
    document = make_document("big-json") if kind == "pools" else pod_document("big-json")
    document["metadata"]["labels"] = {f"k{i}": "v" * 60 for i in range(2000)}  # ~150 KB
    client = api("lead")
    before = db_state()
    response = client.post(f"/api/v1/{kind}/", document, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "larger than 65536 bytes" in response.json()["errors"][0]["message"]
    assert db_state() == before


def _aimed(document: dict, case: str) -> dict:
    """The corpus document aimed at the existing pool (unless the bad part is the name itself)."""
    if case.endswith("-name"):
        return document
    return {**document, "metadata": {**(document.get("metadata") or {}), "name": "train-pool-a"}}


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.parametrize("case", sorted(DOCUMENT_CORPUS))
def test_replacing_a_pool_with_a_bad_document_is_a_400_and_changes_nothing(api, world, case, fmt):
    document = _aimed(DOCUMENT_CORPUS[case], case)
    client = api("lead")
    before = db_state()
    if fmt == "json":
        response = client.put("/api/v1/pools/train-pool-a/", document, format="json")
    else:
        response = client.put("/api/v1/pools/train-pool-a/", dump_yaml(document).encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(DOCUMENT_FIELDS[case]) for f in api_fields(response))
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(YAML_CORPUS))
def test_replacing_or_patching_with_bad_yaml_is_a_400(api, world, case):
    client = api("lead")
    before = db_state()
    for method in ("put", "patch"):
        response = getattr(client, method)("/api/v1/pools/train-pool-a/", YAML_CORPUS[case].encode(), content_type="application/yaml")
        if (case, method) == ("empty", "patch"):
            assert response.status_code == 200  # an empty merge patch changes nothing (RFC 7386)
            continue
        assert response.status_code == 400, (method, response.content[:300])
        api_fields(response)
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(PATCHES))
def test_bad_merge_patches_are_a_400_naming_the_field(api, world, case):
    patch, field = PATCHES[case]
    client = api("lead")
    before = db_state()
    response = client.patch("/api/v1/pools/train-pool-a/", patch, format="json")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(field) for f in api_fields(response))
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(SCALES))
def test_bad_scale_requests_are_a_400_naming_the_field(api, world, case):
    body, field = SCALES[case]
    client = api("lead")
    before = db_state()
    response = client.post("/api/v1/pools/train-pool-a/scale/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert any(f.startswith(field) for f in api_fields(response))
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_deleting_by_a_hostile_name_is_a_404_everywhere(api, browser, world, case):
    """A NUL in the path too (PostgreSQL cannot compare such text): a 404, never a 500."""
    name = quote(HOSTILE_NAMES[case], safe="")
    rest, client = api("lead"), browser("lead")
    before = db_state()
    response = rest.delete(f"/api/v1/pools/{name}/")
    assert response.status_code == 404 and api_fields(response) == [""]
    for url in (f"/api/v1/pods/algorithm/{name}/", f"/api/v1/poddisruptionbudgets/algorithm/{name}/", f"/api/v1/poddisruptionbudgets/{name}/x/"):
        assert rest.delete(url).status_code == 404, url
        assert rest.get(url).status_code == 404, url
    for url in (f"/pools/{name}/delete/", f"/pods/algorithm/{name}/delete/", f"/pods/{name}/good-pod/delete/", f"/disruption-budgets/algorithm/{name}/delete/"):
        page = client.post(url)
        assert page.status_code == 404 and escaped(page), url
    for url in (f"/pools/{name}/", f"/pods/algorithm/{name}/", f"/pools/train-pool-a/nodes/{name}/"):
        page = client.get(url)
        assert page.status_code == 404 and escaped(page), url
    preview = client.post(f"/pools/new/preview/?pool={name}")  # a name in the query string, not the path
    assert preview.status_code == 404 and escaped(preview)
    assert db_state() == before


# --- orders: approve and reject (web and API) ------------------------------------------------


@pytest.mark.parametrize("case", sorted(REASONS))
def test_rejecting_an_order_with_a_bad_reason_is_a_400_and_leaves_it_pending(api, world, case):
    client = api("admin")
    before = db_state()
    response = client.post(f"/api/v1/orders/{world['order'].pk}/reject/", {"reason": REASONS[case]}, format="json")
    assert response.status_code == 400, response.content[:300]
    assert api_fields(response) == ["reason"]
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_deciding_a_malformed_order_id_is_a_4xx_in_the_error_shape(api, world, case):
    client = api("admin")
    before = db_state()
    for action in ("approve", "reject"):
        response = client.post(f"/api/v1/orders/{quote(BAD_IDS[case], safe='')}/{action}/", {"reason": "r"}, format="json")
        assert response.status_code in (400, 404), response.content[:300]
        assert api_fields(response) == ["id" if response.status_code == 400 else ""]
    assert db_state() == before


@pytest.mark.parametrize("reason", ["x" * 501, "   ", SCRIPT + "\x00"], ids=["overlong", "blank", "script-nul"])
def test_the_web_order_queue_refuses_a_bad_reason_with_a_message(browser, world, reason):
    client = browser("admin")
    before = db_state()
    response = client.post(f"/orders/{world['order'].pk}/reject/", {"reason": reason})
    assert response.status_code == 400  # the queue again, with the reason
    assert f"Order #{world['order'].pk}: reason: " in response.content.decode()
    assert db_state() == before
    assert escaped(response)


def test_the_web_order_queue_answers_404_for_an_id_beyond_the_database_range(browser, world):
    client = browser("admin")
    before = db_state()
    for action in ("approve", "reject"):
        assert client.post(f"/orders/{'9' * 30}/{action}/", {"reason": "r"}).status_code == 404
    assert db_state() == before


# --- pods: submit (web YAML form, API JSON and YAML) -------------------------------------------


@pytest.mark.parametrize("case", sorted(POD_CORPUS))
def test_bad_pods_are_a_400_naming_the_field_on_the_api_and_the_page(api, browser, world, case):
    rest, page = api("member"), browser("member")
    before = db_state()
    for response in (
        rest.post("/api/v1/pods/", POD_CORPUS[case], format="json"),
        rest.post("/api/v1/pods/", dump_yaml(POD_CORPUS[case]).encode(), content_type="application/yaml"),
    ):
        assert response.status_code == 400, response.content[:300]
        assert any(f.startswith(POD_FIELDS[case]) for f in api_fields(response)), response.json()
    response = page.post("/pods/new/", {"document": dump_yaml(POD_CORPUS[case])})
    assert response.status_code == 400
    assert any(e.field.startswith(POD_FIELDS[case]) for e in response.context["spec_errors"])
    assert escaped(response)
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(YAML_CORPUS))
def test_bad_pod_yaml_is_a_400_on_the_api_and_the_page(api, browser, world, case):
    rest, page = api("member"), browser("member")
    before = db_state()
    response = rest.post("/api/v1/pods/", YAML_CORPUS[case].encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:300]
    api_fields(response)
    response = page.post("/pods/new/", {"document": YAML_CORPUS[case]})
    assert response.status_code == 400
    assert response.context["spec_errors"] or response.context["form"].errors
    assert db_state() == before


# --- fragmentation repack apply (web and API, pool and cluster) --------------------------------


@pytest.mark.parametrize("case", sorted(MAX_NODES))
def test_a_bad_disruption_budget_applies_no_repack(api, browser, world, case):
    value = MAX_NODES[case]
    rest, page = api("admin"), browser("admin")
    before = db_state()
    for url in ("/api/v1/pools/train-pool-a/fragmentation/apply/", "/api/v1/fragmentation/apply/"):
        body = {"maxNodes": int(value) if value.lstrip("-").isdigit() else value}
        response = rest.post(url, body, format="json")
        assert response.status_code == 400, (url, response.content[:300])
        assert api_fields(response) == ["maxNodes"]
    for url in ("/pools/train-pool-a/fragmentation/apply/", "/fragmentation/apply/"):
        response = page.post(url, {"max_nodes": value})
        assert response.status_code == 400, url  # the report again, with the reason
        assert "Repack not applied: maxNodes: must be" in response.content.decode()
        assert escaped(response)
    assert db_state() == before


# --- the node page's admin actions -------------------------------------------------------------


@pytest.fixture
def machine_node(world):
    """The world's first node, backed by a running simulated machine, with a repair awaiting approval."""
    node, pool = world["node"], world["pool"]
    machine = SimMachine.objects.create(provider_id="sim-bad-input", client_token=node.name, zone=pool.zone, gpu_model=pool.gpu_model,
                                        node_type=pool.node_type, gpus=8, billing="monthly", image="i", status="Running")  # fmt: skip
    Node.objects.filter(pk=node.pk).update(provider_id=machine.provider_id)
    return node, RepairApproval.objects.create(pool=pool, node=node, action="reboot", reason="FatalXid")


@pytest.mark.parametrize("case", sorted(NODE_ACTIONS))
def test_bad_node_actions_flash_the_field_and_change_nothing(browser, machine_node, case):
    node, approval = machine_node
    data, field = NODE_ACTIONS[case]
    data = {k: v.replace("{approval}", str(approval.pk)) for k, v in data.items()}
    page = f"/pools/train-pool-a/nodes/{node.name}/"
    client = browser("admin")
    before = db_state()
    response = client.post(page, data)
    assert response.status_code in (400, 409)  # the page again, with the reason
    assert field in response.content.decode()
    assert db_state() == before
    assert escaped(response)


@pytest.mark.parametrize("approval", ["-1", "0", "9" * 30])
def test_an_approval_that_does_not_exist_is_a_404(browser, machine_node, approval):
    node, _ = machine_node
    client = browser("admin")
    before = db_state()
    assert client.post(f"/pools/train-pool-a/nodes/{node.name}/", {"action": "approve", "approval": approval}).status_code == 404
    assert db_state() == before


# --- filters on read pages and the costs API: never a 500, never raw, never a write -----------


@pytest.mark.parametrize("case", sorted(HOSTILE_VALUES))
def test_hostile_filters_on_every_listing_are_harmless(api, browser, world, case):
    value = HOSTILE_VALUES[case]
    rest, page = api("admin"), browser("admin")
    before = db_state()
    for url, params in (
        ("/audit/", {"action": value, "actor": value}),
        ("/pods/", {"namespace": value, "phase": value}),
        ("/orders/", {"status": value}),
        ("/costs/", {"team": value, "pool": value}),
        ("/costs/budgets/", {"team": value}),
        ("/pools/", {"q": value, "team": value, "gpu_model": value, "sort": value, "page": value}),
        ("/pools/new/row/", {"kind": value}),
        ("/pools/new/", {"team": value, "gpu_model": value, "node_type": value}),  # a Pending pod's hint's prefill
    ):
        response = page.get(url, params)
        assert response.status_code == 200 and escaped(response), url
    for url, params in (
        ("/api/v1/pods/", {"namespace": value, "phase": value, "team": value}),
        ("/api/v1/costs/", {"team": value, "pool": value}),
        ("/api/v1/pools/", {"q": value, "team": value, "gpuModel": value}),
        ("/api/v1/orders/", {"status": value}),
    ):
        response = rest.get(url, params)
        assert response.status_code in (200, 400), (url, response.status_code, response.content[:200])
        if response.status_code == 400:
            api_fields(response)
    assert db_state() == before


@pytest.mark.parametrize("case", sorted(COST_PARAMS))
def test_bad_cost_queries_are_a_400_naming_the_parameter_and_the_page_shows_it(api, browser, world, case):
    params, field = COST_PARAMS[case]
    rest, page = api("finance"), browser("finance")
    response = rest.get("/api/v1/costs/", params)
    assert response.status_code == 400, response.content[:300]
    assert field in api_fields(response)
    if field != "format":  # the page has no format; the CSV button links to the API
        html = page.get("/costs/", params)
        assert html.status_code == 200 and escaped(html)
        assert any(e.field == field for e in html.context["errors"])


@pytest.mark.parametrize("case", sorted(TEAM_BUDGETS))
def test_finance_s_team_budget_form_refuses_bad_input_beside_the_field(browser, world, case):
    fields, where = TEAM_BUDGETS[case]
    client = browser("finance")
    before = db_state()
    response = client.post("/costs/budgets/teams/new/", {**TEAM_BUDGET_FORM, **fields})
    assert response.status_code == 400, response.content[:300]
    assert response.context["form"].errors.get(where), response.context["form"].errors
    assert escaped(response)
    assert db_state() == before
