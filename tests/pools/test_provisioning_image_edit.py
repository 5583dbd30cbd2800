"""Editing `spec.systemImage` while nodes provision (D4; design §5): a machine walks the steps of
the image it was ordered with to Ready, and a new image applies to machines ordered after the
edit, as a Karpenter NodeClaim keeps the launch template it was launched with. Before this, a
node booting a plain image when the pool switched to a prewarmed one skipped the driver and was
Ready without one (its events naming the prewarmed image), and one installing the driver was
sent back to boot."""

from __future__ import annotations

import copy

import pytest

from pools.core import lifecycle as rules
from pools.models import Node, PoolEvent, PoolOrder
from pools.models.cloud import SimMachine
from pools.providers import simulated
from pools.services import pools as services
from tests.pools.lifecycle_helpers import T0, TICK, approved_pool, live_nodes, reconcile, run_until

PLAIN = "ubuntu-22.04-cuda-12.2"
PREWARMED = "ubuntu-22.04-cuda-12.2-prewarmed"
PLAIN_STEPS = ["OrderPlaced", "NodeInitializing", "ImagePulled", "DriverInstalled", "KubeletInstalled", "NodeRegistered", "NodeLabeled", "NodeTainted", "NodeReady"]


def _until_step(pool, step):
    """Reconcile tick by tick until the pool's first node is at `step`; returns the moment."""
    now = T0
    for _ in range(100):
        reconcile(pool, now)
        nodes = live_nodes(pool)
        if nodes and nodes[0].step == step:
            return now
        now += TICK
    raise AssertionError(f"no node reached {step}")


def _edit(actors, pool, *, now, **spec):
    pool.refresh_from_db()
    document = copy.deepcopy(pool.document)
    document["spec"].update(spec)
    services.pool_update(user=actors["lead"], pool=pool, document=document, now=now)


def _events(node):
    return list(PoolEvent.objects.filter(node=node).order_by("first_timestamp", "id").values_list("reason", "message"))


def test_the_steps_after_a_step_the_image_skips_go_on_from_its_place_never_back_to_boot():
    assert rules.next_step("driver_install", prewarmed=True) == "kubelet_install"
    assert rules.next_step("driver_install", prewarmed=False) == "kubelet_install"
    assert rules.next_step("image_pull", prewarmed=True) == "kubelet_install"
    assert rules.next_step("boot", prewarmed=True) == "image_pull"


@pytest.mark.parametrize("step", ["boot", "driver_install"])
def test_a_node_provisioning_when_the_image_turns_prewarmed_installs_the_driver_of_the_image_it_was_ordered_with(actors, train_document, step):
    assert train_document["spec"]["systemImage"] == PLAIN and simulated.is_prewarmed(PREWARMED)
    pool = approved_pool(actors, train_document)
    edited_at = _until_step(pool, step)
    node = live_nodes(pool)[0]
    _edit(actors, pool, now=edited_at, systemImage=PREWARMED)
    run_until(pool, edited_at)

    node.refresh_from_db()
    events = _events(node)
    assert node.phase == "Ready" and SimMachine.objects.get(provider_id=node.provider_id).image == PLAIN
    assert [reason for reason, _ in events] == PLAIN_STEPS  # booted once, the driver installed
    messages = dict(events)
    assert messages["DriverInstalled"] == f"NVIDIA driver and CUDA installed on {node.name}"
    assert messages["NodeInitializing"].endswith(f"initialising system image {PLAIN}")
    assert messages["ImagePulled"] == f"System image {PLAIN} pulled"
    assert f"with system image {PLAIN} in " in messages["OrderPlaced"]
    assert not any(PREWARMED in message for _, message in events)
    assert node.system_image == PLAIN
    # Ready in the time a plain image takes from where it was: not one more boot
    assert node.ready_at - node.created_at < rules.SLOW_CAPACITY
    assert Node.objects.filter(pool=pool, phase="Ready", system_image=PLAIN).count() == 2


def test_a_machine_ordered_after_the_edit_gets_the_new_image_and_the_running_ones_keep_theirs(actors, train_document):
    pool = approved_pool(actors, train_document)
    ready = run_until(pool, T0)
    _edit(actors, pool, now=ready, systemImage=PREWARMED, nodeCount={"min": 3, "max": 6})
    services.order_approve(user=actors["admin"], order=pool.orders.get(status=PoolOrder.Status.PENDING), now=ready)
    run_until(pool, ready)

    old, _, new = sorted(live_nodes(pool), key=lambda n: n.created_at)
    assert (old.phase, old.system_image, new.phase, new.system_image) == ("Ready", PLAIN, "Ready", PREWARMED)
    assert SimMachine.objects.get(provider_id=new.provider_id).image == PREWARMED
    assert dict(_events(new))["DriverInstalled"].endswith(f"prewarmed image {PREWARMED}: install skipped")
    assert PoolEvent.objects.filter(node=old).count() == len(PLAIN_STEPS)  # not replaced, not touched


def test_a_node_whose_order_the_cloud_refused_orders_the_image_in_the_spec_when_it_tries_again(actors, train_document):
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=0)
    pool = approved_pool(actors, train_document)
    reconcile(pool, T0)
    node = live_nodes(pool)[0]
    assert node.phase == "Ordering" and node.system_image == ""  # nothing bought, no image held
    _edit(actors, pool, now=T0 + TICK, systemImage=PREWARMED)
    simulated.stock_set(zone="cn-east-2a", gpu_model="A100_80G", gpus=16)
    run_until(pool, T0 + TICK)

    node.refresh_from_db()
    assert node.system_image == PREWARMED == SimMachine.objects.get(provider_id=node.provider_id).image
    assert "install skipped" in dict(_events(node))["DriverInstalled"]
