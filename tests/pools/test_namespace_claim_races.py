"""A namespace's owner is decided by one transaction at a time (design §3: a pod's namespace
belongs to a team; §5: several workers, several admins clicking). The admin creating team
`research` and a pod of team inference claiming namespace `research` at the same moment both
passed their checks, each before the other's write was committed, and both succeeded: a team
without its own namespace. Likewise an admin removing a mapping while the first pod of its team
in the namespace was being written left that pod in a namespace nobody held.

Each race is made to happen every time, not by luck: the test holds a lock on the tables the
two requests write, starts one and then the other, lets both run up to their first write (or,
with the fix, the second up to the namespace's lock, which the first holds), and only then lets
them go; both orders are tested. PostgreSQL only (SQLite has one writer)."""

from __future__ import annotations

import time

import pytest
from django.db import connection, transaction
from django.urls import reverse

from pools.models import NamespaceTeam, Team
from pools.models.pods import Pod
from tests.pools.test_namespace_claims import NO_INLINES, SQUAT, form_errors
from tests.race import Race

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent requests need PostgreSQL (SQLite has one writer)"),
    pytest.mark.django_db(transaction=True),
]


def _until_waiting(count: int, timeout: float = 30.0) -> None:
    """Until `count` other sessions of this database wait for a lock (the requests of the race
    have both made their checks, or queued on the namespace's lock)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # pg_stat_activity is read once per transaction otherwise
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"the {count} requests of the race never both waited")


def _overlapping(*calls, tables: tuple[type, ...]) -> list:
    """Run `calls` while this connection keeps the `tables` from being written, so each call
    gets past its reads before any of them writes; then let them all go. Each starts once the
    ones before it wait, so they hold (and queue on) the namespace's lock in their order."""
    with transaction.atomic():
        names = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in tables)
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {names} IN SHARE MODE")  # reads go on, writes wait
        races = []
        for waiting, call in enumerate(calls, start=1):
            races.append(Race(call).start())
            _until_waiting(waiting)
    return [result for race in races for result in race.join()]


@pytest.mark.parametrize("team_first", [True, False], ids=["team-first", "pod-first"])
def test_a_team_created_while_a_pod_claims_its_slug_as_namespace_exactly_one_wins(actors, api, admin_client, team_first):
    def add_team():
        return admin_client.post(reverse("admin:pools_team_add"), {"name": "Research", "slug": "research", **NO_INLINES})

    def claim():
        return api("other_lead").post("/api/v1/pods/", SQUAT, format="json")

    if team_first:
        team_response, pod_response = _overlapping(add_team, claim, tables=(Team, Pod))
    else:
        pod_response, team_response = _overlapping(claim, add_team, tables=(Team, Pod))

    mapping = NamespaceTeam.objects.filter(namespace="research").select_related("team").first()
    if team_first:  # the team won: the pod is told the namespace was just taken, and nothing was written
        assert team_response.status_code == 302 and Team.objects.filter(slug="research").exists()
        assert pod_response.status_code == 409, pod_response.content
        assert "just taken by another team" in pod_response.json()["errors"][0]["message"]
        assert mapping is None and not Pod.objects.exists()
    else:  # the pod won: the form says who holds the namespace, and nothing was saved
        assert pod_response.status_code == 201, pod_response.content
        assert team_response.status_code == 200 and not Team.objects.filter(slug="research").exists()
        assert "already belongs to team 'inference'" in form_errors(team_response)
        assert mapping is not None and mapping.team.slug == "inference"


@pytest.mark.parametrize("removal_first", [True, False], ids=["removal-first", "pod-first"])
def test_a_mapping_removed_while_its_teams_first_pod_is_written_never_leaves_the_pod_in_nobodys_namespace(actors, api, admin_client, teams, removal_first):
    mapping = NamespaceTeam.objects.create(namespace="research", team=teams["inference"])

    def remove():
        return admin_client.post(reverse("admin:pools_namespaceteam_delete", args=[mapping.pk]), {"post": "yes"})

    def submit():
        return api("other_lead").post("/api/v1/pods/", SQUAT, format="json")

    if removal_first:
        removed, submitted = _overlapping(remove, submit, tables=(NamespaceTeam, Pod))
    else:
        submitted, removed = _overlapping(submit, remove, tables=(NamespaceTeam, Pod))

    assert submitted.status_code == 201, submitted.content
    held = NamespaceTeam.objects.filter(namespace="research").select_related("team").first()
    assert held is not None and held.team == teams["inference"]  # the pod's namespace is its team's
    if removal_first:  # the mapping went, and the pod claimed the namespace again for its team
        assert removed.status_code == 302 and held.pk != mapping.pk
    else:  # the pod came first: the removal is refused, naming the pod
        assert removed.status_code == 200 and held.pk == mapping.pk
        assert "1 live pod(s) (squat)" in removed.content.decode()
