"""Helpers of the billing tests: pools with nodes and pods created directly, and metered hours."""

from __future__ import annotations

import csv
import io
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection

from billing import focus_selectors, services
from billing.demo import load_prices
from billing.focus import FOCUS_COLUMNS, iter_csv_lines
from billing.label_sets import label_set_id
from billing.lease_costs import add_months
from billing.models import CostRecord, LabelSet
from billing.selectors import CostQuery
from pools.models import Node, Pod
from pools.services import pools as pool_services
from tests.conftest import make_document

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)  # a 31-day month: 744 hours
HOUR = timedelta(hours=1)


def label_set(labels: dict | None = None) -> LabelSet:
    """The stored set of these labels (none by default), for usage records made by hand."""
    labels = labels or {}
    return LabelSet.objects.get_or_create(id=label_set_id(labels), defaults={"labels": labels})[0]


def pool(user, name="train-pool-a", labels=None, **spec):
    """A pool with no order (min 0); labels from the article's YAML (team: algorithm)."""
    load_prices()
    document = make_document(name, nodeCount={"min": 0, "max": 6}, **spec)
    if labels is not None:
        document["metadata"]["labels"] = labels
    return pool_services.pool_create(user=user, document=document, now=T0)


def node(
    pool,
    name,
    *,
    billing="monthly",
    start=T0,
    months=1,
    created=None,
    terminated=None,
    labels=None,
    phase="Ready",
):
    lease = billing == "monthly"
    return Node.objects.create(
        pool=pool,
        name=name,
        billing=billing,
        phase=phase,
        zone=pool.zone,
        gpu_count=pool.node_type.gpu_count,
        labels={"gpu-class": "a100", **(labels or {})},
        lease_start=start if lease else None,
        lease_end=add_months(start, months) if lease else None,
        created_at=created or start,
        machine_at=None if phase == "Ordering" else created or start,  # its machine came when it was requested
        terminated_at=terminated,
    )


def pod(
    team,
    node,
    name,
    *,
    namespace="algorithm",
    gpus=1,
    milli=0,
    labels=None,
    started=T0,
    finished=None,
    phase="Running",
):
    return Pod.objects.create(
        team=team,
        namespace=namespace,
        name=name,
        labels=labels or {},
        gpu_count=gpus,
        gpu_milli=milli or (1000 if gpus else 0),
        node=node,
        phase=phase,
        started_at=started,
        finished_at=finished,
    )


def meter(start=T0, hours=1):
    return [services.meter_hour(hour=start + i * HOUR) for i in range(hours)]


def scenario(actors, teams, hours=3):
    """Two teams' pools metered for `hours` hours:

    - train-pool-a (algorithm; labels pool-role=training, team=algorithm; gpu-class=a100 on
      nodes): monthly node n-0 and on-demand node od-0; pods algorithm/llm (2 GPUs,
      project=llm), algorithm/notebook (half a GPU, no project), algorithm/batch on od-0.
    - spot-pool (inference; preemptible; labels team=inference): node spot-0 with pod
      inference/serve (1 GPU, project=chat).
    """
    a = pool(actors["lead"])
    b = pool(
        actors["other_lead"],
        name="spot-pool",
        labels={"team": "inference"},
        preemptible=True,
        region="cn-north-1a",
    )
    n0 = node(a, "n-0")
    od = node(a, "od-0", billing="on_demand", created=T0 - HOUR)
    spot = node(b, "spot-0", billing="preemptible", created=T0 - HOUR)
    pod(teams["algorithm"], n0, "llm", gpus=2, labels={"project": "llm"})
    pod(teams["algorithm"], n0, "notebook", gpus=1, milli=500)
    pod(teams["algorithm"], od, "batch", gpus=8, labels={"project": "etl"})
    pod(
        teams["inference"], spot, "serve", namespace="inference", gpus=1, labels={"project": "chat"}
    )
    meter(hours=hours)
    return a, b


def charge(pool, per_hour, *, hours: int, start=T0, currency="CNY", team=None):
    """`hours` hourly idle cost records of `per_hour` for the pool (charged to its team or
    `team`), and their days' rollup as metering adds it (`cost_day_add`): what the pool list,
    the order queue and chargeback read without metering real nodes."""
    records = CostRecord.objects.bulk_create(
        CostRecord(hour=start + i * HOUR, pool=pool, team=team or pool.team, billing_kind="monthly", cost_kind="idle",
                   amount=Decimal(per_hour), currency=currency)
        for i in range(hours)
    )  # fmt: skip
    for record in records:
        services.cost_day_add(day=record.hour.date(), costs=[record])
    return records


def in_thread(target) -> threading.Thread:
    """`target` started in a thread of its own, which closes its database connection when done
    (a thread has its own connection: a second transaction alongside the test's)."""

    def run():
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def focus_export(user, query: CostQuery, form: str) -> list[dict[str, str]]:
    """The FOCUS export as a user downloads it: `daily` (the default), `hourly` or `detail`."""
    if form == "detail":
        text = "".join(iter_csv_lines(focus_selectors.focus_rows_for_user(user=user, query=query), FOCUS_COLUMNS))
    else:
        text = "".join(focus_selectors.focus_csv_for_user(user=user, query=query, granularity=form))
    return list(csv.DictReader(io.StringIO(text)))
