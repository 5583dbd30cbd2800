"""The per-minute passes split by pool over workers (issue 23 item 3): with
`EBCLOUD_TICK_PARTS` the scheduled task queues the other parts and runs the first, every pool
is taken by exactly one part, and each part books its own early wake-up."""

from __future__ import annotations

import ast

from django.db.models import Q
from django_q.models import Schedule

from pools import tasks
from pools.claims import Part
from pools.controllers import autoscaler, lifecycle
from pools.models import GpuNodePool, PoolEvent
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool


def three_pools(actors):
    return [approved_pool(actors, make_document(f"train-pool-{i}")) for i in range(3)]


def paid(pool) -> bool:
    return PoolEvent.objects.filter(pool=pool, reason="OrderPaid").exists()


def test_a_part_reconciles_its_own_pools_and_no_other(actors):
    pools = three_pools(actors)
    part = Part(1, 2)
    results = lifecycle.reconcile_all(now=T0, part=part)
    assert sorted(r.pool_id for r in results) == sorted(p.pk for p in pools if p.pk % 2 == 1)
    assert [paid(p) for p in pools] == [p.pk % 2 == 1 for p in pools]
    # The other part takes the rest, each pool once.
    lifecycle.reconcile_all(now=T0, part=Part(0, 2))
    assert all(PoolEvent.objects.filter(pool=p, reason="OrderPaid").count() == 1 for p in pools)


def test_the_task_runs_every_part_and_each_part_books_its_own_wakeup(actors, settings):
    pools = three_pools(actors)
    settings.EBCLOUD_TICK_PARTS = 2
    # The other part is queued (run inline in tests), this task runs the first: every pool once.
    result = tasks.reconcile_all()
    assert result == {"pools": sum(1 for p in pools if p.pk % 2 == 0), "claimed": result["pools"], "errors": 0}
    assert all(paid(p) for p in pools)
    booked = {s.name: s for s in Schedule.objects.filter(name__startswith=tasks.SOON)}
    assert set(booked) == {f"{tasks.SOON}.0-of-2", f"{tasks.SOON}.1-of-2"}
    for index in range(2):
        wake = booked[f"{tasks.SOON}.{index}-of-2"]
        assert (wake.func, ast.literal_eval(wake.args), wake.schedule_type) == ("pools.tasks.reconcile_part", (index, 2), Schedule.ONCE)
        nodes = lifecycle.next_wakeup(after=T0, part=Part(index, 2))
        assert wake.next_run == nodes
    # The booked run reconciles only its part.
    assert tasks.reconcile_part(*ast.literal_eval(booked[f"{tasks.SOON}.1-of-2"].args))["pools"] == sum(1 for p in pools if p.pk % 2 == 1)


def test_the_autoscaler_task_runs_every_part_once(actors, settings, monkeypatch):
    pools = three_pools(actors)
    settings.EBCLOUD_TICK_PARTS = 3
    seen = []
    real = autoscaler.autoscale_all

    def autoscale_all(*, now, part):
        results = real(now=now, part=part)
        seen.append((part, sorted(r.pool for r in results)))
        return results

    monkeypatch.setattr(autoscaler, "autoscale_all", autoscale_all)
    tasks.autoscale_all()
    assert sorted(part for part, _ in seen) == Part.all_of(3)
    names = [name for _, names in seen for name in names]
    assert sorted(names) == sorted(p.name for p in pools)
    for part, names in seen:
        assert all(GpuNodePool.objects.get(name=name).pk % 3 == part.index for name in names)
    assert Schedule.objects.get(name=tasks.AUTOSCALE_SOON).func == "pools.tasks.autoscale_all"


def test_a_part_is_an_integer_modulo_in_sql(db):
    """Django's `Mod` is numeric by default (`mod(id, 2)::numeric = 1.0`): an integer keeps
    the comparison cheap and exact."""
    sql = str(Part(1, 2).of(GpuNodePool.objects.filter(~Q(name="")), "pk").query).lower()
    assert "mod(" in sql and "numeric" not in sql and "1.0" not in sql
