"""Which Pending pods the pool's Diagnose counts as aimed at it, and the advice it gives (seed T2,
T5): only pods the pool could run but for what its spec or the pod's tolerations can change.
An H100-only pod is nothing an A100 pool can fix, a pod another pool of the team takes is that
pool's, and what the pod cannot change about the pool (GPU model, size) is said before taints,
in the words a pod's owner writes (the ebcloud.io/gpu-models annotation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from pools.controllers.scheduler import scheduler_pass
from pools.core.diagnose import checks as d
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, Taint, Toleration
from pools.models.pods import Pod as PodRow
from pools.selectors import diagnose as diagnose_service
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.test_diagnose import healthy
from tests.pools.test_diagnose_views import pending_pod
from tests.pools.test_pending_hints_waiting_pools import infer_pool

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TRAIN = Taint("pool", "train", "NoSchedule")
TOLERATE_TRAIN = (Toleration("pool", "Equal", "train", "NoSchedule"),)
SPOT = {"key": "ebcloud.io/preemptible", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
AFFINITY_TRAIN = ((NodeSelectorRequirement("pool", "In", ("train",)),),)


def template(pool: str, *, model="A100_80G", gpus=8, labels=None, taints=(TRAIN,), teams=frozenset({"1"})) -> NodeState:
    return NodeState(name=f"{pool}-template", cpu_milli=96000, memory_mib=1024 * 1024, gpu_count=gpus, gpu_model=model, pool=pool,
                     labels={"ebcloud.io/pool": pool, **(labels or {})}, taints=taints, teams=teams)  # fmt: skip


TRAIN_POOL_A = template("train-pool-a", labels={"gpu-class": "a100"})  # the article's file: tainted, not labelled pool=train
TRAIN_POOL_DEMO = template("train-pool-demo", labels={"gpu-class": "a100", "pool": "train"})
BATCH_T4 = template("batch-spot-t4", model="T4", gpus=4, taints=(Taint("ebcloud.io/preemptible", "true", "NoSchedule"),))


def facts(pod: Pod, pool: NodeState = TRAIN_POOL_A, others=()) -> d.PendingPod | None:
    return d.pending_pod_facts(pod, pool, pending_since=NOW - timedelta(minutes=40), others=others)


def test_pods_whose_gpu_model_the_pool_lacks_and_that_select_nothing_are_not_aimed_at_it():
    """The issue's pods: H100-only and L40S-only, no selector, on an A100 pool tainted pool=train."""
    assert facts(Pod(name="algorithm/needs-h100", gpu_count=1, gpu_models=("H100_80G",), team="1")) is None
    assert facts(Pod(name="algorithm/wants-l40s", gpu_count=4, gpu_models=("L40S",), team="1")) is None
    assert facts(Pod(name="algorithm/huge", gpu_count=16, team="1")) is None  # no node of the pool holds it


def test_a_pod_that_selects_nothing_but_fits_only_needs_the_toleration_and_is_told_so():
    waiting = facts(Pod(name="algorithm/any-a100", gpu_count=4, team="1"))
    assert waiting.blocker == d.TAINT
    c = d.check_pending(healthy(pending_pods=(waiting,)), NOW)
    assert "Taint not tolerated" in c.cause and "add the toleration to the pod spec" in c.action


def test_a_pod_another_pool_of_the_team_takes_is_left_to_that_pool():
    """The fresh demo: the article's pods go to train-pool-demo and batch work to batch-spot-t4,
    not to the lead's new train-pool-a."""
    train_pod = Pod(name="algorithm/bert-train-0", gpu_count=8, affinity_terms=AFFINITY_TRAIN, tolerations=TOLERATE_TRAIN, team="1")
    batch = Pod(name="algorithm/label-3", gpu_count=4, tolerations=(Toleration("ebcloud.io/preemptible", "Equal", "true", "NoSchedule"),), team="1")
    assert facts(train_pod, others=(TRAIN_POOL_DEMO, BATCH_T4)) is None
    assert facts(batch, others=(TRAIN_POOL_DEMO, BATCH_T4)) is None
    assert facts(train_pod, TRAIN_POOL_DEMO, others=(TRAIN_POOL_A, BATCH_T4)).blocker == d.FITS  # its own pool, waiting for room
    assert facts(train_pod, others=(BATCH_T4,)).blocker == d.AFFINITY  # train-pool-a the only training pool: label it
    other_teams = template("train-pool-b", labels={"pool": "train"}, teams=frozenset({"2"}))
    assert facts(train_pod, others=(other_teams,)).blocker == d.AFFINITY  # a pool the team may not use takes nothing


