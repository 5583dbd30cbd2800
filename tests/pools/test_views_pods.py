"""Web pages for pods (list, submit, pod page with "why Pending") and the fragmentation reports."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.staticfiles import finders
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.core.documents import dump_yaml
from pools.models import PoolEvent
from pools.models.pods import Pod
from pools.services import pools as pool_services
from tests.conftest import assets_off_site, make_document
from tests.pools.pod_helpers import T0, TRAIN_POD, pod_document, pool_with_nodes, submit


@pytest.fixture
def fragmented(actors):
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(2):
        submit(actors["member"], f"f{i}", gpus=2, checkpointable=True)
    scheduler_pass(now=T0)
    return pool


def test_a_member_pastes_the_articles_pod_and_lands_on_its_page(browser, actors):
    response = browser("member").post("/pods/new/", {"document": TRAIN_POD.read_text()})
    assert response.status_code == 302 and response["Location"] == "/pods/algorithm/bert-train-0/"
    page = browser("member").get(response["Location"]).content.decode()
    assert "Waiting for the next scheduler pass." in page and "Pending" in page


def test_the_forms_own_prefilled_example_is_accepted_as_it_stands(browser, actors):
    """The example a lead finds in /pods/new/ must pass the same checks as any pasted pod: it
    once lacked the container image Kubernetes requires, so "Submit" without editing gave 400."""
    client = browser("lead")
    page = client.get("/pods/new/").content.decode()
    found = re.search(r'<textarea[^>]*name="document"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, "the form shows a prefilled pod"
    response = client.post("/pods/new/", {"document": html.unescape(found.group(1))})
    assert response.status_code == 302, response.content.decode()
    assert Pod.objects.filter(name="bert-train-0", namespace="algorithm").exists()


def test_a_bad_pod_shows_every_field_error_and_creates_nothing(browser, actors):
    bad = dump_yaml(pod_document("Bad", gpus=2, milli=10))
    response = browser("member").post("/pods/new/", {"document": bad})
    page = response.content.decode()
    assert response.status_code == 400
    assert "<code>metadata.name</code>" in page and "<code>spec.containers[0].resources.limits.ebcloud.io/gpu-milli</code>" in page
    assert not Pod.objects.exists()


def test_the_pod_page_shows_the_explanation_and_the_hints(browser, actors):
    pool_with_nodes(actors["lead"])
    submit(actors["member"], "lost")
    scheduler_pass(now=T0)
    page = browser("lead").get("/pods/algorithm/lost/").content.decode()
    assert "0/2 nodes are available: 2 node(s) didn&#x27;t match Pod&#x27;s node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling." in page
    assert "nodeLabels: {pool: train}" in page and 'hx-trigger="every 5s"' in page


def test_the_pod_page_fragment_is_served_to_htmx(browser, actors):
    submit(actors["member"], "p")
    response = browser("member").get("/pods/algorithm/p/", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="pod-status"') and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_the_pod_list_filters_and_takes_constant_queries(browser, actors):
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "a", namespace="one")
    submit(actors["member"], "b", namespace="two")
    scheduler_pass(now=T0)
    client = browser("member")
    page = client.get("/pods/?namespace=two").content.decode()
    assert "/pods/two/b/" in page and "/pods/one/a/" not in page
    with CaptureQueriesContext(connection) as few:
        client.get("/pods/")
    for i in range(8):
        submit(actors["member"], f"c{i}")
    scheduler_pass(now=T0)
    with CaptureQueriesContext(connection) as many:
        client.get("/pods/")
    assert len(many.captured_queries) == len(few.captured_queries)


def test_a_member_deletes_a_pod_from_its_page(browser, actors):
    submit(actors["member"], "p")
    response = browser("member").post("/pods/algorithm/p/delete/")
    assert response.status_code == 302 and not Pod.objects.exists()


def test_the_nav_links_pods_and_fragmentation_for_everyone(browser, actors):
    for role in ("member", "lead", "finance"):
        page = browser(role).get("/pods/").content.decode()
        assert 'href="/pods/"' in page and 'href="/fragmentation/"' in page, role


def test_a_lead_reaches_the_pools_fragmentation_report_from_the_nav_and_the_pool_page(browser, fragmented, actors):
    """Issue 21 item 7: the menu's Fragmentation lists the lead's own pools, each linking to its
    report; another team's lead sees none of them; the pool page links its report too."""
    chooser = browser("lead").get("/fragmentation/").content.decode()
    assert 'href="/pools/train-pool-a/fragmentation/"' in chooser
    report = browser("lead").get("/pools/train-pool-a/fragmentation/").context["report"]  # each row sums up its pool's report
    assert f"<td>{report.total_gpu_milli // 1000}</td>" in chooser and f"<td>{report.unallocated_pct:.1f}%</td>" in chooser
    assert f"<td>{report.cluster_fragmentation_milli / 1000:.2f}</td>" in chooser
    assert "train-pool-a" not in browser("other_lead").get("/fragmentation/").content.decode()
    assert 'href="/pools/train-pool-a/fragmentation/"' in browser("lead").get("/pools/train-pool-a/").content.decode()
    assert browser("other_lead").get("/pools/train-pool-a/fragmentation/").status_code == 404
    csv = browser("lead").get("/fragmentation/?format=csv")
    assert csv.status_code == 403 and "each pool&#x27;s report has its own CSV" in csv.content.decode()


