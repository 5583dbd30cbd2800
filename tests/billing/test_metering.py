"""Hourly metering: node-hours by billing kind, pod GPU-hours by request, fees, idempotency."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from functools import partial

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import metering, node_prices, services
from billing.demo import load_prices
from billing.label_sets import LabelSets
from billing.lease_costs import monthly_hour_cost
from billing.models import (
    CostRecord,
    MeterRun,
    NodePrice,
    PoolResourceSample,
    PriceBookEntry,
    UsageRecord,
)
from pools.claims import Part
from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool, Node, Pod
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool
from tests.conftest import make_document
from tests.pools.pod_helpers import TRAIN_POD
from tests.race import concurrently

pytestmark = pytest.mark.django_db


def total(qs) -> Decimal:
    return sum((r.amount for r in qs), Decimal(0))


def node_and_fee_total(hour=None) -> Decimal:
    qs = UsageRecord.objects.exclude(kind="pod")
    if hour is not None:
        qs = qs.filter(hour=hour)
    return total(qs)


def test_load_prices_is_idempotent_and_versioned(actors):
    load_prices()
    load_prices()
    assert PriceBookEntry.objects.count() == 4
    later = T0 + timedelta(days=3)
    PriceBookEntry.objects.create(
        kind="preemptible_discount", amount=Decimal("0.70"), effective_from=later
    )
    assert node_prices.price_entry_in_force(kind="preemptible_discount", at=T0).amount == Decimal(
        "0.60"
    )
    assert node_prices.price_entry_in_force(kind="preemptible_discount", at=later).amount == Decimal(
        "0.70"
    )


def test_a_monthly_node_is_billed_its_amortised_lease_hour_even_when_idle(actors):
    p = pool(actors["lead"])
    node(p, "n-0")
    [result] = meter()
    assert result.metered
    record = UsageRecord.objects.get(kind="node")
    # The article's node: 20,000 a month; December has 744 hours.
    assert record.amount == monthly_hour_cost(Decimal("20000"), T0, T0 + 744 * HOUR, T0)
    assert record.billing_kind == "monthly" and record.quantity == 1
    assert record.list_amount == Decimal("100.00")
    idle = CostRecord.objects.get(component="gpu")
    assert (idle.cost_kind, idle.team, idle.amount) == ("idle", p.team, record.amount)
    registry = CostRecord.objects.get(component="registry")
    assert (registry.cost_kind, registry.team) == ("idle", p.team)


def test_a_whole_lease_of_hours_adds_up_to_the_lease_payment(actors):
    p = pool(actors["lead"])
    node(p, "n-0")
    sets = LabelSets()
    records = [
        metering._node_record(node_obj, T0 + i * HOUR, sets)
        for i in range(744)
        for node_obj in [p.nodes.get()]
    ]
    assert sum(r.amount for r in records) == Decimal("20000.00")
    assert metering._node_record(p.nodes.get(), T0 + 744 * HOUR, sets) is None
    assert metering._node_record(p.nodes.get(), T0 - HOUR, sets) is None


def test_on_demand_nodes_are_billed_pro_rata_until_terminated(actors):
    p = pool(actors["lead"])
    node(p, "od-0", billing="on_demand", created=T0 + timedelta(minutes=30))
    node(p, "od-1", billing="on_demand", created=T0 - HOUR, terminated=T0 + timedelta(minutes=15))
    node(
        p,
        "od-2",
        billing="on_demand",
        created=T0 - HOUR,
        terminated=T0 - timedelta(minutes=1),
        phase="Terminated",
    )
    meter()
    amounts = dict(UsageRecord.objects.filter(kind="node").values_list("resource", "amount"))
    assert amounts == {"od-0": Decimal("50.00"), "od-1": Decimal("25.00")}


def test_an_hour_is_priced_at_the_price_in_force_when_it_began(actors):
    """A price that takes effect mid-hour applies from the next hour, as docs/guide-finance.md
    says: metering prices whole hours, so a node launched after the change still pays the old
    price for the rest of that hour."""
    p = pool(actors["lead"])
    old = NodePrice.objects.get(node_type=p.node_type, gpu_model=p.gpu_model)
    NodePrice.objects.create(node_type=old.node_type, gpu_model=old.gpu_model, monthly_price=old.monthly_price,
                             hourly_price=old.hourly_price * 2, effective_from=T0 + timedelta(minutes=30))
    node(p, "od-0", billing="on_demand", created=T0 + timedelta(minutes=40))
    meter(hours=2)
    hours = dict(UsageRecord.objects.filter(kind="node", resource="od-0").values_list("hour", "amount"))
    assert hours == {T0: (old.hourly_price / 3).quantize(Decimal("0.01")), T0 + HOUR: old.hourly_price * 2}


def test_nodes_priced_once_per_shape_still_differ_in_every_column_that_prices_them(actors):
    """Within an hour nodes alike in every column a price reads share one computation; each
    column that differs still gives the node its own price (the memo's key names them all)."""
    p = pool(actors["lead"])
    for i in range(3):
        node(p, f"alike-{i}", billing="on_demand", created=T0 - HOUR)
    node(p, "later", billing="on_demand", created=T0 + timedelta(minutes=45))
    node(p, "leaving", billing="on_demand", created=T0 - HOUR, terminated=T0 + timedelta(minutes=30))
    node(p, "gone", billing="on_demand", created=T0 - HOUR, terminated=T0 - timedelta(minutes=1), phase="Terminated")
    node(p, "leased", billing="monthly", start=T0)
    node(p, "leased-later", billing="monthly", start=T0 + HOUR)  # its lease starts after the hour
    meter()
    # Each node's share of its record (alike nodes are one record: `test_alike_nodes`).
    amounts = {name: r.amount / len(r.nodes_billed) for r in UsageRecord.objects.filter(kind="node") for name in r.nodes_billed}
    leased = node_prices.node_price(Node.objects.get(name="leased"), T0)  # a model instance: priced without the memo
    assert amounts == {
        "alike-0": Decimal("100.00"), "alike-1": Decimal("100.00"), "alike-2": Decimal("100.00"),
        "later": Decimal("25.00"), "leaving": Decimal("50.00"), "leased": leased[1],
    }  # fmt: skip


def test_preemptible_nodes_get_the_price_books_discount(actors):
    p = pool(actors["lead"], name="spot-pool", preemptible=True)
    node(p, "spot-0", billing="preemptible", created=T0 - HOUR)
    meter()
    record = UsageRecord.objects.get(kind="node")
    assert (record.amount, record.list_amount) == (Decimal("40.00"), Decimal("100.00"))
    assert set(CostRecord.objects.values_list("billing_kind", flat=True)) == {"preemptible"}


def test_pods_are_metered_by_request_with_inherited_labels_the_pod_winning(actors, teams):
    p = pool(actors["lead"])
    n = node(p, "n-0", labels={"project": "from-node"})
    pod(teams["algorithm"], n, "whole", gpus=2, labels={"project": "llm"})
    pod(teams["algorithm"], n, "shared", gpus=1, milli=250)
    pod(
        teams["algorithm"], n, "half-hour", gpus=4, labels={"app": "late"},
        started=T0 + timedelta(minutes=30),
    )  # fmt: skip
    pod(
        teams["algorithm"],
        n,
        "done-before",
        gpus=4,
        started=T0 - 2 * HOUR,
        finished=T0,
        phase="Succeeded",
    )
    pod(teams["algorithm"], None, "pending", gpus=4, started=None, phase="Pending")
    meter()
    pods = {r.pod_name: r for r in UsageRecord.objects.filter(kind="pod")}
    assert {k: v.quantity for k, v in pods.items()} == {
        "whole": 2,
        "shared": Decimal("0.25"),
        "half-hour": 2,
    }
    assert pods["whole"].labels == {
        "pool-role": "training",
        "team": "algorithm",
        "gpu-class": "a100",
        "project": "llm",
    }
    assert pods["shared"].labels["project"] == "from-node"
    assert pods["whole"].namespace == "algorithm"
    assert {r.pod_count for r in pods.values()} == {1}


def test_the_articles_pod_with_a_gpu_limit_alone_gets_and_is_metered_for_8_gpus(actors, api):
    """Through the pod API, the scheduler pass and metering: `limits: {nvidia.com/gpu: 8}` and no
    request is a request of 8 GPUs, as in Kubernetes (it was 0 GPUs, billed nothing)."""
    p = pool(actors["lead"])
    n = node(p, "n-0", labels={"pool": "train"})
    response = api("member").post("/api/v1/pods/", TRAIN_POD.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.content
    resources = response.json()["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 8 and resources["requests"]["nvidia.com/gpu"] == 8  # defaulted
    scheduler_pass(now=T0)
    placed = Pod.objects.get(name="bert-train-0")
    assert (placed.phase, placed.node, placed.gpu_count) == ("Running", n, 8)
    meter(hours=2)
    assert [r.quantity for r in UsageRecord.objects.filter(kind="pod").order_by("hour")] == [8, 8]


def test_a_workloads_replicas_on_a_node_are_one_record_with_their_pods_summed(actors, teams):
    """Issue 9: pods with the same namespace, team and labels on one node are one usage record
    (their GPU-hours added exactly, counted, named by the first); on another node, with other
    labels, or of another team they stay apart. Costs and fees come out to the same cents."""
    p = pool(actors["lead"])
    n0, n1 = node(p, "n-0"), node(p, "n-1")
    web = {"app": "web"}
    pod(teams["algorithm"], n0, "web-b", gpus=1, milli=500, labels=web)
    pod(teams["algorithm"], n0, "web-a", gpus=2, labels=web)
    pod(teams["algorithm"], n0, "web-c", gpus=1, labels=web, started=T0 + timedelta(minutes=45))
    pod(teams["algorithm"], n1, "web-d", gpus=1, labels=web)
    pod(teams["algorithm"], n0, "batch-a", gpus=1, labels={"app": "batch"})
    pod(teams["inference"], n0, "web-e", namespace="algorithm", gpus=1, labels=web)
    PoolResourceSample.objects.create(
        pool=p, hour=T0, storage_gb=Decimal("100"), cross_zone_gb=Decimal("3")
    )
    meter()
    rows = {
        r.resource: (r.node_name, r.pod_count, r.quantity, r.team_id)
        for r in UsageRecord.objects.filter(kind="pod")
    }
    assert rows == {
        "algorithm/web-a@n-0": ("n-0", 3, Decimal("2.75"), teams["algorithm"].pk),
        "algorithm/web-d@n-1": ("n-1", 1, Decimal("1"), teams["algorithm"].pk),
        "algorithm/batch-a@n-0": ("n-0", 1, Decimal("1"), teams["algorithm"].pk),
        "algorithm/web-e@n-0": ("n-0", 1, Decimal("1"), teams["inference"].pk),
    }
    assert total(CostRecord.objects.all()) == node_and_fee_total(T0)
    inference = CostRecord.objects.filter(team=teams["inference"])
    assert set(inference.values_list("cost_kind", flat=True)) == {"usage", "fee"}


def test_pods_without_gpus_are_left_out_of_the_workloads_and_their_costs(actors, teams):
    """A real cluster runs DaemonSet pods that request no GPU on every node (the device plugin,
    exporters, the CNI): they have no GPU-hours, so no usage record and no share of a cost,
    and a CPU-only pod of a GPU workload (same namespace and labels, a name that sorts first)
    neither counts among its pods nor names it."""
    p = pool(actors["lead"])
    n0 = node(p, "n-0")
    web = {"app": "web"}
    pod(teams["algorithm"], n0, "web-b", gpus=1, labels=web)
    pod(teams["algorithm"], n0, "web-c", gpus=1, labels=web)
    pod(teams["algorithm"], n0, "web-a", gpus=0, labels=web)
    for daemon in ("nvidia-device-plugin", "dcgm-exporter", "node-exporter"):
        pod(teams["algorithm"], n0, f"{daemon}-n-0", namespace="kube-system", gpus=0, labels={"app": daemon})
    meter()
    rows = {r.resource: (r.pod_count, r.gpu_count, r.quantity) for r in UsageRecord.objects.filter(kind="pod")}
    assert rows == {"algorithm/web-b@n-0": (2, 2, Decimal("2"))}
    assert not CostRecord.objects.filter(namespace="kube-system").exists()
    assert total(CostRecord.objects.all()) == node_and_fee_total(T0)


def test_a_pod_recreated_under_its_name_on_another_node_within_the_hour_is_billed_on_both(actors, teams):
    """A StatefulSet's pod keeps its name when it is recreated, often on another node (its first
    node was drained or failed). Both runs are billed in that hour, each on its node, and the
    hour is metered (the two workload records once had the same resource name and the hour
    failed on the ledger's uniqueness, every retry alike)."""
    p = pool(actors["lead"])
    n0, n1 = node(p, "n-0"), node(p, "n-1")
    first = pod(teams["algorithm"], n0, "db-0", started=T0 - HOUR, finished=T0 + timedelta(minutes=20), phase="Succeeded")
    Pod.objects.filter(pk=first.pk).update(deleted_at=T0 + timedelta(minutes=20))
    pod(teams["algorithm"], n1, "db-0", started=T0 + timedelta(minutes=30))
    [result] = meter()
    assert result.metered and not result.skipped
    records = {r.node_name: r for r in UsageRecord.objects.filter(kind="pod")}
    assert {name: (r.pod_name, r.quantity, r.resource) for name, r in records.items()} == {
        "n-0": ("db-0", Decimal("0.333333"), "algorithm/db-0@n-0"), "n-1": ("db-0", Decimal("0.500000"), "algorithm/db-0@n-1"),
    }  # fmt: skip


def test_a_pod_recreated_under_its_name_on_the_same_node_with_other_labels_gets_an_ordinal(actors, teams):
    """A StatefulSet's rolling update recreates a pod under its name with a new revision label,
    often on the same node: two workloads there named by the same pod, each its own record."""
    p = pool(actors["lead"])
    n0 = node(p, "n-0")
    old = pod(teams["algorithm"], n0, "db-0", labels={"rev": "1"}, started=T0 - HOUR, finished=T0 + timedelta(minutes=15), phase="Succeeded")
    Pod.objects.filter(pk=old.pk).update(deleted_at=T0 + timedelta(minutes=15))
    pod(teams["algorithm"], n0, "db-0", labels={"rev": "2"}, started=T0 + timedelta(minutes=15))
    [result] = meter()
    assert result.metered
    records = UsageRecord.objects.filter(kind="pod").order_by("resource")
    assert [(r.resource, r.labels["rev"], r.quantity) for r in records] == [
        ("algorithm/db-0@n-0#1", "1", Decimal("0.250000")), ("algorithm/db-0@n-0#2", "2", Decimal("0.750000")),
    ]  # fmt: skip


def test_a_pod_recreated_under_its_name_in_another_part_of_the_hour_is_billed_in_each(actors, teams):
    """The two runs are on nodes of two pools metered by different parts (workers) of the hour."""
    p0, p1 = pool(actors["lead"]), pool(actors["lead"], name="train-pool-b")
    assert p0.pk % 2 != p1.pk % 2
    first = pod(teams["algorithm"], node(p0, "n-0"), "db-0", started=T0 - HOUR, finished=T0 + timedelta(minutes=30), phase="Succeeded")
    Pod.objects.filter(pk=first.pk).update(deleted_at=T0 + timedelta(minutes=30))
    pod(teams["algorithm"], node(p1, "n-1"), "db-0", started=T0 + timedelta(minutes=30))
    results = [services.meter_hour(hour=T0, part=Part(i, 2)) for i in range(2)]
    assert all(r.metered for r in results) and results[-1].complete
    assert sorted(UsageRecord.objects.filter(kind="pod").values_list("resource", "quantity")) == [
        ("algorithm/db-0@n-0", Decimal("0.500000")), ("algorithm/db-0@n-1", Decimal("0.500000")),
    ]  # fmt: skip


def test_a_pool_deleted_while_its_leases_run_and_one_created_under_its_name_are_two_pools(actors):
    """A deleted pool's monthly nodes are billed to their leases' end; meanwhile its team may
    create a pool under the same name. Each hour is metered (their fees once clashed on the
    ledger's key and failed the hour at every retry until the old leases ended), and each
    pool's costs are charged to that pool, not merged by name."""
    old = pool(actors["lead"])
    node(old, "old-0", start=T0 - 10 * HOUR, terminated=T0 - HOUR, phase="Terminated")
    GpuNodePool.objects.filter(pk=old.pk).update(deleted_at=T0 - HOUR)
    new = pool(actors["lead"])
    node(new, "new-0", billing="on_demand", created=T0 - HOUR)
    assert all(r.metered for r in meter(hours=2))
    fees = UsageRecord.objects.filter(kind="registry", hour=T0)
    assert sorted(fees.values_list("resource", "pool_id")) == [("train-pool-a", new.pk), (f"train-pool-a#{old.pk}", old.pk)]
    for p in (old, new):
        charged = total(CostRecord.objects.filter(pool=p))
        assert charged == total(UsageRecord.objects.filter(pool=p).exclude(kind="pod")) > 0


def test_an_hour_charged_in_two_currencies_is_allocated_in_each_never_converted(actors, teams):
    """A node type priced in one currency and the pool fees in another: the hour is metered
    (it once failed at every retry), each currency's costs add up to its usage, and the fees
    are still split over the pool's pods by GPU-hours."""
    p = pool(actors["lead"])
    NodePrice.objects.update(currency="USD")
    pod(teams["algorithm"], node(p, "od-0", billing="on_demand", created=T0 - HOUR), "train", gpus=4)
    PoolResourceSample.objects.create(pool=p, hour=T0, storage_gb=Decimal("100"), cross_zone_gb=Decimal("0"))
    [result] = meter()
    assert result.metered
    usage, costs = UsageRecord.objects.filter(hour=T0), CostRecord.objects.filter(hour=T0)
    assert set(usage.values_list("kind", "currency")) == {("node", "USD"), ("pod", "USD"), ("registry", "CNY"), ("storage", "CNY")}
    for currency in ("USD", "CNY"):
        assert total(costs.filter(currency=currency)) == total(usage.filter(currency=currency).exclude(kind="pod")) > 0
    assert set(costs.filter(currency="USD").values_list("cost_kind", flat=True)) == {"usage", "idle"}
    assert set(costs.filter(currency="CNY").values_list("cost_kind", flat=True)) == {"fee"}  # all on the pod: the only one


def test_stored_costs_equal_node_costs_plus_fees_exactly(actors, teams):
    p = pool(actors["lead"])
    n0, n1 = node(p, "n-0"), node(p, "n-1", billing="on_demand", created=T0 - HOUR)
    pod(teams["algorithm"], n0, "a", gpus=3, labels={"project": "x"})
    pod(teams["inference"], n0, "b", namespace="inference", gpus=1, milli=333)
    pod(teams["algorithm"], n1, "c", gpus=5, started=T0 + timedelta(minutes=20))
    PoolResourceSample.objects.create(
        pool=p, hour=T0 + HOUR, storage_gb=Decimal("2048"), cross_zone_gb=Decimal("12.5")
    )
    meter(hours=3)
    assert UsageRecord.objects.filter(kind__in=["storage", "network", "registry"]).count() == 3 + 2
    for i in range(3):
        hour = T0 + i * HOUR
        assert total(CostRecord.objects.filter(hour=hour)) == node_and_fee_total(hour)
    assert set(CostRecord.objects.values_list("cost_kind", flat=True)) == {"usage", "idle", "fee"}
    assert (
        CostRecord.objects.filter(namespace="inference")
        .values_list("team", flat=True)
        .distinct()
        .get()
        == teams["inference"].pk
    )
    assert not CostRecord.objects.filter(cost_kind="idle").exclude(team=p.team).exists()


def test_a_rerun_never_double_counts(actors, teams):
    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=8)
    first = meter()[0]
    again = meter()[0]
    assert first.metered and not again.metered
    assert MeterRun.objects.count() == 1
    assert UsageRecord.objects.count() == 2 + 1  # node, pod, registry fee
    assert total(CostRecord.objects.all()) == first.total


def test_a_failed_hour_leaves_no_claim_and_is_metered_again(actors, monkeypatch):
    p = pool(actors["lead"])
    node(p, "n-0")

    def boom(records):
        raise RuntimeError("database went away")

    monkeypatch.setattr(services, "cost_records_for", boom)
    with pytest.raises(RuntimeError):
        meter()
    assert not MeterRun.objects.exists() and not UsageRecord.objects.exists()
    monkeypatch.undo()
    assert meter()[0].metered


def test_hours_must_be_aware_hour_starts(actors):
    with pytest.raises(ValueError):
        services.meter_hour(hour=T0 + timedelta(minutes=5))
    with pytest.raises(ValueError):
        services.meter_hour(hour=T0.replace(tzinfo=None))


def test_meter_pending_catches_up_missed_hours_once(actors):
    p = pool(actors["lead"])
    node(p, "n-0")
    now = T0 + timedelta(hours=5, minutes=10)
    services.meter_hour(hour=T0)
    results = services.meter_pending(now=now)
    assert [r.hour for r in results] == [T0 + i * HOUR for i in range(1, 5)]
    assert services.meter_pending(now=now) == []
    assert MeterRun.objects.count() == 5


def test_an_hour_that_fails_does_not_stop_the_later_hours_and_is_retried(actors, monkeypatch, capsys):
    """The catch-up meters every hour it can: a failing hour is reported (the task's result,
    the command's exit status and one line), nothing of it is written, the later hours are
    metered all the same, and the failed hour is metered on the run after the fault is gone."""
    from billing import tasks

    p = pool(actors["lead"])
    node(p, "n-0")
    now = T0 + timedelta(hours=3, minutes=10)
    services.meter_hour(hour=T0 - HOUR)  # metered up to here: the catch-up starts at T0
    collect = metering.usage_collect

    def fails_at_t0(*, hour, part):
        if hour == T0:
            raise ValueError("a record the ledger refuses")
        return collect(hour=hour, part=part)

    monkeypatch.setattr(metering, "usage_collect", fails_at_t0)
    monkeypatch.setattr(timezone, "now", lambda: now)  # the command's and the task's clock
    results = services.meter_pending(now=now)
    assert [(r.hour, r.metered, r.error) for r in results] == [
        (T0, False, "ValueError: a record the ledger refuses"), (T0 + HOUR, True, ""), (T0 + 2 * HOUR, True, ""),
    ]  # fmt: skip
    assert not UsageRecord.objects.filter(hour=T0).exists()
    with pytest.raises(CommandError, match=r"^1 hour part\(s\) failed and stay pending"):
        call_command("meter")
    assert "2026-12-01T00:00Z failed: ValueError: a record the ledger refuses" in capsys.readouterr().err
    assert tasks.meter_pending()["failed"] == ["2026-12-01T00:00Z: ValueError: a record the ledger refuses"]
    monkeypatch.setattr(metering, "usage_collect", collect)
    assert [r.hour for r in services.meter_pending(now=now) if r.metered] == [T0]
    assert MeterRun.objects.count() == 4


def test_the_meter_command_meters_one_hour(actors, capsys):
    p = pool(actors["lead"])
    node(p, "n-0")
    call_command("meter", "--hour", "2026-12-01T03:00")
    call_command("meter", "--hour", "2026-12-01T03:00")
    out = capsys.readouterr().out
    assert "2026-12-01T03:00Z metered: 2 usage records" in out and "already metered" in out
    call_command("meter", "--once")
    assert MeterRun.objects.count() == 2


def test_metering_is_scheduled_hourly_by_a_data_migration():
    schedule = Schedule.objects.get(name="billing.meter_pending")
    assert (schedule.func, schedule.schedule_type, schedule.repeats) == (
        "billing.tasks.meter_pending",
        "H",
        -1,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent claims need PostgreSQL (SQLite serialises writers)",
)
def test_two_workers_meter_an_hour_once(actors, teams):
    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=8)
    results = concurrently(*[partial(services.meter_hour, hour=T0)] * 2)
    assert sorted(r.metered for r in results) == [False, True]
    assert MeterRun.objects.count() == 1 and UsageRecord.objects.count() == 3


NODE_KINDS = st.sampled_from(["monthly", "on_demand", "preemptible"])
PODS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 8),
        st.sampled_from([0, 1, 250, 500, 999]),
        st.integers(-90, 59),
        st.booleans(),
    ),
    max_size=8,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(NODE_KINDS, min_size=1, max_size=3),
    pods=PODS,
    storage=st.integers(0, 5000),
    network=st.integers(0, 999),
)
def test_stored_costs_always_equal_node_costs_plus_fees(
    actors, teams, kinds, pods, storage, network
):
    """Property: whatever runs where, Σ cost records of an hour = Σ node costs + Σ fees, exactly."""
    from django.db import transaction

    with transaction.atomic():
        p = pool(actors["lead"])
        nodes = [node(p, f"n-{i}", billing=kind, created=T0 - HOUR) for i, kind in enumerate(kinds)]
        for j, (on, gpus, milli, start_min, other_team) in enumerate(pods):
            shared = gpus == 1 and milli
            team = teams["inference" if other_team else "algorithm"]
            pod(
                team,
                nodes[on % len(nodes)],
                f"p-{j}",
                gpus=gpus,
                milli=milli if shared else 0,
                started=T0 + timedelta(minutes=start_min),
            )
        PoolResourceSample.objects.create(
            pool=p, hour=T0, storage_gb=storage, cross_zone_gb=Decimal(network) / 10
        )
        [result] = meter()
        assert result.metered
        assert total(CostRecord.objects.all()) == node_and_fee_total() == result.total
        assert not CostRecord.objects.filter(amount__lt=0).exists()
        transaction.set_rollback(True)


