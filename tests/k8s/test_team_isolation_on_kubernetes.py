"""Team isolation on a real API server (design §1, §3): the product keeps a
ValidatingAdmissionPolicy + binding in sync with its pools, `spec.sharedWith` and the
namespaces' teams, and kube-apiserver itself refuses a pod of a team's namespace that selects
only another team's pool, with our message; a toleration of the pool's taint does not help."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pools.controllers.cluster_sync import admission_policy_sync
from pools.core.isolation import (
    POLICY_NAME,
    TEAM_LABEL,
    PoolAccess,
    admission_policy,
    node_refusal,
    refusal,
)
from pools.models import NamespaceTeam, Team
from pools.providers.kubernetes_admission import AdmissionPolicies
from pools.services import pools as services
from tests.conftest import make_document
from tests.k8s.helpers import wait_for
from tests.pools.pod_helpers import pool_with_nodes


@pytest.fixture
def policies(kube, on_kubernetes):
    admission = AdmissionPolicies(kube)
    yield admission
    for delete in (admission.api.delete_validating_admission_policy_binding, admission.api.delete_validating_admission_policy):
        try:
            delete(POLICY_NAME)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def team_namespace(core, unique):
    """team -> a namespace of the API server labelled as that team's."""

    def make(team: str) -> str:
        name = f"{team}-{unique}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={TEAM_LABEL: team})))
        # kube-controller-manager is not running: no service account is made for the namespace.
        core.create_namespaced_service_account(name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))
        return name

    return make


def pod(name: str, *, selector=None, pool_affinity=None, node_name=None, scheduler=None) -> dict:
    spec = {
        "containers": [{"name": "main", "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        "tolerations": [{"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}],
    }
    if selector:
        spec["nodeSelector"] = selector
    if node_name:
        spec["nodeName"] = node_name
    if scheduler:  # one kube-scheduler does not serve: the pod waits for a Binding
        spec["schedulerName"] = scheduler
    if pool_affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": [pool_affinity]}]}]}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def admitted(core, namespace: str, body: dict) -> str | None:
    """None if the API server would create the pod (a dry run: nothing is stored), else its refusal."""
    try:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as exc:
        return json.loads(exc.body)["message"]
    return None


def test_the_api_server_refuses_another_teams_pod_on_a_pool_until_its_lead_shares_it(actors, core, policies, team_namespace):
    document = make_document("train-pool-a", nodeCount={"min": 0, "max": 4}, nodeLabels={"pool": "train"})
    pool = services.pool_create(user=actors["lead"], document=document)
    inference, algorithm = team_namespace("inference"), team_namespace("algorithm")
    assert admission_policy_sync(policies) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]

    pinned = pod("sneaky", selector={"ebcloud.io/pool": "train-pool-a"})
    message = wait_for(lambda: admitted(core, inference, pinned), what="the policy to take effect")
    assert refusal("inference") in message and "ValidatingAdmissionPolicy 'ebcloud-pool-teams'" in message
    assert refusal("inference") in admitted(core, inference, pod("by-label", pool_affinity="train"))
    assert admitted(core, inference, pod("anywhere")) is None  # selects no pool in particular
    assert admitted(core, algorithm, pinned) is None  # the owner's own namespace

    spec = {**pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": spec})
    assert admission_policy_sync(policies) == ["ValidatingAdmissionPolicy"]
    wait_for(lambda: admitted(core, inference, pinned) is None, what="the shared pool to admit the borrower's pod")
    assert admission_policy_sync(policies) == []  # in step: two reads, nothing applied


def test_a_pod_created_on_a_node_of_another_teams_pool_by_name_is_refused_until_the_pool_is_shared(actors, core, policies, team_namespace):
    """`spec.nodeName` skips kube-scheduler and the extender, and a kubelet admits the pod
    whatever NoSchedule taint its node has: that pod of another team ran on the pool, without a
    word (found by a QA sweep). The policy knows each pool's nodes by name."""
    pool = pool_with_nodes(actors["lead"], nodes=2)
    inference, algorithm = team_namespace("inference"), team_namespace("algorithm")
    admission_policy_sync(policies)
    direct = pod("direct", node_name="train-pool-a-1")
    message = wait_for(lambda: admitted(core, inference, direct), what="the policy to take effect")
    assert node_refusal("inference", "train-pool-a-1") in message
    assert admitted(core, algorithm, direct) is None  # the owner's own namespace
    assert admitted(core, inference, pod("elsewhere", node_name="cpu-node-7")) is None  # a node of no pool
    spec = {**pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": spec})
    admission_policy_sync(policies)
    wait_for(lambda: admitted(core, inference, direct) is None, what="the shared pool to admit the borrower's pod")


SECOND = "second-scheduler"  # a scheduler our extender does not advise


def bound(core, namespace: str, pod_name: str, node: str, *, dry_run: bool = True) -> str | None:
    """None if the API server binds the pod to the node (as a scheduler does), else its refusal."""
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod_name), target=client.V1ObjectReference(kind="Node", name=node))
    try:  # the answer is a Status, which the client cannot read back as a Binding
        core.create_namespaced_pod_binding(pod_name, namespace, body, dry_run="All" if dry_run else None, _preload_content=False)
    except ApiException as exc:
        return json.loads(exc.body)["message"]
    return None


