"""The cluster overview page (issue 6 §6): water levels and alerts of the pools a user may see."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.models import Node
from pools.services import pools as pool_services
from pools.services.events import WARNING, event_record
from tests.conftest import make_document


@pytest.fixture
def pools(actors):
    mine = pool_services.pool_create(user=actors["lead"], document=make_document("algo-burst", nodeCount={"min": 0, "max": 4}))
    theirs = pool_services.pool_create(user=actors["other_lead"], document=make_document("infer-burst", nodeCount={"min": 0, "max": 4}))
    return mine, theirs


def test_the_overview_shows_my_pools_water_levels_and_alerts_but_not_other_teams(client, actors, pools, make_node):
    mine, theirs = pools
    make_node("algo-0", target=mine)
    event_record(pool=mine, type=WARNING, reason="LowGpuUtilization", message="mean GPU utilisation below 30% for 24 hours")
    event_record(pool=theirs, type=WARNING, reason="LowGpuUtilization", message="the other team's alert")
    client.force_login(actors["lead"])
    response = client.get("/monitoring/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "algo-burst" in body and "Ready 1" in body and "below 30% for 24 hours" in body
    assert "infer-burst" not in body and "the other team" not in body


def test_the_overview_needs_a_login(client, db):
    response = client.get("/monitoring/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_overview_query_count_does_not_grow_with_pools_or_events(client, actors, pools, make_node):
    mine, _ = pools
    client.force_login(actors["admin"])
    client.get("/monitoring/")
    with CaptureQueriesContext(connection) as few:
        client.get("/monitoring/")
    for i in range(5):
        extra = pool_services.pool_create(user=actors["lead"], document=make_document(f"more-{i}", nodeCount={"min": 0, "max": 2}))
        make_node(f"more-{i}-0", target=extra)
        event_record(pool=extra, type=WARNING, reason="XidError", message=f"Xid 79 on GPU {i}")
    with CaptureQueriesContext(connection) as many:
        client.get("/monitoring/")
    assert len(few) == len(many)


def test_the_overview_refreshes_itself_while_pools_have_nodes_and_stops_when_nothing_changes(client, actors, pools, make_node):
    """Issue 21 item 8: the capacity page's live part polls (htmx) while agents report or a
    pool changes phase; the fragment it gets is that part alone."""
    mine, _ = pools
    type(mine).objects.update(phase="Ready")
    Node.objects.all().delete()  # make_node's own pool was bought with nodes
    client.force_login(actors["lead"])
    assert 'hx-trigger="every 15s"' not in client.get("/monitoring/").content.decode()
    make_node("algo-0", target=mine)
    assert 'id="overview-live" hx-get="/monitoring/" hx-trigger="every 15s"' in client.get("/monitoring/").content.decode()
    fragment = client.get("/monitoring/", headers={"HX-Request": "true"}).content.decode()
    assert 'id="overview-live"' in fragment and "algo-burst" in fragment and "<html" not in fragment
