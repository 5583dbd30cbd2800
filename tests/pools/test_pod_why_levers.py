"""The reviewer's two cases through the scheduler pass, the pod's API document, its page and the
pool's Diagnose check (seed T2, T5, O4): the hints a lead reads never offer a lever that cannot
work, and the Diagnose page says the same.

1. A 2-GPU pod aimed at fh-l40s (1-GPU L40S nodes, `pool=fh`) is told only that it can never
   fit there; it was also told to "wait, preempt lower-priority pods, repack, or raise the
   pool's nodeCount.max".
2. A busy pool below its max that does not burst is told how a node comes (nodeCount.min, or
   burst), never to raise nodeCount.max; at its max, or at its burst limit, it is told the limit
   it is at, and what raising it brings.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node
from pools.models.pods import Pod
from pools.selectors import diagnose as diagnose_service
from pools.services import pods as pod_services
from tests.pools.pod_helpers import T0, pool_with_nodes, submit, train_pod_document

NEVER_FITS = ("pool fh-l40s (2 nodes): the pod requests 2 GPUs and a node has 1. To run there, ask for at most 1 GPU per pod "
              "(split the job, e.g. into data-parallel workers).")  # fmt: skip
TRAIN_DEMO_AFFINITY = ("pool train-pool-demo (2 nodes): required node affinity not met, failing (pool In [fh]). To run there, "
                       "change the required node affinity to (pool In [fh, train]). (Or, instead of changing the pod's node "
                       "selection, add nodeLabels: {pool: fh} to the pool spec.)")  # fmt: skip
FULL_DEMO = ("pool train-pool-demo (2 nodes): no node has 2 idle GPUs (at most 0 on any one). Wait for the pods there to finish "
             "or give the pod a PriorityClass above theirs (spec.priorityClassName) to preempt pods there.")  # fmt: skip


def fh_big_0(actors) -> Pod:
    """examples/pods/train-pod.yaml renamed fh-big-0: `pool In [fh]`, nvidia.com/gpu 2, cpu 4, memory 16Gi."""
    document = train_pod_document()
    document["metadata"]["name"] = "fh-big-0"
    spec = document["spec"]
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["fh"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 2}}
    return pod_services.pod_create(user=actors["member"], document=document, now=T0)


def demo_pool(actors, **spec) -> GpuNodePool:
    """The demo's train-pool-demo: two Ready 8-GPU nodes labelled pool=train, tainted pool=train, max 6."""
    return pool_with_nodes(actors["lead"], name="train-pool-demo", node_labels={"gpu-class": "a100", "pool": "train"}, **spec)


def pending_after_pass(pod: Pod) -> Pod:
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.phase == "Pending"
    return pod


def pods_pending_check(pool: GpuNodePool):
    checks = diagnose_service.pool_diagnose(pool=pool, now=T0 + timedelta(minutes=40)).checks
    return next(c for c in checks if c.id == "pods-pending")


def test_a_pod_too_large_for_a_pools_nodes_is_told_only_that_on_the_api_the_page_and_diagnose(actors, api, browser):
    fh = pool_with_nodes(actors["lead"], name="fh-l40s", nodes=2, node_labels={"pool": "fh"}, taints=[],
                         nodeType="GPU_1_CARD", gpuModel="L40S", region="cn-east-2b")  # fmt: skip
    demo_pool(actors)
    pod = pending_after_pass(fh_big_0(actors))
    assert pod.explanation == ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
                               "affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")  # fmt: skip
    assert pod.hints == [NEVER_FITS, TRAIN_DEMO_AFFINITY]
    status = api("member").get("/api/v1/pods/algorithm/fh-big-0/").json()["status"]
    assert (status["message"], status["hints"]) == (pod.explanation, [NEVER_FITS, TRAIN_DEMO_AFFINITY])
    page = browser("lead").get("/pods/algorithm/fh-big-0/").content.decode()
    assert "the pod requests 2 GPUs and a node has 1" in page
    assert "idle GPUs" not in page and "nodeCount.max" not in page and "preempt lower-priority" not in page
    check = pods_pending_check(fh)
    assert check.cause.startswith("The request exceeds allocatable: algorithm/fh-big-0 asks for 2 GPU(s)")
    assert check.action.endswith(f"The scheduler's hint: {NEVER_FITS}")
    assert "nodeCount" not in check.action and "repack" not in check.action and "preempt" not in check.action