def test_a_second_scheduler_cannot_bind_a_pod_to_another_teams_pool_node(actors, core, policies, team_namespace):
    """A Binding skips the extender as `spec.nodeName` does: a second scheduler (one the
    extender does not advise), or anyone allowed to bind pods, could put a pod of another team
    on the pool (found by review). The policy refuses it, by pods/binding and by the older
    namespaced bindings, and still lets the pool's own team's pods and a shared pool's be bound."""
    pool = pool_with_nodes(actors["lead"], nodes=2)
    inference, algorithm = team_namespace("inference"), team_namespace("algorithm")
    admission_policy_sync(policies)
    for namespace in (inference, algorithm):
        core.create_namespaced_pod(namespace, pod("waiting", scheduler=SECOND))  # selects no pool: admitted, unbound
    message = wait_for(lambda: bound(core, inference, "waiting", "train-pool-a-1"), what="the policy to take effect")
    assert node_refusal("inference", "train-pool-a-1") in message
    older = client.V1Binding(metadata=client.V1ObjectMeta(name="waiting"), target=client.V1ObjectReference(kind="Node", name="train-pool-a-1"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_binding(inference, older, dry_run="All", _preload_content=False)
    assert node_refusal("inference", "train-pool-a-1") in json.loads(refused.value.body)["message"]
    assert bound(core, inference, "waiting", "cpu-node-7") is None  # a node of no pool
    assert bound(core, algorithm, "waiting", "train-pool-a-1", dry_run=False) is None  # the owner's own pod, for real
    assert core.read_namespaced_pod("waiting", algorithm).spec.node_name == "train-pool-a-1"
    spec = {**pool.document["spec"], "sharedWith": ["inference"]}
    services.pool_update(user=actors["lead"], pool=pool, document={**pool.document, "spec": spec})
    admission_policy_sync(policies)
    wait_for(lambda: bound(core, inference, "waiting", "train-pool-a-1") is None, what="the shared pool to take the borrower's pod")
    assert core.read_namespaced_pod("waiting", inference).spec.node_name is None  # a dry run binds nothing


def test_a_team_s_own_namespace_is_its_team_s_to_the_policy_without_a_label(actors, core, policies, namespace):
    """A team's own namespace (its slug) is the team's by the product's rule (`namespace_owner`)
    before any mapping or label says so: the API server refuses its pod that selects only
    another team's pool, as the extender would keep it off."""
    services.pool_create(user=actors["lead"], document=make_document("train-pool-a", nodeCount={"min": 0, "max": 4}))
    Team.objects.create(slug=namespace, name="Own namespace")
    admission_policy_sync(policies)
    pinned = pod("pinned", selector={"ebcloud.io/pool": "train-pool-a"})
    assert refusal(namespace) in wait_for(lambda: admitted(core, namespace, pinned), what="the policy to take effect")


def test_an_admins_namespace_mapping_wins_and_a_policy_someone_removed_comes_back(actors, teams, core, policies, team_namespace, unique):
    services.pool_create(user=actors["lead"], document=make_document("train-pool-a", nodeCount={"min": 0, "max": 4}))
    labelled_algorithm = team_namespace("algorithm")
    NamespaceTeam.objects.create(namespace=labelled_algorithm, team=teams["inference"])  # the admin's word wins over the label
    admission_policy_sync(policies)
    pinned = pod("pinned", selector={"ebcloud.io/pool": "train-pool-a"})
    message = wait_for(lambda: admitted(core, labelled_algorithm, pinned), what="the policy to take effect")
    assert refusal("inference") in message

    policies.api.delete_validating_admission_policy_binding(POLICY_NAME)
    wait_for(lambda: admitted(core, labelled_algorithm, pinned) is None, what="the binding's removal to take effect")
    assert admission_policy_sync(policies) == ["ValidatingAdmissionPolicyBinding"]
    wait_for(lambda: admitted(core, labelled_algorithm, pinned), what="the binding to be back")


def test_the_api_server_takes_the_policy_for_a_thousand_pools(core, policies, team_namespace):
    """CEL expressions have a cost budget the API server checks when a policy is written: the
    pools are data of one variable, so the policy stays valid however many pools there are."""
    pools = [
        PoolAccess(f"pool-{i}", {"ebcloud.io/pool": f"pool-{i}", "ebcloud.io/team": f"team-{i % 20}", "pool": "train", "gpu-class": "a100"},
                   frozenset({f"team-{i % 20}", f"team-{(i + 1) % 20}"}), frozenset(f"pool-{i}-{n}" for n in range(4)))
        for i in range(1000)
    ]  # fmt: skip
    big = frozenset(f"{'n' * 50}-{i:05d}" for i in range(2500))  # one pool's node names alone are more than one expression may hold
    pools.append(PoolAccess("big", {"ebcloud.io/pool": "big"}, frozenset({"team-19"}), big))
    policy, binding = admission_policy(pools, {f"ns-{i}": f"team-{i}" for i in range(200)})
    assert len([v for v in policy["spec"]["variables"] if v["name"].startswith("nodes")]) >= 3
    assert policies.sync(policy, binding) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    namespace = team_namespace("team-3")
    message = wait_for(lambda: admitted(core, namespace, pod("far", selector={"ebcloud.io/pool": "pool-0"})), what="the policy to take effect")
    assert refusal("team-3") in message
    assert admitted(core, namespace, pod("near", selector={"ebcloud.io/pool": "pool-2"})) is None  # lent to team-3
    assert node_refusal("team-3", "pool-999-3") in admitted(core, namespace, pod("named", node_name="pool-999-3"))
    assert node_refusal("team-3", f"{'n' * 50}-02499") in admitted(core, namespace, pod("big", node_name=f"{'n' * 50}-02499"))
    assert admitted(core, namespace, pod("lent", node_name="pool-2-0")) is None
    core.create_namespaced_pod(namespace, pod("waiting", scheduler=SECOND))
    assert node_refusal("team-3", f"{'n' * 50}-02499") in bound(core, namespace, "waiting", f"{'n' * 50}-02499")
    assert bound(core, namespace, "waiting", "pool-2-0") is None
