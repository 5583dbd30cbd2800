"""The trace benchmark reproduces the FGD paper's numbers (seed O3 placement, P3
fragmentation): Weng et al., "Beware of Fragmentation", USENIX ATC 2023, on the Alibaba
cluster-trace-gpu-v2023 in ../shared/data (skipped when that folder is absent)."""

from __future__ import annotations

import random
import statistics

import pytest

from bench.scheduler_trace import (
    DEFAULT_DATA,
    NODE_FILE,
    PUBLISHED,
    arrival_order,
    load_nodes,
    load_pods,
    parse_seeds,
    rename_nodes,
    run_once,
)
from pools.core.scheduling.fragmentation import workload_from_pods
from pools.core.scheduling.nodes import MILLI, NodeState, Pod

needs_trace = pytest.mark.skipif(
    not (DEFAULT_DATA / NODE_FILE).is_file(),
    reason=f"trace data not found at {DEFAULT_DATA} (../shared/data relative to the project root)",
)

# One seed spreads about +-0.4 around the ten-seed median (BestFit seeds 42-51 give 6.85 to
# 7.52 against a median of 7.18), so a single seed is held to a wider band than the median.
ONE_SEED_BAND, MEDIAN_BAND = 0.5, 0.3
SECONDS_PER_SEED = 10.0


@pytest.fixture(scope="module")
def trace():
    nodes, pods = load_nodes(DEFAULT_DATA), load_pods(DEFAULT_DATA, "default")
    return nodes, pods, workload_from_pods(pods)


@needs_trace
def test_one_seed_of_bestfit_and_fgd_lands_in_the_published_band_quickly(trace):
    bestfit = run_once(*trace, "bestfit", 42)
    fgd = run_once(*trace, "fgd", 42)
    assert bestfit.unallocated_100 == pytest.approx(
        PUBLISHED["default"]["bestfit"][0], abs=ONE_SEED_BAND
    )
    assert fgd.unallocated_100 == pytest.approx(PUBLISHED["default"]["fgd"][0], abs=ONE_SEED_BAND)
    assert fgd.unallocated_100 < bestfit.unallocated_100 - 1.5
    assert max(bestfit.cpu_seconds, fgd.cpu_seconds) < SECONDS_PER_SEED  # CPU, not wall: CI shares its cores


@needs_trace
@pytest.mark.parametrize("policy", ["bestfit", "fgd"])
def test_the_ten_seed_median_reproduces_the_published_number(trace, policy):
    results = [run_once(*trace, policy, seed) for seed in range(42, 52)]
    at_100, at_130 = PUBLISHED["default"][policy]
    assert statistics.median(r.unallocated_100 for r in results) == pytest.approx(
        at_100, abs=MEDIAN_BAND
    )
    assert statistics.median(r.unallocated_130 for r in results) == pytest.approx(
        at_130, abs=MEDIAN_BAND
    )


@needs_trace
def test_fgd_cpu_beats_the_published_state_of_the_art_within_twice_its_time(trace):
    """Issue 22 item 1: median of seeds 42-51 at 100% arrived <= 4.30 (FGD 4.70), better than
    FGD at 100% and 130%, and at most twice FGD's CPU time per seed."""
    fgd = [run_once(*trace, "fgd", seed) for seed in range(42, 52)]
    ours = [run_once(*trace, "fgd-cpu", seed) for seed in range(42, 52)]
    median = statistics.median
    assert median(r.unallocated_100 for r in ours) <= 4.30
    assert median(r.unallocated_100 for r in ours) < median(r.unallocated_100 for r in fgd)
    assert median(r.unallocated_130 for r in ours) < median(r.unallocated_130 for r in fgd)
    assert sum(r.cpu_seconds for r in ours) <= 2 * sum(r.cpu_seconds for r in fgd)


def synthetic_pods(n=50) -> list[Pod]:
    return [Pod(f"p{i:03d}", cpu_milli=1000, gpu_count=1 + i % 2, gpu_milli=0) for i in range(n)]


def test_the_workload_is_tuned_up_to_just_below_1_3_times_capacity():
    pods = synthetic_pods()  # 75 GPUs requested
    order = arrival_order(pods, 100_000, random.Random(1))
    total = sum(p.gpu_request_milli for p in order)
    assert 120_000 <= total <= 130_000
    assert sorted(p.name for p in order[:50]) == [p.name for p in pods]  # originals come first
    assert len({p.name for p in order}) == len(order)


def test_the_workload_is_tuned_down_when_it_starts_above_1_3_times_capacity():
    order = arrival_order(synthetic_pods(), 40_000, random.Random(1))
    assert sum(p.gpu_request_milli for p in order) <= 52_000