def test_the_hourly_task_meters_pending_hours_and_checks_budgets(actors, monkeypatch):
    from billing import tasks

    monkeypatch.setattr(tasks.timezone, "now", lambda: T0 + timedelta(hours=2, minutes=5))
    p = pool(actors["lead"], budget={"monthly": "50"})
    node(p, "n-0")
    result = tasks.meter_pending()
    assert result["hours"] == services.MAX_CATCH_UP_HOURS and result["alerts"] == 2
    assert tasks.meter_pending() == {"hours": 0, "alerts": 0}


def test_the_daily_rollup_sums_the_days_cost_records_exactly(actors, teams):
    from billing.models import CostDay

    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=3, labels={"project": "x"})
    meter(T0 + timedelta(hours=22), hours=3)  # two hours of Dec 1, one of Dec 2
    for day in (T0.date(), (T0 + timedelta(days=1)).date()):
        records = CostRecord.objects.filter(hour__date=day)
        assert total(CostDay.objects.filter(day=day)) == total(records) > 0
    assert services.cost_day_rebuild(day=T0.date()) == CostDay.objects.filter(day=T0.date()).count()
    assert total(CostDay.objects.all()) == total(CostRecord.objects.all())


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent claims need PostgreSQL (SQLite serialises writers)",
)
def test_two_workers_metering_two_hours_of_one_day_keep_the_rollup_whole(actors, teams):
    from billing.models import CostDay

    p = pool(actors["lead"])
    pod(teams["algorithm"], node(p, "n-0"), "a", gpus=8)
    concurrently(*[partial(services.meter_hour, hour=T0 + i * HOUR) for i in range(2)])
    assert MeterRun.objects.count() == 2
    assert total(CostDay.objects.all()) == total(CostRecord.objects.all()) > 0


