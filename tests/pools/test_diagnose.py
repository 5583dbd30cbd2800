"""The self-check table (seed T5) as a pure function over a crafted pool snapshot (issue 8 §3).

Each check must fire on the state the article's row describes — scale-up failing (T1), pods
Pending (T2), GPU errors (T3), low utilisation (T4), a bill rising from cross-zone traffic or
idle nodes (T5) — with concrete findings and the first action, and stay ok on a healthy pool.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from pools.core.autoscaling import DEFAULT_SCALING_SPEC, MetricTarget, ScalingRules
from pools.core.diagnose import checks as d
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod, Taint, Toleration
from tests.conftest import ROOT

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def node(name: str, *, billing="monthly", phase="Ready", allocated=8.0, largest=4.0, ready=NOW - 48 * H, **kw) -> d.NodeInfo:
    kw.setdefault("created_at", (ready or NOW) - 5 * M)
    return d.NodeInfo(name=name, phase=phase, billing=billing, gpu_count=8, ready_at=ready,
                      allocated_gpus=allocated, largest_pod_gpus=largest, reported=True, **kw)  # fmt: skip


def pod(key: str, *, age=5 * M, gpus=4.0, blocker=d.FITS, **kw) -> d.PendingPod:
    return d.PendingPod(key=key, pending_since=NOW - age, gpus=gpus, blocker=blocker, **kw)


def healthy(**overrides) -> d.PoolSnapshot:
    """The article's train-pool-a: 2 monthly nodes, busy, reporting, a quiet bill."""
    base = d.PoolSnapshot(
        name="train-pool-a", zone="cn-east-2a", region="cn-east-2", gpu_model="A100_80G", node_type="GPU_8_CARD",
        gpus_per_node=8, min_nodes=2, max_nodes=6, system_image="ubuntu-22.04-cuda-12.2", taints=("pool=train:NoSchedule",),
        nodes=(node("train-pool-a-1-001"), node("train-pool-a-1-002")),
        utilisation=d.UtilisationInfo(samples=1440, first_minute=NOW - 24 * H, mean_util_pct=72.0, max_util_pct=95.0, allocated_pct=88.0),
        costs=d.CostInfo(currency="CNY", recent={"gpu": Decimal("1315.07"), "storage": Decimal("60.00"), "network": Decimal("20.00")},
                         previous_daily={"gpu": Decimal("1315.07"), "storage": Decimal("60.00"), "network": Decimal("19.00")}, previous_days=7),
    )  # fmt: skip
    return replace(base, **overrides)


def check(snapshot: d.PoolSnapshot, check_id: str) -> d.Check:
    return next(c for c in d.diagnose(snapshot, NOW) if c.id == check_id)


def test_a_healthy_pool_passes_every_check_in_the_articles_table_order():
    """T5: the five rows of §5.4 (bill split in its two causes) plus the scaling-spec and the
    preemption (O3) checks."""
    checks = d.diagnose(healthy(), NOW)
    assert [c.id for c in checks] == ["scale-up", "pods-pending", "gpu-errors", "low-utilisation", "bill-cross-zone", "bill-idle-nodes",
                                      "scaling-whole-node", "preemption-checkpointable"]  # fmt: skip
    assert {c.id: c.status for c in checks} == {c.id: "ok" for c in checks}
    assert all(c.found and not c.cause and not c.action for c in checks)
    assert d.overall(checks) == "ok"


def test_now_must_be_timezone_aware():
    with pytest.raises(ValueError):
        d.diagnose(healthy(), NOW.replace(tzinfo=None))


# --- T1: scale-up keeps failing ---------------------------------------------------------------


def test_a_quota_stall_fails_and_names_region_and_gpu_model():
    """T1: quota is per region *and* per GPU model; first action: describe -> pendingReason."""
    c = check(healthy(pending_reason="QuotaExceeded: cn-east-2 A100_80G requested 16, in use 48, limit 56"), "scale-up")
    assert c.status == "failing"
    assert "pendingReason: QuotaExceeded: cn-east-2 A100_80G requested 16" in c.found
    assert "per region and per GPU model (cn-east-2, A100_80G)" in c.cause
    assert "`ebcloud node-pool describe train-pool-a` (pendingReason)" in c.action


