"""The autoscaler replay benchmark (issue 5 items 6 and 8): a short replay of the Alibaba
cluster-trace-gpu-v2023 pods (Weng et al., "Beware of Fragmentation", USENIX ATC 2023) in
../shared/data (skipped when that folder is absent), and the bench's own tables."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bench.autoscaler_replay import DEFAULT_DATA, main
from billing.lease_costs import quantize_money
from pools.simulation.model import DAY, PoolConfig, peak_nodes
from pools.simulation.replay import replay
from pools.simulation.workloads import TRACE_FILE, trace_workload

needs_trace = pytest.mark.skipif(
    not (DEFAULT_DATA / TRACE_FILE).is_file(),
    reason=f"trace data not found at {DEFAULT_DATA} (../shared/data relative to the project root)",
)


@needs_trace
def test_the_trace_maps_onto_one_a100_pool():
    workload = trace_workload(DEFAULT_DATA, days=30)
    assert 7000 < len(workload) < 7200  # the GPU pods of openb_pod_list_default.csv
    assert all(0 <= w.arrival < 30 * DAY and w.duration >= 1 for w in workload)
    assert all(w.pod.gpu_count >= 1 and not w.pod.gpu_models for w in workload)
    assert all(w.pod.gpu_count <= 8 and w.pod.cpu_milli <= 128_000 for w in workload)
    assert trace_workload(DEFAULT_DATA, days=30, sample=0.25, seed=1) == trace_workload(
        DEFAULT_DATA, days=30, sample=0.25, seed=1
    )


@needs_trace
def test_a_short_trace_replay_serves_or_reports_every_pod_and_prices_it_exactly():
    workload = trace_workload(DEFAULT_DATA, days=30, sample=0.5, seed=1)
    end = 3 * DAY
    pool = PoolConfig(monthly_nodes=1, max_nodes=peak_nodes(workload, PoolConfig(0, 1), end))
    result = replay(workload, pool, duration_seconds=end)
    arrived = [w for w in workload if w.arrival < end]
    assert result.pods_total == len(arrived) > 100
    assert result.pods_total == (
        result.pods_finished + result.pods_running_at_end + result.pods_waiting_at_end
    )
    assert result.nodes_added > 0 and result.max_nodes_seen <= pool.max_nodes
    assert all(s.monthly == 1 and s.desired <= pool.max_nodes for s in result.timeline)
    exact = (
        Fraction(result.monthly_node_seconds, 3600) * Fraction(20_000, 730)
        + Fraction(result.on_demand_billed_seconds, 3600) * 100
    )
    assert result.cost_exact == exact and result.total_cost == quantize_money(exact)


@needs_trace
def test_the_bench_prints_every_strategy_for_the_trace(capsys):
    assert main(["--workloads", "trace", "--days", "2", "--trace-sample", "0.05", "--no-instructions"]) == 0
    out = capsys.readouterr().out
    for strategy in ("all-monthly", "all-on-demand", "article", "advisor", "article+Any"):
        assert f"| trace | {strategy} |" in out


def test_the_bench_reproduces_the_article_example_and_the_t6_incident(capsys):
    assert main(["--workloads", "article", "--days", "3", "--data", "/nonexistent", "--no-instructions"]) == 0
    out = capsys.readouterr().out
    assert "## The article's worked example (O1)" in out
    assert "| 30m (article) | 4 | 4 | 0s | 0s | 0/32 |" in out
    assert "| 1m | 4 | 2 |" in out
