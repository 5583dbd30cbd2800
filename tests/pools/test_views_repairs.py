"""Repairs you can follow on the pages and in the API (issue 21 item 6; seed P4, T3): the fleet's
repair page for platform admins, the pool page's repair section for its team, the node pages
that link a replaced node and its successor both ways and say who pays for the slot, and the
polling that runs only while a repair moves by itself (issue 21 item 8).

Times are taken from the wall clock at the start of each test (the pages read it), never a
fixed date."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from monitoring.models import AgentCommand
from pools.controllers.repair import pool_repair
from pools.models import Node, PoolEvent
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import approved_pool, run_until
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.repair_helpers import ack, xid

POLL = 'hx-trigger="every 5s"'


@pytest.fixture
def start():
    return timezone.now() - timedelta(hours=3)


@pytest.fixture
def waiting(actors, start):
    """Team algorithm's pool with one node whose Xid 48 has to persist: cordoned, waiting."""
    pool = pool_with_nodes(actors["lead"], nodes=5)
    node = pool.nodes.order_by("name").first()
    fault = timezone.now() - timedelta(minutes=2)
    xid(node, 48, at=fault, gpu=1)
    pool_repair(pool_id=pool.pk, now=fault + timedelta(minutes=1))
    node.refresh_from_db()
    assert node.phase == "Cordoned"
    return pool, node


@pytest.fixture
def replaced(actors, start):
    """A pool whose first node was replaced after an Xid 79; the successor is Ready."""
    pool = approved_pool(actors, make_document("replaced", nodeCount={"min": 2, "max": 2}), now=start)
    ready = run_until(pool, start)
    old = pool.nodes.order_by("name").first()
    xid(old, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=15)) == 1
    run_until(pool, ready + timedelta(seconds=30), limit=timedelta(hours=2))
    old.refresh_from_db()
    return pool, old, old.successor