def test_a_teams_own_quota_is_named_as_the_teams_not_the_regions():
    """A team's own quota full while the region has room was told to raise the region's quota."""
    c = check(healthy(pending_reason="QuotaExceeded: cn-east-2 A100_80G for team algorithm requested 16, in use 48, limit 56"), "scale-up")
    assert "team algorithm has a quota of its own there" in c.cause
    assert "raise the cn-east-2 A100_80G quota of team algorithm" in c.action
    scaled = d.EventInfo("QuotaExceeded", "Scale-up to 4 not done: 2 on-demand node(s) of 8 GPU(s) would pass the GPU quota of team algorithm "
                         "for A100_80G in cn-east-2: 48 of 56 GPU(s) in use", NOW - 5 * H)  # fmt: skip
    assert "quota of team algorithm" in check(healthy(events=(scaled,)), "scale-up").action
    region = check(healthy(pending_reason="QuotaExceeded: cn-east-2 A100_80G requested 16, in use 48, limit 56"), "scale-up")
    assert "raise the cn-east-2 A100_80G quota or free" in region.action and "own" not in region.cause


def test_out_of_stock_asks_for_a_fallback_zone_and_outranks_an_image_pull_failure():
    events = (
        d.EventInfo("ImagePullFailed", "Node x: image pull failed; retrying in 1m0s", NOW - 2 * M),
        d.EventInfo("OutOfStock", "Node y: OutOfStock in cn-east-2a, 3 in cn-east-2b; retrying in 30s", NOW - 10 * M, count=4),
    )
    c = check(healthy(events=events), "scale-up")
    assert c.status == "failing"
    assert "OutOfStock ×4 (10m0s ago): Node y: OutOfStock in cn-east-2a, 3 in cn-east-2b" in c.found
    assert c.cause.startswith("No A100_80G stock in cn-east-2a")
    assert c.action.startswith("Add a fallback zone")
    assert "to the pool's spec.zones after cn-east-2a, e.g. `zones: [cn-east-2a, <zone with stock>]`" in c.action
    assert len(c.details) == 2


@pytest.mark.parametrize(
    ("last_error", "cause"),
    [("OutOfStock in cn-east-2a, none in the region's other zones", "No A100_80G stock in cn-east-2a"),
     ("ImagePullFailed: registry timeout", "Machines were bought but did not become Ready")],
)  # fmt: skip
def test_a_burst_node_given_up_past_its_provision_time_is_reported_by_its_last_errors_cause(last_error, cause):
    """A node given up (`ProvisionTimeout`) leaves no node behind to point at: its event says why."""
    message = f"Gave up on-demand node y: not Ready 15m0s after it was requested (the limit is 15m0s, EBCLOUD_MAX_NODE_PROVISION_SECONDS); last error: {last_error}; billed nothing"
    c = check(healthy(events=(d.EventInfo("ProvisionTimeout", message, NOW - 3 * M),)), "scale-up")
    assert c.status == "failing" and c.cause.startswith(cause)
    assert f"ProvisionTimeout (3m0s ago): {message}" in c.found


def test_an_unpaid_order_says_top_up_the_account():
    c = check(healthy(pending_reason="InsufficientBalance: need 160000.00 CNY, balance 100.00 CNY"), "scale-up")
    assert c.status == "failing" and "balance is too low" in c.cause and c.action.startswith("Top up the account")


def test_an_order_awaiting_approval_is_a_warning_naming_the_approve_command():
    c = check(healthy(pending_reason="OrderPending: order #7 awaits approval by a platform admin", orders=(d.OrderInfo(7, "Pending"),)), "scale-up")
    assert c.status == "warning"
    assert "`ebcloud order approve 7`" in c.action


def test_a_node_provisioning_past_15_minutes_points_at_image_or_init_script():
    """O4: trigger -> Ready over 15 minutes is a fault (image prewarming, init script)."""
    stuck = node("train-pool-a-1-003", phase="Initializing", allocated=0, ready=None, created_at=NOW - 22 * M, last_error="ImagePullFailed: registry timeout")
    c = check(healthy(nodes=(*healthy().nodes, stuck)), "scale-up")
    assert c.status == "failing"
    assert "node train-pool-a-1-003 still Initializing 22m0s after it was requested, last error: ImagePullFailed: registry timeout" in c.found
    assert "image pull or the init script" in c.cause and "`ebcloud node-pool events train-pool-a`" in c.action


