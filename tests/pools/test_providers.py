"""The simulated cloud and cluster behave like real ones (issue 3 §1): finite stock, a balance
that payments debit, steps that take time and fail on demand, idempotent calls, reclaims only
of preemptible machines (D2), prewarmed images (D4)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.demo import load_prices
from billing.models import Account
from pools.core.lifecycle import STEPS, steps_for
from pools.models import Node, Zone
from pools.models.cloud import SimClusterNode, SimFailure, SimMachine
from pools.models.pods import Pod
from pools.providers import get_cloud_provider, get_cluster_backend, simulated
from pools.providers.base import (
    DONE,
    FAILED,
    RUNNING,
    CloudProvider,
    ClusterBackend,
    InsufficientBalance,
    MachineRequest,
    OutOfStock,
    PaymentDeclined,
)
from pools.providers.simulated import SimulatedCloud
from pools.providers.simulated_cluster import SimulatedCluster
from pools.services import pools as services
from tests.pools.lifecycle_helpers import T0

pytestmark = pytest.mark.django_db


def request(token="node-1", zone="cn-east-2a", image="ubuntu-22.04-cuda-12.2", billing="monthly"):
    return MachineRequest(client_token=token, zone=zone, gpu_model="A100_80G", node_type="GPU_8_CARD", billing=billing, image=image)


@pytest.fixture
def cloud(catalog):
    return SimulatedCloud()


def walk(cloud, provider_id, step, start):
    """Drive one step to its end; returns (result, when)."""
    now = start
    result = cloud.provision_step(provider_id=provider_id, step=step, now=now)
    while result.status == RUNNING:
        now = result.due_at
        result = cloud.provision_step(provider_id=provider_id, step=step, now=now)
    return result, now


def test_the_factories_return_the_simulated_implementations_of_both_protocols(settings):
    assert isinstance(get_cloud_provider(), CloudProvider) and isinstance(get_cloud_provider(), SimulatedCloud)
    assert isinstance(get_cluster_backend(), ClusterBackend) and isinstance(get_cluster_backend(), SimulatedCluster)
    settings.EBCLOUD_CLOUD_PROVIDER = "aws"
    with pytest.raises(ImproperlyConfigured, match="EBCLOUD_CLOUD_PROVIDER"):
        get_cloud_provider()


def test_ordering_is_idempotent_on_the_client_token_and_takes_stock(cloud):
    first = cloud.place_order(request=request(), now=T0)
    again = cloud.place_order(request=request(), now=T0)
    assert first.created and not again.created and first.provider_id == again.provider_id
    assert cloud.stock(region="cn-east-2", gpu_model="A100_80G", node_type="GPU_8_CARD") == {"cn-east-2a": 31, "cn-east-2b": 32}


def test_one_provider_instance_reads_the_catalogue_once_for_all_its_orders(cloud):
    """The controllers take one provider per pass; a pass's orders share its catalogue rows
    (zone, GPU model, node type) and lock the stock row with one statement."""
    cloud.place_order(request=request("n-1"), now=T0)
    with CaptureQueriesContext(connection) as second:
        cloud.place_order(request=request("n-2"), now=T0)
    assert not any(table in q["sql"] for q in second.captured_queries for table in ('"pools_zone"', '"pools_gpumodel"', '"pools_nodetype"'))
    assert SimMachine.objects.count() == 2
    assert cloud.stock(region="cn-east-2", gpu_model="A100_80G", node_type="GPU_8_CARD") == {"cn-east-2a": 30, "cn-east-2b": 32}
    with pytest.raises(Zone.DoesNotExist):
        cloud.place_order(request=request("n-3", zone="nowhere-1a"), now=T0)


def test_an_empty_zone_is_out_of_stock_and_names_what_the_other_zones_have(cloud):
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=7)
    simulated.stock_set(zone="cn-east-2b", gpu_model="A100_80G", gpus=24)
    with pytest.raises(OutOfStock) as caught:
        cloud.place_order(request=request(), now=T0)
    assert caught.value.zone == "cn-east-2a" and caught.value.alternatives == {"cn-east-2a": 0, "cn-east-2b": 3}
    assert not SimMachine.objects.exists()


def test_a_zone_runs_out_when_its_own_stock_is_ordered_while_the_next_zone_still_delivers(cloud):
    """Capacity is per zone, as in a real cloud (seed T1): orders drain one zone's stock (32
    GPUs, four 8-GPU machines), the fifth is OutOfStock there and names the other zone's four;
    the same shape still orders in cn-east-2b, and a released machine makes room again."""
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=32)
    simulated.stock_set(zone="cn-east-2b", gpu_model="A100_80G", gpus=32)
    machines = [cloud.place_order(request=request(f"a-{i}"), now=T0) for i in range(4)]
    with pytest.raises(OutOfStock) as caught:
        cloud.place_order(request=request("a-4"), now=T0)
    assert (caught.value.zone, caught.value.alternatives) == ("cn-east-2a", {"cn-east-2a": 0, "cn-east-2b": 4})
    assert cloud.place_order(request=request("a-4", zone="cn-east-2b"), now=T0).zone == "cn-east-2b"
    cloud.release(provider_id=machines[0].provider_id, now=T0)
    assert cloud.place_order(request=request("a-5"), now=T0).zone == "cn-east-2a"
    assert SimMachine.objects.filter(zone__name="cn-east-2a").exclude(status="Released").count() == 4


def test_a_client_token_already_ordered_returns_its_machine_whatever_zone_is_asked(cloud):
    """The controller tries a pool's zones with one token: asking again in another zone finds
    the machine ordered in the first, instead of buying a second."""
    first = cloud.place_order(request=request(zone="cn-east-2b"), now=T0)
    again = cloud.place_order(request=request(zone="cn-east-2a"), now=T0)
    assert (again.provider_id, again.zone, again.created) == (first.provider_id, "cn-east-2b", False)
    assert SimMachine.objects.count() == 1


def test_the_cross_zone_price_is_the_price_books(cloud):
    assert cloud.cross_zone_price(at=T0) is None  # no price book entry yet
    load_prices()
    price = cloud.cross_zone_price(at=T0)
    assert (price.per_gb, price.currency) == (Decimal("0.50"), "CNY")


def test_releasing_a_machine_returns_its_gpus_to_stock_once(cloud):
    machine = cloud.place_order(request=request(), now=T0)
    cloud.release(provider_id=machine.provider_id, now=T0)
    cloud.release(provider_id=machine.provider_id, now=T0)
    assert cloud.stock(region="cn-east-2", gpu_model="A100_80G", node_type="GPU_8_CARD")["cn-east-2a"] == 32


def test_paying_debits_the_account_once_per_order(actors, train_document, cloud):
    pool = services.pool_create(user=actors["lead"], document=train_document, now=T0)
    order = pool.orders.get()
    first = cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0)
    again = cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0 + timedelta(hours=1))
    assert first.created and not again.created and again.paid_at == T0
    assert first.balance_after == Decimal("960000.00") == Account.objects.get(name="default").balance


def test_a_short_balance_is_refused_with_both_numbers(actors, train_document, cloud):
    Account.objects.filter(name="default").update(balance=Decimal("1000.00"))
    order = services.pool_create(user=actors["lead"], document=train_document, now=T0).orders.get()
    with pytest.raises(InsufficientBalance) as caught:
        cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0)
    assert (caught.value.need, caught.value.balance, caught.value.currency) == (Decimal("40000.00"), Decimal("1000.00"), "CNY")
    assert Account.objects.get(name="default").balance == Decimal("1000.00")


def test_an_injected_decline_fails_one_payment(actors, train_document, cloud):
    order = services.pool_create(user=actors["lead"], document=train_document, now=T0).orders.get()
    simulated.failure_inject(step="pay", times=1)
    with pytest.raises(PaymentDeclined):
        cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0)
    assert cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0).created


def test_steps_take_their_configured_time_and_a_node_is_ready_in_three_to_five_minutes(cloud):
    machine = cloud.place_order(request=request(), now=T0)
    now = T0
    for step in steps_for(prewarmed=False):
        result, now = walk(cloud, machine.provider_id, step, now)
        assert result.status == DONE
        # Asking again after the end is idempotent (a controller that crashed asks twice).
        assert cloud.provision_step(provider_id=machine.provider_id, step=step, now=now).status == DONE
    assert timedelta(minutes=3) <= now - T0 <= timedelta(minutes=5)
    assert SimMachine.objects.get(provider_id=machine.provider_id).status == "Running"


def test_the_fast_demo_setting_makes_steps_take_seconds(cloud, settings):
    settings.EBCLOUD_SIM_STEP_SECONDS = {step: 2 for step in STEPS}
    machine = cloud.place_order(request=request(), now=T0)
    now = T0
    for step in steps_for(prewarmed=False):
        _, now = walk(cloud, machine.provider_id, step, now)
    assert now - T0 == timedelta(seconds=10)


def test_a_prewarmed_image_has_no_driver_install_step(cloud):
    """D4: custom system image with CUDA/cuDNN preinstalled."""
    assert cloud.image_prewarmed(image="ubuntu-22.04-cuda-12.2-prewarmed")
    assert not cloud.image_prewarmed(image="ubuntu-22.04-cuda-12.2")
    assert "driver_install" not in steps_for(prewarmed=True)


@pytest.mark.parametrize(
    ("step", "reason", "detail"),
    [
        ("image_pull", "ImagePullFailed", "ubuntu-22.04-cuda-12.2"),
        ("driver_install", "DriverInstallFailed", "NVIDIA driver install"),
        ("kubelet_join", "KubeletJoinTimeout", "did not join"),
    ],
)
def test_an_injected_step_failure_fails_once_then_the_retry_succeeds(cloud, step, reason, detail):
    machine = cloud.place_order(request=request(), now=T0)
    simulated.failure_inject(step=step, times=1)
    result, now = walk(cloud, machine.provider_id, step, T0)
    assert result.status == FAILED and result.reason == reason and detail in result.message
    result, _ = walk(cloud, machine.provider_id, step, now)
    assert result.status == DONE


def test_a_failure_rate_setting_fails_steps_deterministically(cloud, settings):
    settings.EBCLOUD_SIM_FAILURE_RATES = {"boot": 1.0}
    machine = cloud.place_order(request=request(), now=T0)
    assert walk(cloud, machine.provider_id, "boot", T0)[0].status == FAILED


def test_only_preemptible_machines_can_be_reclaimed(cloud):
    """D2: guaranteed pools are never reclaimed during the lease."""
    guaranteed = cloud.place_order(request=request("g-1"), now=T0)
    spot = cloud.place_order(request=request("p-1", billing="preemptible"), now=T0)
    with pytest.raises(ValueError):
        simulated.reclaim_inject(provider_id=guaranteed.provider_id, now=T0)
    simulated.reclaim_inject(provider_id=spot.provider_id, now=T0, notice=timedelta(seconds=30))
    assert [(n.provider_id, n.reclaim_at) for n in cloud.reclaim_notices(now=T0)] == [(spot.provider_id, T0 + timedelta(seconds=30))]


def test_the_cluster_registers_labels_taints_cordons_and_evicts(actors, train_document):
    pool = services.pool_create(user=actors["lead"], document=train_document, now=T0)
    Node.objects.create(pool=pool, name="n1", zone=pool.zone, gpu_count=8, phase="Ready")
    cluster = SimulatedCluster()
    cluster.register_node(name="n1", now=T0)
    cluster.node_apply(name="n1", labels={"pool": "train"}, taints=[{"key": "pool", "value": "train", "effect": "NoSchedule"}])
    cluster.cordon(name="n1")
    node = SimClusterNode.objects.get(name="n1")
    assert (node.labels, node.taints[0]["effect"], node.unschedulable) == ({"pool": "train"}, "NoSchedule", True)
    simulated.pod_run(node_name="n1", name="a", priority=5)
    simulated.pod_run(node_name="n1", name="b", eviction_blocked=True)
    assert [p.name for p in cluster.list_pods(node_name="n1")] == ["a", "b"]
    assert cluster.evict_pod(namespace="default", name="a", reason="test") is True
    assert cluster.evict_pod(namespace="default", name="b", reason="disruption budget") is False
    assert [p.name for p in cluster.list_pods(node_name="n1")] == ["b"]
    evicted = Pod.objects.get(name="a")
    assert (evicted.phase, evicted.reason, evicted.node) == ("Pending", "Evicted", None)
    cluster.remove_node(name="n1")
    lost = Pod.objects.get(name="b")
    assert not SimClusterNode.objects.exists() and (lost.phase, lost.reason, lost.node) == ("Pending", "NodeLost", None)


def test_the_simulated_clusters_drain_cordon_is_marked_as_a_real_nodes_is():
    """As tests/k8s/test_kubernetes_cluster.py shows of a real Node: a drain's cordon (`mark`) is
    marked as its own where the node was schedulable, and lifting it by the mark lifts no one
    else's cordon; a repair's (unmarked) takes a drain's over."""
    cluster = SimulatedCluster()
    cluster.register_node(name="n1", now=T0)
    row = SimClusterNode.objects.filter(name="n1")
    assert cluster.cordon(name="n1", mark=True) is True and row.get().cordoned_for_drain
    assert cluster.uncordon(name="n1", mark=True) is True and not row.get().unschedulable
    cluster.cordon(name="n1")  # someone's
    assert cluster.cordon(name="n1", mark=True) is True and not row.get().cordoned_for_drain
    assert cluster.uncordon(name="n1", mark=True) is False and row.get().unschedulable
    cluster.uncordon(name="n1")
    cluster.cordon(name="n1", mark=True)
    cluster.cordon(name="n1")  # a repair's
    assert cluster.uncordon(name="n1", mark=True) is False and row.get().unschedulable
    assert cluster.cordon(name="gone", mark=True) is False and cluster.uncordon(name="gone", mark=True) is True


