"""bench/chargeback.py makes its month in PostgreSQL's SQL (7.2 M rows) and, for the counted
small months on SQLite (issue 23 item 1), in Python: the two must be the same rows."""

from __future__ import annotations

import pytest
from django.db import connection

from bench import chargeback
from billing.models import CostRecord

pytestmark = pytest.mark.django_db


def month() -> list[tuple]:
    rows = CostRecord.objects.values_list(
        "hour", "pool__name", "team__slug", "namespace", "labels", "gpu_class", "billing_kind", "cost_kind", "component", "gpu_hours", "amount", "currency"
    )  # fmt: skip
    return sorted((*row[:4], sorted(row[4].items()), *row[5:]) for row in rows)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the bench's SQL month is PostgreSQL's")
def test_the_python_month_is_the_sql_month():
    chargeback.generate(pods=45, hours=3, pools=12)
    made_in_sql = month()
    CostRecord.objects.all().delete()
    chargeback.rows_made(pods=45, hours=3, pools=12)
    assert month() == made_in_sql
    assert len(made_in_sql) == 45 * 3 + 12 * 3