def test_a_failure_that_stopped_hours_ago_is_only_a_warning():
    c = check(healthy(events=(d.EventInfo("QuotaExceeded", "Order #3 is not paid", NOW - 5 * H),)), "scale-up")
    assert c.status == "warning"


def test_a_rejected_order_is_reported_with_its_reason():
    c = check(healthy(orders=(d.OrderInfo(4, "Rejected", "budget freeze"),)), "scale-up")
    assert c.status == "warning" and "order #4 Rejected: budget freeze" in c.found


def test_a_rejected_order_a_later_order_made_good_is_no_longer_a_failing_scale_up():
    """The baseline was ordered again, approved and paid: the old rejection advised requesting
    the capacity again (found by a QA sweep)."""
    rejected = d.OrderInfo(5, "Rejected", "no A100 this month")
    assert check(healthy(orders=(rejected, d.OrderInfo(7, "Paid", ""))), "scale-up").status == "ok"
    assert "order #7 awaits approval" in check(healthy(orders=(rejected, d.OrderInfo(7, "Pending", ""))), "scale-up").found
    assert "order #5 Rejected" in check(healthy(orders=(d.OrderInfo(3, "Paid", ""), rejected)), "scale-up").found


def test_an_order_its_pool_withdrew_is_no_failed_scale_up():
    """A lowered nodeCount.min or a deleted pool withdraws orders (reason `Withdrawn: ...`): the
    lead chose it, nothing failed, and no advice to request the capacity again (T1)."""
    withdrawn = (d.OrderInfo(5, "Withdrawn", "nodeCount.min lowered to 1"),  # and as an earlier release marked them:
                 d.OrderInfo(6, "Rejected", "Withdrawn: nodeCount.min lowered to 2"), d.OrderInfo(7, "Failed", "Withdrawn: the pool was deleted"))  # fmt: skip
    c = check(healthy(orders=withdrawn), "scale-up")
    assert c.status == "ok" and "order #" not in c.found and not c.action
    refused = check(healthy(orders=(*withdrawn, d.OrderInfo(8, "Rejected", "budget freeze"))), "scale-up")
    assert refused.status == "warning" and "order #8 Rejected: budget freeze" in refused.found and "order #6" not in refused.found


# --- T2: pods Pending for a long time ---------------------------------------------------------


def test_a_young_pod_waiting_for_capacity_is_a_normal_scale_up():
    snapshot = healthy(nodes=(node("a"), node("b")), pending_pods=(pod("algorithm/new", age=4 * M),), scaling=DEFAULT_SCALING_SPEC, burst_enabled=True)
    c = check(snapshot, "pods-pending")
    assert c.status == "ok" and "1 Pending pod aimed at this pool" in c.found


def test_a_pod_pending_40_minutes_without_the_toleration_fails_with_the_fix():
    """T2: taint not tolerated; first action: `ebcloud pod why` (kubectl describe pod)."""
    hint = 'pool train-pool-a (2 nodes): untolerated taint pool=train:NoSchedule. To run there, add to the pod spec:\ntolerations: ...'
    elsewhere = "pool spot-a (1 node): untolerated taint ebcloud.io/preemptible=true:NoSchedule. To run there, add ..."
    waiting = pod("algorithm/bert-train-0", age=40 * M, blocker=d.TAINT, reason="node(s) had untolerated taint(s)",
                  explanation="0/2 nodes are available: 2 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.", hints=(elsewhere, hint))  # fmt: skip
    c = check(healthy(pending_pods=(waiting,)), "pods-pending")
    assert c.status == "failing"
    assert "oldest algorithm/bert-train-0 for 40m0s" in c.found and "By cause: a taint it does not tolerate (1)." in c.found
    assert "Taint not tolerated: the pool's nodes carry pool=train:NoSchedule" in c.cause
    assert "`ebcloud pod why algorithm/bert-train-0`" in c.action and "tolerations:" in c.action
    assert "spot-a" not in c.action  # the hint quoted is the one about this pool
    assert "0/2 nodes are available" in c.details[0]