def test_evicting_a_nodes_pods_together_refuses_and_evicts_like_one_by_one(actors, train_document):
    """`evict_pods` (one drain, a fixed number of queries) gives what `evict_pod` per pod gives:
    a standing refusal, a refusal counted down (it refuses the first matching pod only), the
    rest evicted (issue 9)."""
    pool = services.pool_create(user=actors["lead"], document=train_document, now=T0)
    outcomes = []
    for batch in (False, True):
        Pod.objects.all().delete()
        SimFailure.objects.all().delete()
        node = Node.objects.create(pool=pool, name=f"n-{batch}", zone=pool.zone, gpu_count=8, phase="Ready")
        for name in ("a", "b-1", "b-2", "c"):
            simulated.pod_run(node_name=node.name, name=name)
        simulated.failure_inject(step="evict", times=None, token_prefix="default/a")
        simulated.failure_inject(step="evict", times=1, token_prefix="default/b-")
        cluster, pods = SimulatedCluster(), [("default", n) for n in ("a", "b-1", "b-2", "c")]
        if batch:
            with CaptureQueriesContext(connection) as queries:
                done = cluster.evict_pods(pods=pods, reason="drain")
            # The namespaces' disruption budgets (none), the armed refusals, the refusal counted
            # down, one INSERT of the evicted pods' time on the node (metering's), one UPDATE,
            # and the savepoint around them: however many pods.
            assert len(queries) <= 7
        else:
            done = {pod for pod in pods if cluster.evict_pod(namespace=pod[0], name=pod[1], reason="drain")}
        left = sorted(Pod.objects.filter(phase="Running").values_list("name", flat=True))
        outcomes.append((sorted(done), left, sorted(SimFailure.objects.values_list("remaining", flat=True), key=str)))
    assert outcomes[0] == outcomes[1] == ([("default", "b-2"), ("default", "c")], ["a", "b-1"], [0, None])