def test_the_fragmentation_trend_tells_a_lead_when_it_comes_and_only_an_admin_the_command(browser, fragmented, actors):
    """A lead cannot run `manage.py` on the control plane: before the first weekly sample the
    page says the worker takes one; the command that takes one now is an admin's."""
    lead = browser("lead").get("/pools/train-pool-a/fragmentation/").content.decode()
    assert "the worker takes one a week." in lead and "manage.py" not in lead
    assert "manage.py fragmentation --record" in browser("admin").get("/pools/train-pool-a/fragmentation/").content.decode()


# --- authorization per role ------------------------------------------------------------------

POD_PAGE = {"lead": 200, "member": 200, "finance": 200, "admin": 200, "other_lead": 404}
POD_DELETE = {"lead": 302, "member": 302, "admin": 302, "finance": 403, "other_lead": 404}
SUBMIT_PAGE = {"lead": 200, "member": 200, "other_lead": 200, "admin": 200, "finance": 403}


@pytest.mark.parametrize("role", list(POD_PAGE))
def test_pod_pages_by_role(browser, actors, role):
    submit(actors["member"], "p")
    client = browser(role)
    assert client.get("/pods/algorithm/p/").status_code == POD_PAGE[role]
    assert ("/pods/algorithm/p/" in client.get("/pods/").content.decode()) == (role != "other_lead")
    assert client.get("/pods/new/").status_code == SUBMIT_PAGE[role]
    assert client.post("/pods/algorithm/p/delete/").status_code == POD_DELETE[role]


POOL_REPORT = {"lead": 200, "member": 200, "finance": 200, "admin": 200, "other_lead": 404}
POOL_APPLY = {"lead": 302, "admin": 302, "member": 403, "finance": 403, "other_lead": 404}
CLUSTER_REPORT = {"lead": 200, "member": 200, "other_lead": 200, "finance": 200, "admin": 200}  # team roles: their pools
CLUSTER_APPLY = {"lead": 403, "member": 403, "other_lead": 403, "finance": 403, "admin": 302}


@pytest.mark.parametrize("role", list(POOL_REPORT))
def test_fragmentation_pages_by_role(browser, fragmented, role):
    client = browser(role)
    assert client.get("/pools/train-pool-a/fragmentation/").status_code == POOL_REPORT[role]
    assert client.get("/fragmentation/").status_code == CLUSTER_REPORT[role]
    assert client.post("/fragmentation/apply/", {"max_nodes": "1"}).status_code == CLUSTER_APPLY[role]
    assert client.post("/pools/train-pool-a/fragmentation/apply/", {"max_nodes": "1"}).status_code == POOL_APPLY[role]