def test_a_request_larger_than_a_node_is_a_warning_even_when_young():
    c = check(healthy(pending_pods=(pod("algorithm/huge", gpus=16, blocker=d.TOO_LARGE, reason="Insufficient nvidia.com/gpu"),)), "pods-pending")
    assert c.status == "warning"
    assert "request exceeds allocatable" in c.cause and "16 GPU(s)" in c.cause and "has 8 GPUs" in c.cause


def test_an_affinity_label_missing_on_the_nodes_is_named():
    c = check(healthy(pending_pods=(pod("algorithm/x", age=20 * M, blocker=d.AFFINITY),)), "pods-pending")
    assert c.status == "failing" and c.cause.startswith("Affinity label missing on nodes") and "spec.nodeLabels" in c.action


def test_a_fitting_pod_with_room_on_a_ready_node_points_at_the_scheduler_plugin():
    """T2: scheduler plugin version skew hides nodes: room exists yet the pod waits."""
    snapshot = healthy(nodes=(node("a", allocated=2), node("b")), pending_pods=(pod("algorithm/y", age=30 * M, gpus=4),))
    c = check(snapshot, "pods-pending")
    assert c.status == "failing" and "scheduler plugin" in c.cause


def test_room_only_on_a_node_the_cluster_runs_no_pod_on_names_that_node_and_why():
    """The room of a node whose Node is gone (or not Ready, or without its GPUs) is no skew of
    the scheduler's: the pod waits because the cluster places nothing there, and the first thing
    to do is to bring the Node back."""
    gone = "the cluster has no Node 'b' (deleted?); its kubelet registers it again when it restarts"
    snapshot = healthy(nodes=(node("a"), node("b", allocated=0, cluster_fault=gone)), pending_pods=(pod("algorithm/y", age=30 * M, gpus=4),))
    c = check(snapshot, "pods-pending")
    assert c.status == "failing" and "By cause: room only on nodes out of use (1)." in c.found
    assert f"runs no pod on (b: {gone})" in c.cause and c.action.startswith("Bring the Node back")
    both = healthy(nodes=(node("a", allocated=2), node("b", allocated=0, cluster_fault=gone)), pending_pods=(pod("algorithm/y", age=30 * M, gpus=4),))
    assert "scheduler plugin" in check(both, "pods-pending").cause  # a node that takes pods has the room too
    full = healthy(nodes=(node("a", cluster_fault="its Node is not Ready (Ready=Unknown)"), node("b", allocated=0, cluster_fault=gone)),
                   pending_pods=(pod("algorithm/y", age=30 * M, gpus=4),))  # fmt: skip
    assert f"(b: {gone})" in check(full, "pods-pending").cause  # the node with the room, not the first faulted one (review)


def test_a_full_pool_at_max_or_without_burst_says_so():
    full = tuple(node(f"n{i}") for i in range(6))
    at_max = check(healthy(nodes=full, pending_pods=(pod("algorithm/z", age=30 * M),)), "pods-pending")
    assert "nodeCount.max (6)" in at_max.cause and "--max N" in at_max.action
    no_burst = check(healthy(pending_pods=(pod("algorithm/z", age=30 * M),)), "pods-pending")
    assert "does not burst" in no_burst.cause and "spec.burst.enabled" in no_burst.action


def test_pending_pod_facts_tell_taint_affinity_size_and_other_pools_apart():
    """The pool's empty node decides what stops a pod (seed O3: affinity AND toleration)."""
    template = NodeState(name="t", cpu_milli=96000, memory_mib=1024 * 1024, gpu_count=8, gpu_model="A100_80G", pool="train-pool-a",
                         labels={"ebcloud.io/pool": "train-pool-a", "pool": "train"}, taints=(Taint("pool", "train", "NoSchedule"),))  # fmt: skip
    affinity = ((NodeSelectorRequirement("pool", "In", ("train",)),),)
    tolerate = (Toleration("pool", "Equal", "train", "NoSchedule"),)

    def facts(**kw):
        return d.pending_pod_facts(Pod(name="algorithm/p", cpu_milli=1000, gpu_count=kw.pop("gpus", 4), **kw), template, pending_since=NOW)

    assert facts(affinity_terms=affinity, tolerations=tolerate).blocker == d.FITS
    assert facts(affinity_terms=affinity).blocker == d.TAINT
    assert facts(affinity_terms=affinity, tolerations=tolerate, gpus=16).blocker == d.TOO_LARGE
    assert facts(affinity_terms=((NodeSelectorRequirement("pool", "In", ("trian",)),),), tolerations=tolerate).blocker == d.AFFINITY
    assert facts(affinity_terms=affinity, tolerations=tolerate, gpu_models=("H100_80G",)).blocker == d.GPU_MODEL
    assert facts(node_selector={"pool": "infer"}) is None  # aimed at another pool: not this pool's concern
    assert facts(affinity_terms=affinity, tolerations=tolerate).gpus == 4