def test_an_admin_sees_every_pool_s_repairs_and_the_page_polls_while_one_moves(browser, waiting, django_assert_max_num_queries):
    pool, node = waiting
    client = browser("admin")
    with django_assert_max_num_queries(14):
        page = client.get(reverse("repairs")).content.decode()
    assert node.name in page and "cordoned, waiting for its repair to start" in page
    assert "WaitingForFaultToPersist" in page or "NodeCordoned" in page
    assert POLL in page
    fragment = client.get(reverse("repairs"), HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200 and b"<html" not in fragment.content and POLL.encode() in fragment.content


def test_the_fleet_page_s_queries_do_not_grow_with_the_repairs(actors, browser, waiting):
    client = browser("admin")
    with CaptureQueriesContext(connection) as one:
        client.get(reverse("repairs"))
    big = pool_with_nodes(actors["lead"], name="big", nodes=20)  # 3 of 20 faulty: under the pause
    for node in big.nodes.order_by("name")[:3]:
        xid(node, 48, at=timezone.now() - timedelta(minutes=2))
    pool_repair(pool_id=big.pk, now=timezone.now() - timedelta(minutes=1))
    assert big.nodes.filter(phase="Cordoned").count() == 3
    with CaptureQueriesContext(connection) as four:
        page = client.get(reverse("repairs")).content.decode()
    assert page.count("cordoned, waiting for its repair to start") == 4
    assert len(four) == len(one)


def test_the_polling_stops_once_no_repair_moves(browser, waiting):
    pool, node = waiting
    later = timezone.now() + timedelta(minutes=9)  # the fault has persisted: the reset runs and holds
    assert pool_repair(pool_id=pool.pk, now=later) == 1
    ack(AgentCommand.objects.get(node=node))
    pool_repair(pool_id=pool.pk, now=later + timedelta(minutes=1))
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert "No repair in progress." in page and POLL not in page
    assert "RepairSucceeded" in page  # the last week's outcomes


def test_a_repair_waiting_for_an_admin_does_not_poll(actors, browser):
    pool = pool_with_nodes(actors["lead"], name="gated", nodes=5, autoRepairPolicy={"requireApproval": True})
    node = pool.nodes.order_by("name").first()
    fault = timezone.now() - timedelta(minutes=20)
    xid(node, 48, at=fault)
    pool_repair(pool_id=pool.pk, now=fault + timedelta(minutes=11))
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert "waiting for a platform admin to approve reset_gpu" in page and "Waiting for a platform admin" in page
    assert POLL not in page


@pytest.mark.parametrize("role", ["lead", "member", "finance", "other_lead"])
def test_the_fleet_page_does_not_exist_for_anyone_but_admins(browser, role):
    assert browser(role).get(reverse("repairs")).status_code == 404


def test_the_pool_page_shows_its_own_repairs_and_polls_its_section(browser, waiting, actors, django_assert_max_num_queries):
    pool, node = waiting
    other = pool_with_nodes(actors["other_lead"], name="their-pool", nodes=5)
    theirs = other.nodes.order_by("name").first()
    xid(theirs, 48, at=timezone.now() - timedelta(minutes=2))
    pool_repair(pool_id=other.pk, now=timezone.now() - timedelta(minutes=1))
    client = browser("lead")
    page = client.get(reverse("pools:detail", args=[pool.name])).content.decode()
    assert 'id="repairs-heading"' in page and node.name in page and theirs.name not in page
    assert f'hx-get="/pools/{pool.name}/?part=repairs"' in page
    with django_assert_max_num_queries(12):  # the poll reads only what the section shows (the full page: 20+)
        fragment = client.get(reverse("pools:detail", args=[pool.name]) + "?part=repairs", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="repairs"' in fragment and "<h2" not in fragment  # the section alone


def test_a_replaced_node_and_its_successor_link_each_other_and_say_who_pays(browser, replaced):
    pool, old, successor = replaced
    assert successor is not None and successor.phase == "Ready"
    client = browser("lead")
    old_page = client.get(reverse("pools:node-detail", args=[pool.name, old.name])).content.decode()
    new_url = reverse("pools:node-detail", args=[pool.name, successor.name])
    assert "Replaced by" in old_page and f'href="{new_url}"' in old_page
    assert "the team pays for one node in this slot, not for both" in old_page
    new_page = client.get(new_url).content.decode()
    assert "Replaces" in new_page and f'href="{reverse("pools:node-detail", args=[pool.name, old.name])}"' in new_page
    assert "no new order and no second charge" in new_page
    # The repair completed, on the replaced node's history, and the release says who pays.
    assert "RepairSucceeded" in old_page
    released = PoolEvent.objects.get(node=old, reason="NodeReleased")
    assert "the team pays once for the slot, not twice" in released.message and "stays billed" not in released.message
    pool_page = client.get(reverse("pools:detail", args=[pool.name])).content.decode()
    assert f"replaced by <a href=\"{new_url}\">{successor.name}</a>" in pool_page


def test_the_api_names_each_node_s_successor_and_whom_it_replaces(api, replaced):
    pool, old, successor = replaced
    rows = {r["name"]: r for r in api("lead").get(f"/api/v1/pools/{pool.name}/nodes/").json()}
    assert rows[old.name]["successor"] == successor.name and rows[old.name]["releaseReason"] == "Repair"
    assert rows[successor.name]["replaces"] == [old.name] and rows[successor.name]["successor"] is None
    assert api("other_lead").get(f"/api/v1/pools/{pool.name}/nodes/").status_code == 404


def test_a_node_being_replaced_shows_as_a_repair_in_progress(actors, browser, start):
    pool = approved_pool(actors, make_document("replacing", nodeCount={"min": 2, "max": 2}), now=start)
    ready = run_until(pool, start)
    old = pool.nodes.order_by("name").first()
    xid(old, 79, at=ready)
    pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=15))
    assert Node.objects.get(pk=old.pk).phase == "Terminated"
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert old.name in page and "its replacement is being ordered" in page and POLL in page


def test_a_replacement_is_over_once_its_successor_was_ready_whatever_the_successor_does_next(browser, replaced):
    """The page read the successor's phase now: a successor that had been Ready and was later
    cordoned or replaced itself brought its predecessor's finished repair back "in progress"."""
    pool, old, successor = replaced
    assert successor.ready_at is not None
    Node.objects.filter(pk=successor.pk).update(phase=Node.Phase.TERMINATED)
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert "No repair in progress." in page


def test_a_drain_s_cordon_is_not_listed_among_the_repairs(actors, browser, waiting):
    """A scale-down drain cordons its node with `NodeCordoned` too: the fleet's repairs page
    listed every burst node the autoscaler removed above the real repairs (found by a QA sweep)."""
    pool, cordoned = waiting
    drained = pool.nodes.exclude(pk=cordoned.pk).order_by("name").first()
    Node.objects.filter(pk=drained.pk).update(release_reason="ScaledIn", phase="Draining")
    PoolEvent.objects.create(pool=pool, node=drained, reason="NodeCordoned", message=f"Node {drained.name} cordoned: no new pods are scheduled on it")
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert f"Node {cordoned.name} cordoned while its GPU fault waits for repair" in page
    assert f"Node {drained.name} cordoned" not in page