def test_a_released_monthly_node_is_billed_until_its_lease_ends(actors):
    p = pool(actors["lead"])
    node(p, "n-0", terminated=T0 - HOUR, phase="Terminated")
    node(
        p,
        "od-old",
        billing="on_demand",
        created=T0 - 5 * HOUR,
        terminated=T0 - HOUR,
        phase="Terminated",
    )
    meter()
    assert list(UsageRecord.objects.filter(kind="node").values_list("resource", flat=True)) == [
        "n-0"
    ]


def test_a_long_catch_up_stops_after_its_time_budget_and_resumes(actors):
    p = pool(actors["lead"])
    node(p, "n-0")
    now = T0 + timedelta(hours=5, minutes=1)
    first = services.meter_pending(now=now, time_budget_s=0)  # at least one hour per run
    rest = services.meter_pending(now=now)
    assert len(first) == 1 and len(first) + len(rest) == services.MAX_CATCH_UP_HOURS
    assert MeterRun.objects.filter(hour__gte=T0).count() == 5


def test_storage_and_cross_zone_traffic_come_from_the_simulated_cloud(actors, settings):
    """C1/D4: the provider reports each machine's disk and the traffic crossing zones."""
    from tests.pools.lifecycle_helpers import approved_pool, run_until

    settings.EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR = {"cn-east-2a": 3.5}
    load_prices()
    p = approved_pool(actors, make_document("metered"))
    ready = run_until(p, T0)
    hour = (ready + HOUR).replace(minute=0, second=0, microsecond=0)
    machines = {p.pk: list(Node.objects.filter(pool=p).values_list("provider_id", flat=True))}
    sample = metering.resource_samples([p], hour, machines=machines)[p.pk]
    assert (sample.storage_gb, sample.cross_zone_gb) == (Decimal(1000), Decimal("7.0"))  # 2 machines
    assert metering.resource_samples([p], hour, machines=machines)[p.pk].pk == sample.pk  # read once, then kept
    services.meter_hour(hour=hour)
    kinds = dict(UsageRecord.objects.filter(hour=hour, pool=p, kind__in=["storage", "network"]).values_list("kind", "quantity"))
    assert kinds == {"storage": Decimal(1000), "network": Decimal("7.0")}