def test_the_gpu_model_rules_the_pool_out_before_its_taint_in_the_annotations_words():
    picky = facts(Pod(name="algorithm/picky", gpu_count=8, gpu_models=("H100_80G",), node_selector={"gpu-class": "a100"}, team="1"))
    assert picky.blocker == d.GPU_MODEL and picky.gpu_models == ("H100_80G",)
    c = d.check_pending(healthy(pending_pods=(picky,)), NOW)
    assert c.cause.startswith("GPU model not allowed: the pod's ebcloud.io/gpu-models annotation asks for H100_80G, and this pool's nodes have A100_80G")
    assert "add it to the pod's ebcloud.io/gpu-models annotation" in c.action
    # The toleration is never the advice on its own: it comes after the GPU model's, with every other change.
    head, every = c.action.split(" To run it on this pool, make every change: ")
    assert "toleration" not in head and "gpuSpec" not in c.cause + c.action
    assert every.startswith("1) add the toleration") and "2) allow A100_80G too in the pod's ebcloud.io/gpu-models annotation" in every
    big = facts(Pod(name="algorithm/big", gpu_count=16, node_selector={"gpu-class": "a100"}, team="1"))
    assert big.blocker == d.TOO_LARGE  # untolerated taint too, but no toleration makes 16 GPUs fit 8


def test_only_teams_that_may_use_the_pool_aim_at_it():
    stranger = Pod(name="inference/p", gpu_count=4, tolerations=TOLERATE_TRAIN, team="2")
    assert facts(stranger) is None
    lent = template("train-pool-a", labels={"gpu-class": "a100"}, teams=frozenset({"1", "2"}))
    assert facts(stranger, lent).blocker == d.FITS


def test_a_pod_waiting_for_the_pools_first_nodes_is_told_what_they_wait_for():
    waiting = d.PendingPod(key="algorithm/wants-l40s", pending_since=NOW - timedelta(minutes=30), gpus=4, blocker=d.FITS)
    ordered = healthy(nodes=(), min_nodes=1, max_nodes=3, orders=(d.OrderInfo(7, "Pending"),), pending_pods=(waiting,))
    c = d.check_pending(ordered, NOW)
    assert "By cause: nodes ordered or starting (1)" in c.found and "order #7 awaits approval by a platform admin" in c.cause
    assert "`ebcloud order approve 7`" in c.action and "does not burst" not in c.cause
    starting = d.NodeInfo(name="n1", phase="Initializing", billing="monthly", gpu_count=4, created_at=NOW - timedelta(minutes=3))
    c = d.check_pending(healthy(nodes=(starting,), min_nodes=1, max_nodes=3, pending_pods=(waiting,)), NOW)
    assert "1 node starting" in c.cause and c.action.startswith("Wait: a new node is usually Ready")


# --- over live state -----------------------------------------------------------------------------


def pending_check(pool) -> d.Check:
    checks = diagnose_service.pool_diagnose(pool=pool, now=timezone.now()).checks
    return next(c for c in checks if c.id == "pods-pending")


def test_the_issues_repro_counts_no_h100_or_l40s_pod_against_the_a100_pool(actors):
    train = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100"})  # A100, tainted pool=train
    infer = infer_pool(actors["lead"])  # L40S, its order awaiting approval
    pending_pod(actors, "needs-h100", age=timedelta(minutes=40), models="H100_80G", pool_affinity=None, tolerate=None)
    pending_pod(actors, "wants-l40s", age=timedelta(minutes=40), gpus=4, models="L40S", pool_affinity=None, tolerate=None)
    scheduler_pass(now=timezone.now())
    c = pending_check(train)
    assert c.status == "ok" and c.found == "No Pending pod is aimed at this pool.", c
    c = pending_check(infer)
    assert "1 Pending pod aimed at this pool" in c.found and "algorithm/wants-l40s" in c.found
    order = infer.orders.get().pk
    assert f"order #{order} awaits approval" in c.cause and f"`ebcloud order approve {order}`" in c.action


def test_pods_of_the_teams_other_pools_are_not_listed(actors):
    """The fresh demo's case: full train-pool-demo and batch-spot-t4 with pods queued for them."""
    demo = pool_with_nodes(actors["lead"], name="train-pool-demo", nodes=1, node_labels={"pool": "train", "gpu-class": "a100"})
    pool_with_nodes(actors["lead"], name="batch-spot-t4", nodes=1, gpuModel="T4", nodeType="GPU_4_CARD", region="cn-north-1a",
                    taints=[{"key": "ebcloud.io/preemptible", "value": "true", "effect": "NoSchedule"}])  # fmt: skip
    train = pool_with_nodes(actors["lead"], name="train-pool-a", nodes=0, node_labels={"gpu-class": "a100"})
    for i in range(3):
        pending_pod(actors, f"bert-{i}", age=timedelta(minutes=30), gpus=8)  # affinity pool In [train], tolerates pool=train
        pending_pod(actors, f"label-{i}", age=timedelta(minutes=30), gpus=4, pool_affinity=None, tolerate=None)
    PodRow.objects.filter(name__startswith="label-").update(tolerations=[SPOT])  # no selector: batch work for the spot pool
    assert pending_check(train).found == "No Pending pod is aimed at this pool."
    assert "3 Pending pods aimed at this pool" in pending_check(demo).found
