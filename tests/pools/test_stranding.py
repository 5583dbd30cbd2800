"""CPU-stranded GPU and the fgd-cpu policy (seed O3 placement, C3 fragmentation, P3;
issue 22 item 1): FGD's ties go to the placement that leaves the least idle GPU without CPU."""

from __future__ import annotations

import pytest

from pools.core.scheduling.cluster import ClusterScheduler
from pools.core.scheduling.fragmentation import PodShape, Workload
from pools.core.scheduling.nodes import POLICIES, NodeState, Pod
from pools.core.scheduling.policies import FgdPolicy, make_policy, policy_for
from pools.core.scheduling.stranding import StrandingModel, cpu_per_gpu_milli

# GPU pods ask 8 cores per GPU; CPU-only pods are a third of the workload.
WORKLOAD = Workload(((PodShape(8000, 1, 1000), 2), (PodShape(4000), 1)))


def node(name, cpu_free, gpus=4) -> NodeState:
    state = NodeState(name, 96_000, 512_000, gpus, "A100")
    state.cpu_used = 96_000 - cpu_free
    return state


def test_the_ratio_is_the_cpu_gpu_pods_ask_per_gpu_milli_and_none_without_gpu_pods():
    assert cpu_per_gpu_milli(WORKLOAD) == 8.0
    assert cpu_per_gpu_milli(Workload(((PodShape(4000), 3),))) is None
    assert StrandingModel(Workload(((PodShape(4000), 3),))).node_stranded(node("n", 0)) == 0.0


def test_stranded_gpu_is_what_the_free_cpu_cannot_feed():
    model = StrandingModel(WORKLOAD)
    assert model.node_stranded(node("short", 16_000)) == 2000.0  # 4 idle GPUs, CPU for 2
    assert model.node_stranded(node("plenty", 64_000)) == 0.0
    cpu_pod = Pod("ns/cpu", cpu_milli=4000)
    assert model.placement_delta(cpu_pod, node("short", 16_000)) == 500.0
    assert model.placement_delta(cpu_pod, node("plenty", 64_000)) == 0.0


def test_fgd_cpu_breaks_fgds_tie_towards_the_node_with_cpu_to_spare():
    """FGD sees no difference (a 1-GPU pod still fits on both), so it takes the smallest name
    and strands GPU; fgd-cpu puts the CPU-only pod where CPU is plentiful."""
    nodes = [node("a-short", 16_000), node("b-plenty", 64_000)]
    cpu_pod = Pod("ns/cpu", cpu_milli=4000)
    assert ClusterScheduler([n.clone() for n in nodes], "fgd", workload=WORKLOAD).schedule(cpu_pod).node == "a-short"
    assert ClusterScheduler([n.clone() for n in nodes], "fgd-cpu", workload=WORKLOAD).schedule(cpu_pod).node == "b-plenty"


@pytest.mark.parametrize("cpu_free", [8000, 16_000, 40_000, 96_000])
@pytest.mark.parametrize("request_", [Pod("ns/cpu", cpu_milli=4000), Pod("ns/gpu", cpu_milli=8000, gpu_count=1)])
def test_the_score_is_fgds_plus_a_fraction_below_one(cpu_free, request_):
    """FGD's choice stands whenever it prefers a node; the score stays comparable (0-100)
    with other pools' policies in the live scheduler."""
    fgd_score = FgdPolicy(WORKLOAD).score(request_, node("n", cpu_free))[0]
    score = make_policy("fgd-cpu", workload=WORKLOAD).score(request_, node("n", cpu_free))[0]
    assert fgd_score < score < fgd_score + 1


def test_fgd_cpu_is_selectable_and_learns_the_workload_like_fgd():
    assert "fgd-cpu" in POLICIES
    busy = node("n", 64_000)
    busy.bind(Pod("ns/running", cpu_milli=8000, gpu_count=1), (0,))
    policy = policy_for("fgd-cpu", nodes=[busy])
    assert policy.stranding.ratio == 8.0
    with pytest.raises(ValueError, match="fgd-cpu needs a workload"):
        make_policy("fgd-cpu")