def test_metering_asks_the_cloud_about_no_machine_it_does_not_bill(actors, settings, monkeypatch):
    """Metering asks the provider about the machines of the nodes it bills in the hour, not
    about every machine the pool ever had (its history only grows): a node gone before the
    hour, its lease ended, is not asked about."""
    from pools.providers.simulated import SimulatedCloud
    from tests.pools.lifecycle_helpers import approved_pool, run_until

    settings.EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR = {"cn-east-2a": 3.5}
    load_prices()
    p = approved_pool(actors, make_document("metered"))
    ready = run_until(p, T0)
    hour = (ready + 2 * HOUR).replace(minute=0, second=0, microsecond=0)
    gone, kept = Node.objects.filter(pool=p).order_by("name")
    Node.objects.filter(pk=gone.pk).update(terminated_at=hour - timedelta(minutes=1), lease_end=hour - timedelta(minutes=1))
    asked = []
    usage_many = SimulatedCloud.resource_usage_many

    def recorded(self, *, machines, hour):
        asked.append({pk: sorted(ids) for pk, ids in machines.items()})
        return usage_many(self, machines=machines, hour=hour)

    monkeypatch.setattr(SimulatedCloud, "resource_usage_many", recorded)
    services.meter_hour(hour=hour)
    assert asked == [{p.pk: [kept.provider_id]}]


