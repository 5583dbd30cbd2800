"""Teams are isolated in capacity on the simulated cluster (design §3): a pool's nodes take only
its team's pods and those of teams its `spec.sharedWith` names; a pod that selects only another
team's pool is refused at once; another team's namespace does not exist for you (404); the
Pending explanation counts and names the team's own nodes only, and says what to order when no
pool of the team fits."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.core.isolation import PoolAccess, admission_error, refusal, targeted_pools
from pools.core.podspec import affinity_terms
from pools.core.scheduling.nodes import REASON_TEAM, NodeState, Pod, filter_node, may_use
from pools.core.spec import parse_document
from pools.models import NamespaceTeam, PoolEvent
from pools.models.pods import Pod as PodRow
from pools.selectors.cluster import pool_teams
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit
from tests.pools.test_views import FORM

POOL_A = {"ebcloud.io/pool": "train-pool-a", "ebcloud.io/team": "algorithm", "pool": "train"}


def fields(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def pinned(document: dict, pool: str) -> dict:
    """The issue's pod: nodeSelector on another team's pool, tolerating its taint."""
    document["spec"].pop("affinity", None)
    document["spec"]["nodeSelector"] = {"ebcloud.io/pool": pool}
    return document


@pytest.fixture
def train_pool(actors):
    return pool_with_nodes(actors["lead"], node_labels={"pool": "train"})  # algorithm's, tainted pool=train


# --- the core's rules ----------------------------------------------------------------------------


def test_a_node_of_a_teams_pool_refuses_other_teams_pods_whatever_they_tolerate():
    node = NodeState(name="n", cpu_milli=64000, memory_mib=512000, gpu_count=8, teams=frozenset({"1"}))
    stranger = Pod(name="inference/p", gpu_count=1, team="2")
    assert not may_use(stranger, node) and filter_node(stranger, node) == REASON_TEAM
    assert filter_node(Pod(name="algorithm/p", gpu_count=1, team="1"), node) is None
    assert filter_node(stranger, NodeState(name="m", cpu_milli=64000, memory_mib=512000, gpu_count=8)) is None  # no teams: no limit


def test_admission_refuses_only_pods_that_select_nothing_but_other_teams_pools():
    pools = [PoolAccess("train-pool-a", POOL_A, frozenset({"algorithm"})),
             PoolAccess("infer-a", {"ebcloud.io/pool": "infer-a", "pool": "infer"}, frozenset({"inference"}))]  # fmt: skip
    terms = affinity_terms({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}]}}})  # fmt: skip
    assert admission_error(team="inference", node_selector={"ebcloud.io/pool": "train-pool-a"}, affinity_terms=(), pools=pools) == refusal("inference")
    assert admission_error(team="inference", node_selector={}, affinity_terms=terms, pools=pools) == refusal("inference")
    assert admission_error(team="algorithm", node_selector={}, affinity_terms=terms, pools=pools) is None
    assert admission_error(team="inference", node_selector={}, affinity_terms=(), pools=pools) is None  # selects no pool in particular
    assert admission_error(team="inference", node_selector={"pool": "nowhere"}, affinity_terms=(), pools=pools) is None  # no pool yet: it waits
    assert [p.name for p in targeted_pools({"ebcloud.io/team": "inference"}, (), pools)] == []
    shared = [PoolAccess("train-pool-a", POOL_A, frozenset({"algorithm", "inference"}))]
    assert admission_error(team="inference", node_selector={"ebcloud.io/pool": "train-pool-a"}, affinity_terms=(), pools=shared) is None


# --- the pod API -----------------------------------------------------------------------------------


def test_the_issues_pod_on_another_teams_pool_is_refused_with_the_rule_and_nothing_is_written(api, train_pool):
    response = api("other_lead").post("/api/v1/pods/", pinned(pod_document("sneaky", namespace="inference", gpus=8), "train-pool-a"), format="json")
    assert response.status_code == 400, response.content
    assert "may not use the node pools" in fields(response)["spec.nodeSelector"]
    assert "spec.sharedWith" in fields(response)["spec.nodeSelector"]
    assert not PodRow.objects.exists() and not NamespaceTeam.objects.filter(namespace="inference").exists()


def test_a_pod_in_another_teams_namespace_does_not_exist_for_you(actors, api, train_pool):
    submit(actors["member"], "trainer-1")  # algorithm's namespace is algorithm's
    response = api("other_lead").post("/api/v1/pods/", pod_document("trainer-2", namespace="algorithm"), format="json")
    assert response.status_code == 404, response.content
    response = api("other_lead").post("/api/v1/pods/", pod_document("x", namespace="newspace", pool_affinity=None), format="json")
    assert response.status_code == 201, response.content  # a namespace nobody has is the first team's
    assert NamespaceTeam.objects.get(namespace="newspace").team.slug == "inference"
    response = api("member").post("/api/v1/pods/", pod_document("y", namespace="newspace"), format="json")
    assert response.status_code == 404
    response = api("admin").post("/api/v1/pods/?team=algorithm", pod_document("z", namespace="newspace"), format="json")
    assert response.status_code == 400 and "belongs to team 'inference'" in fields(response)["metadata.namespace"]
    assert response.json()["errors"] and PodRow.objects.count() == 2


# --- placement and explanations ---------------------------------------------------------------------


def test_another_teams_pod_that_tolerates_the_taint_never_lands_on_the_pool_and_is_told_what_to_order(actors, train_pool, browser):
    pod = submit(actors["other_lead"], "tolerant", namespace="inference", pool_affinity=None, gpus=8)
    result = scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert result.scheduled == [] and pod.phase == "Pending" and pod.node is None
    assert pod.explanation == "no nodes available to schedule pods"
    assert not any("train-pool-a" in h for h in pod.hints)
    (order,) = [h for h in pod.hints if h.startswith("No pool of your team")]
    assert "it needs 8 GPUs, " in order and "GPU_8_CARD" in order and "A100" in order
    link = order.rsplit(" ", 1)[1]
    assert link.startswith("/pools/new/?team=inference&gpu_model=")
    page = browser("other_lead").get(link).content.decode()
    assert '<option value="GPU_8_CARD" selected>' in page and 'selected>A100' in page.replace('"', "")
    detail = browser("other_lead").get("/pods/inference/tolerant/").content.decode()
    assert f'<a href="{link.replace("&", "&amp;")}">' in detail


def test_the_explanation_counts_only_the_teams_own_nodes(actors, train_pool):
    pool_with_nodes(actors["other_lead"], name="infer-a", nodes=3, node_labels={"pool": "infer"})
    pod = submit(actors["other_lead"], "lost", namespace="inference", pool_affinity="batch", tolerate="train")
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.explanation == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    assert any("pool infer-a (3 nodes)" in h for h in pod.hints) and not any("train-pool-a" in h for h in pod.hints)


def test_a_pool_shared_by_its_lead_takes_the_borrowing_teams_pods(actors, api, train_pool):
    document = pinned(pod_document("borrowed", namespace="inference", gpus=8), "train-pool-a")
    assert api("other_lead").post("/api/v1/pods/", document, format="json").status_code == 400
    spec = {**train_pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=train_pool, document={**train_pool.document, "spec": spec})
    assert "sharedWith changed" in PoolEvent.objects.filter(reason="SpecUpdated").latest("id").message
    assert api("other_lead").post("/api/v1/pods/", document, format="json").status_code == 201
    scheduler_pass(now=T0)
    pod = PodRow.objects.get(name="borrowed")
    assert pod.phase == "Running" and pod.node.pool == train_pool


def test_a_borrowing_team_runs_on_the_free_capacity_and_never_preempts_the_owners_pods(actors, api, train_pool):
    """Whatever its priority: the owner pays for the nodes (it evicted the owner's pod before);
    the owner's own pods still preempt as Kubernetes decides."""
    for index in range(2):
        submit(actors["member"], f"owners-{index}", gpus=8)
    scheduler_pass(now=T0)
    spec = {**train_pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=train_pool, document={**train_pool.document, "spec": spec})
    guest = pinned(pod_document("borrower", namespace="inference", gpus=8, priority=1000), "train-pool-a")
    assert api("other_lead").post("/api/v1/pods/", guest, format="json").status_code == 201
    scheduler_pass(now=T0)
    assert set(PodRow.objects.filter(phase="Running").values_list("name", flat=True)) == {"owners-0", "owners-1"}
    borrower = PodRow.objects.get(name="borrower")
    assert borrower.phase == "Pending" and not PoolEvent.objects.filter(reason="Preempted").exists()
    submit(actors["member"], "owners-vip", gpus=8, priority=2000)
    scheduler_pass(now=T0)
    assert PodRow.objects.get(name="owners-vip").phase == "Running" and PoolEvent.objects.filter(reason="Preempted").count() == 1


def test_shared_with_is_validated_with_field_paths(actors, api, train_pool):
    for shared, path, words in (
        (["nobody"], "spec.sharedWith[0]", "no team named 'nobody'"),
        (["inference", "inference"], "spec.sharedWith[1]", "listed twice"),
        (["algorithm"], "spec.sharedWith[0]", "owns the pool"),
        ("inference", "spec.sharedWith", "must be a list"),
        ([7], "spec.sharedWith[0]", "must be a team name"),
    ):
        spec = {**train_pool.document["spec"], "sharedWith": shared}
        response = api("lead").put("/api/v1/pools/train-pool-a/", {**train_pool.document, "spec": spec}, format="json")
        assert response.status_code == 400, (shared, response.content)
        assert words in fields(response)[path]
    train_pool.refresh_from_db()
    assert "sharedWith" not in train_pool.document["spec"] and train_pool.generation == 1


def test_the_owning_lead_shares_the_pool_in_the_form_with_errors_beside_the_field(browser, train_pool):
    client = browser("lead")
    base = {**FORM, "name": "train-pool-a", "min_nodes": "0", "max_nodes": "6", "nodelabel_key": ["pool"], "nodelabel_value": ["train"]}
    response = client.post("/pools/train-pool-a/edit/", {**base, "shared_with": "inference, nobody"})
    assert response.status_code == 400
    assert response.context["form"].errors["shared_with"] == ["no team named 'nobody'"]
    assert client.post("/pools/train-pool-a/edit/", {**base, "shared_with": "inference"}).status_code == 302
    train_pool.refresh_from_db()
    assert train_pool.shared_with == ("inference",)
    assert 'value="inference"' in client.get("/pools/train-pool-a/edit/").content.decode()


def test_order_hints_cost_no_statement_per_pod(actors, train_pool):
    def pass_statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            scheduler_pass(now=T0)
        return len(queries)

    submit(actors["other_lead"], "one", namespace="inference", pool_affinity=None, gpus=8)
    one = pass_statements()
    for i in range(5):
        submit(actors["other_lead"], f"more-{i}", namespace="inference", pool_affinity=None, gpus=8)
    assert pass_statements() == one
    assert all(any(h.startswith("No pool of your team") for h in pod.hints) for pod in PodRow.objects.all())


def test_a_pool_lent_to_a_team_that_is_gone_keeps_working(actors, teams, train_pool):
    spec = {**train_pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=train_pool, document={**train_pool.document, "spec": spec})
    teams["inference"].delete()
    train_pool.refresh_from_db()
    assert parse_document(train_pool.document, catalog_current()).shared_with == ("inference",)  # what the controllers read
    assert pool_teams([train_pool])[train_pool.pk] == frozenset({str(train_pool.team_id)})
    pod = submit(actors["member"], "still-ours", gpus=8)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.phase == "Running"