# --- T3: GPU errors mid-training ---------------------------------------------------------------


def test_without_any_agent_report_gpu_health_is_unknown():
    c = check(healthy(nodes=(replace(node("a"), reported=False),)), "gpu-errors")
    assert c.status == "unknown" and "Join the node agents" in c.action


def test_a_fatal_xid_fails_and_the_action_follows_the_auto_repair_setting():
    """T3: confirm the Xid; autoRepair marks the node, evicts its pods and rebuilds it."""
    errors = (d.GpuErrorInfo("train-pool-a-1-001", 79, "fatal", 2, NOW - 20 * M),)
    c = check(healthy(gpu_errors=errors), "gpu-errors")
    assert c.status == "failing"
    assert "2 Xid errors in the last 24 h on 1 node" in c.found and "Xid 79 ×2 on train-pool-a-1-001 (fatal: GPU has fallen off the bus)" in c.found
    assert "GPU hardware fault: Xid 79" in c.cause and "autoRepair is on" in c.action
    off = check(healthy(gpu_errors=errors, auto_repair=False), "gpu-errors")
    assert "autoRepair is off" in off.action


def test_a_driver_cuda_mismatch_is_blamed_before_the_hardware():
    """T3: driver vs CUDA mismatch gives crashes that come and go."""
    condition = {"type": "CudaDriverMismatch", "status": "True", "reason": "DriverBelowToolkitMinimum", "message": "workload CUDA 12.4 needs driver >= 550.54.14, node has 535.104.05"}
    bad = node("train-pool-a-1-002", conditions=(condition,))
    c = check(healthy(nodes=(node("a"), bad), gpu_errors=(d.GpuErrorInfo("train-pool-a-1-002", 13, "application", 5, NOW - H),)), "gpu-errors")
    assert c.status == "failing"
    assert c.cause.startswith("Driver vs CUDA version mismatch on train-pool-a-1-002: workload CUDA 12.4 needs driver >= 550.54.14")
    assert "spec.systemImage (now ubuntu-22.04-cuda-12.2)" in c.action


def test_application_xids_alone_are_a_warning_that_leaves_the_node_alone():
    c = check(healthy(gpu_errors=(d.GpuErrorInfo("a", 13, "application", 1, NOW - H),)), "gpu-errors")
    assert c.status == "warning" and "raised by the application" in c.cause and "the node is left alone" in c.action


def test_a_repairing_node_fails_the_gpu_check_and_old_errors_do_not_count():
    c = check(healthy(nodes=(node("a", phase="Repairing"),), gpu_errors=(d.GpuErrorInfo("a", 79, "fatal", 1, NOW - 30 * H),)), "gpu-errors")
    assert c.status == "failing" and "a is Repairing" in c.found and "Xid" not in c.found


# --- T4: low utilisation ---------------------------------------------------------------------


def test_no_samples_means_unknown():
    assert check(healthy(utilisation=d.UtilisationInfo(samples=0)), "low-utilisation").status == "unknown"


def test_a_day_under_30_percent_with_gpus_allocated_is_io_bound():
    """T4: < 30% busy while the GPUs are held by pods: the jobs wait on data loading."""
    u = d.UtilisationInfo(samples=1440, first_minute=NOW - 24 * H, mean_util_pct=18.0, max_util_pct=27.0, allocated_pct=92.0)
    c = check(healthy(utilisation=u), "low-utilisation")
    assert c.status == "failing"
    assert "Mean GPU utilisation 18.0% over 24 h (1440 samples, highest 27%), 92% of GPUs allocated" in c.found
    assert c.cause.startswith("IO-bound data loading") and "data-loading share" in c.action


