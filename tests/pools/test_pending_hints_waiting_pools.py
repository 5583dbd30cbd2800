"""A Pending pod whose team already has a pool that would take it, but with no Ready node yet,
is told which pool and what it waits for (its order awaiting approval, its nodes starting, its
taint to tolerate), never to order a duplicate pool; the order form is suggested only when no
pool the team may use could ever take the pod (seed T2)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.core.scheduling.nodes import NodeState, Pod, Taint
from pools.core.scheduling.waiting import PoolProspect, could_take, waiting_hints
from pools.models import Node, PoolOrder
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

ORDER_HINT = "No pool of your team can run this pod"


def infer_pool(user, *, name="infer-pool-a", taints=(), **spec):
    """The issue's pool: L40S, 4 GPUs a node, min 1 (an order awaiting approval), max 3."""
    spec = {"nodeType": "GPU_4_CARD", "gpuModel": "L40S", "region": "cn-east-2b", "nodeCount": {"min": 1, "max": 3}, "nodeLabels": {}, **spec}
    document = make_document(name, nodeTaints=list(taints), **spec)
    return services.pool_create(user=user, document=document)


def wants_l40s(actors, name="wants-l40s", **kwargs):
    """The issue's pod: `ebcloud.io/gpu-models: L40S`, `limits: {nvidia.com/gpu: 4}`, no selector."""
    return submit(actors["member"], name, gpus=4, models="L40S", pool_affinity=None, tolerate=None, **kwargs)


def hints_after_pass(pod) -> list[str]:
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.phase == "Pending"
    return pod.hints


def about(hints: list[str], pool: str) -> str:
    (hint,) = [h for h in hints if h.startswith(f"pool {pool} (")]
    return hint


def test_the_issues_pod_names_the_pool_whose_order_awaits_approval_and_orders_nothing(actors):
    pool = infer_pool(actors["lead"])
    order = pool.orders.get()
    hints = hints_after_pass(wants_l40s(actors))
    assert not any(h.startswith(ORDER_HINT) for h in hints), hints
    hint = about(hints, "infer-pool-a")
    assert hint.startswith(f"pool infer-pool-a (no Ready node yet): its order #{order.pk} awaits approval by a platform admin")
    assert f"`ebcloud order approve {order.pk}`" in hint and "no need to order another pool" in hint
    assert "gpuSpec" not in hint and "/pools/new/" not in hint


def test_while_the_pools_nodes_start_the_pod_is_told_to_wait_for_them(actors):
    pool = infer_pool(actors["lead"])
    PoolOrder.objects.filter(pool=pool).update(status=PoolOrder.Status.PAID)
    Node.objects.create(pool=pool, name="infer-pool-a-1-001", phase=Node.Phase.INITIALIZING, zone=pool.zone, gpu_count=4)
    hints = hints_after_pass(wants_l40s(actors))
    hint = about(hints, "infer-pool-a")
    assert "1 node is starting (a new node is usually Ready within 5–10 minutes" in hint
    assert "`ebcloud node-pool events infer-pool-a`" in hint
    assert not any(h.startswith(ORDER_HINT) for h in hints)


def test_an_approved_order_waiting_for_payment_is_named(actors):
    pool = infer_pool(actors["lead"])
    order = pool.orders.get()
    PoolOrder.objects.filter(pk=order.pk).update(status=PoolOrder.Status.APPROVED)
    hint = about(hints_after_pass(wants_l40s(actors)), "infer-pool-a")
    assert f"its order #{order.pk} is approved and waits to be paid" in hint


def test_a_rejected_order_is_named_with_its_reason_and_no_other_pool_is_ordered(actors):
    pool = infer_pool(actors["lead"])
    services.order_reject(user=actors["admin"], order=pool.orders.get(), reason="budget freeze")
    hints = hints_after_pass(wants_l40s(actors))
    assert "its status says OrderRejected: budget freeze" in about(hints, "infer-pool-a")
    assert not any(h.startswith(ORDER_HINT) for h in hints)


def test_the_readme_train_pod_waits_for_the_training_pool_that_is_booting(actors):
    """The article's pod (affinity pool In [train], tolerating pool=train) while the demo's
    training pool, labelled and tainted for it, has its two nodes still provisioning."""
    pool = pool_with_nodes(actors["lead"], name="train-pool-demo", nodes=2, node_labels={"pool": "train", "gpu-class": "a100"}, phase=Node.Phase.PROVISIONING)
    hints = hints_after_pass(submit(actors["member"], "bert-train-0", gpus=8))
    hint = about(hints, "train-pool-demo")
    assert "2 nodes are starting" in hint and "Its nodes will take this pod once one is Ready" in hint
    assert not any(h.startswith(ORDER_HINT) for h in hints), hints
    assert pool.nodes.count() == 2


def test_a_pool_whose_taint_the_pod_lacks_is_named_with_the_toleration_to_add(actors):
    infer_pool(actors["lead"], taints=[{"key": "pool", "value": "infer", "effect": "NoSchedule"}])
    hint = about(hints_after_pass(wants_l40s(actors)), "infer-pool-a")
    assert "awaits approval by a platform admin" in hint
    assert "Its nodes will not take this pod as it is: untolerated taint pool=infer:NoSchedule" in hint
    assert 'tolerations:\n- key: "pool"\n  operator: "Equal"\n  value: "infer"\n  effect: "NoSchedule"' in hint


