"""The scheduler pass over the database (seed O3, T2): binds, explanations, preemption, completion,
events, per-pool policy, a constant number of queries, and the `schedule` command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from pools.providers import get_cluster_backend
from tests.pools.pod_helpers import T0, pool_with_nodes, submit


def reasons(pool):
    return list(PoolEvent.objects.filter(pool=pool).order_by("id").values_list("reason", flat=True))


@pytest.fixture
def train_pool(actors):
    return pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"})


def test_the_articles_pod_is_bound_to_a_train_node_with_an_event(actors, train_pool):
    pod = submit(actors["member"], "bert", gpus=4)
    result = scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert result.scheduled == ["algorithm/bert"]
    assert (pod.phase, pod.node.name, pod.gpu_indices, pod.started_at) == ("Running", "train-pool-a-0", [0, 1, 2, 3], T0)
    assert pod.explanation == "" and pod.hints == []
    event = PoolEvent.objects.get(pool=train_pool, reason="Scheduled")
    assert event.node == pod.node and event.message == "Successfully assigned algorithm/bert to train-pool-a-0 on GPU(s) 0, 1, 2, 3"


def test_a_pod_missing_the_toleration_stays_pending_with_the_kube_message_and_a_hint(actors, train_pool):
    pod = submit(actors["member"], "no-toleration", tolerate=None)
    result = scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert result.unschedulable == ["algorithm/no-toleration"]
    assert (pod.phase, pod.reason, pod.node) == ("Pending", "Unschedulable", None)
    assert pod.explanation == "0/2 nodes are available: 2 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    assert any("tolerations:" in h and 'value: "train"' in h for h in pod.hints)
    assert not PoolEvent.objects.filter(reason="Scheduled").exists()


def test_a_missing_node_label_names_the_pool_and_the_node_labels_to_add(actors):
    pool_with_nodes(actors["lead"])  # the article's pool: nodes are not labelled pool=train
    pod = submit(actors["member"], "lost")
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.explanation == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    assert any("pool train-pool-a (2 nodes)" in h and "nodeLabels: {pool: train}" in h for h in pod.hints)


def test_sixteen_gpus_never_fit_eight_gpu_nodes(actors, train_pool):
    pod = submit(actors["member"], "huge", gpus=16)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.explanation == ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
                               "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")  # fmt: skip
    assert any("16 GPUs but the largest node has 8" in h for h in pod.hints)


def test_pods_fill_nodes_without_oversubscribing_and_the_rest_wait(actors, train_pool):
    pods = [submit(actors["member"], f"p{i}", gpus=4) for i in range(5)]
    scheduler_pass(now=T0)
    phases = sorted(Pod.objects.values_list("phase", flat=True))
    assert phases == ["Pending"] + ["Running"] * 4
    for node in Node.objects.all():
        assert sum(p.gpu_count for p in Pod.objects.filter(node=node, phase="Running")) <= 8
    assert pods[4].key in {p.key for p in Pod.objects.filter(phase="Pending")}


def test_a_higher_priority_pod_preempts_checkpointable_batch_pods_on_one_node(actors):
    pool = pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    batch = [submit(actors["member"], f"batch-{i}", gpus=4, priority=10, checkpointable=True) for i in range(2)]
    scheduler_pass(now=T0)
    online = submit(actors["member"], "online", gpus=4, priority=1000)
    later = T0 + timedelta(minutes=1)
    result = scheduler_pass(now=later)
    online.refresh_from_db()
    assert online.phase == "Running"
    assert len(result.preempted) == 1 and result.preempted[0] in {b.key for b in batch}
    victim = Pod.objects.get(name=result.preempted[0].split("/")[1])
    assert (victim.phase, victim.reason, victim.node) == ("Pending", "Preempted", None)
    assert "Preempted by algorithm/online" in victim.explanation
    assert reasons(pool)[-3:] == ["Preempted", "Preempting", "Scheduled"]
    assert {b.pk for b in batch} >= {victim.pk}


def test_equal_priority_pods_are_never_preempted(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    submit(actors["member"], "first", gpus=8, priority=100, checkpointable=True)
    scheduler_pass(now=T0)
    late = submit(actors["member"], "second", gpus=8, priority=100)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    late.refresh_from_db()
    assert result.preempted == [] and late.phase == "Pending"


def test_pods_succeed_after_their_duration_and_free_their_gpus(actors, train_pool):
    short = submit(actors["member"], "short", gpus=8, duration="30m")
    submit(actors["member"], "long", gpus=8)
    waiting = submit(actors["member"], "waiting", gpus=8)
    scheduler_pass(now=T0)
    waiting.refresh_from_db()
    assert waiting.phase == "Pending"
    result = scheduler_pass(now=T0 + timedelta(minutes=30))
    short.refresh_from_db()
    waiting.refresh_from_db()
    assert result.succeeded == ["algorithm/short"]
    assert (short.phase, short.finished_at) == ("Succeeded", T0 + timedelta(minutes=30))
    assert waiting.phase == "Running" and waiting.node_id == short.node_id
    assert "Completed" in reasons(train_pool)


def test_pods_on_a_node_that_left_are_requeued(actors, train_pool):
    pod = submit(actors["member"], "orphan", gpus=8)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    Node.objects.filter(pk=pod.node_id).update(phase=Node.Phase.TERMINATED)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    pod.refresh_from_db()
    assert result.requeued == ["algorithm/orphan"]
    assert (pod.phase, pod.reason, pod.node) == ("Pending", "NodeLost", None)
    assert "NodeLost" in reasons(train_pool)


def test_each_pool_packs_by_its_own_policy(actors):
    spread = pool_with_nodes(actors["lead"], name="spread-pool", node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(2):
        submit(actors["member"], f"s{i}", gpus=2)
    scheduler_pass(now=T0)
    nodes = set(Pod.objects.values_list("node__name", flat=True))
    assert nodes == {"spread-pool-0", "spread-pool-1"}
    Pod.objects.all().delete()
    Node.objects.filter(pool=spread).delete()
    pool_with_nodes(actors["lead"], name="pack-pool", node_labels={"pool": "train"}, schedulingPolicy="binpack")
    for i in range(2):
        submit(actors["member"], f"b{i}", gpus=2)
    scheduler_pass(now=T0)
    assert set(Pod.objects.values_list("node__name", flat=True)) == {"pack-pool-0"}


def test_a_pass_takes_the_same_number_of_queries_for_3_or_30_pods(actors):
    pool_with_nodes(actors["lead"], nodes=3, node_labels={"pool": "train"})

    def queries_for(count, prefix):
        for i in range(count):
            gpus = 16 if i == 0 else (1 if i % 3 else 8)  # the first never fits: an explanation to store
            submit(actors["member"], f"{prefix}{i}", gpus=gpus, priority=i % 2, duration="1h")
        with CaptureQueriesContext(connection) as captured:
            scheduler_pass(now=T0)
        return len(captured.captured_queries)

    few = queries_for(3, "a")
    Pod.objects.all().delete()
    many = queries_for(30, "b")
    assert Pod.objects.filter(phase="Pending").exists() and Pod.objects.filter(phase="Running").exists()
    assert many == few, (few, many)


def test_a_repeated_pass_changes_nothing(actors, train_pool):
    submit(actors["member"], "fits", gpus=4)
    submit(actors["member"], "never", gpus=16)
    scheduler_pass(now=T0)
    before = list(Pod.objects.order_by("pk").values_list("phase", "node_id", "explanation")), PoolEvent.objects.count()
    with CaptureQueriesContext(connection) as captured:
        scheduler_pass(now=T0)
    after = list(Pod.objects.order_by("pk").values_list("phase", "node_id", "explanation")), PoolEvent.objects.count()
    assert before == after
    assert not any(q["sql"].startswith(("UPDATE", "INSERT")) for q in captured.captured_queries)


def test_the_schedule_command_runs_one_pass(actors, train_pool):
    submit(actors["member"], "cmd", gpus=1)
    out = StringIO()
    call_command("schedule", "--once", "--now", "2026-12-01T08:00:00Z", stdout=out)
    assert out.getvalue().startswith("scheduled 1, unschedulable 0")
    assert Pod.objects.get(name="cmd").phase == "Running"


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "fgd-cpu", None])
def test_gpu_shares_pack_onto_one_gpu_under_bestfit_and_fgd(actors, policy):
    """None: a pool that names no policy gets the default, fgd-cpu (issue 22 item 5)."""
    chosen = {"schedulingPolicy": policy} if policy else {}
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"}, **chosen)
    for i in range(4):
        submit(actors["member"], f"share-{i}", gpus=1, milli=250, cpu="1", memory="1Gi")
    scheduler_pass(now=T0)
    placed = {(node, tuple(gpus)) for node, gpus in Pod.objects.values_list("node__name", "gpu_indices")}
    assert all(p.phase == "Running" for p in Pod.objects.all())
    assert len(placed) == 1  # four quarter shares fill one GPU of one node


def test_a_pool_without_a_policy_is_scheduled_with_fgd_cpu_and_keeps_an_explicit_binpack(actors):
    """Issue 22 item 5: the default moved from binpack to fgd-cpu; a pool that chose binpack
    must say so in its document and keep it."""

    default = pool_with_nodes(actors["lead"], name="default-pool", node_labels={"pool": "train"})
    packed = pool_with_nodes(actors["lead"], name="pack-pool", node_labels={"pool": "infer"}, schedulingPolicy="binpack")
    assert default.scheduling_policy == "fgd-cpu" and packed.scheduling_policy == "binpack"
    assert "schedulingPolicy" not in default.document["spec"]
    assert packed.document["spec"]["schedulingPolicy"] == "binpack"


def test_a_pod_deleted_during_a_pass_gets_no_scheduled_event(actors, train_pool, monkeypatch):
    from pools.controllers import scheduler as scheduler_service

    submit(actors["member"], "stays", gpus=1)
    doomed = submit(actors["member"], "doomed", gpus=1)
    real = scheduler_service.live_nodes

    def live_nodes_then_delete(**kwargs):
        nodes = real(**kwargs)
        Pod.objects.filter(pk=doomed.pk).delete()  # the API deletes it after the pass loaded it
        return nodes

    monkeypatch.setattr(scheduler_service, "live_nodes", live_nodes_then_delete)
    result = scheduler_pass(now=T0)
    assert result.scheduled == ["algorithm/stays"]
    assert list(PoolEvent.objects.filter(reason="Scheduled").values_list("message", flat=True)) == [
        "Successfully assigned algorithm/stays to train-pool-a-0 on GPU(s) 0"
    ]


def test_a_busy_pool_at_its_max_says_so_and_a_growable_one_says_it_can_grow(actors):
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"}, nodeCount={"min": 0, "max": 2})
    for i in range(2):
        submit(actors["member"], f"full-{i}", gpus=8, priority=10)
    waiting = submit(actors["member"], "waiting", gpus=4, priority=10)
    scheduler_pass(now=T0)
    waiting.refresh_from_db()
    assert waiting.explanation == ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "  # the pods there are of its own priority
                                   "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")  # fmt: skip
    assert any(h.startswith("pool train-pool-a is at its nodeCount.max (2 nodes)") for h in waiting.hints)
    from pools.models import GpuNodePool

    GpuNodePool.objects.filter(name="train-pool-a").update(max_nodes=6)
    scheduler_pass(now=T0)
    waiting.refresh_from_db()
    grows = [h for h in waiting.hints if h.startswith("pool train-pool-a has 2 Ready node(s) of at most 6")]
    assert len(grows) == 1 and "does not burst (no spec.scaling block, or spec.burst.enabled: false)" in grows[0]  # nothing will add a node by itself
    pool = GpuNodePool.objects.get(name="train-pool-a")
    pool.document["spec"]["burst"] = {"enabled": True}
    pool.save(update_fields=["document"])
    scheduler_pass(now=T0)
    waiting.refresh_from_db()
    grows = [h for h in waiting.hints if h.startswith("pool train-pool-a has 2 Ready node(s) of at most 6")]
    assert len(grows) == 1 and "the autoscaler adds a burst node" in grows[0]


def test_a_draining_node_keeps_its_pods_until_the_drain_evicts_them_and_unknown_nodes_keep_theirs(actors, train_pool):
    """The drain evicts through the Eviction API, which a disruption budget may refuse
    (pools/controllers/exits.py); the scheduler pass requeued every pod of a draining node
    behind the budget's back."""
    moving = submit(actors["member"], "moving", gpus=8)
    staying = submit(actors["member"], "staying", gpus=8)
    scheduler_pass(now=T0)
    moving.refresh_from_db()
    staying.refresh_from_db()
    drained = Node.objects.get(pk=moving.node_id)
    Node.objects.filter(pk=drained.pk).update(phase=Node.Phase.DRAINING, unschedulable=True, release_reason="LeaseExpired")
    Node.objects.filter(pk=staying.node_id).update(phase=Node.Phase.UNKNOWN)
    assert scheduler_pass(now=T0 + timedelta(minutes=1)).requeued == []
    moving.refresh_from_db()
    staying.refresh_from_db()
    assert (moving.phase, moving.node_id, staying.phase) == ("Running", drained.pk, "Running")
    get_cluster_backend().evict_pods(pods=[("algorithm", "moving")], reason="LeaseExpired")
    moving.refresh_from_db()
    assert (moving.phase, moving.reason) == ("Pending", "Evicted") and "LeaseExpired" in moving.explanation


