"""The optional admin approval gate of auto-repair (issue 6 §5 "Auto-repair ... optional admin
approval gate"; seed P4, T3): declared per pool with `autoRepairPolicy.requireApproval`, a
request instead of a repair, approved or rejected by a platform admin, started once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django import db
from django.core.exceptions import PermissionDenied

from monitoring.models import AgentCommand
from pools.controllers.repair import pool_repair
from pools.core.documents import to_document
from pools.core.errors import ConflictError, ValidationError
from pools.core.repair import RepairDecision
from pools.core.spec import parse_document
from pools.models import AuditEntry, Node
from pools.models.repair import RepairApproval
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from pools.services.repair import approval_gate, approvals_latest, repair_approve, repair_reject
from tests.conftest import make_document
from tests.pools.pod_helpers import T0, pool_with_nodes
from tests.pools.repair_helpers import ack, xid
from tests.race import concurrently

GATED = {"autoRepairPolicy": {"requireApproval": True}}


@pytest.fixture
def pool(actors):
    return pool_with_nodes(actors["lead"], nodes=5, **GATED)


def first(pool):
    return pool.nodes.order_by("name").first()


# --- the declaration -------------------------------------------------------------------------


def test_the_seed_document_needs_no_approval_and_keeps_its_shape(catalog):
    """Backward compatible: `autoRepair: true` alone (the seed's YAML) repairs on its own, and a
    spec built in code writes no policy unless it asks for approval."""
    spec = parse_document(make_document(), catalog_current())
    assert spec.auto_repair and not spec.repair_requires_approval
    assert "autoRepairPolicy" not in to_document(spec)["spec"]


def test_require_approval_is_parsed_and_round_trips(catalog):
    spec = parse_document(make_document(**GATED), catalog_current())
    assert spec.repair_requires_approval
    assert to_document(spec)["spec"]["autoRepairPolicy"] == {"requireApproval": True}
    assert parse_document(to_document(spec), catalog_current()) == spec


@pytest.mark.parametrize(("policy", "field"), [
    ({"requireApproval": "yes"}, "spec.autoRepairPolicy.requireApproval"),
    ({"approvers": ["admin"]}, "spec.autoRepairPolicy.approvers"),
    (True, "spec.autoRepairPolicy"),
])  # fmt: skip
def test_a_bad_policy_is_refused_with_its_field_path(catalog, policy, field):
    with pytest.raises(ValidationError) as caught:
        parse_document(make_document(autoRepairPolicy=policy), catalog_current())
    assert field in [e.field for e in caught.value.errors]


def test_turning_approval_on_is_named_in_the_update_event(actors, pool):
    plain = pool_with_nodes(actors["lead"], name="plain", nodes=0)
    services.pool_update(user=actors["lead"], pool=plain, document=make_document("plain", nodeCount={"min": 0, "max": 6}, **GATED))
    assert "autoRepairPolicy.requireApproval False → True" in plain.events.get(reason="SpecUpdated").message


# --- the gate ----------------------------------------------------------------------------------


def test_a_gated_pool_raises_a_request_instead_of_repairing(pool):
    node = first(pool)
    xid(node, 48, at=T0, gpu=3)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=5)) == 0  # the fault must persist first
    assert not RepairApproval.objects.exists()
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 0
    request = RepairApproval.objects.get()
    assert (request.node, request.status, request.action, request.gpu_index, request.xid) == (node, "Pending", "reset_gpu", 3, 48)
    event = pool.events.get(reason="RepairPendingApproval")
    assert event.type == "Warning" and "reset_gpu GPU 3" in event.message
    node.refresh_from_db()
    # Nothing is repaired yet, but the faulty node takes no new pods while it waits (issue 21).
    assert (node.phase, node.unschedulable) == ("Cordoned", True) and not AgentCommand.objects.exists()
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12)) == 0  # asked once, not every pass
    assert RepairApproval.objects.count() == 1 and pool.events.get(reason="RepairPendingApproval").count == 1


def test_an_approved_repair_starts_on_the_next_pass_exactly_once(actors, pool):
    node = first(pool)
    xid(node, 48, at=T0, gpu=3)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    request = RepairApproval.objects.get()
    repair_approve(user=actors["admin"], approval=request, now=T0 + timedelta(minutes=12))
    assert pool.events.get(reason="RepairApproved").actor == actors["admin"]
    assert AuditEntry.objects.filter(action="repair.approved", object_id=str(request.pk)).exists()
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=13)) == 1
    request.refresh_from_db()
    node.refresh_from_db()
    command = AgentCommand.objects.get(node=node)
    assert (request.status, node.phase, command.action, command.gpu_index) == ("Started", "Repairing", "reset_gpu", 3)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=14)) == 0  # running: nothing new
    ack(command)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=15))
    node.refresh_from_db()
    assert node.phase == "Ready" and AgentCommand.objects.count() == 1 and RepairApproval.objects.count() == 1


def test_a_rejected_repair_is_not_asked_again_until_a_new_fault(actors, pool):
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    repair_reject(user=actors["admin"], approval=RepairApproval.objects.get(), note="job finishing tonight", now=T0 + timedelta(minutes=12))
    assert "job finishing tonight" in pool.events.get(reason="RepairRejected").message
    assert Node.objects.get(pk=node.pk).phase == "Cordoned"  # while the approval was awaited
    for minutes in (13, 30, 60):
        assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes)) == 0
    assert RepairApproval.objects.count() == 1 and not AgentCommand.objects.exists()
    # The cordon was the request's: a rejection left the node cordoned for good, listed as a
    # repair in progress (found by a QA sweep).
    assert Node.objects.get(pk=node.pk).phase == "Ready" and pool.events.filter(reason="NodeUncordoned", node=node).count() == 1
    xid(node, 48, at=T0 + timedelta(minutes=61), seq=2)  # the GPU faults again
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=75))
    assert list(RepairApproval.objects.order_by("pk").values_list("status", flat=True)) == ["Rejected", "Pending"]


def test_a_rejected_node_stays_uncordoned_while_another_is_repaired_and_a_fatal_one_stays_cordoned(actors):
    """The pool's one-repair-at-a-time gate came before the rejection: while another node was
    repaired, the rejected one was cordoned again "waiting for repair" (found by review). A GPU
    that fell off the bus (Xid 79) stays cordoned when its replacement is rejected: no new pod
    could use it."""
    pool = pool_with_nodes(actors["lead"], name="tolerant", nodes=5, autoRepairPolicy={"requireApproval": True, "maxUnhealthy": 3})
    a, b, c = pool.nodes.order_by("name")[:3]
    xid(a, 48, at=T0)
    xid(c, 79, at=T0, seq=2)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    for approval in RepairApproval.objects.filter(node__in=[a, c], status="Pending"):
        repair_reject(user=actors["admin"], approval=approval, note="handled by hand", now=T0 + timedelta(minutes=12))
    xid(b, 48, at=T0 + timedelta(minutes=13), seq=3)
    for minutes in (14, 25):
        pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    repair_approve(user=actors["admin"], approval=RepairApproval.objects.get(node=b, status="Pending"))
    for minutes in (26, 27):
        pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=minutes))
    assert Node.objects.get(pk=b.pk).phase == "Repairing"
    assert Node.objects.get(pk=a.pk).phase == "Ready" and pool.events.filter(node=a, reason="NodeCordoned").count() == 1
    assert Node.objects.get(pk=c.pk).phase == "Cordoned"


def test_only_platform_admins_decide_and_only_once(actors, pool):
    xid(first(pool), 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    request = RepairApproval.objects.get()
    for role in ("lead", "member", "finance"):
        with pytest.raises(PermissionDenied):
            repair_approve(user=actors[role], approval=request)
    repair_approve(user=actors["admin"], approval=request)
    with pytest.raises(ConflictError, match="Approved, no longer pending"):
        repair_reject(user=actors["admin"], approval=request, note="too late")
    with pytest.raises(ConflictError):
        repair_approve(user=actors["admin"], approval=request)
    assert pool.events.filter(reason="RepairApproved").count() == 1


def test_a_request_the_ladder_no_longer_wants_is_cancelled(pool):
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(hours=25))  # the fault left the 24 h window
    request = RepairApproval.objects.get()
    assert request.status == "Cancelled" and "no open fault" in request.note
    assert pool.events.filter(reason="RepairApprovalCancelled").exists()


def test_a_worse_fault_supersedes_the_pending_request(pool):
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    xid(node, 79, at=T0 + timedelta(minutes=20), seq=2)  # the GPU fell off the bus: replace
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=21))
    rows = list(RepairApproval.objects.order_by("pk").values_list("action", "status"))
    assert rows == [("reset_gpu", "Cancelled"), ("replace", "Pending")]
    node.refresh_from_db()
    assert node.phase == "Cordoned" and node.release_reason == ""  # not replaced without approval; cordoned while it waits


def test_turning_approval_off_cancels_open_requests_and_repairs(actors, pool):
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    services.pool_update(user=actors["lead"], pool=pool, document=make_document(nodeCount={"min": 0, "max": 6}))
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12)) == 1
    assert RepairApproval.objects.get().status == "Cancelled" and AgentCommand.objects.get(node=node).action == "reset_gpu"


def test_an_approval_is_claimed_once_even_by_overlapping_passes(actors, pool):
    """Two passes holding the same (stale) Approved row: the conditional UPDATE lets one start."""
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    repair_approve(user=actors["admin"], approval=RepairApproval.objects.get())
    now = T0 + timedelta(minutes=12)
    stale = approvals_latest(nodes=[node], since=T0 - timedelta(hours=1))[node.pk]
    decision = RepairDecision("reset_gpu", "ResetClassXid", 0, "Xid 48", 48)
    claims = [approval_gate(pool=pool, node=node, decision=decision, latest=stale, last_fault_at=T0, now=now) for _ in range(2)]
    assert claims == [True, False]


def test_a_failed_start_keeps_the_approval_for_the_next_pass(actors, pool, monkeypatch):
    """A provider error while starting the approved repair gives the claim back: the next pass
    starts it without asking the admin again (and the one after does not start it twice)."""
    from pools.controllers import repair as repair_service

    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    repair_approve(user=actors["admin"], approval=RepairApproval.objects.get())
    real_start = repair_service._start

    def broken(*args):
        raise RuntimeError("the cloud API timed out")

    monkeypatch.setattr(repair_service, "_start", broken)
    with pytest.raises(RuntimeError):
        pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12))
    assert RepairApproval.objects.get().status == "Approved"
    monkeypatch.setattr(repair_service, "_start", real_start)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=13)) == 1
    assert RepairApproval.objects.get().status == "Started" and AgentCommand.objects.count() == 1


def test_one_open_request_per_node_even_when_two_passes_raise_it(pool):
    """The database keeps one open request per node; the second insert is absorbed."""
    node = first(pool)
    decision = RepairDecision("reset_gpu", "ResetClassXid", 0, "Xid 48", 48)
    for _ in range(2):
        assert approval_gate(pool=pool, node=node, decision=decision, latest=None, last_fault_at=T0, now=T0) is False
    assert RepairApproval.objects.filter(node=node).count() == 1


def test_pools_without_the_policy_repair_with_no_request(actors):
    pool = pool_with_nodes(actors["lead"], name="auto", nodes=5)
    xid(first(pool), 48, at=T0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
    assert not RepairApproval.objects.exists()


def _race(n: int, work) -> list:
    """Run `work` in `n` threads released together (tests/race.py); a ConflictError is "conflict"."""

    def or_conflict():
        try:
            return work()
        except ConflictError:
            return "conflict"

    return concurrently(*[or_conflict] * n)


@pytest.mark.skipif(db.connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)")
@pytest.mark.django_db(transaction=True)
def test_concurrent_clicks_and_workers_start_one_repair(actors):
    """Several admins clicking at once and several workers passing at once (design §5): one
    approval wins, one repair starts, one agent command is queued."""
    pool = pool_with_nodes(actors["lead"], nodes=5, **GATED)
    node = first(pool)
    xid(node, 48, at=T0)
    pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))
    request = RepairApproval.objects.get()
    clicks = _race(4, lambda: repair_approve(user=actors["admin"], approval=request, now=T0 + timedelta(minutes=12)) and "approved")
    assert sorted(clicks) == ["approved", "conflict", "conflict", "conflict"]
    stale = approvals_latest(nodes=[node], since=T0)[node.pk]
    decision = RepairDecision("reset_gpu", "ResetClassXid", 0, "Xid 48", 48)
    claims = _race(4, lambda: approval_gate(pool=pool, node=node, decision=decision, latest=stale, last_fault_at=T0, now=T0 + timedelta(minutes=13)))
    assert sorted(claims) == [False, False, False, True]
    RepairApproval.objects.filter(pk=request.pk).update(status="Approved", started_at=None)  # let the passes race for it
    started = _race(4, lambda: pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=14)))
    assert sum(started) == 1 and AgentCommand.objects.filter(node=node).count() == 1
    assert RepairApproval.objects.get().status == "Started"