def test_a_pool_whose_labels_the_pod_does_not_select_names_both_fixes(actors):
    """The README's first step: train-pool-a from the article's file (tainted pool=train, no
    `pool: train` label), its order awaiting approval; the article's pod selects pool=train."""
    pool = services.pool_create(user=actors["lead"], document=make_document("train-pool-a"))
    hint = about(hints_after_pass(submit(actors["member"], "bert-train-0", gpus=8)), "train-pool-a")
    assert f"order #{pool.orders.get().pk} awaits approval" in hint
    assert "required node affinity not met" in hint and "nodeLabels: {pool: train}" in hint


def test_only_a_pool_of_another_gpu_model_or_team_still_suggests_an_order(actors):
    infer_pool(actors["lead"], name="algo-t4", gpuModel="T4", region="cn-north-1a")  # the team's, but T4
    infer_pool(actors["other_lead"], name="their-l40s")  # L40S, but another team's
    hints = hints_after_pass(wants_l40s(actors))
    (order,) = [h for h in hints if h.startswith(ORDER_HINT)]
    assert "GPU model L40S" in order and "/pools/new/?team=algorithm" in order
    # A member is told who can order (the form is a lead's: a 403 to a member; found by a QA sweep).
    assert "it needs 4 GPUs, 4000m CPU and 32768Mi memory on one node, GPU model L40S. A lead of team algorithm can order a pool" in order
    (bare,) = [h for h in hints_after_pass(wants_l40s(actors, name="bare", cpu="0", memory="0")) if h.startswith(ORDER_HINT)]
    assert "it needs 4 GPUs on one node, GPU model L40S." in bare  # not "0m CPU and 0Mi memory"
    assert not any("their-l40s" in h for h in hints) and not any(h.startswith("pool algo-t4 (") for h in hints)


def test_a_pool_lent_to_the_team_counts_as_its_own(actors):
    infer_pool(actors["other_lead"], name="their-l40s", sharedWith=["algorithm"])
    hints = hints_after_pass(wants_l40s(actors))
    assert "awaits approval" in about(hints, "their-l40s")
    assert not any(h.startswith(ORDER_HINT) for h in hints)


def test_a_guest_of_a_lent_pool_that_keeps_no_node_is_told_whom_to_ask_not_its_owners_commands(actors):
    """`ebcloud node-pool scale their-l40s --min 1` is the owner's command (a 404 for the guest),
    and a guest's pods never grow a lent pool (found by a hostile-input probe)."""
    infer_pool(actors["other_lead"], name="their-l40s", sharedWith=["algorithm"], nodeCount={"min": 0, "max": 3})
    hint = about(hints_after_pass(wants_l40s(actors)), "their-l40s")
    assert hint.startswith("pool their-l40s (no Ready node yet): it is lent to your team, and a lent pool grows only for its own team's pods, "
                           "so this pod waits for room on it: ask the lead of team inference for more.")
    assert "node-pool" not in hint and "nodeCount.min" not in hint


def test_a_full_pool_at_its_max_is_named_and_nothing_is_ordered(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"}, nodeCount={"min": 0, "max": 1})
    submit(actors["member"], "first", gpus=8)
    hints = hints_after_pass(submit(actors["member"], "second", gpus=8))
    assert any(h.startswith("pool train-pool-a is at its nodeCount.max (1 node)") for h in hints)
    assert not any(h.startswith(ORDER_HINT) for h in hints) and not any("no Ready node yet" in h for h in hints)


def test_the_hints_cost_no_statement_per_pod(actors):
    infer_pool(actors["lead"])

    def pass_statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            scheduler_pass(now=T0)
        return len(queries)

    wants_l40s(actors, "one")
    one = pass_statements()
    for i in range(5):
        wants_l40s(actors, f"more-{i}")
    assert pass_statements() == one


@pytest.mark.parametrize(
    ("pod", "takes"),
    [
        (Pod(name="algorithm/p", gpu_count=4, gpu_models=("L40S",), team="1"), True),
        (Pod(name="algorithm/p", gpu_count=8, team="1"), False),  # larger than a node
        (Pod(name="algorithm/p", gpu_count=1, gpu_models=("H100_80G",), team="1"), False),  # another GPU model
        (Pod(name="inference/p", gpu_count=1, team="2"), False),  # another team's pool
    ],
)
def test_could_take_is_what_the_pod_cannot_change_about_a_pool(pod, takes):
    template = NodeState(name="t", cpu_milli=64000, memory_mib=512 * 1024, gpu_count=4, gpu_model="L40S", pool="infer-pool-a",
                         taints=(Taint("pool", "infer"),), teams=frozenset({"1"}))  # fmt: skip
    prospect = PoolProspect(template=template, min_nodes=1, max_nodes=3, awaiting_approval=(7,))
    assert could_take(pod, prospect) is takes
    assert bool(waiting_hints(pod, [prospect])) is takes
    assert waiting_hints(pod, [PoolProspect(template=template, min_nodes=1, max_nodes=3, live=1)]) == []  # nodes: the scheduler's hints say it
