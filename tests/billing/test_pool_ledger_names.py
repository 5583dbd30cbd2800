"""A deleted pool and the new pool that took its name are two pools in every cost report, as in
the hour's ledger (`GpuNodePool.ledger_name`): the live pool is its name, the deleted
one `name#id`. `?pool=` selects exactly one of them (the pool list's figure for it), and every
row that names a pool (the detail CSV, FOCUS's resource and tags, the accruing hours) names it so."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from billing import chargeback, metering
from billing.month_spend import month_spend
from billing.selectors import CostQuery, cost_query_parse, ledger_pool_name_of, ledger_pool_q
from pools.core.errors import ValidationError
from pools.models import GpuNodePool, Node
from tests.billing.billing_helpers import HOUR, T0, focus_export, meter, node, pod, pool

pytestmark = pytest.mark.django_db

RANGE = "from=2026-12-01&to=2026-12-31"
DECEMBER = {"start": T0.date(), "end": T0.date() + timedelta(days=30)}


@pytest.fixture(autouse=True)
def after_the_month(time_machine):
    """The clock after the metered range: no hour of it is still accruing, whatever today is."""
    time_machine.move_to(datetime(2027, 1, 15, 9, 0, tzinfo=UTC), tick=True)


@pytest.fixture
def renamed(actors, teams):
    """train-pool-a with a monthly node and a pod for an hour, metered, then deleted (its lease
    is still billed, idle); a new train-pool-a with an on-demand node and a pod, two hours more
    metered. Returns (new, old, {ledger name: the pool list's cost this month})."""
    old = pool(actors["lead"])
    old_node = node(old, "old-0")
    pod(teams["algorithm"], old_node, "llm", gpus=2, labels={"project": "llm"}, finished=T0 + HOUR, phase="Succeeded")
    meter(hours=1)
    Node.objects.filter(pk=old_node.pk).update(phase="Terminated", terminated_at=T0 + HOUR)
    GpuNodePool.objects.filter(pk=old.pk).update(deleted_at=T0 + HOUR)
    old.refresh_from_db()
    new = pool(actors["lead"])
    pod(teams["algorithm"], node(new, "new-0", billing="on_demand", created=T0 + HOUR), "batch", gpus=8, started=T0 + HOUR)
    meter(start=T0 + HOUR, hours=2)
    spend = month_spend(scope="pool_id", ids=[new.pk, old.pk], now=T0 + 3 * HOUR)
    figures = {"train-pool-a": spend[new.pk][0].spent, f"train-pool-a#{old.pk}": spend[old.pk][0].spent}
    assert all(figures.values())
    return new, old, figures


def page_total(response) -> Decimal:
    return Decimal(re.search(r"<strong data-total>([\d.]+)</strong>", response.content.decode()).group(1))


def by_pool(rows, pool_of, amount_of) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        sums[pool_of(row)] += Decimal(amount_of(row))
    return dict(sums)


def test_the_pool_names_its_ledger_name_as_the_database_does(renamed):
    """One rule, two forms: the property (templates, alerts, metrics, the ledger) and its SQL
    (`ledger_pool_name_of`, the reports' grouping and sorting) name every pool alike."""
    new, old, figures = renamed
    pools = GpuNodePool.objects.filter(pk__in=[new.pk, old.pk]).annotate(sql_name=ledger_pool_name_of(""))
    assert {p.ledger_name: p.sql_name for p in pools} == {name: name for name in figures}
    assert {metering.ledger_pool_name(p) for p in (new, old)} == {new.ledger_name, old.ledger_name} == set(figures)


def test_the_pool_filter_selects_the_live_pool_or_a_deleted_one_by_its_ledger_name(api, actors, renamed):
    new, old, figures = renamed
    finance = Client()
    finance.force_login(actors["finance"])
    for name, spent in figures.items():
        param = name.replace("#", "%23")
        assert Decimal(api("finance").get(f"/api/v1/costs/?{RANGE}&pool={param}").json()["total"]) == spent, name
        assert page_total(finance.get(f"/costs/?{RANGE}&pool={param}")) == spent, name
        query = CostQuery(**DECEMBER, pool=name)
        assert chargeback.summarize(chargeback.chargeback(user=actors["finance"], query=query)).total == spent
        assert list(GpuNodePool.objects.filter(ledger_pool_q(name, ""))) == [new if name == "train-pool-a" else old]
    # Not the deleted pool's id with the live pool's name, nor a deleted pool by its bare name.
    assert not GpuNodePool.objects.filter(ledger_pool_q(f"train-pool-a#{new.pk}", "")).exists()
    GpuNodePool.objects.filter(pk=new.pk).update(deleted_at=T0 + 3 * HOUR)
    # Both deleted: the bare name is no pool now, and is refused so, pointing to `name#id`.
    refused = api("finance").get(f"/api/v1/costs/?{RANGE}&pool=train-pool-a")
    assert refused.status_code == 400 and [e["field"] for e in refused.json()["errors"]] == ["pool"]
    assert "such as train-pool-a#12" in refused.json()["errors"][0]["message"]
    assert api("finance").get(f"/api/v1/costs/?{RANGE}&pool=train-pool-a%23{new.pk}").json()["rows"]


def test_the_detail_csv_names_each_pool_by_its_ledger_name(api, renamed):
    _, old, figures = renamed
    response = api("finance").get(f"/api/v1/costs/?{RANGE}&format=csv&detail=1")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert by_pool(rows, lambda r: r["pool"], lambda r: r["amount"]) == figures
    response = api("finance").get(f"/api/v1/costs/?{RANGE}&format=csv&detail=1&pool=train-pool-a%23{old.pk}")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert by_pool(rows, lambda r: r["pool"], lambda r: r["amount"]) == {f"train-pool-a#{old.pk}": figures[f"train-pool-a#{old.pk}"]}


@pytest.mark.parametrize("form", ["daily", "hourly", "detail"])
def test_focus_keeps_the_two_pools_apart_in_its_resources_tags_and_commitments(actors, renamed, form):
    _, old, figures = renamed
    deleted = f"train-pool-a#{old.pk}"
    rows = focus_export(actors["finance"], CostQuery(**DECEMBER), form)
    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    assert by_pool(usage, lambda r: json.loads(r["Tags"])["ebcloud.io/pool"], lambda r: r["EffectiveCost"]) == figures
    purchases = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert purchases and {json.loads(r["Tags"])["ebcloud.io/pool"] for r in purchases} == {deleted}
    # The old pool's lease is one commitment, named alike on its purchases and its usage rows.
    used = {r["CommitmentDiscountId"] for r in usage if r["CommitmentDiscountId"]}
    assert used and used <= {r["CommitmentDiscountId"] for r in purchases}
    if form != "detail":  # the export from cost records: the pool is the resource
        assert {r["ResourceId"] for r in usage if r["ServiceCategory"] == "Compute"} == set(figures)
        assert used == {f"monthly-leases/{deleted}"}
    for name, spent in figures.items():
        rows = focus_export(actors["finance"], CostQuery(**DECEMBER, pool=name), form)
        assert {json.loads(r["Tags"])["ebcloud.io/pool"] for r in rows} == {name}, name
        assert sum(Decimal(r["EffectiveCost"]) for r in rows if r["ChargeCategory"] == "Usage") == spent, name


def test_accruing_hours_are_filtered_by_the_ledger_name(actors, renamed):
    new, old, _ = renamed
    now = T0 + 3 * HOUR + timedelta(minutes=30)  # T0+3h not metered: accruing
    for name, pool_id in (("train-pool-a", new.pk), (f"train-pool-a#{old.pk}", old.pk)):
        records = chargeback.accruing_costs(user=actors["finance"], query=CostQuery(**DECEMBER, pool=name), now=now)
        assert records and {r.pool_id for r in records} == {pool_id}, name


@pytest.mark.parametrize("value", ["train-pool-a#abc", "train-pool-a#", "#12", "train-pool-a#0", "train-pool-a#012", "train-pool-a#" + "9" * 30, "train-pool-a#１２"])
def test_a_malformed_ledger_name_is_a_400_naming_the_pool(api, actors, value):
    with pytest.raises(ValidationError) as exc:
        cost_query_parse({"pool": value})
    assert [e.field for e in exc.value.errors] == ["pool"]
    response = api("finance").get("/api/v1/costs/", {"pool": value, "format": "csv"})
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["pool"]
    page = Client()
    page.force_login(actors["finance"])
    assert [e.field for e in page.get("/costs/", {"pool": value}).context["errors"]] == ["pool"]
