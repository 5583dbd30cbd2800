"""A pool's alike nodes are one node usage record (issue 23 §3: ~20,000 node rows an hour become
about one a pool), and everything read from the ledger is what a record per node gives: the cost
records, the node-level FOCUS export, the nodes its leases are read for."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import focus_selectors, metering
from billing.models import CostDay, CostRecord, MeterRun, UsageRecord
from billing.selectors import CostQuery
from tests.billing.billing_helpers import HOUR, T0, meter, node, pod, pool

pytestmark = pytest.mark.django_db


def fleet(actors, teams):
    """Two pools: alike on-demand and monthly nodes, nodes set apart by labels, by the moment
    they came (another price in the hour) and by billing; pods of two teams on some of them."""
    a = pool(actors["lead"])
    b = pool(actors["other_lead"], name="spot-pool", labels={"team": "inference"}, preemptible=True)
    for i in range(4):
        od = node(a, f"od-{i}", billing="on_demand", created=T0 - HOUR)
        pod(teams["algorithm"], od, f"train-{i}", gpus=1 + i % 2, labels={"project": "llm"})
    node(a, "od-tagged", billing="on_demand", created=T0 - HOUR, labels={"rack": "r7"})
    node(a, "od-late", billing="on_demand", created=T0 + timedelta(minutes=20))
    for i in range(3):
        monthly = node(a, f"m-{i}")
    pod(teams["algorithm"], monthly, "notebook", gpus=1, milli=500)
    for i in range(2):
        spot = node(b, f"spot-{i}", billing="preemptible", created=T0 - HOUR)
        pod(teams["inference"], spot, f"serve-{i}", namespace="inference", gpus=1, labels={"project": "chat"})
    return a, b


def hour_forgotten(hour):
    """The hour's ledger gone, as before it was metered (its cloud samples kept)."""
    for model in (UsageRecord, CostRecord, MeterRun):
        model.objects.filter(hour=hour).delete()
    CostDay.objects.filter(day=hour.date()).delete()


def ledger(actors):
    costs = sorted(CostRecord.objects.values_list("pool_id", "team_id", "namespace", "billing_kind", "cost_kind", "component", "gpu_hours", "amount"))  # fmt: skip
    detail = list(focus_selectors.focus_rows_for_user(user=actors["finance"], query=CostQuery()))
    return costs, detail


def test_alike_nodes_are_one_record_with_their_hours_cost_and_gpus_summed(actors, teams):
    fleet(actors, teams)
    meter()
    records = {r.resource: r for r in UsageRecord.objects.filter(kind="node")}
    assert {name: r.nodes_billed for name, r in records.items()} == {
        "od-0": ["od-0", "od-1", "od-2", "od-3"], "od-tagged": ["od-tagged"], "od-late": ["od-late"],
        "m-0": ["m-0", "m-1", "m-2"], "spot-0": ["spot-0", "spot-1"],
    }  # fmt: skip
    alike, late = records["od-0"], records["od-late"]
    assert (alike.quantity, alike.amount, alike.list_amount, alike.gpu_count) == (Decimal(4), Decimal("400.00"), Decimal("400.00"), 32)
    assert (late.quantity, late.amount, late.node_names) == (Decimal("0.666667"), Decimal("66.67"), "")
    # Pods name their own node, whichever record bills it.
    assert set(UsageRecord.objects.filter(kind="pod", pool=alike.pool).values_list("node_name", flat=True)) == {"od-0", "od-1", "od-2", "od-3", "m-2"}


def test_the_ledger_reads_as_one_record_per_node_would(actors, teams, monkeypatch):
    """Cost records and the node-level FOCUS export, row for row, equal those of the same hour
    metered with every node in a record of its own."""
    fleet(actors, teams)
    monkeypatch.setattr(metering, "MAX_GPUS_IN_RECORD", 8)  # one 8-GPU node a record
    meter()
    assert UsageRecord.objects.filter(kind="node").exclude(node_names="").count() == 0
    per_node = ledger(actors)
    hour_forgotten(T0)
    monkeypatch.undo()
    meter()
    assert UsageRecord.objects.filter(kind="node").count() == 5
    together = ledger(actors)
    assert together[0] == per_node[0]
    assert together[1] == per_node[1]
    assert {r["ResourceId"] for r in together[1]} >= {"od-0", "od-1", "od-2", "od-3", "m-0", "m-1", "m-2", "spot-1"}


