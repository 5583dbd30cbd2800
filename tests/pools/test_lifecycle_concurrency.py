"""Several workers at once (design §5): two processes run `manage.py reconcile --once` against
the same PostgreSQL database at the same moments; no order is paid twice, no machine is
ordered twice, no node is created twice. SQLite has no row locks across processes worth
testing (and no `skip_locked`), so this runs on PostgreSQL only."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django import db
from django.db import connection
from django.utils import timezone

from billing.models import Account
from pools.controllers import lifecycle
from pools.models import GpuNodePool, Node, PoolEvent, PoolOrder
from pools.models.cloud import PoolClaim, SimMachine, SimPayment, SimStock
from pools.providers.base import MachineRequest
from pools.providers.simulated import SimulatedCloud
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has no skip_locked and one writer)"),
    pytest.mark.django_db(transaction=True),
]


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _two_workers(now) -> list[str]:
    env = {**os.environ, "DATABASE_URL": _database_url(), "EBCLOUD_TESTING": "false"}
    command = [sys.executable, "manage.py", "reconcile", "--once", "--now", now.isoformat()]
    workers = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        outputs.append(out)
    return outputs


def test_two_workers_reconciling_at_once_never_pay_order_or_create_twice(actors):
    pools = [
        approved_pool(actors, make_document(f"race-{i}", gpuModel="T4", nodeType="GPU_2_CARD", nodeCount={"min": 2, "max": 3}))
        for i in range(4)
    ]
    balance = Account.objects.get(name="default").balance
    now, outputs = T0, []
    for _ in range(12):
        outputs += _two_workers(now)
        if all(p.phase == "Ready" for p in GpuNodePool.objects.filter(pk__in=[p.pk for p in pools])):
            break
        now += timedelta(seconds=60)
    assert all(p.phase == "Ready" for p in GpuNodePool.objects.all()), list(GpuNodePool.objects.values_list("name", "phase", "pending_reason"))
    orders = PoolOrder.objects.all()
    assert SimPayment.objects.count() == orders.count() == 4
    assert Account.objects.get(name="default").balance == balance - sum((o.amount for o in orders), Decimal("0"))
    assert Node.objects.count() == SimMachine.objects.count() == 8
    assert Node.objects.filter(phase="Ready").count() == 8
    assert PoolEvent.objects.filter(reason="OrderPaid").count() == 4
    assert PoolEvent.objects.filter(reason="NodeReady").count() == 8
    assert SimStock.objects.get(zone__name="cn-east-2a", gpu_model__name="T4").available_gpus == 256 - 16
    print("passes skipped because the other worker held the pool:", sum(out.count("skipped") for out in outputs))


def _race(fn, n=4):
    """Run `fn` in `n` threads released together; each thread has its own connection."""
    barrier = threading.Barrier(n)
    results, errors = [], []

    def run():
        try:
            barrier.wait()
            results.append(fn())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            db.connection.close()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def test_concurrent_payments_of_one_order_debit_the_account_once(actors, train_document):
    """Even without the pool claim, the payment is keyed by the order: one debit."""
    order = approved_pool(actors, train_document).orders.get()
    balance = Account.objects.get(name="default").balance
    results = _race(lambda: SimulatedCloud().pay(order_id=order.pk, amount=order.amount, currency="CNY", now=T0))
    assert sum(1 for r in results if r.created) == 1
    assert SimPayment.objects.count() == 1
    assert Account.objects.get(name="default").balance == balance - order.amount


def test_concurrent_machine_orders_with_one_client_token_create_one_machine(actors):
    request = MachineRequest(client_token="race-node-1", zone="cn-east-2a", gpu_model="A100_80G", node_type="GPU_8_CARD", billing="monthly", image="img")
    results = _race(lambda: SimulatedCloud().place_order(request=request, now=T0))
    assert len({r.provider_id for r in results}) == 1 and sum(1 for r in results if r.created) == 1
    assert SimStock.objects.get(zone__name="cn-east-2a", gpu_model__name="A100_80G").available_gpus == 256 - 8


KILLER = """
import os
from pools.controllers import lifecycle
from pools.controllers import context
from datetime import datetime, timedelta
real = context.event_record
def dying(**kwargs):
    if kwargs["reason"] == os.environ["DIE_AT"]:
        os._exit(9)  # the worker dies: no finally, no rollback of what was committed
    return real(**kwargs)
context.event_record = dying
now = datetime.fromisoformat(os.environ["AT"])
for _ in range(40):
    lifecycle.reconcile_all(now=now)
    now = now + timedelta(seconds=15)
"""


@pytest.mark.parametrize("die_at", ["OrderPaid", "OrderPlaced", "DriverInstalled", "NodeLabeled", "NodeReady"])
def test_a_worker_killed_mid_step_leaves_a_state_the_next_worker_finishes(actors, train_document, die_at):
    """Issue 3 §3: a reconcile killed mid-step and rerun converges to the same state."""
    pool = approved_pool(actors, train_document)
    env = {**os.environ, "DATABASE_URL": _database_url(), "EBCLOUD_TESTING": "false", "DIE_AT": die_at, "AT": T0.isoformat()}
    worker = subprocess.run([sys.executable, "manage.py", "shell", "-c", KILLER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 9, worker.stderr
    claim = PoolClaim.objects.get(pk=pool.pk)
    assert claim.claimed_until is not None  # the dead worker still holds the pool...
    assert lifecycle.pool_reconcile(pool_id=pool.pk, now=T0).claimed is False
    PoolClaim.objects.filter(pk=pool.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))  # ...until it expires
    now = T0
    while GpuNodePool.objects.get(pk=pool.pk).phase != "Ready":
        lifecycle.pool_reconcile(pool_id=pool.pk, now=now)
        now += timedelta(seconds=15)
        assert now < T0 + timedelta(hours=1)
    assert SimPayment.objects.count() == 1
    assert Account.objects.get(name="default").balance == Decimal("960000.00")
    assert Node.objects.count() == SimMachine.objects.count() == 2
    assert SimStock.objects.get(zone__name="cn-east-2a", gpu_model__name="A100_80G").available_gpus == 256 - 16
    assert PoolEvent.objects.filter(reason="OrderPaid").count() == 1
    assert PoolEvent.objects.filter(reason="NodeReady").count() == 2
