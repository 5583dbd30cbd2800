"""A repair that releases a node nothing replaces is over once the node is gone (seed P4, T3;
issue 21 item 6). The demo's Xid 79 on an on-demand burst node left `/repairs/` reading
"released; its replacement is being ordered" for a day (`REPLACEMENT_WINDOW`), though the
lifecycle refills only the slots of paid capacity orders, and only below `nodeCount.max`: the
page now lists such a release with the outcomes and says why no replacement comes, and keeps
"in progress" for the nodes whose successor is really due."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from pools.controllers.lifecycle import node_name_next
from pools.controllers.repair import pool_repair
from pools.models import Node
from pools.selectors.repairs import repair_outcomes, repairs_in_progress
from pools.services import pools as pool_services
from tests.conftest import make_document
from tests.pools.lifecycle_helpers import T0, approved_pool, live_nodes, reconcile, run_until
from tests.pools.repair_helpers import xid

BURST_NOTE = "burst capacity is not replaced: the autoscaler orders nodes when pods need them"


def passes(pool, start, minutes: int) -> None:
    """The lifecycle's passes, one a minute: time enough to order and ready any successor."""
    for minute in range(minutes):
        reconcile(pool, start + timedelta(minutes=minute))


def burst_node(pool, *, at) -> Node:
    """A Ready on-demand node beside the pool's monthly ones, as the autoscaler makes it: no order."""
    first = pool.nodes.order_by("name").first()
    return Node.objects.create(
        pool=pool, name=node_name_next(pool), billing=Node.Billing.ON_DEMAND, phase=Node.Phase.READY, zone=pool.zone,
        gpu_count=first.gpu_count, labels=first.labels, taints=first.taints, created_at=at, ready_at=at,
    )  # fmt: skip


def test_a_repaired_burst_node_is_done_once_released_and_says_why_nothing_replaces_it(actors, browser):
    """The demo: Xid 79 on a burst node. 45 minutes of passes later nothing replaced it (right:
    the autoscaler orders burst capacity when pods need it); the page said "in progress"."""
    start = timezone.now() - timedelta(hours=3)  # the page reads the wall clock
    pool = approved_pool(actors, make_document("infer", nodeCount={"min": 2, "max": 4}, burst={"enabled": True, "maxNodes": 2}), now=start)
    ready = run_until(pool, start)
    node = burst_node(pool, at=ready)
    xid(node, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=15)) == 1
    passes(pool, ready + timedelta(seconds=30), 45)
    node.refresh_from_db()
    assert (node.phase, node.release_reason, node.successor) == ("Terminated", "Repair", None)
    assert len(live_nodes(pool)) == 2  # no successor came
    later = ready + timedelta(minutes=46)
    assert repairs_in_progress(user=actors["admin"], now=later) == []
    (released,) = [e for e in repair_outcomes(user=actors["admin"], now=later) if e.reason == "NodeReleased"]
    assert released.node == node and released.refill_note == BURST_NOTE
    page = browser("admin").get(reverse("repairs")).content.decode()
    assert "No repair in progress." in page and "its replacement is being ordered" not in page
    assert f"Node {node.name} released (Repair); {BURST_NOTE}" in page
    assert 'hx-trigger="every 5s"' not in page  # nothing moves by itself


def test_a_repaired_node_of_a_pool_shrunk_to_its_live_nodes_is_not_waited_for(actors):
    """A monthly node released by a repair while the pool shrank to the nodes it has left: no
    room under `nodeCount.max`, so no successor; the repair is over, and the outcome says why:
    only until there is room again, when the lifecycle refills the slot with its successor."""
    pool = approved_pool(actors, make_document("shrunk", nodeCount={"min": 2, "max": 2}))
    ready = run_until(pool, T0)
    old, kept = live_nodes(pool)
    xid(old, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=15)) == 1
    pool_services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=1, now=ready + timedelta(seconds=20))
    passes(pool, ready + timedelta(seconds=30), 30)
    old.refresh_from_db()
    assert (old.phase, old.successor) == ("Terminated", None) and live_nodes(pool) == [Node.objects.get(pk=kept.pk)]
    later = ready + timedelta(minutes=31)
    assert repairs_in_progress(user=actors["admin"], pool=pool, now=later) == []
    (released,) = [e for e in repair_outcomes(user=actors["lead"], pool=pool, now=later) if e.reason == "NodeReleased"]
    assert released.refill_note == "the pool already has 1 live node(s), its nodeCount.max: a replacement is ordered only once fewer remain"
    pool_services.pool_resize(user=actors["lead"], pool=pool, min_nodes=1, max_nodes=2, now=later)  # room again: the slot is refilled
    passes(pool, later + timedelta(seconds=10), 30)
    old.refresh_from_db()
    assert old.successor is not None and old.successor.phase == "Ready", old.successor


def test_a_released_node_whose_successor_is_due_stays_in_progress(actors):
    """The other side of the rule: a monthly node released with room for its successor is in
    progress until the successor is Ready, and its release is not an outcome yet."""
    pool = approved_pool(actors, make_document("due", nodeCount={"min": 2, "max": 2}))
    ready = run_until(pool, T0)
    old = live_nodes(pool)[0]
    xid(old, 79, at=ready)
    assert pool_repair(pool_id=pool.pk, now=ready + timedelta(seconds=15)) == 1
    later = ready + timedelta(seconds=20)
    (row,) = repairs_in_progress(user=actors["admin"], now=later)
    assert (row.node, row.stage, row.moving) == (old.name, "released; its replacement is being ordered", True)
    assert not [e for e in repair_outcomes(user=actors["admin"], now=later) if e.reason == "NodeReleased"]
