"""The web console: pages per role, forms with errors beside fields, YAML import/export, order queue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pools.core.documents import dump_yaml, load_yaml
from pools.core.spec import SCHEDULING_POLICIES, SCHEDULING_POLICY_HELP
from pools.models import GpuNodePool, PoolOrder
from pools.services import pools as services
from pools.templatetags.pools_extras import age
from tests.conftest import EXAMPLES, make_document
from tests.pools.pool_helpers import create_pools, db_state


@pytest.fixture
def algorithm_pool(actors, train_document):
    return services.pool_create(user=actors["lead"], document=train_document)


FORM = {
    "name": "form-pool",
    "gpu_model": "A100_80G",
    "node_type": "GPU_8_CARD",
    "region": "cn-east-2a",
    "min_nodes": "2",
    "max_nodes": "6",
    "lease_type": "monthly",
    "system_image": "ubuntu-22.04-cuda-12.2",
    "auto_repair": "on",
    "scheduling_policy": "binpack",
    "label_key": ["team", "project"],
    "label_value": ["algorithm", "llm"],
    "nodelabel_key": ["gpu-class"],
    "nodelabel_value": ["a100"],
    "taint_key": ["pool"],
    "taint_value": ["train"],
    "taint_effect": ["NoSchedule"],
}


def test_every_page_has_a_language_a_title_and_labelled_inputs(browser, algorithm_pool):
    client = browser("lead")
    for url in ("/pools/", "/pools/new/", "/pools/import/", "/pools/train-pool-a/", "/pools/train-pool-a/edit/", "/orders/", "/pools/train-pool-a/delete/"):
        html = client.get(url).content.decode()
        assert '<html lang="en">' in html and "<title>" in html, url
        for marker in ('<input type="text"', '<input type="number"', "<select"):
            assert html.count(marker) <= html.count("<label") + html.count("aria-label"), url
    assert '<html lang="en">' in browser(None).get("/login/").content.decode()


def test_anonymous_visitors_are_sent_to_log_in(browser):
    response = browser(None).get("/pools/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_lead_creates_a_pool_with_the_form_including_label_and_taint_rows(browser):
    response = browser("lead").post("/pools/new/", FORM)
    assert response.status_code == 302 and response["Location"] == "/pools/form-pool/"
    pool = GpuNodePool.objects.get(name="form-pool")
    spec = pool.document["spec"]
    assert pool.document["metadata"]["labels"] == {"team": "algorithm", "project": "llm"}
    assert spec["nodeLabels"] == {"gpu-class": "a100"}
    assert spec["nodeTaints"] == [{"key": "pool", "value": "train", "effect": "NoSchedule"}]
    assert pool.orders.get().status == "Pending"


def test_form_errors_appear_beside_their_fields_and_nothing_is_written(browser, algorithm_pool):
    before = db_state()
    bad = {**FORM, "name": "Bad_Name", "min_nodes": "9", "taint_effect": ["Sometimes"], "label_key": ["-x"], "label_value": ["y"]}
    response = browser("lead").post("/pools/new/", bad)
    assert response.status_code == 400
    form = response.context["form"]
    assert "DNS-1123" in form.errors["name"][0]
    assert "must not exceed spec.nodeCount.max" in form.errors["min_nodes"][0]
    assert any("NoSchedule" in e for e in form.row_errors["taint"])
    assert any("invalid label key" in e for e in form.row_errors["label"])
    assert db_state() == before


def test_a_quota_refusal_shows_on_the_form(browser, actors):
    services.pool_create(user=actors["other_lead"], document=make_document("big", nodeCount={"min": 6, "max": 6}))
    response = browser("lead").post("/pools/new/", FORM)
    assert response.status_code == 400
    assert "QuotaExceeded: cn-east-2 A100_80G requested 16, in use 0, awaiting approval 48, limit 48" in response.context["form"].errors["min_nodes"][0]


def test_the_add_row_fragment_is_a_labelled_row(browser):
    html = browser("lead").get("/pools/new/row/?kind=taint").content.decode()
    assert 'name="taint_key"' in html and 'name="taint_effect"' in html and "aria-label" in html
    assert "<html" not in html
    # Its fields are named in words, as a screen reader reads them: not "nodelabel key".
    node_label = browser("lead").get("/pools/new/row/?kind=nodelabel").content.decode()
    assert 'aria-label="node label key"' in node_label and 'aria-label="Remove this node label"' in node_label
    assert 'aria-label="node taint value"' in html and "nodelabel key" not in browser("lead").get("/pools/new/").content.decode()


def test_a_lead_edits_a_pool_and_cannot_change_immutable_fields(browser, algorithm_pool):
    client = browser("lead")
    page = client.get("/pools/train-pool-a/edit/")
    assert page.status_code == 200 and page.context["form"].fields["gpu_model"].disabled
    edited = {**FORM, "name": "train-pool-a", "gpu_model": "H100_80G", "max_nodes": "5", "label_key": ["pool-role", "team"], "label_value": ["training", "algorithm"]}
    response = client.post("/pools/train-pool-a/edit/", edited)
    assert response.status_code == 302
    algorithm_pool.refresh_from_db()
    assert algorithm_pool.max_nodes == 5 and algorithm_pool.gpu_model.name == "A100_80G"
    assert algorithm_pool.events.filter(reason="SpecUpdated").exists()


def test_yaml_import_by_paste_and_by_upload(browser):
    client = browser("lead")
    pasted = client.post("/pools/import/", {"document": (EXAMPLES / "create-train-pool.yaml").read_text()})
    assert pasted.status_code == 302 and GpuNodePool.objects.filter(name="train-pool-a").exists()
    with open(EXAMPLES / "inference-pool.yaml", "rb") as upload:
        document = load_yaml(upload.read())
    document["spec"]["region"] = "cn-north-1a"
    from django.core.files.uploadedfile import SimpleUploadedFile

    uploaded = client.post("/pools/import/", {"upload": SimpleUploadedFile("pool.yaml", dump_yaml(document).encode())})
    assert uploaded.status_code == 302 and GpuNodePool.objects.filter(name="infer-pool-l40s").exists()


def test_yaml_import_errors_are_listed_with_their_paths(browser):
    before = db_state()
    response = browser("lead").post("/pools/import/", {"document": "apiVersion: ebcloud.io/v1\nkind: GpuNodePool\nmetadata: {name: x}\nspec: {nodeType: GPU_8_CARD}\n"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "spec.gpuModel" in html and "spec.nodeCount" in html
    assert db_state() == before
    script = browser("lead").post("/pools/import/", {"document": "metadata: {name: '<script>alert(1)</script>'}"})
    assert "<script>alert(1)</script>" not in script.content.decode()


def test_export_returns_the_document_as_given(browser, algorithm_pool, train_document):
    response = browser("member").get("/pools/train-pool-a/yaml/")
    assert response["Content-Type"].startswith("application/yaml")
    assert load_yaml(response.content) == train_document


def test_the_detail_page_shows_spec_orders_nodes_and_events(browser, algorithm_pool):
    html = browser("lead").get("/pools/train-pool-a/").content.decode()
    for text in ("GPU_8_CARD", "A100_80G", "pool=train:NoSchedule", "OrderPending", "OrderRequested", "40000.00 CNY", "No nodes yet"):
        assert text in html
    assert 'hx-trigger="every 5s"' in html


@pytest.mark.django_db
@pytest.mark.parametrize(("spec", "shown"), [({}, "on"), ({"autoRepair": False}, "off"), ({"autoRepairPolicy": {"requireApproval": True}}, "on, each repair after")])
def test_auto_repair_left_out_of_the_spec_is_on_as_the_server_reads_it(browser, actors, spec, shown):
    """The web form leaves a default out of the document: its pool page said "Auto-repair off"
    of a pool whose repairs ran (found by a QA sweep)."""
    document = make_document("defaults")
    del document["spec"]["autoRepair"]
    services.pool_create(user=actors["lead"], document={**document, "spec": {**document["spec"], **spec}})
    html = browser("lead").get("/pools/defaults/").content.decode()
    assert f"<dt>Auto-repair</dt><dd>{shown}" in html


@pytest.mark.django_db
def test_one_gpu_is_said_as_one_on_the_pool_and_order_pages(browser, actors):
    """A pool of one-GPU nodes (the demo's L40S and T4 pools): "GPU_1_CARD (1 GPU)", and its
    one-node order "1 (1 GPU)", never "1 GPUs"."""
    pool = services.pool_create(user=actors["lead"], document=make_document("one-card", region="cn-north-1a", gpuModel="T4",
                                                                                 nodeType="GPU_1_CARD", nodeCount={"min": 1, "max": 2}))  # fmt: skip
    html = browser("lead").get(f"/pools/{pool.name}/").content.decode()
    assert "GPU_1_CARD (1 GPU)</dd>" in html and "(1 GPU)</td>" in html and "1 GPUs" not in html
    orders = browser("admin").get("/orders/").content.decode()
    assert "(1 GPU)</td>" in orders and "1 GPUs" not in orders


def test_conditions_show_their_transition_time_like_every_other_time(browser, algorithm_pool):
    conditions = [{"type": "Ready", "status": "False", "reason": "OrderPending", "message": "m", "lastTransitionTime": "2026-11-30T21:15:48.208049+00:00"},
                  {"type": "Progressing", "status": "False", "reason": "Stable", "message": "m", "lastTransitionTime": "not a time"}]  # fmt: skip
    GpuNodePool.objects.filter(pk=algorithm_pool.pk).update(conditions=conditions)
    html = browser("lead").get("/pools/train-pool-a/").content.decode()
    assert '<time datetime="2026-11-30T21:15:48.208049+00:00">2026-11-30 21:15:48</time>' in html
    assert "not a time" not in html and "+00:00</td>" not in html


def test_ages_read_like_kubectl_get_events():
    now = timezone.now()
    assert [age(now - timedelta(seconds=s)) for s in (5, 190, 7300)] == ["5s", "3m10s", "2h1m"]
    assert age(None) == "—" and age(now + timedelta(seconds=3)) == "0s"  # a clock a little ahead


def test_the_timeline_shows_warnings_only_when_asked_and_keeps_polling_that_way(browser, algorithm_pool):
    from pools.services.events import WARNING, event_record

    event_record(pool=algorithm_pool, reason="QuotaExceeded", message="cn-east-2 A100_80G requested 16, limit 8", type=WARNING)
    client = browser("lead")
    everything = client.get("/pools/train-pool-a/").content.decode()
    assert "QuotaExceeded" in everything and "OrderRequested" in everything and "?type=Warning#timeline" in everything
    warnings = client.get("/pools/train-pool-a/?type=Warning").content.decode()
    assert "QuotaExceeded" in warnings and "OrderRequested" not in warnings
    assert 'hx-get="/pools/train-pool-a/?type=Warning"' in warnings  # the 5 s refresh keeps the filter
    assert "OrderRequested" in client.get("/pools/train-pool-a/?type=bogus").content.decode()  # unknown: every event


def test_an_admin_reaches_a_pending_order_in_the_queue_from_the_pool_page(browser, algorithm_pool):
    order = algorithm_pool.orders.get()
    link = f'href="/orders/?status=Pending#order-{order.pk}">approve or reject</a>'
    assert link in browser("admin").get("/pools/train-pool-a/").content.decode()
    assert link not in browser("lead").get("/pools/train-pool-a/").content.decode()  # leads wait for an admin
    assert f'<tr id="order-{order.pk}">' in browser("admin").get("/orders/?status=Pending").content.decode()


def test_the_timeline_fragment_is_served_to_htmx(browser, algorithm_pool):
    response = browser("lead").get("/pools/train-pool-a/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="timeline"' in html and "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_the_list_filters_sorts_and_answers_htmx_with_the_table_only(browser, actors, algorithm_pool):
    services.pool_create(user=actors["lead"], document=make_document("zeta", region="cn-north-1a", gpuModel="T4", nodeType="GPU_4_CARD"))
    client = browser("lead")
    names = [p.name for p in client.get("/pools/?gpu_model=T4").context["pools"]]
    assert names == ["zeta"]
    assert [p.name for p in client.get("/pools/?sort=-name").context["pools"]] == ["zeta", "train-pool-a"]
    fragment = client.get("/pools/?q=zet", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="pool-table"' in fragment and "zeta" in fragment and "<html" not in fragment


@pytest.mark.parametrize(
    ("role", "expected"),
    [("lead", 200), ("member", 200), ("finance", 200), ("admin", 200), ("other_lead", 404)],
)
def test_pool_pages_by_role(browser, algorithm_pool, role, expected):
    client = browser(role)
    assert client.get("/pools/train-pool-a/").status_code == expected
    assert client.get("/pools/train-pool-a/yaml/").status_code == expected
    listed = [p.name for p in client.get("/pools/").context["pools"]]
    assert ("train-pool-a" in listed) == (expected == 200)


@pytest.mark.parametrize(("role", "expected"), [("lead", 200), ("admin", 200), ("member", 403), ("finance", 403), ("other_lead", 404)])
def test_edit_and_delete_pages_by_role(browser, algorithm_pool, role, expected):
    client = browser(role)
    assert client.get("/pools/train-pool-a/edit/").status_code == expected
    assert client.get("/pools/train-pool-a/delete/").status_code == expected
    before = db_state()
    response = client.post("/pools/train-pool-a/edit/", {**FORM, "name": "train-pool-a", "max_nodes": "3"})
    assert response.status_code == (302 if expected == 200 else expected)
    if expected != 200:
        assert db_state() == before


@pytest.mark.parametrize(("role", "expected"), [("member", 403), ("finance", 403), ("lead", 200)])
def test_create_pages_by_role(browser, role, expected):
    assert browser(role).get("/pools/new/").status_code == expected
    assert browser(role).get("/pools/import/").status_code == expected


def test_delete_by_post_removes_a_pool_without_nodes(browser, algorithm_pool):
    response = browser("lead").post("/pools/train-pool-a/delete/")
    assert response.status_code == 302
    algorithm_pool.refresh_from_db()
    assert algorithm_pool.deleted_at is not None


def test_the_admin_queue_approves_and_rejects(browser, actors, algorithm_pool):
    other = services.pool_create(user=actors["other_lead"], document=make_document("infer", region="cn-north-1a"))
    client = browser("admin")
    page = client.get("/orders/")
    assert [o.pool.name for o in page.context["orders"]] == ["infer", "train-pool-a"]
    assert b">Approve</button>" in page.content
    order = algorithm_pool.orders.get()
    assert client.post(f"/orders/{order.pk}/approve/").status_code == 302
    twice = client.post(f"/orders/{order.pk}/approve/")
    assert twice.status_code == 409 and f"Order #{order.pk} is Approved, not Pending: it was already decided" in twice.content.decode()
    assert f"Order #{order.pk}: order #" not in twice.content.decode()  # said once (found by a QA sweep)
    no_reason = client.post(f"/orders/{other.orders.get().pk}/reject/", {"reason": ""})
    assert no_reason.status_code == 400 and "reason is required" in no_reason.content.decode()
    client.post(f"/orders/{other.orders.get().pk}/reject/", {"reason": "no stock this month"})
    assert PoolOrder.objects.get(pool=other).status == "Rejected"


@pytest.mark.parametrize(("role", "expected"), [("lead", 403), ("member", 403), ("finance", 403), ("other_lead", 404)])
def test_only_admins_decide_in_the_web(browser, algorithm_pool, role, expected):
    order = algorithm_pool.orders.get()
    # A non-admin's decision is forbidden; another team's order does not exist for them.
    assert browser(role).post(f"/orders/{order.pk}/approve/").status_code == expected
    assert browser(role).post(f"/orders/{order.pk}/reject/", {"reason": "x"}).status_code == expected
    order.refresh_from_db()
    assert order.status == "Pending"


def test_leads_see_their_teams_orders_without_decision_buttons(browser, algorithm_pool):
    page = browser("lead").get("/orders/")
    assert [o.pool.name for o in page.context["orders"]] == ["train-pool-a"]
    assert b">Approve</button>" not in page.content


def test_the_pool_list_page_does_not_grow_queries_with_pools(browser, actors):
    client = browser("lead")
    create_pools(actors, 2)
    with CaptureQueriesContext(connection) as few:
        client.get("/pools/")
    create_pools(actors, 10, offset=2)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/pools/").context["pools"]) == 12
    # 13: the page's cost this month and forecast take two (the sums, the first and last hour).
    assert len(many) == len(few) <= 13


def test_the_order_queue_does_not_grow_queries_with_orders(browser, actors):
    client = browser("admin")
    create_pools(actors, 2)
    with CaptureQueriesContext(connection) as few:
        client.get("/orders/")
    create_pools(actors, 10, offset=2)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/orders/").context["orders"]) == 12
    assert len(many) == len(few)


def test_platform_admins_edit_quotas_in_the_admin_site_and_others_cannot_enter(browser, actors):
    from pools.models import Quota

    quota = Quota.objects.filter(team__isnull=True).first()
    client = browser("admin")  # a member of the platform-admin group, not a superuser
    assert client.get("/admin/pools/quota/").status_code == 200
    page = client.get(f"/admin/pools/quota/{quota.pk}/change/")
    assert page.status_code == 200
    response = client.post(f"/admin/pools/quota/{quota.pk}/change/", {"region": quota.region, "gpu_model": quota.gpu_model_id, "team": "", "limit_gpus": 99})
    assert response.status_code == 302
    quota.refresh_from_db()
    assert quota.limit_gpus == 99
    assert client.get("/admin/billing/nodeprice/").status_code == 200
    for role in ("lead", "member", "finance", "other_lead"):
        assert browser(role).get("/admin/pools/quota/").status_code == 302


@pytest.mark.parametrize(
    "url",
    ["/pools/", "/pools/new/", "/pools/new/row/", "/pools/import/", "/pools/train-pool-a/", "/pools/train-pool-a/edit/", "/pools/train-pool-a/yaml/", "/pools/train-pool-a/delete/", "/orders/"],
)
def test_every_page_sends_anonymous_visitors_to_log_in(browser, algorithm_pool, url):
    response = browser(None).get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("url", ["/pools/new/", "/pools/import/", "/pools/train-pool-a/edit/", "/pools/train-pool-a/delete/", "/orders/1/approve/", "/orders/1/reject/"])
def test_anonymous_posts_change_nothing(browser, algorithm_pool, url):
    before = db_state()
    response = browser(None).post(url, FORM)
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert db_state() == before


def test_web_posts_need_a_csrf_token(actors, algorithm_pool):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(actors["lead"])
    before = db_state()
    assert browser.post("/pools/train-pool-a/delete/").status_code == 403
    assert db_state() == before


def test_every_scheduling_policy_in_the_pool_form_says_what_it_does(browser):
    """Issue 21 item 9: "fgd" alone means nothing to a lead; each option carries one line."""
    assert set(SCHEDULING_POLICY_HELP) == set(SCHEDULING_POLICIES)
    page = browser("lead").get("/pools/new/").content.decode()
    for policy in SCHEDULING_POLICIES:
        explanation = SCHEDULING_POLICY_HELP[policy]
        assert 10 < len(explanation) < 140 and "\n" not in explanation
        assert f'<option value="{policy}"' in page and f"{policy}: {explanation}" in page.replace("&#x27;", "'"), policy
    assert "How the scheduler picks a node" in page