def test_metering_asks_the_cloud_about_the_machines_it_bills_in_the_hour(actors, settings):
    """With no sample stored, metering asks the provider about the machines of the nodes it
    bills in the hour (`resource_samples(machines=...)`: it has them, no query for every
    machine the pool ever had) and keeps what it was told."""
    from tests.pools.lifecycle_helpers import approved_pool, run_until

    settings.EBCLOUD_SIM_CROSS_ZONE_GB_PER_HOUR = {"cn-east-2a": 3.5}
    load_prices()
    p = approved_pool(actors, make_document("metered"))
    ready = run_until(p, T0)
    hour = (ready + HOUR).replace(minute=0, second=0, microsecond=0)
    assert not PoolResourceSample.objects.filter(pool=p, hour=hour).exists()
    services.meter_hour(hour=hour)
    kinds = dict(UsageRecord.objects.filter(hour=hour, pool=p, kind__in=["storage", "network"]).values_list("kind", "quantity"))
    assert kinds == {"storage": Decimal(1000), "network": Decimal("7.0")}  # the 2 machines billed
    sample = PoolResourceSample.objects.get(pool=p, hour=hour)
    assert (sample.storage_gb, sample.cross_zone_gb) == (Decimal(1000), Decimal("7.0"))


def test_a_fee_nobody_used_carries_the_gpu_class_its_nodes_carry(actors):
    """A pool's fees carry the labels every node of it has (`spec.nodeLabels`, such as
    gpu-class), as its nodes' costs do: the owner's idle fee was the one row of the pool with
    an empty gpu-class in a report grouped by it."""
    p = pool(actors["lead"], nodeLabels={"gpu-class": "a100"})
    node(p, "od-0", billing="on_demand", created=T0 - HOUR)
    meter()
    fee = UsageRecord.objects.get(kind="registry", hour=T0)
    assert fee.labels["gpu-class"] == "a100" and fee.labels["team"] == "algorithm"
    idle = CostRecord.objects.filter(pool=p, cost_kind="idle")
    assert {(r.component, r.labels.get("gpu-class")) for r in idle} == {("gpu", "a100"), ("registry", "a100")}
