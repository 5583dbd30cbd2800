"""`ebcloud pod why` for the reviewer's repro, against a live server (seed T2): a 2-GPU pod
aimed at a pool of 1-GPU nodes is told only that it can never fit there, never to wait, preempt,
repack or raise the pool's nodeCount.max (tests/pools/test_pod_why_levers.py has the rest)."""

from __future__ import annotations

from pools.controllers.scheduler import scheduler_pass
from tests.ebcloud.cli_helpers import live
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.test_pod_why_levers import NEVER_FITS, TRAIN_DEMO_AFFINITY, demo_pool, fh_big_0


@live
def test_pod_why_gives_a_pod_too_large_for_the_pools_nodes_only_the_never_fits_hint(ebcloud, login_as, actors):
    pool_with_nodes(actors["lead"], name="fh-l40s", nodes=2, node_labels={"pool": "fh"}, taints=[],
                    nodeType="GPU_1_CARD", gpuModel="L40S", region="cn-east-2b")  # fmt: skip
    demo_pool(actors)
    fh_big_0(actors)
    scheduler_pass(now=T0)
    login_as("member")
    result = ebcloud("pod", "why", "algorithm/fh-big-0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "pod/algorithm/fh-big-0 is Pending",
        "Reason:  Unschedulable",
        "Message: 0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        "Hints:",
        f"  - {NEVER_FITS}",
        f"  - {TRAIN_DEMO_AFFINITY}",
    ]