def test_a_reclaim_rate_reclaims_running_preemptible_machines_only(cloud, settings):
    settings.EBCLOUD_SIM_RECLAIM_RATE_PER_HOUR = 1.0
    guaranteed = cloud.place_order(request=request("g-1"), now=T0)
    spot = cloud.place_order(request=request("p-1", billing="preemptible"), now=T0)
    assert cloud.reclaim_notices(now=T0) == []  # not running yet
    SimMachine.objects.update(status="Running")
    notices = cloud.reclaim_notices(now=T0)
    assert [(n.provider_id, n.reclaim_at) for n in notices] == [(spot.provider_id, T0 + timedelta(minutes=2))]
    assert SimMachine.objects.get(provider_id=guaranteed.provider_id).reclaim_at is None
    assert cloud.reclaim_notices(now=T0 + timedelta(minutes=1))[0].reclaim_at == T0 + timedelta(minutes=2)


def test_failure_rates_apply_to_ordering_and_paying_too(actors, train_document, cloud, settings):
    settings.EBCLOUD_SIM_FAILURE_RATES = {"order": 1.0, "pay": 1.0}
    with pytest.raises(OutOfStock):
        cloud.place_order(request=request(), now=T0)
    order = services.pool_create(user=actors["lead"], document=train_document, now=T0).orders.get()
    with pytest.raises(PaymentDeclined):
        cloud.pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0)
