"""`field__any_of`: the rows `field__in` gives, as one array parameter on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection

from pools.models import Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams():
    return [Team.objects.create(name=f"Team {i}", slug=f"team-{i}") for i in range(4)]


@pytest.mark.parametrize(
    "wanted",
    [["team-1", "team-3"], ["team-1", "team-1", None, "nobody"], [], ("team-0",), {"team-2", "team-3"}],
)
def test_the_same_rows_as_in_for_any_list(teams, wanted):
    assert set(Team.objects.filter(slug__any_of=wanted)) == set(Team.objects.filter(slug__in=wanted))
    pks = [t.pk for t in teams if t.slug in wanted]
    assert set(Team.objects.filter(pk__any_of=pks)) == set(Team.objects.filter(pk__in=pks))
    assert set(Team.objects.exclude(slug__any_of=wanted)) == set(Team.objects.exclude(slug__in=wanted))


def test_a_subquery_is_a_plain_in(teams):
    some = Team.objects.filter(slug__in=["team-0", "team-2"]).values("pk")
    assert sorted(Team.objects.filter(pk__any_of=some).values_list("slug", flat=True)) == ["team-0", "team-2"]


def test_ten_thousand_values_are_one_parameter_on_postgresql(teams):
    values = [f"id-{i}" for i in range(10_000)] + ["team-1"]
    sql, params = Team.objects.filter(slug__any_of=values).query.sql_with_params()
    assert list(Team.objects.filter(slug__any_of=values).values_list("slug", flat=True)) == ["team-1"]
    if connection.vendor == "postgresql":
        assert "= ANY(%s)" in sql and params == (values,)
    else:
        assert " IN (" in sql and len(params) == len(values)