@pytest.mark.parametrize(
    "url", ["/pods/", "/pods/new/", "/pods/algorithm/p/", "/fragmentation/", "/pools/train-pool-a/fragmentation/"]
)
def test_anonymous_visitors_are_sent_to_log_in(browser, fragmented, url):
    response = browser(None).get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize(
    "url", ["/pods/new/", "/pods/algorithm/f0/delete/", "/fragmentation/apply/", "/pools/train-pool-a/fragmentation/apply/"]
)
def test_anonymous_posts_change_nothing(browser, fragmented, url):
    before = list(Pod.objects.order_by("pk").values_list("phase", "node_id"))
    response = browser(None).post(url, {"document": TRAIN_POD.read_text(), "max_nodes": "1"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert list(Pod.objects.order_by("pk").values_list("phase", "node_id")) == before


# --- the fragmentation page ------------------------------------------------------------------


def test_the_pool_report_shows_underused_nodes_the_plan_and_plotly_from_static(browser, fragmented):
    page = browser("lead").get("/pools/train-pool-a/fragmentation/").content.decode()
    assert "<code>train-pool-a-0</code> <code>train-pool-a-1</code>" in page
    assert '<script src="/static/js/charts.js" data-plotly="/static/vendor/plotly.min.js" defer></script>' in page
    assert 'id="fragmentation-charts"' in page
    assert assets_off_site(page) == []
    # The plan follows the page (issue 21 item 8: solving it must not hold the page up).
    assert 'hx-get="/pools/train-pool-a/fragmentation/?part=plan" hx-trigger="load"' in page and "GPU-hours saved" not in page
    plan = browser("lead").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in plan and 'id="repack-plan"' in plan
    assert "1344 GPU-hours saved per week" in plan
    assert "Free after the plan: <strong>1 node(s)</strong>, 0 already running no pods and 1 freed by moving 1 pod(s)." in plan
    assert "Apply: evict and re-place" in plan
    assert "Apply: evict" not in browser("member").get("/pools/train-pool-a/fragmentation/?part=plan", headers={"HX-Request": "true"}).content.decode()


def test_plotly_is_found_in_the_installed_package_not_copied(settings):
    found = finders.find("vendor/plotly.min.js")
    assert found and found.endswith("plotly/package_data/plotly.min.js")
    listed = {path for finder in finders.get_finders() for path, _ in finder.list([])}
    assert "plotly.min.js" in listed


def test_applying_from_the_page_moves_pods_with_events(browser, fragmented):
    response = browser("lead").post("/pools/train-pool-a/fragmentation/apply/", {"max_nodes": "1"})
    assert response.status_code == 302
    assert len(set(Pod.objects.values_list("node__name", flat=True))) == 1
    assert PoolEvent.objects.filter(pool=fragmented, reason="Repacked").count() == 1


def test_the_cluster_report_covers_every_pool(browser, actors, fragmented):
    pool_with_nodes(actors["other_lead"], name="infer-pool", nodes=1, node_labels={"pool": "infer"})
    page = browser("finance").get("/fragmentation/").content.decode()
    assert "whole cluster" in page and "infer-pool-0" in page and "train-pool-a-0" in page
    assert "Apply: evict and re-place" not in page


def test_the_weekly_trend_is_recorded_and_drawn(browser, actors, fragmented):
    from io import StringIO

    from django.core.management import call_command

    from pools.models.pods import FragmentationSample
    from pools.tasks import fragmentation_record_task

    assert 'id="chart-trend"' not in browser("lead").get("/pools/train-pool-a/fragmentation/").content.decode()
    assert fragmentation_record_task() == 2  # the pool and the cluster
    one = browser("lead").get("/pools/train-pool-a/fragmentation/").content.decode()
    assert 'id="chart-trend"' not in one and "One weekly sample so far" in one  # a single point draws no trend
    assert fragmentation_record_task() == 0  # a second delivery of this week's task records nothing
    out = StringIO()
    call_command("fragmentation", "--record", stdout=out)
    assert out.getvalue().startswith("recorded 2 sample(s)") and "repack frees train-pool-a-" in out.getvalue()
    assert "packing GPU shares frees 0 whole GPU(s) and starts 0 waiting pod(s) by moving 0 pod(s)" in out.getvalue()  # whole-GPU pods only
    pool_sample = FragmentationSample.objects.filter(pool=fragmented).first()
    assert (pool_sample.total_gpus, pool_sample.allocated_gpus, pool_sample.underused_nodes, pool_sample.freeable_nodes) == (16, 4, 2, 1)
    assert 'id="chart-trend"' in browser("lead").get("/pools/train-pool-a/fragmentation/").content.decode()
    assert 'id="chart-trend"' in browser("admin").get("/fragmentation/").content.decode()


def test_cluster_trend_points_are_hidden_from_team_members(actors, fragmented):
    from pools.services.fragmentation import fragmentation_record, fragmentation_trend

    fragmentation_record(now=T0)
    assert fragmentation_trend(user=actors["lead"], pool=None) == []
    assert len(fragmentation_trend(user=actors["finance"], pool=None)) == 1
    assert fragmentation_trend(user=actors["other_lead"], pool=fragmented) == []


def test_the_fragmentation_page_takes_constant_queries(browser, actors, fragmented):
    client = browser("admin")
    with CaptureQueriesContext(connection) as few:
        client.get("/fragmentation/")
    for i in range(6):
        submit(actors["member"], f"more{i}", gpus=1)
    scheduler_pass(now=T0)
    with CaptureQueriesContext(connection) as many:
        client.get("/fragmentation/")
    assert len(many.captured_queries) == len(few.captured_queries)


def test_the_schedules_exist_after_migrate(db):
    from django_q.models import Schedule

    names = set(Schedule.objects.values_list("name", flat=True))
    assert {"pools.scheduler_pass", "pools.fragmentation_weekly"} <= names


def test_the_scheduler_task_runs_a_pass(actors, fragmented):
    from pools.tasks import scheduler_pass_task

    submit(actors["member"], "task", gpus=1)
    assert scheduler_pass_task()["scheduled"] == 1


def test_the_node_table_downloads_as_csv(browser, fragmented):
    response = browser("member").get("/pools/train-pool-a/fragmentation/?format=csv")
    assert response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().splitlines()
    assert lines[0] == "node,pool,gpus,allocated_pct,free_milli_gpu,fragmented_milli_gpu,underused"
    assert lines[1].startswith("train-pool-a-0,train-pool-a,8,25.0,6000,") and lines[1].endswith(",yes")
    assert browser("other_lead").get("/pools/train-pool-a/fragmentation/?format=csv").status_code == 404


def test_a_pool_without_nodes_says_in_words_that_there_is_nothing_to_chart(browser, actors):
    """Issue 21 item 8: no empty axes."""
    pool_services.pool_create(user=actors["lead"], document=make_document("empty-pool"))
    page = browser("lead").get("/pools/empty-pool/fragmentation/").content.decode()
    assert "No live nodes yet, so nothing to chart" in page and 'id="chart-allocation"' not in page


def test_a_pod_on_a_pool_lent_to_its_team_names_the_pool_without_a_link_its_lead_cannot_open(browser, actors):
    """The lender's pool page is a 404 to the borrowing team: the pod page and list linked to it
    (found by a QA sweep). They name it; the lender's lead still gets the link."""
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, sharedWith=["inference"])
    submit(actors["other_lead"], "borrowed", namespace="inference")
    scheduler_pass(now=T0)
    assert Pod.objects.get(name="borrowed").phase == Pod.Phase.RUNNING
    borrower = browser("other_lead")
    page, listing = (borrower.get(url).content.decode() for url in ("/pods/inference/borrowed/", "/pods/"))
    assert "in pool train-pool-a (lent to your team)" in page and "/pools/train-pool-a/" not in page + listing
    assert "train-pool-a-" in listing  # the node is named
    assert borrower.get("/pools/train-pool-a/").status_code == 404
    assert 'href="/pools/train-pool-a/"' in browser("admin").get("/pods/inference/borrowed/").content.decode()
