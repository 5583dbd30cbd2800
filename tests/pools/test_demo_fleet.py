"""The living demo (issue 8 §1): the workload plan (pure) and the fleet end to end, its agents
reporting over HTTP to a live server through the real agent API."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection

from monitoring.models import GpuErrorEvent, NodeAgentState
from pools.core.scheduling.nodes import Pod as CorePod
from pools.core.spec import parse_document
from pools.demo import workload as demo_workload
from pools.demo.workload import Route
from pools.management.commands.seed_demo import Command as SeedDemo
from pools.models import GpuNodePool, Node, Pod, PoolEvent, PoolOrder, ScalingActivity
from pools.selectors.pools import catalog_current
from pools.simulation.model import SimPod
from pools.simulation.workloads import TRACE_FILE, trace_workload

TRACE = Path(django_settings.EBCLOUD_TRACE_DIR)
SMALL = Route(pool="small", team="t", node_gpus=2, cpu_milli_per_gpu=16000, memory_mib_per_gpu=131072,
              baseline_nodes=2, load=1.5, shared=True, whole=False)
BIG = Route(pool="big", team="t", node_gpus=8, cpu_milli_per_gpu=16000, memory_mib_per_gpu=131072,
            baseline_nodes=2, load=10, tolerations=({"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"},))


def sim(name: str, arrival: int, duration: int, gpus: int = 1, milli: int = 1000) -> SimPod:
    return SimPod(CorePod(name=name, cpu_milli=64000, memory_mib=500_000, gpu_count=gpus, gpu_milli=milli), arrival, duration)


def test_the_plan_compresses_time_routes_by_shape_and_caps_requests_to_the_node():
    source = [sim("a", 0, 600, milli=500), sim("b", 60, 3600, gpus=4), sim("c", 120, 36000, gpus=8)]
    pods = demo_workload.plan(source, [SMALL, BIG], speed=60, window_seconds=3600, max_run=120, run_id="x")
    by_name = {p.name: p for p in pods}
    shared = by_name["small-x-00000"]
    assert (shared.at, shared.run, shared.gpu_count, shared.gpu_milli) == (0, 20, 1, 500)  # 600 s / 60 = 10 s -> min 20 s
    assert shared.cpu_milli == 8000  # half a GPU's share of a 16-core-per-GPU node, not the trace's 64 cores
    four = by_name["big-x-00000"]
    assert (four.at, four.run, four.gpu_count) == (1, 60, 4)
    assert by_name["big-x-00001"].run == 120  # 10 h clamped to max_run
    document = four.document()
    assert document["spec"]["tolerations"] == [dict(BIG.tolerations[0])]
    assert document["metadata"]["annotations"]["ebcloud.io/duration"] == "60s"
    assert document["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert shared.document()["spec"]["containers"][0]["resources"]["limits"] == {"ebcloud.io/gpu-milli": "500"}


def test_the_plan_thins_each_route_to_its_target_load_deterministically():
    source = [sim(f"p{i}", i * 10, 600) for i in range(360)]  # 60 GPUs busy on average
    route = Route(pool="p", team="t", node_gpus=8, cpu_milli_per_gpu=16000, memory_mib_per_gpu=1024,
                  baseline_nodes=2, load=1.0)
    pods = demo_workload.plan(source, [route], speed=10, window_seconds=3600, seed=3)
    assert pods == demo_workload.plan(source, [route], speed=10, window_seconds=3600, seed=3)
    busy = sum(p.gpu_count * p.run for p in pods) / 360  # over the compressed window
    assert 12 <= busy <= 20  # about the baseline's 16 GPUs, not 60
    with pytest.raises(ValueError):
        demo_workload.plan(source, [route], speed=0, window_seconds=3600)


@pytest.mark.skipif(not (TRACE / TRACE_FILE).exists(), reason="needs ../shared/data (the Alibaba trace)")
def test_the_plan_from_the_alibaba_trace_feeds_every_route():
    source = trace_workload(TRACE)
    pods = demo_workload.plan(source, [SMALL, BIG], speed=60, window_seconds=24 * 3600)
    assert {p.route.pool for p in pods} == {"small", "big"}
    assert all(p.gpu_milli < 1000 for p in pods if p.route is SMALL)


@pytest.mark.django_db
def test_the_demo_data_is_what_the_readme_promises(settings, tmp_path):
    """`make run`'s pools: two approved, `batch-spot-t4`'s baseline order left for an admin to
    approve, and the batch pool bursts by its own policy (a short queue or hot GPU memory, not
    the defaults' 10 pods and hot memory together: batch jobs must not wait behind them)."""
    settings.VAR_DIR = tmp_path
    SeedDemo().handle(no_pools=False)
    orders = dict(PoolOrder.objects.values_list("pool__name", "status"))
    assert orders == {"train-pool-demo": PoolOrder.Status.APPROVED, "infer-pool-l40s": PoolOrder.Status.APPROVED,
                      "batch-spot-t4": PoolOrder.Status.PENDING}
    batch = parse_document(GpuNodePool.objects.get(name="batch-spot-t4").document, catalog_current())
    assert batch.autoscaling.combine == "Any" and [(m.name, m.target) for m in batch.autoscaling.metrics] == [("gpu-memory", 80.0), ("queued_pods", 1.0)]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="the in-memory SQLite test database fails at once on a table another thread writes")
def test_the_fleet_brings_the_demo_to_life_over_http(live_server, settings, tmp_path):
    """Within the demo's first minute (issue 8 §1): nodes Ready, agents reporting over HTTP,
    pods running and pending, a scale-up, a GPU error and its repair starting."""
    settings.EBCLOUD_SIM_STEP_SECONDS = settings.SIM_STEP_SECONDS_FAST
    settings.VAR_DIR = tmp_path
    SeedDemo().handle(no_pools=False)
    # The synthetic workload (no trace directory), so the test is the same with or without
    # ../shared/data, ten times the demo's speed so that 30 s hold a busy afternoon.
    call_command("demo_fleet", server=live_server.url, seconds=30, tick=1, report_interval=1, fault_after=3, speed=600,
                 data=str(tmp_path / "no-trace"))
    assert Node.objects.filter(phase=Node.Phase.READY).count() >= 4
    assert NodeAgentState.objects.filter(last_report_at__isnull=False).count() >= 4
    assert Pod.objects.filter(phase=Pod.Phase.RUNNING).exists() and Pod.objects.filter(phase=Pod.Phase.PENDING).exists()
    assert ScalingActivity.objects.filter(reason="ScaledUp").exists()
    assert GpuErrorEvent.objects.filter(xid=79).exists()
    assert PoolEvent.objects.filter(reason="RepairStarted").exists()
