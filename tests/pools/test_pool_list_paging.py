"""The pool list pages by 50 at fleet size (issue 9 item 1: p95 < 150 ms at 1,000 pools): the
page shows its pools with their node counts, links to the next page keep sort and filters,
and the statements per page do not grow with the number of pools."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.control_plane_fleet import Shape, build
from pools.views.pools import POOLS_PER_PAGE

TINY = Shape(pools=POOLS_PER_PAGE + 5, teams=2, monthly_ready=1, provisioning=1, burst_ready=0, pods_per_node=0,
             pending_per_pool=0, draining=0, events_per_pool=0, sample_minutes=0)  # fmt: skip


@pytest.mark.django_db
def test_the_pool_list_shows_fifty_pools_a_page_with_their_node_counts(client):
    fleet = build(TINY)
    client.force_login(fleet.admin)
    first = client.get("/pools/")
    pools = first.context["pools"]
    assert len(pools) == POOLS_PER_PAGE and pools[0].name == "pool-0000"
    assert all((p.node_ready, p.node_total) == (1, 2) for p in pools)  # one Ready, one provisioning
    html = first.content.decode()
    assert f"Page 1 of 2 (1–{POOLS_PER_PAGE} of {TINY.pools})" in html and 'rel="next"' in html
    with CaptureQueriesContext(connection) as queries:
        last = client.get("/pools/?sort=-name&page=2")
    assert [p.name for p in last.context["pools"]] == [f"pool-{i:04d}" for i in range(4, -1, -1)]
    assert 'href="?sort=-name&amp;page=1"' in last.content.decode()  # the sort survives paging
    assert last.content.decode().count('aria-sort="descending"') == 1 and "aria-sort=\"ascending\"" not in last.content.decode()
    with CaptureQueriesContext(connection) as again:
        client.get("/pools/")
    assert len(queries) == len(again)


@pytest.mark.django_db
def test_a_lead_pages_through_their_own_teams_pools_only(client):
    fleet = build(TINY)
    client.force_login(fleet.lead)
    response = client.get("/pools/?page=9")  # past the end: the last page
    names = [p.name for p in response.context["pools"]]
    assert names and all(int(name.split("-")[1]) % TINY.teams == 0 for name in names)
    assert response.context["page"].paginator.count == (TINY.pools + 1) // TINY.teams