def test_nodes_are_renamed_with_a_seeded_permutation_prefix():
    nodes = [NodeState(f"node-{i}", 1000, 1000) for i in range(12)]
    rename_nodes(nodes, random.Random(3))
    prefixes = sorted(int(n.name[:4]) for n in nodes)
    assert prefixes == list(range(12))
    assert all(n.name[4:].startswith("-node-") for n in nodes)


def test_seed_ranges_parse_like_the_cli_documents():
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]


@needs_trace
def test_the_offline_floor_lies_below_every_online_policy(trace):
    """Issue 4 §6b: with every pod known in advance the LP bound is the limit no placement beats."""
    pytest.importorskip("scipy", reason="the offline floor needs scipy (a dependency of the product)")
    from bench.scheduler_trace import floor_once

    nodes, pods, workload = trace
    at_100, at_130 = floor_once(nodes, pods, 42, bound="patterns")
    cuts_100, cuts_130 = floor_once(nodes, pods, 42)
    loose_100, loose_130 = floor_once(nodes, pods, 42, bound="aggregate")
    for policy in ("fgd", "fgd-cpu"):
        online = run_once(nodes, pods, workload, policy, 42)
        assert 0.0 <= at_100 <= online.unallocated_100 and 0.0 <= at_130 <= online.unallocated_130
    # Issue 22 item 3: the per-GPU cuts tighten the bound (seed 42: 0.00 -> 2.52 at 100%), the
    # share patterns more (3.09): even knowing every pod in advance, no placement reaches 3.0%.
    assert loose_100 < 0.5 < 2.0 < cuts_100 < 3.0 < at_100 and loose_130 <= cuts_130 <= at_130


def test_the_offline_floor_of_a_tiny_cluster_is_exact():
    """Two 1-GPU nodes, three 1-GPU pods: two fit, so 0% is unallocated; one 2-GPU pod fits none."""
    pytest.importorskip("scipy", reason="the offline floor needs scipy (a dependency of the product)")
    from bench.offline_floor import offline_floor

    nodes = [NodeState(name=f"n{i}", cpu_milli=8000, memory_mib=32768, gpu_count=1, gpu_model="T4") for i in range(2)]
    ones = [Pod(name=f"p{i}", cpu_milli=1000, memory_mib=1024, gpu_count=1) for i in range(3)]
    assert offline_floor(nodes, ones) == 0.0
    assert offline_floor(nodes, [Pod(name="big", cpu_milli=1000, memory_mib=1024, gpu_count=2)]) == 100.0
    half = [Pod(name="cpu-heavy", cpu_milli=8000, memory_mib=1024, gpu_count=1, gpu_milli=500)]
    assert offline_floor(nodes, half) == 75.0  # one share of 500 milli placed out of 2000


def test_per_gpu_cuts_keep_two_large_shares_off_one_gpu():
    """Issue 22 item 3: three 800-milli shares on two GPUs; the aggregate LP packs 2000 milli
    of them (0% unallocated), but any real placement puts one per GPU: 1600 placed, 20% idle,
    which the cuts find. Shares of 400 milli pair up on a GPU, so the cuts must allow that."""
    pytest.importorskip("scipy", reason="the offline floor needs scipy (a dependency of the product)")
    from bench.offline_floor import offline_floor

    nodes = [NodeState(name=f"n{i}", cpu_milli=64_000, memory_mib=65_536, gpu_count=1, gpu_model="T4") for i in range(2)]
    large = [Pod(name=f"l{i}", cpu_milli=1000, gpu_count=1, gpu_milli=800) for i in range(3)]
    small = [Pod(name=f"s{i}", cpu_milli=1000, gpu_count=1, gpu_milli=400) for i in range(4)]
    assert offline_floor(nodes, large, gpu_cuts=False) == 0.0
    assert offline_floor(nodes, large) == pytest.approx(20.0)
    assert offline_floor(nodes, small) == pytest.approx(20.0)  # 2 x 400 per GPU: 1600 of 2000
    # One 800 that must stay and four 400s: really 1600 placed (20%); the cuts allow 1800 (a
    # bound, not the optimum), the aggregate LP all 2000.
    mixed = small + large[:1]
    assert offline_floor(nodes, mixed, required=large[:1], gpu_cuts=False) == 0.0
    assert offline_floor(nodes, mixed, required=large[:1]) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="cannot all be placed"):
        offline_floor(nodes, [], required=large)