def test_explanations_never_name_another_teams_pool(actors):
    """A lead never learns of another team's pools, not even from a hint, and the nodes it may
    not use are not counted (design §6)."""
    pool_with_nodes(actors["lead"])  # algorithm's pool, 2 nodes
    pod = submit(actors["other_lead"], "theirs", namespace="inference")
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.explanation == "no nodes available to schedule pods"
    assert pod.hints and not any("train-pool-a" in h for h in pod.hints)
    assert any(h.startswith("No pool of your team can run this pod") for h in pod.hints)
    own = submit(actors["member"], "ours")
    scheduler_pass(now=T0)
    own.refresh_from_db()
    assert any("pool train-pool-a (2 nodes)" in h for h in own.hints)


def test_pending_pods_read_for_the_core_share_a_replicas_build_and_keep_their_own_names(actors, django_assert_num_queries):
    """Issue 9: `core_pods_of` builds the core's pod once per distinct set of fields (a
    workload's replicas) and renames it for the others: each pod is what `core_pod_of` makes of
    it, a pod the core refuses is reported for itself, and it is one query."""
    from pools.selectors.cluster import core_pod_of, core_pods_of

    for name in ("bert-0", "bert-1", "bert-2"):
        submit(actors["member"], name, gpus=4)
    submit(actors["member"], "small", gpus=1)
    broken = submit(actors["member"], "broken", gpus=1)
    Pod.objects.filter(pk=broken.pk).update(gpu_count=2, gpu_milli=500)  # a share of two GPUs: the core refuses it
    pods = Pod.objects.order_by("name")
    with django_assert_num_queries(1):
        read = {key: core for _, key, core in core_pods_of(pods)}
    assert isinstance(read.pop("algorithm/broken"), ValueError)
    assert read == {f"algorithm/{pod.name}": core_pod_of(pod) for pod in pods.exclude(pk=broken.pk)}
    replicas = [read[f"algorithm/bert-{i}"] for i in range(3)]
    assert [p.name for p in replicas] == ["algorithm/bert-0", "algorithm/bert-1", "algorithm/bert-2"]
    assert len({p.shape_key for p in replicas}) == 1 and replicas[1].labels is replicas[0].labels
    assert read["algorithm/small"].shape_key != replicas[0].shape_key


