"""The ledger tables keep no index another one makes redundant (migrations billing 0012 and
0016): every index written on each hour's ~7,000 cost rows and ~41,000 usage rows, and on the
daily rollup's rows, must earn its writes, and a lookup by pool or team still finds an index that
leads with it."""

from __future__ import annotations

import pytest
from django.db import connection

from billing.models import CostDay, CostRecord, UsageRecord

pytestmark = pytest.mark.django_db


def _indexes(model) -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return {name: c["columns"] for name, c in constraints.items() if c["index"] and not c["primary_key"]}


@pytest.mark.parametrize("model", [CostDay, CostRecord, UsageRecord])
def test_no_index_is_a_prefix_of_another(model):
    indexes = _indexes(model)
    for name, columns in indexes.items():
        covering = [other for other, longer in indexes.items() if other != name and longer[: len(columns)] == columns]
        assert not covering, f"{model.__name__}: {name} {columns} is a prefix of {covering}"


@pytest.mark.parametrize("model", [CostDay, CostRecord, UsageRecord])
@pytest.mark.parametrize("column", ["pool_id", "team_id"])
def test_a_lookup_by_pool_or_team_has_an_index_leading_with_it(model, column):
    assert any(columns[0] == column for columns in _indexes(model).values())