def test_a_busy_pool_below_its_max_without_burst_is_told_to_raise_min_not_max(actors):
    pool = demo_pool(actors)
    for i in range(2):
        submit(actors["member"], f"full-{i}", gpus=8, priority=100)
    pod = pending_after_pass(submit(actors["member"], "waiting", gpus=2, priority=100))
    assert pod.hints == [
        FULL_DEMO,
        "pool train-pool-demo has 2 Ready node(s) of at most 6: a new node would fit the pod, but the pool does not burst (no "
        "spec.scaling block, or spec.burst.enabled: false), so none is added until you raise nodeCount.min (ebcloud node-pool "
        "scale train-pool-demo --min N) or enable burst.",
    ]
    check = pods_pending_check(pool)
    assert "does not burst" in check.cause and "raise nodeCount.min" in check.action and "nodeCount.max" not in check.action


def test_a_full_pool_of_another_gpu_model_is_not_told_to_grow_for_the_pod(actors):
    """A new node of the pool would be of its own GPU model, which the pod does not take: no
    growth hint for it, only what the pod can change."""
    demo_pool(actors)
    for i in range(2):
        submit(actors["member"], f"full-{i}", gpus=8, priority=100)
    pod = pending_after_pass(submit(actors["member"], "h100-only", gpus=2, priority=100, models="H100_80G"))
    assert pod.hints and not any("a new node would fit" in hint or "nodeCount" in hint for hint in pod.hints), pod.hints


@pytest.mark.parametrize(
    ("spec", "on_demand", "hint", "cause", "action"),
    [
        pytest.param(
            {"nodeCount": {"min": 0, "max": 2}}, 0,
            "pool train-pool-demo is at its nodeCount.max (2 nodes) and they are busy, and the pool does not burst (no "
            "spec.scaling block, or spec.burst.enabled: false): raising the max alone adds no node. Raise both (ebcloud node-pool "
            "scale train-pool-demo --min N --max N), or raise nodeCount.max and enable burst.",
            "No capacity: the pool is at nodeCount.max (2) and its nodes are full; it does not burst (no spec.scaling block, or "
            "spec.burst.enabled is false), so raising nodeCount.max alone adds no node.",
            "raise nodeCount.min with it (`ebcloud node-pool scale train-pool-demo --min N --max N`), or raise nodeCount.max and "
            "enable on-demand burst.",
            id="at-max-without-burst",
        ),
        pytest.param(
            {"nodeCount": {"min": 0, "max": 2}, "burst": {"enabled": True}}, 0,
            "pool train-pool-demo is at its nodeCount.max (2 nodes) and they are busy: raise it (ebcloud node-pool scale "
            "train-pool-demo --max N); the autoscaler then adds a burst node when the pool's scaling policy asks.",
            "No capacity: the pool is at nodeCount.max (2) and its nodes are full.",
            "raise nodeCount.max (`ebcloud node-pool scale train-pool-demo --max N`): the autoscaler then adds a burst node when "
            "the pool's scaling policy asks.",
            id="at-max-bursting",
        ),
        pytest.param(
            {"burst": {"enabled": True, "maxNodes": 1}}, 1,
            "pool train-pool-demo is at its burst limit (spec.burst.maxNodes: 1 above its 1 monthly node) and they are busy: "
            "raise spec.burst.maxNodes (ebcloud node-pool apply -f with the pool's YAML), or raise nodeCount.min (ebcloud "
            "node-pool scale train-pool-demo --min N).",
            "No capacity: the pool is at its burst limit (spec.burst.maxNodes: 1 above its 1 monthly node) and its nodes are full.",
            "raise spec.burst.maxNodes (`ebcloud node-pool apply -f` with the pool's YAML) or nodeCount.min (`ebcloud node-pool "
            "scale train-pool-demo --min N`).",
            id="at-burst-limit-below-max",
        ),
    ],
)
def test_a_busy_pool_at_a_limit_is_told_that_limit_on_the_pod_and_on_diagnose(actors, spec, on_demand, hint, cause, action):
    """The autoscaler adds burst nodes up to nodeCount.max, or spec.burst.maxNodes above the
    monthly nodes where that is lower; a pool that does not burst grows only by nodeCount.min."""
    pool = demo_pool(actors, **spec)
    for node in Node.objects.filter(pool=pool).order_by("-name")[:on_demand]:
        node.billing = Node.Billing.ON_DEMAND
        node.labels = {**node.labels, "ebcloud.io/billing": Node.Billing.ON_DEMAND}
        node.save(update_fields=["billing", "labels"])
    for i in range(2):
        submit(actors["member"], f"full-{i}", gpus=8, priority=100)
    pod = pending_after_pass(submit(actors["member"], "waiting", gpus=2, priority=100))
    assert pod.hints == [FULL_DEMO, hint]
    check = pods_pending_check(pool)
    assert check.cause == cause
    assert check.action == (f"Run `ebcloud pod why algorithm/waiting` (what `kubectl describe pod` shows: the scheduler's message "
                            f"and hints); {action} The scheduler's hint: {FULL_DEMO}")  # fmt: skip