def test_low_utilisation_with_few_gpus_allocated_asks_for_the_packing_report():
    """T4/C3: an oversized spec is fixed with packing and the fragmentation report."""
    u = d.UtilisationInfo(samples=300, first_minute=NOW - 5 * H, mean_util_pct=21.0, max_util_pct=60.0, allocated_pct=35.0)
    c = check(healthy(utilisation=u, fragmentation=d.FragmentationInfo(underused_nodes=3, freeable_nodes=2)), "low-utilisation")
    assert c.status == "warning"
    assert "Oversized GPU spec" in c.cause
    assert "`ebcloud node-pool fragmentation train-pool-a --plan`" in c.action and "3 nodes under 50% allocated, repacking frees 2" in c.action


# --- the bill: cross-zone traffic, idle nodes --------------------------------------------------


def test_no_metered_cost_means_unknown():
    assert check(healthy(costs=None), "bill-cross-zone").status == "unknown"


def test_cross_zone_traffic_rising_above_5_percent_fails_with_the_cost_export():
    """T5 row 5, D4, O1 (network ~5%): export costs by labels, check the traffic bill."""
    costs = d.CostInfo(currency="CNY", recent={"gpu": Decimal("1315.07"), "network": Decimal("400.00")},
                       previous_daily={"gpu": Decimal("1315.07"), "network": Decimal("20.00")}, previous_days=7, cross_zone_gb=Decimal("2000"))  # fmt: skip
    c = check(healthy(costs=costs), "bill-cross-zone")
    assert c.status == "failing"
    assert "Last 24 h billed 1715.07 CNY, against 1335.07 a day over the previous 7 days" in c.found
    assert "Cross-zone network 400.00 CNY = 23.3% of it" in c.found and "2000 GB crossed zones" in c.found
    assert "cn-east-2a" in c.cause
    assert "`ebcloud cost export --by-labels team,project,gpu-class --detail`" in c.action


def test_a_steady_but_large_network_share_is_a_warning():
    costs = d.CostInfo(currency="CNY", recent={"gpu": Decimal("900"), "network": Decimal("100")}, previous_daily={"gpu": Decimal("900"), "network": Decimal("100")}, previous_days=3)
    assert check(healthy(costs=costs), "bill-cross-zone").status == "warning"


def test_an_idle_burst_node_past_the_scale_down_window_fails():
    """T5 row 5: idle nodes not scaled in; T6: the scale-down window is 30 minutes."""
    idle = node("train-pool-a-1-003", billing="on_demand", allocated=0, ready=NOW - 3 * H)
    snapshot = healthy(nodes=(*healthy().nodes, idle), scaling=DEFAULT_SCALING_SPEC, burst_enabled=True)
    c = check(snapshot, "bill-idle-nodes")
    assert c.status == "failing"
    assert "1 node above nodeCount.min (2) idle longer than the 30m scale-down window: train-pool-a-1-003 (on_demand) idle for 3h0m" in c.found
    assert "On-demand nodes billed by the hour are not scaled in" in c.cause
    assert c.action.startswith("Export the cost detail by labels (`ebcloud cost export")


def test_idle_within_the_window_or_at_the_minimum_is_fine():
    recent = node("c", billing="on_demand", allocated=0, ready=NOW - 10 * M)
    assert check(healthy(nodes=(*healthy().nodes, recent)), "bill-idle-nodes").status == "ok"
    at_min = check(healthy(nodes=(node("a", allocated=0), node("b", allocated=0))), "bill-idle-nodes")
    assert at_min.status == "ok" and "the paid baseline" in at_min.found


def test_the_pools_own_scale_down_window_is_used():
    hour_window = replace(DEFAULT_SCALING_SPEC, scale_down=ScalingRules(stabilization_window_seconds=3600, policies=DEFAULT_SCALING_SPEC.scale_down.policies))
    idle = node("c", billing="on_demand", allocated=0, ready=NOW - 45 * M)
    assert check(healthy(nodes=(*healthy().nodes, idle), scaling=hour_window, burst_enabled=True), "bill-idle-nodes").status == "ok"


def test_an_idle_monthly_node_above_the_minimum_is_a_warning_about_the_lease():
    c = check(healthy(min_nodes=1, nodes=(node("a"), node("b", allocated=0, last_pod_finished_at=NOW - 2 * H))), "bill-idle-nodes")
    assert c.status == "warning" and "paid until their lease ends" in c.cause and "--min N" in c.action


