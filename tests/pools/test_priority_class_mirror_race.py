"""Two scheduler passes on a real cluster mirror its PriorityClasses at once (`priority_classes_sync`
of each pass): a class new to both is added once and neither pass fails. The threaded test needs
PostgreSQL (SQLite has one writer)."""

from __future__ import annotations

import pytest
from django.db import connection

from pools.models import PriorityClass
from pools.services.pod_mirror import priority_classes_replace
from tests.race import concurrently

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent passes need PostgreSQL (SQLite has one writer)"),
    pytest.mark.django_db(transaction=True),
]

TEAM_HIGH = {"name": "team-high", "value": 1000, "preemption_policy": "PreemptLowerPriority", "global_default": False, "description": ""}


@pytest.mark.parametrize("attempt", range(3))  # a race: a few tries make a pass that never meets it unlikely
def test_two_passes_mirroring_a_new_class_at_once_add_it_once_and_neither_fails(attempt):
    """The second INSERT met the first's unique name (IntegrityError), and `scheduler_pass`,
    which expects only an unreachable cluster there, lost that tick's pending pods' hints."""
    concurrently(*[lambda: priority_classes_replace([TEAM_HIGH])] * 2)  # raises what either pass met
    assert list(PriorityClass.objects.filter(name="team-high").values_list("value", "preemption_policy")) == [(1000, "PreemptLowerPriority")]