def test_share_patterns_count_the_milli_no_combination_of_shares_fills():
    """Issue 22 item 3: three 340-milli shares on one GPU; the u_ε rows let 1000 milli of them
    fit (each counts 0.34 of a GPU), but only two fit on a GPU: 680 placed, 32% idle, which the
    pattern LP finds. Two GPUs, four 470s and a whole-GPU pod: at best the whole pod and two
    470s (1940 of 2000), exactly the pattern bound, whichever pod must stay."""
    pytest.importorskip("scipy", reason="the offline floor needs scipy (a dependency of the product)")
    from bench.offline_floor import offline_floor, pattern_floor

    one = [NodeState(name="n", cpu_milli=64_000, memory_mib=65_536, gpu_count=1, gpu_model="T4")]
    three = [Pod(name=f"s{i}", cpu_milli=1000, gpu_count=1, gpu_milli=340) for i in range(3)]
    assert offline_floor(one, three) == 0.0
    assert pattern_floor(one, three) == pytest.approx(32.0)
    two = [NodeState(name=f"n{i}", cpu_milli=64_000, memory_mib=65_536, gpu_count=1, gpu_model="T4") for i in range(2)]
    mixed = [Pod(name=f"a{i}", cpu_milli=1000, gpu_count=1, gpu_milli=470) for i in range(4)]
    mixed.append(Pod(name="whole", cpu_milli=1000, gpu_count=1))
    assert offline_floor(two, mixed) == 0.0
    assert pattern_floor(two, mixed) == pytest.approx(3.0)
    assert pattern_floor(two, mixed, required=mixed[:1]) == pytest.approx(3.0)
    assert pattern_floor(two, []) == 100.0
    with pytest.raises(ValueError, match="cannot all be placed"):
        pattern_floor(one, [], required=three)


