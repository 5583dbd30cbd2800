"""Fast metering (issue 9 item 1): the incremental daily rollup, instances built without
`Model.__init__`, and COPY's cached label JSON store exactly what the slow paths stored."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest

from billing import costing, metering, services
from billing.allocation import FeeHour, NodeHour, PodHour
from billing.bulk_insert import Unsaved, bulk_insert, json_text
from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
from tests.billing.billing_helpers import T0, label_set, meter, node, pod, pool, scenario

pytestmark = pytest.mark.django_db


def rollup() -> Counter:
    """The day rows as a multiset of their values (ids change with every write)."""
    rows = CostDay.objects.values_list(
        "day", "pool_id", "team_id", "namespace", "labels", "billing_kind", "cost_kind",
        "currency", "amount", "gpu_hours",
    )  # fmt: skip
    return Counter(
        (*r[:4], json.dumps(r[4], sort_keys=True), *r[5:8], Decimal(r[8]), Decimal(r[9]))
        for r in rows
    )


def rebuilt() -> Counter:
    for day in CostDay.objects.values_list("day", flat=True).distinct():
        services.cost_day_rebuild(day=day)
    return rollup()


def test_adding_each_hour_gives_the_rollup_a_rebuild_gives(actors, teams):
    """Issue 9: the rollup adds the hour's groups instead of re-reading the day's records;
    after hours that cross midnight, with pods coming and going and label sets shared by
    several pods, the day rows are exactly what rebuilding from the records computes."""
    a, _ = scenario(actors, teams, hours=2)
    n1 = node(a, "n-1")
    pod(teams["algorithm"], n1, "late", gpus=3, labels={"project": "llm"}, started=T0 + timedelta(hours=2, minutes=30))
    pod(teams["algorithm"], n1, "short", gpus=1, started=T0 - timedelta(hours=1), finished=T0 + timedelta(hours=3, minutes=15))
    meter(T0 + timedelta(hours=2), hours=2)
    meter(T0 + timedelta(hours=23), hours=2)  # the last hour of Dec 1, the first of Dec 2
    incremental = rollup()
    assert incremental == rebuilt()
    assert len(incremental) > 5
    assert CostDay.objects.filter(day=(T0 + timedelta(days=1)).date()).exists()
    total_day_rows = sum(CostDay.objects.values_list("amount", flat=True), Decimal(0))
    assert total_day_rows == sum(CostRecord.objects.values_list("amount", flat=True), Decimal(0))


def test_a_failed_hour_adds_nothing_to_the_day(actors, teams, monkeypatch):
    """The addition is in the transaction that claims the hour: an hour that fails after it
    leaves the day as it was, and its rerun adds it once (no double count)."""
    a, _ = scenario(actors, teams, hours=1)
    before = rollup()
    real = services.cost_day_add

    def add_then_fail(**kwargs):
        real(**kwargs)
        raise RuntimeError("worker killed after the rollup")

    monkeypatch.setattr(services, "cost_day_add", add_then_fail)
    with pytest.raises(RuntimeError):
        meter(T0 + timedelta(hours=1))
    assert rollup() == before
    assert not MeterRun.objects.filter(hour=T0 + timedelta(hours=1)).exists()
    monkeypatch.undo()
    assert meter(T0 + timedelta(hours=1))[0].metered
    assert not meter(T0 + timedelta(hours=1))[0].metered
    assert rollup() == rebuilt() != before


def test_metered_records_are_complete_model_instances(actors, teams, django_assert_num_queries):
    """Records built without `Model.__init__` carry every column, their pool, team and label
    set, and their labels (read from the cache, no query): selectors and tests use them like
    any instance."""
    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=2, labels={"project": "x"})
    from billing import metering

    records = metering.usage_collect(hour=T0).records
    costs = costing.cost_records_for(records)
    for model, objects in ((UsageRecord, records), (CostRecord, costs)):
        names = {f.attname for f in model._meta.concrete_fields}
        for obj in objects:
            assert names <= set(obj.__dict__), model
            assert obj.pk is None and obj._state.adding
            assert obj.pool.pk == obj.pool_id == p.pk and obj.team.pk == obj.team_id
    with django_assert_num_queries(0):
        assert all(r.labels is r.label_set.labels and r.label_set.pk == r.label_set_id for r in records)
    pod_record = next(r for r in records if r.kind == "pod")
    assert pod_record.labels["project"] == "x" and pod_record.quantity == Decimal(2)


def test_allocation_inputs_are_the_classes_own(actors, teams):
    """`allocation_inputs` builds its inputs without their classes' `__init__` (`frozen_new`):
    each has every field of its class, equals what the constructor builds from them, and is
    as frozen."""
    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=2, labels={"project": "x"})
    nodes, pods, fees = metering.allocation_inputs(metering.usage_collect(hour=T0).records)
    assert nodes and pods and fees
    for inputs, cls in ((nodes, NodeHour), (pods, PodHour), (fees, FeeHour)):
        for made in inputs:
            values = vars(made)
            assert values.keys() == {f.name for f in dataclasses.fields(cls)} and made == cls(**values)
            with pytest.raises(dataclasses.FrozenInstanceError):
                made.labels = {}


def test_unsaved_instances_store_what_model_init_stores(actors, teams):
    """`Unsaved` fills defaults like `__init__` (a fresh dict per instance for JSON fields),
    and COPY / executemany write the same rows as `bulk_create`."""
    p = pool(actors["lead"])
    make = Unsaved(UsageRecord)
    labels = label_set({"team": "a"})
    common = dict(kind="registry", pool=p, team=p.team, quantity=Decimal(1), amount=Decimal("1.25"), label_set=labels)
    fast = [make(hour=T0, resource="fast", **common), make(hour=T0, resource="fast-2", **common)]
    slow = UsageRecord(hour=T0 + timedelta(hours=1), resource="slow", **common)
    assert fast[0].team is p.team and fast[0].label_set is labels and fast[0].labels == {"team": "a"}
    assert fast[0].list_amount is None and fast[0].currency == "CNY"
    costs = Unsaved(CostRecord)
    assert costs().labels == {} and costs().labels is not costs().labels
    bulk_insert(UsageRecord, fast)
    UsageRecord.objects.bulk_create([slow])
    columns = ["kind", "pool_id", "team_id", "node_name", "quantity", "amount", "list_amount", "currency", "label_set_id", "gpu_count"]
    stored = {r["resource"]: {c: r[c] for c in columns} for r in UsageRecord.objects.values("resource", *columns)}
    assert stored["fast"] == stored["fast-2"] == stored["slow"]


def test_moments_written_once_per_value_store_the_instants_given(actors, teams):
    """COPY formats each distinct aware moment once (an hour's rows share their hour): rows in
    other zones, with microseconds, or sharing one moment store the instants `bulk_create`
    stores."""
    from zoneinfo import ZoneInfo

    p = pool(actors["lead"])
    make = Unsaved(UsageRecord)
    common = dict(kind="registry", pool=p, team=p.team, quantity=Decimal(1), amount=Decimal("1.25"), label_set=label_set())
    moments = [
        T0, T0, T0.astimezone(ZoneInfo("Asia/Shanghai")) + timedelta(hours=1),
        T0.astimezone(ZoneInfo("America/St_Johns")) + timedelta(hours=2, microseconds=7),
    ]
    bulk_insert(UsageRecord, [make(hour=at, resource=f"fast-{i}", **common) for i, at in enumerate(moments)])
    UsageRecord.objects.bulk_create([UsageRecord(hour=at, resource=f"slow-{i}", **common) for i, at in enumerate(moments)])
    stored = dict(UsageRecord.objects.values_list("resource", "hour"))
    assert [stored[f"fast-{i}"] for i in range(4)] == [stored[f"slow-{i}"] for i in range(4)] == moments


def test_rows_inserted_while_a_block_runs_are_stored_when_it_ends_or_not_at_all(actors, teams):
    """`inserting` (issue 9: metering allocates the hour while PostgreSQL stores its usage rows)
    stores the rows when its block ends; an error in the block leaves none of them, and a query
    in the block fails at once instead of waiting for ever."""
    from django.db import transaction

    from billing.bulk_insert import ConnectionBusy, inserting

    p = pool(actors["lead"])
    make = Unsaved(UsageRecord)
    common = dict(hour=T0, kind="registry", pool=p, team=p.team, quantity=Decimal(1), amount=Decimal("1.25"), label_set=label_set())
    with inserting(UsageRecord, [make(resource="kept", **common), make(resource="kept-2", **common)]) as count:
        worked = sum(range(1000))  # the block's own work, while the rows are stored
    assert count == 2 and worked == 499500
    with pytest.raises(RuntimeError), transaction.atomic(), inserting(UsageRecord, [make(resource="dropped", **common)]):
        raise RuntimeError("the hour's allocation failed")
    assert sorted(UsageRecord.objects.values_list("resource", flat=True)) == ["kept", "kept-2"]
    with pytest.raises(ConnectionBusy), transaction.atomic(), inserting(UsageRecord, [make(resource="waits", **common)]):
        UsageRecord.objects.count()  # on PostgreSQL this would wait for the COPY, which waits for the block
    assert not UsageRecord.objects.filter(resource="waits").exists()
    with inserting(UsageRecord, []) as none:
        assert none == 0


def test_label_json_is_cached_per_distinct_set_but_kept_in_order():
    """The cached text is `json.dumps` of the dict, so the same pairs in another order (a
    different text on SQLite) get their own entry; nested values still encode."""
    first = json_text({"team": "a", "project": "x"})
    assert first == json.dumps({"team": "a", "project": "x"})
    assert json_text({"team": "a", "project": "x"}) is first
    assert json_text({"project": "x", "team": "a"}) == json.dumps({"project": "x", "team": "a"})
    assert json_text({"a": ["b"]}) == '{"a": ["b"]}' and json_text(None) is None