# --- the scaling spec: combine: All and whole-node pods ----------------------------------------


def test_the_queue_threshold_is_the_autoscalers_own_arithmetic():
    """queued_pods target 10 with HPA's 10% tolerance asks for more from 12 pods, not 11."""
    assert d.queue_threshold(DEFAULT_SCALING_SPEC, 2) == 12
    strict = replace(DEFAULT_SCALING_SPEC, scale_up=replace(DEFAULT_SCALING_SPEC.scale_up, tolerance=0.0))
    assert d.queue_threshold(strict, 2) == 11


def test_combine_all_never_bursts_for_a_whole_node_pod():
    """docs/benchmarks.md autoscaler replay: the article's spec never bursts for 8-GPU jobs."""
    snapshot = healthy(max_nodes=3, scaling=DEFAULT_SCALING_SPEC, burst_enabled=True, pending_pods=(pod("algorithm/peak-job", gpus=8),))
    c = check(snapshot, "scaling-whole-node")
    assert c.status == "failing"
    assert "queued_pods asks only when 12 or more pods are queued and the average GPU memory is above 93.5%" in c.found
    assert "up to 11 of them can wait — more than the 1 burst node this pool may add — and the pool never bursts for them." in c.found
    assert "combine: Any" in c.action and "58 h to 5 min" in c.action
    assert c.details == ("algorithm/peak-job",)


def test_a_queue_target_alone_that_needs_several_pods_leaves_whole_node_pods_waiting():
    """Without a GPU memory metric the queue decides alone (whatever `combine` says): a target
    of 2 needs 3 queued pods, so 2 whole-node jobs wait; GPU memory under `combine: Any` helps."""
    queue_only = replace(DEFAULT_SCALING_SPEC, metrics=(MetricTarget(type="Pods", name="queued_pods", target=2.0),))
    snapshot = healthy(max_nodes=6, scaling=queue_only, burst_enabled=True, pending_pods=(pod("algorithm/peak-job", gpus=8),))
    c = check(snapshot, "scaling-whole-node")
    assert c.status == "failing" and "combine" not in c.found and "GPU memory" not in c.cause
    assert "queued_pods asks for a node only when 3 or more pods are queued" in c.found and "combine: Any" in c.action
    hot = replace(queue_only, combine="Any", metrics=(MetricTarget(type="Resource", name="gpu-memory", target=80.0), *queue_only.metrics))
    assert check(replace(snapshot, scaling=hot), "scaling-whole-node").status == "ok"


def test_whole_node_pods_seen_running_make_it_a_warning():
    snapshot = healthy(max_nodes=20, scaling=DEFAULT_SCALING_SPEC, burst_enabled=True, nodes=(node("a", largest=8), node("b")))
    c = check(snapshot, "scaling-whole-node")
    assert c.status == "warning" and "up to 11 of them wait without a single burst node" in c.found
    assert "(1 node runs one, 0 Pending now)" in c.found


@pytest.mark.parametrize(
    "overrides",
    [
        {"scaling": replace(DEFAULT_SCALING_SPEC, combine="Any"), "burst_enabled": True},  # bursts on one pod
        {"scaling": DEFAULT_SCALING_SPEC, "burst_enabled": False},  # does not burst at all
        {"scaling": DEFAULT_SCALING_SPEC, "burst_enabled": True, "pending_pods": (pod("algorithm/small", gpus=1),)},  # small pods
        {"scaling": DEFAULT_SCALING_SPEC, "burst_enabled": True, "max_nodes": 2},  # no room above the baseline
    ],
)
def test_the_whole_node_check_only_fires_where_it_applies(overrides):
    overrides.setdefault("pending_pods", (pod("algorithm/peak-job", gpus=8),))
    assert check(healthy(**overrides), "scaling-whole-node").status == "ok"


def test_overall_is_the_worst_status():
    make = lambda status: d.Check("x", "x", status, "x")  # noqa: E731
    assert d.overall([make("ok"), make("unknown")]) == "unknown"
    assert d.overall([make("warning"), make("unknown")]) == "warning"
    assert d.overall([make("ok"), make("failing"), make("warning")]) == "failing"