def _exact_unallocated(nodes, pods, required) -> float | None:
    """The true optimum of a tiny instance (every pod on a node and a GPU, binary), or None
    when the required pods cannot all be placed: what the floors must stay below."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    candidates = [(p, p in required) for p in [*required, *pods]]
    cols = [(i, n, g) for i, (p, _) in enumerate(candidates) for n, node in enumerate(nodes) if p.cpu_milli <= node.cpu_milli for g in range(node.gpu_count)]
    rows, low, high = [], [], []

    def row(selected, weight, lo, hi):
        rows.append([weight(c) if selected(c) else 0 for c in cols])
        low.append(lo)
        high.append(hi)

    for i, (_, must) in enumerate(candidates):
        row(lambda c, i=i: c[0] == i, lambda c: 1, 1 if must else 0, 1)
    for n, node in enumerate(nodes):
        row(lambda c, n=n: c[1] == n, lambda c: candidates[c[0]][0].cpu_milli, -np.inf, node.cpu_milli)
        for g in range(node.gpu_count):
            row(lambda c, n=n, g=g: c[1:] == (n, g), lambda c: candidates[c[0]][0].gpu_milli, -np.inf, MILLI)
    gain = np.array([-candidates[c[0]][0].gpu_milli for c in cols], dtype=float)
    result = milp(gain, constraints=LinearConstraint(np.array(rows), low, high), integrality=np.ones(len(cols)), bounds=Bounds(0, 1))
    if result.x is None:
        return None
    return 100.0 + 100.0 * result.fun / (sum(n.gpu_count for n in nodes) * MILLI)


def test_the_pattern_floor_lies_between_the_cuts_and_the_true_optimum():
    """Issue 22 item 3: on random tiny clusters (1-GPU shares and whole pods, some required,
    CPU per node binding too) the pattern LP is a bound (never above the exact optimum) and
    never looser than the u_ε rows, and it is strictly tighter on some."""
    pytest.importorskip("scipy", reason="the offline floor needs scipy (a dependency of the product)")
    from bench.offline_floor import offline_floor, pattern_floor

    rng, tighter = random.Random(1), 0
    for trial in range(24):
        nodes = [NodeState(name=f"n{i}", cpu_milli=rng.choice([16_000, 24_000]), memory_mib=10**6, gpu_count=2, gpu_model="T4") for i in range(3)]
        pods = [
            Pod(name=f"p{trial}-{j}", cpu_milli=rng.choice([2000, 4000, 8000]), memory_mib=1, gpu_count=1,
                gpu_milli=rng.choice([810, 470, 650, 320, 160, 1000, 250, 550]))
            for j in range(rng.randint(4, 12))
        ]
        required, optional = pods[: len(pods) // 3], pods[len(pods) // 3 :]
        exact = _exact_unallocated(nodes, optional, required)
        if exact is None:
            continue
        cuts, patterns = offline_floor(nodes, optional, required=required), pattern_floor(nodes, optional, required=required)
        assert cuts - 1e-6 <= patterns <= exact + 1e-6
        tighter += patterns > cuts + 0.1
    assert tighter >= 3


@needs_trace
def test_no_repack_of_fgd_cpu_at_100_percent_reaches_3_percent():
    """Issue 22 item 2's target, 3.0% after one repack, is below what any repack could reach:
    with every running pod kept (anywhere its model allows) and any failed or later pod added,
    the 100% value of seed 42 stays above 3.6% (the u_ε rows allowed 2.94%)."""
    pytest.importorskip("scipy", reason="the repack floor needs scipy (a dependency of the product)")
    nodes, pods = load_nodes(DEFAULT_DATA), load_pods(DEFAULT_DATA, "default")
    floored = run_once(nodes, pods, workload_from_pods(pods), "fgd-cpu", 42, at_full="floor")
    assert 3.6 < floored.step_floor < floored.unallocated_100


def write_openb(tmp_path, nodes: int = 6, pods: int = 40):
    """A small cluster export in the openb format, as a user would bring their own."""
    node_file, pod_file = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    node_file.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"node-{i},32000,131072,{2 + 2 * (i % 2)},T4\n" for i in range(nodes))
    )
    pod_file.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(
            f"pod-{i:03d},{4000 + 2000 * (i % 3)},8192,{1 if i % 4 else 0},{(250, 500, 1000)[i % 3] if i % 4 else 0},\n"
            for i in range(pods)
        )
    )
    return node_file, pod_file


def test_any_openb_export_replays_with_pods_and_nodes_files(tmp_path, capsys):
    """Issue 22 item 4: a user's own cluster export runs like the shared trace."""
    from bench.scheduler_trace import main

    node_file, pod_file = write_openb(tmp_path)
    assert main(["--pods", str(pod_file), "--nodes", str(node_file), "--policies", "bestfit,fgd", "--seeds", "1-2", "--no-instructions"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# pods.csv: 6 nodes, 18 GPUs, 40 pods, seeds 1-2")
    rows = [line for line in out.splitlines() if line.startswith(("| bestfit", "| fgd"))]
    assert len(rows) == 2 and all("| - |" in row for row in rows)  # nothing published for it


def test_a_missing_or_malformed_export_is_refused_with_its_path(tmp_path, capsys):
    from bench.scheduler_trace import main

    node_file, pod_file = write_openb(tmp_path)
    assert main(["--pods", str(tmp_path / "absent.csv"), "--nodes", str(node_file)]) == 2
    assert "absent.csv" in capsys.readouterr().err
    pod_file.write_text("name,cpu\np,1\n")
    assert main(["--pods", str(pod_file), "--nodes", str(node_file)]) == 2
    assert "not an openb-format list" in capsys.readouterr().err


def test_a_step_that_changes_nothing_leaves_the_100_percent_number_unchanged():
    """Issue 22 item 4: plain and +step rows average over the same arrival window, so a repack
    that can move nothing (one node) cannot look better than no repack. Small shares put many
    records in the window, and pods still land inside it, so a window that started at 100%
    for the step (as it once did) reads lower (seed 3: 0.83 against 1.08)."""
    nodes = [NodeState("only", cpu_milli=60_000, memory_mib=10**6, gpu_count=4, gpu_model="T4")]
    pods = [Pod(f"p{i:03d}", cpu_milli=100, gpu_count=1, gpu_milli=20 + i % 5) for i in range(120)]
    workload = workload_from_pods(pods)
    for seed in (1, 2, 3):
        plain = run_once(nodes, pods, workload, "bestfit", seed)
        repacked = run_once(nodes, pods, workload, "bestfit", seed, at_full="repack")
        assert repacked.unallocated_100 == plain.unallocated_100


def test_the_repack_floor_step_moves_nothing_and_bounds_what_a_repack_could_place():
    """Issue 22 items 2-3: the floor of a repack at 100% keeps every running pod; on one node
    with 4 GPUs and shares of 20-24 milli nothing is stranded, so the bound is near 0 while the
    replay itself is untouched."""
    pytest.importorskip("scipy", reason="the repack floor needs scipy (a dependency of the product)")
    nodes = [NodeState("only", cpu_milli=60_000, memory_mib=10**6, gpu_count=4, gpu_model="T4")]
    pods = [Pod(f"p{i:03d}", cpu_milli=100, gpu_count=1, gpu_milli=20 + i % 5) for i in range(120)]
    workload = workload_from_pods(pods)
    plain = run_once(nodes, pods, workload, "bestfit", 3)
    floored = run_once(nodes, pods, workload, "bestfit", 3, at_full="floor")
    assert floored.unallocated_100 == plain.unallocated_100 and plain.step_floor is None
    assert 0.0 <= floored.step_floor <= 1.0
