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


def test_values_of_another_type_are_prepared_as_in_prepares_them(teams):
    """Values of the type the field holds go as they are; any other (an id's digits, a bool, a
    number for a text field, a UUID's text) is prepared as `__in` prepares it, in both forms."""
    from billing.label_sets import label_set_id
    from billing.models import LabelSet

    pks = [t.pk for t in teams]
    for wanted in ([str(pks[1])], [pks[0], str(pks[2])], [True], [pks[3]]):
        assert set(Team.objects.filter(pk__any_of=wanted)) == set(Team.objects.filter(pk__in=wanted)), wanted
    Team.objects.filter(pk=pks[0]).update(slug="7")
    assert list(Team.objects.filter(slug__any_of=[7]).values_list("pk", flat=True)) == [pks[0]]
    stored = LabelSet.objects.create(id=label_set_id({"team": "a"}), labels={"team": "a"})
    for wanted in ([stored.pk], [str(stored.pk)], [stored.pk.hex]):
        assert list(LabelSet.objects.filter(pk__any_of=wanted)) == [stored], wanted
