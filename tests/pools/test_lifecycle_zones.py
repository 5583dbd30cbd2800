"""Fallback zones (seed T1 "add a fallback zone", D4): OutOfStock in one zone of `spec.zones`
orders in the next, with an event naming both zones and the cross-zone traffic price; all of
them out of stock is one pendingReason listing every zone tried; passes stay idempotent."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.demo import load_prices
from pools.controllers.autoscaler import pool_autoscale
from pools.models import Node, PoolEvent, Zone
from pools.models.cloud import SimMachine, SimStock
from pools.providers import simulated
from pools.providers.base import MachineRequest
from tests.conftest import make_document
from tests.pools.autoscaler_helpers import SCALING, memory_used
from tests.pools.lifecycle_helpers import (
    T0,
    approved_pool,
    live_nodes,
    passes_are_idempotent,
    reconcile,
    run_until,
)
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.test_autoscaler_service import fill_then_queue

A, B, C = "cn-east-2a", "cn-east-2b", "cn-east-2c"


@pytest.fixture
def zone_c(catalog):
    """A third zone of cn-east-2, so a pool can fall over twice."""
    return Zone.objects.create(name=C, region="cn-east-2")


def stock(**gpus_by_zone):
    for zone, gpus in gpus_by_zone.items():
        simulated.stock_set(zone=zone.replace("_", "-"), gpu_model="A100_80G", gpus=gpus)


def pool_in(actors, zones):
    document = make_document()
    document["spec"].pop("region")
    document["spec"]["zones"] = zones
    return approved_pool(actors, document)


def fallback_events(pool):
    return list(PoolEvent.objects.filter(pool=pool, reason="ZoneFallback").order_by("id"))


def test_out_of_stock_in_the_preferred_zone_orders_in_the_next_one(actors):
    load_prices()
    stock(cn_east_2a=0, cn_east_2b=24)
    pool = pool_in(actors, [A, B])
    result = reconcile(pool, T0)
    assert "OutOfStock" not in result.pending_reason
    nodes = live_nodes(pool)
    assert [(n.phase, n.zone.name) for n in nodes] == [("Provisioning", B), ("Provisioning", B)]
    assert SimStock.objects.get(zone__name=B).available_gpus == 8
    events = fallback_events(pool)
    assert [e.node_id for e in events] == [n.pk for n in nodes]
    assert events[0].type == "Warning"
    assert events[0].message == (
        f"Node {nodes[0].name} ordered in fallback zone {B}: OutOfStock in {A}. "
        f"Traffic between {B} and data in the preferred zone {A} crosses zones, billed at 0.50 CNY per GB (500.00 CNY per TB)"
    )
    placed = PoolEvent.objects.get(reason="OrderPlaced", node=nodes[0])
    assert f"in {B}, cloud id sim-{B}-" in placed.message
    run_until(pool, T0)
    node = Node.objects.get(pk=nodes[0].pk)
    assert node.phase == "Ready" and node.labels["topology.kubernetes.io/zone"] == B
    assert pool.zone.name == A  # the pool stays bound to its preferred zone


def test_the_zones_are_tried_in_the_order_the_spec_lists_them(actors, zone_c):
    load_prices()
    stock(cn_east_2a=0, cn_east_2b=0, cn_east_2c=16)
    pool = pool_in(actors, [A, B, C])
    reconcile(pool, T0)
    assert {n.zone.name for n in live_nodes(pool)} == {C}
    assert f"ordered in fallback zone {C}: OutOfStock in {A} and {B}. Traffic between {C} and data in the preferred zone {A}" in fallback_events(pool)[0].message


def test_each_node_tries_the_preferred_zone_first(actors):
    stock(cn_east_2a=8, cn_east_2b=24)
    pool = pool_in(actors, [A, B])
    reconcile(pool, T0)
    assert sorted(n.zone.name for n in live_nodes(pool)) == [A, B]  # the first took the last 8 GPUs of A
    assert len(fallback_events(pool)) == 1


def test_all_zones_out_of_stock_lists_every_zone_tried_in_pending_reason(actors, zone_c):
    stock(cn_east_2a=0, cn_east_2b=0, cn_east_2c=16)
    pool = pool_in(actors, [A, B])
    result = reconcile(pool, T0)
    assert result.pending_reason == f"OutOfStock in {A} and {B}, 2 in {C}"
    assert [(n.phase, n.zone.name) for n in live_nodes(pool)] == [("Ordering", A), ("Ordering", A)]
    warning = PoolEvent.objects.filter(reason="OutOfStock").first()
    assert warning.type == "Warning" and f"OutOfStock in {A} and {B}, 2 in {C}; retrying in 30s" in warning.message
    assert not SimMachine.objects.exists() and not fallback_events(pool)
    stock(cn_east_2c=0)
    assert reconcile(pool, T0 + timedelta(seconds=30)).pending_reason == f"OutOfStock in {A} and {B}, none in the region's other zones"


def test_without_a_cross_zone_price_the_event_says_so(actors):
    stock(cn_east_2a=0, cn_east_2b=24)
    pool = pool_in(actors, [A, B])
    reconcile(pool, T0)
    assert fallback_events(pool)[0].message.endswith("crosses zones, the price book has no cross-zone network price, ask a platform admin what it costs")


def test_reconciling_twice_orders_once(actors):
    load_prices()
    stock(cn_east_2a=0, cn_east_2b=24)
    pool = pool_in(actors, [A, B])
    passes_are_idempotent(pool, T0, ticks=20)
    assert SimMachine.objects.count() == 2 and len(fallback_events(pool)) == 2
    assert SimStock.objects.get(zone__name=B).available_gpus == 8


def test_a_machine_ordered_in_a_fallback_zone_by_a_killed_pass_is_not_bought_again(actors):
    """A pass ordered node 1's machine in the fallback zone and died before writing it; by the
    next pass the preferred zone has stock again. The node takes the machine it has (the client
    token is the node's name in every zone) and no second one is bought."""
    load_prices()
    stock(cn_east_2a=0, cn_east_2b=0)
    pool = pool_in(actors, [A, B])
    reconcile(pool, T0)
    first, second = live_nodes(pool)
    stock(cn_east_2b=8)
    cloud = simulated.SimulatedCloud()
    killed = cloud.place_order(
        request=MachineRequest(client_token=first.name, zone=B, gpu_model="A100_80G", node_type="GPU_8_CARD", billing="monthly", image="ubuntu-22.04-cuda-12.2"),
        now=T0 + timedelta(seconds=5),
    )
    stock(cn_east_2a=32)
    reconcile(pool, T0 + timedelta(seconds=30))
    assert SimMachine.objects.count() == 2
    assert Node.objects.get(pk=first.pk).provider_id == killed.provider_id
    assert [(n.name, n.zone.name) for n in live_nodes(pool)] == [(first.name, B), (second.name, A)]
    assert [e.node_id for e in fallback_events(pool)] == [first.pk]
    assert SimStock.objects.get(zone__name=A).available_gpus == 24


def test_a_burst_node_falls_over_to_the_next_zone_too(actors):
    """The autoscaler's on-demand nodes are ordered by the same pass (seed G4 burst, T1)."""
    pool = pool_with_nodes(actors["lead"], node_labels={"gpu-class": "a100", "pool": "train"}, scaling=SCALING, burst={"enabled": True, "maxNodes": 4}, zones=[A, B])
    fill_then_queue(actors, 3)
    memory_used(pool, 95)
    assert pool_autoscale(pool_id=pool.pk, now=T0).reason == "ScaledUp"
    stock(cn_east_2a=0, cn_east_2b=24)
    reconcile(pool, T0)
    burst = Node.objects.get(pool=pool, billing=Node.Billing.ON_DEMAND)
    assert (burst.phase, burst.zone.name) == ("Provisioning", B)
    assert SimMachine.objects.get(client_token=burst.name).billing == "on_demand"
    assert [e.node_id for e in fallback_events(pool)] == [burst.pk]