def test_a_record_holds_no_more_gpus_than_its_column(actors, teams, monkeypatch):
    a = pool(actors["lead"])
    for i in range(5):
        node(a, f"od-{i}", billing="on_demand", created=T0 - HOUR)
    monkeypatch.setattr(metering, "MAX_GPUS_IN_RECORD", 2 * 8 + 7)
    meter()
    groups = sorted(r.nodes_billed for r in UsageRecord.objects.filter(kind="node"))
    assert groups == [["od-0", "od-1"], ["od-2", "od-3"], ["od-4"]]
    assert sorted(UsageRecord.objects.filter(kind="node").values_list("gpu_count", flat=True)) == [8, 16, 16]


def test_the_detail_export_reads_the_leases_of_every_node_of_a_record(actors, teams):
    a = pool(actors["lead"])
    for i in range(3):
        node(a, f"m-{i}")
    meter()
    [record] = UsageRecord.objects.filter(kind="node")
    assert record.nodes_billed == ["m-0", "m-1", "m-2"]
    purchases = [r for r in focus_selectors.focus_rows_for_user(user=actors["finance"], query=CostQuery()) if r["ChargeCategory"] == "Purchase"]
    assert sorted(r["ResourceId"] for r in purchases) == [f"lease/m-{i}/20261201T00" for i in range(3)]


def test_a_name_with_spaces_is_billed_in_a_record_of_its_own(actors, teams):
    """The names of a record's nodes are kept apart by spaces: a node named with one (not a name
    this product gives, but a database may hold one) is never in a record with others."""
    a = pool(actors["lead"])
    for name in ("od-0", "od 1", "od-2"):
        node(a, name, billing="on_demand", created=T0 - HOUR)
    meter()
    assert sorted(r.nodes_billed for r in UsageRecord.objects.filter(kind="node")) == [["od 1"], ["od-0", "od-2"]]


@pytest.mark.django_db(transaction=True)
def test_going_back_before_the_migration_gives_a_record_per_node(actors, teams):
    """Migration 0017 reversed writes each record of several nodes as one per node, the amounts
    split as metering split them, with the reference checks in place at both ends."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from tests.billing.test_label_sets import usage_triggers

    fleet(actors, teams)
    meter()
    totals = {f: sum(UsageRecord.objects.values_list(f, flat=True)) for f in ("quantity", "amount", "gpu_count")}
    triggers = usage_triggers()
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("billing", "0016_cost_day_team_index_redundant")])
        with connection.cursor() as cursor:
            cursor.execute("SELECT resource, node_name, quantity, amount, gpu_count FROM billing_usagerecord WHERE kind = 'node'")
            # (SQLite gives its decimals as floats: their shortest text is the stored value)
            rows = {resource: (node_name, Decimal(str(quantity)), Decimal(str(amount)), gpus) for resource, node_name, quantity, amount, gpus in cursor.fetchall()}
            cursor.execute("SELECT quantity, amount, gpu_count FROM billing_usagerecord")
            back = {f: sum(Decimal(str(value)) for value in values) for f, values in zip(totals, zip(*cursor.fetchall(), strict=True), strict=True)}
        assert rows["od-2"] == ("od-2", Decimal(1), Decimal("100.00"), 8)
        assert set(rows) == {"od-0", "od-1", "od-2", "od-3", "od-tagged", "od-late", "m-0", "m-1", "m-2", "spot-0", "spot-1"}
        assert back == totals
        assert usage_triggers() == triggers
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert usage_triggers() == triggers
    assert UsageRecord.objects.filter(kind="node").count() == 11
