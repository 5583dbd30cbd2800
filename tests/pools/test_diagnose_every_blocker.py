"""Diagnose names every fix a Pending pod needs on a pool's nodes, not only the first (seed T2,
T5): a pod that misses a taint *and* the label its affinity asks for is told both, in the order
kube-scheduler runs its filters, each with its fix; kube-scheduler's own message still counts
each node under its first failing filter only. The CLI prints each check as one block."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from ebcloud.diagnose import diagnosis_text
from pools.controllers.scheduler import scheduler_pass
from pools.core.diagnose import checks as d
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, Taint, Toleration
from pools.selectors.diagnose import pool_diagnose
from pools.services import pods as pod_services
from tests.pools.pod_helpers import pod_document, pool_with_nodes
from tests.pools.test_diagnose import NOW, M, check, healthy

TWO_TAINTS = [{"key": "pool", "value": "train", "effect": "NoSchedule"}, {"key": "dedicated", "value": "nlp", "effect": "NoSchedule"}]
TEMPLATE = NodeState(name="t", cpu_milli=96000, memory_mib=1024 * 1024, gpu_count=8, gpu_model="A100_80G", pool="train-pool-a",
                     labels={"ebcloud.io/pool": "train-pool-a", "gpu-class": "a100"},
                     taints=(Taint("pool", "train", "NoSchedule"), Taint("dedicated", "nlp", "NoSchedule")))  # fmt: skip
TOLERATES_POOL = (Toleration("pool", "Equal", "train", "NoSchedule"),)
AFFINITY = ((NodeSelectorRequirement("pool", "In", ("train",)),),)


def facts(**kw) -> d.PendingPod:
    pod = Pod(name="algorithm/bert-train-0", cpu_milli=1000, gpu_count=kw.pop("gpus", 4), **kw)
    return d.pending_pod_facts(pod, TEMPLATE, pending_since=NOW - 40 * M)


def test_a_missed_taint_and_a_missed_label_are_both_listed_in_kube_schedulers_order():
    found = facts(tolerations=TOLERATES_POOL, affinity_terms=AFFINITY)
    assert found.blocker == d.TAINT  # the first, as kube-scheduler's message counts it
    assert [b.kind for b in found.blockers] == [d.TAINT, d.AFFINITY]
    assert found.blockers[0].check == "untolerated taint dedicated=nlp:NoSchedule"
    assert found.blockers[0].fix == 'add the toleration {key: "dedicated", operator: "Equal", value: "nlp", effect: "NoSchedule"} to the pod spec'
    assert found.blockers[1].fix == "add pool: train to the pool's spec.nodeLabels, or remove the pod's required node affinity"


def test_a_node_selector_too_large_request_and_taint_each_have_their_fix():
    found = facts(tolerations=TOLERATES_POOL, node_selector={"gpu-class": "h100"})
    assert [b.kind for b in found.blockers] == [d.TAINT, d.AFFINITY]
    assert found.blockers[1].check == "the pod's nodeSelector needs gpu-class=h100 but its nodes have gpu-class=a100"
    assert found.blockers[1].fix == "set the pod's nodeSelector gpu-class: a100"  # an A100 pool is never to be labelled h100
    large = facts(node_selector={"gpu-class": "a100"}, gpus=16)  # selects the pool, tolerates nothing, too large
    assert large.blocker == d.TOO_LARGE  # what the pod cannot change about the pool is the finding's head
    assert [b.kind for b in large.blockers] == [d.TAINT, d.TAINT, d.TOO_LARGE]  # the list keeps kube-scheduler's order
    assert large.blockers[2].check == "the pod requests 16 GPUs and a node has 8"
    assert large.blockers[2].fix == "ask for at most 8 GPUs per pod (split the job)"
    c = check(healthy(pending_pods=(large,)), "pods-pending")
    assert c.cause.startswith("The request exceeds allocatable") and "3 checks fail" in c.cause
    assert "split the job into pods that fit one node, or use a pool of larger nodes. To run it on this pool, make every change: 1) add the toleration" in c.action
    assert facts(tolerations=(*TOLERATES_POOL, Toleration("dedicated", "Exists", "", "")), gpus=2).blockers == ()  # it fits: nothing to fix


def test_the_pods_pending_check_lists_every_check_and_every_fix():
    c = check(healthy(pending_pods=(facts(tolerations=TOLERATES_POOL, affinity_terms=AFFINITY),)), "pods-pending")
    assert c.status == "failing" and "By cause: a taint it does not tolerate (1)." in c.found
    assert c.cause.startswith("Taint not tolerated: the pool's nodes carry pool=train:NoSchedule and algorithm/bert-train-0 has no matching toleration for dedicated=nlp:NoSchedule.")
    assert ("2 checks fail, in the order kube-scheduler runs them (its message counts each node under the first only): "
            "1) untolerated taint dedicated=nlp:NoSchedule; 2) required node affinity not met, failing (pool In [train]).") in c.cause  # fmt: skip
    assert c.action.startswith("Run `ebcloud pod why algorithm/bert-train-0`")
    assert ('Make every change, or the pod stays Pending on the next check: 1) add the toleration {key: "dedicated", operator: "Equal", '
            'value: "nlp", effect: "NoSchedule"} to the pod spec; 2) add pool: train to the pool\'s spec.nodeLabels') in c.action  # fmt: skip
    assert "\n" not in c.cause + c.action
    assert "a taint it does not tolerate + a node selector or affinity no node matches — " in c.details[0]


def test_a_single_blocker_keeps_todays_advice():
    c = check(healthy(pending_pods=(facts(affinity_terms=AFFINITY, tolerations=(*TOLERATES_POOL, Toleration("dedicated", "Exists", "", ""))),)), "pods-pending")
    assert c.cause.startswith("Affinity label missing on nodes") and "checks fail" not in c.cause
    assert "spec.nodeLabels" in c.action and "Make every change" not in c.action


def test_the_diagnose_report_and_cli_block_name_the_toleration_and_the_label(actors):
    """From the database: the pool tainted twice, its nodes without `pool: train`; the pod
    tolerates pool=train only and asks for the label by affinity."""
    pool = pool_with_nodes(actors["lead"], taints=TWO_TAINTS)
    pod_services.pod_create(user=actors["member"], document=pod_document("bert-train-0", gpus=4), now=timezone.now() - timedelta(minutes=40))
    scheduler_pass(now=timezone.now() - timedelta(minutes=39))
    diagnosis = pool_diagnose(pool=pool, now=timezone.now())
    pending = next(c for c in diagnosis.checks if c.id == "pods-pending")
    assert "1) untolerated taint dedicated=nlp:NoSchedule; 2) required node affinity not met" in pending.cause
    assert 'value: "nlp"' in pending.action and "add pool: train to the pool's spec.nodeLabels" in pending.action
    text = diagnosis_text({"pool": pool.name, "checkedAt": "now", "summary": diagnosis.summary,
                           "checks": [{"id": c.id, "title": c.title, "status": c.status, "found": c.found, "cause": c.cause,
                                       "action": c.action, "details": list(c.details)} for c in diagnosis.checks]})  # fmt: skip
    lines = text.splitlines()
    block = lines.index("pods-pending: Pods Pending for a long time [FAILING]")
    assert lines[block + 2].startswith("  Likely cause:  Taint not tolerated") and "2) required node affinity not met" in lines[block + 2]
    assert lines[block + 3].startswith("  First action:  Run `ebcloud pod why algorithm/bert-train-0`") and "1) add the toleration" in lines[block + 3]


def test_a_multi_line_value_stays_inside_its_check_block():
    text = diagnosis_text({"pool": "p", "checks": [{"id": "x", "title": "X", "status": "warning", "found": "f", "cause": "c",
                                                    "action": "add:\ntolerations:\n- key: a"}]})  # fmt: skip
    assert text.endswith("  First action:  add:\n                 tolerations:\n                 - key: a")


def test_a_label_that_exists_bounds_a_number_or_reads_as_a_boolean_is_given_as_yaml_that_reads_back():
    """`tier:` (null), `rank: 11` (a number) and `lend: yes` (a boolean) pasted into the pool's
    spec are refused as label values (found by review)."""
    exists_gt = ((NodeSelectorRequirement("tier", "Exists", ()), NodeSelectorRequirement("rank", "Gt", ("10",))),)
    found = facts(tolerations=TOLERATES_POOL + (Toleration("dedicated", "Equal", "nlp", "NoSchedule"),), affinity_terms=exists_gt)
    assert found.blockers[0].fix.startswith('add rank: "11", tier: "" to the pool\'s spec.nodeLabels, or ')
    lend = facts(tolerations=TOLERATES_POOL + (Toleration("dedicated", "Equal", "nlp", "NoSchedule"),), node_selector={"lend": "yes"})
    assert lend.blockers[0].fix == 'add lend: "yes" to the pool\'s spec.nodeLabels, or remove lend from the pod\'s nodeSelector'