def test_preemption_chooses_the_node_whose_victims_no_disruption_budget_protects(actors):
    """kube-scheduler's pickOneNodeForPreemption asks first how many victims would be past their
    PodDisruptionBudget: with two equal candidates, the node of the unprotected pod is chosen."""
    from pools.services.disruption_budgets import budget_create

    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    guarded = submit(actors["member"], "low-a", gpus=8, priority=10, labels={"app": "guarded"})
    free = submit(actors["member"], "low-b", gpus=8, priority=10, labels={"app": "free"})
    scheduler_pass(now=T0)
    budget_create(user=actors["lead"], document={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": "guard", "namespace": "algorithm"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})  # fmt: skip
    guarded.refresh_from_db()
    free.refresh_from_db()
    assert guarded.node.name == "train-pool-a-0" and free.node.name == "train-pool-a-1"  # the smaller name would win a tie
    submit(actors["member"], "urgent", gpus=8, priority=1000)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    assert result.preempted == ["algorithm/low-b"]
    guarded.refresh_from_db()
    assert guarded.phase == "Running"


def test_tolerations_stored_before_the_api_checked_them_tolerate_nothing_and_break_no_pass(actors, train_pool):
    """A toleration the API refuses today (`effect: {}`, a string in the list) may sit in rows
    written before: it tolerates nothing, and the scheduler and autoscaler passes go on."""
    from pools.controllers.autoscaler import autoscale_all

    kept = submit(actors["member"], "kept")
    lost = submit(actors["member"], "lost")
    valid = kept.tolerations[0]
    Pod.objects.filter(pk=kept.pk).update(tolerations=[{"key": "x", "operator": "Exists", "effect": {}}, "junk", valid])
    Pod.objects.filter(pk=lost.pk).update(tolerations=[{**valid, "effect": {}}, ["junk"]])
    result = scheduler_pass(now=T0)
    assert result.scheduled == ["algorithm/kept"] and result.unschedulable == ["algorithm/lost"]
    lost.refresh_from_db()
    assert "untolerated taint" in lost.explanation
    autoscale_all(now=T0)  # a string has no .get and a dict effect is unhashable: either stopped every pass