def test_the_core_imports_no_django():
    """Functional core (design §1): the checks run without Django, like the other pure cores."""
    code = "import sys, pools.core.diagnose.checks; sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    assert subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT).returncode == 0


# --- O3: only checkpointable work should be preemptible ---------------------------------------------


def test_a_pod_without_checkpoints_that_a_higher_class_may_preempt_is_a_warning_with_the_fix():
    snapshot = healthy(
        running_pods=(d.RunningPod("algorithm/eval", 0, False), d.RunningPod("algorithm/train", 0, True), d.RunningPod("algorithm/serve", 1000, False)),
        preempting_classes=(("training", 100), ("online", 1000)),
    )
    result = check(snapshot, "preemption-checkpointable")
    assert result.status == d.WARNING
    assert result.details == ("algorithm/eval (priority 0): pods of PriorityClass training (value 100) may preempt it",)
    assert 'ebcloud.io/checkpointable: "true"' in result.action and "value 1000 or more" in result.action


def test_a_never_preempting_class_preempts_nobody_so_no_warning():
    snapshot = healthy(running_pods=(d.RunningPod("algorithm/eval", 0, False),), preempting_classes=())
    assert check(snapshot, "preemption-checkpointable").status == d.OK


def test_on_a_preemptible_pool_every_pod_without_checkpoints_is_exposed():
    snapshot = healthy(preemptible=True, running_pods=(d.RunningPod("algorithm/eval", 5000, False),))
    result = check(snapshot, "preemption-checkpointable")
    assert result.status == d.WARNING and "reclaimed" in result.details[0] and "not preemptible" in result.action


def test_a_pool_in_its_first_hour_is_not_told_to_start_the_worker_or_join_its_agents():
    """No metered cost or utilisation sample yet because the pool is new (its first hour has not
    ended, its node is not Ready), not because the worker is down: the advice says when to look
    again; only a pool old enough to have data is told to start the worker and the agents."""
    new = healthy(nodes=(node("train-pool-a-1-001", phase="Initializing", ready=None, created_at=NOW - 20 * M),), utilisation=None, costs=None)
    cost, util = check(new, "bill-cross-zone"), check(new, "low-utilisation")
    assert cost.status == util.status == "unknown"
    assert cost.cause == "The pool's first hour is metered when it has ended, at 12:02 UTC."
    assert util.cause == "No node of the pool has been Ready yet, so none reports GPU utilisation."
    silent = replace(new, nodes=(replace(new.nodes[0], reported=False),))
    agents = check(silent, "gpu-errors")
    assert (agents.status, agents.cause) == ("unknown", "No node of the pool has been Ready yet, so no node agent reports.")
    assert "Join the node agents" in check(healthy(nodes=(replace(node("n-1"), reported=False),)), "gpu-errors").action
    assert "Start the worker" not in cost.action + util.action
    just_ready = replace(new, nodes=(node("train-pool-a-1-001", ready=NOW - 2 * M, created_at=NOW - 20 * M),))
    assert check(just_ready, "low-utilisation").cause.startswith("The pool's first node became Ready 2m0s ago")
    old = healthy(utilisation=None, costs=None)
    assert check(old, "bill-cross-zone").action.startswith("Start the worker (hourly metering)")
    assert check(old, "low-utilisation").action.startswith("Start the worker (the per-minute rollup)")
    assert check(healthy(nodes=(), utilisation=None, costs=None), "bill-cross-zone").cause == "The pool has had no node, so nothing is billed yet."


def test_low_utilisation_is_not_judged_on_under_an_hour_of_samples():
    """Seven minutes into a new pool its GPUs read low (the job loads its data): no warning yet,
    and the check says when it will judge; from an hour of samples it warns as before."""
    early = d.UtilisationInfo(samples=7, first_minute=NOW - 7 * M, mean_util_pct=12.0, max_util_pct=20.0, allocated_pct=40.0)
    c = check(healthy(utilisation=early), "low-utilisation")
    assert (c.status, c.action) == ("unknown", "Nothing to do yet: the check judges from an hour of samples, at 12:53 UTC.")
    assert c.found.startswith("Mean GPU utilisation 12.0% over 7m0s")
    assert check(healthy(utilisation=replace(early, samples=60, first_minute=NOW - H)), "low-utilisation").status == "warning"
