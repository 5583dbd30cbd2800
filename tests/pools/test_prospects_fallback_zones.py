"""A pool with fallback zones (`spec.zones`, seed T1) is read like any other by the Pending-pod
hints and by Diagnose (seed T2, T5): its stored spec names zones beyond the pool's own, and
reading it against the pool's zone alone dropped the pool, so the hints told the lead to order
a second pool and Diagnose saw no pod aimed at it. A stored spec that truly no longer parses is
logged and named, never taken for "no pool"."""

from __future__ import annotations

import logging

from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.scheduler import scheduler_pass
from pools.models import GpuNodePool
from pools.selectors.diagnose import pool_diagnose
from pools.selectors.prospects import read_prospects
from pools.services import pools as services
from tests.conftest import make_document
from tests.pools.pod_helpers import T0, submit

ORDER_HINT = "No pool of your team can run this pod"
A, B = "cn-east-2a", "cn-east-2b"


def vision_pool(actors, zones=(A, B), name="vision-h100"):
    """The issue's pool: labelled and tainted for its pods, min 1 (its order awaits approval), a fallback zone."""
    document = make_document(name, nodeCount={"min": 1, "max": 3}, nodeLabels={"pool": "train"})
    document["spec"].pop("region")
    document["spec"]["zones"] = list(zones)
    return services.pool_create(user=actors["lead"], document=document)


def test_the_pod_aimed_at_a_pool_with_a_fallback_zone_is_told_of_it_and_diagnose_counts_it(actors):
    pool = vision_pool(actors)
    order = pool.orders.get()
    pod = submit(actors["member"], "vis-1", gpus=8)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert pod.phase == "Pending"
    assert any(h.startswith(f"pool vision-h100 (no Ready node yet): its order #{order.pk} awaits approval") for h in pod.hints), pod.hints
    assert not any(h.startswith(ORDER_HINT) for h in pod.hints), pod.hints
    checks = {c.id: c for c in pool_diagnose(pool=pool, now=T0).checks}
    assert checks["pods-pending"].found != "No Pending pod is aimed at this pool."
    assert any("algorithm/vis-1" in line for line in checks["pods-pending"].details), checks["pods-pending"]


def test_a_stored_spec_that_no_longer_parses_is_logged_and_named_not_ordered_again(actors, caplog):
    pool = vision_pool(actors)
    document = pool.document
    document["spec"]["nodeCount"] = {"min": "many"}  # as if a validation rule changed since it was saved
    GpuNodePool.objects.filter(pk=pool.pk).update(document=document)
    pod = submit(actors["member"], "vis-1", gpus=8)
    with caplog.at_level(logging.WARNING, logger="pools.selectors.prospects"):
        assert read_prospects()[0] == []
    assert any("vision-h100" in r.getMessage() for r in caplog.records)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert not any(h.startswith(ORDER_HINT) for h in pod.hints), pod.hints
    assert any(h.startswith("Pool(s) vision-h100 of your team may be meant for this pod") for h in pod.hints), pod.hints
    check = {c.id: c for c in pool_diagnose(pool=pool, now=T0).checks}["pods-pending"]
    assert check.status == "unknown" and "cannot be told" in check.found


def test_a_team_the_unreadable_pool_is_shared_with_is_told_whose_it_is(actors):
    """A guest team (`spec.sharedWith`) was told "Pool(s) ... of your team ...: apply the pool's
    YAML again", which only the owner team can do: it is named as shared, with the owner to ask."""
    pool = vision_pool(actors)
    document = pool.document
    document["spec"]["nodeCount"] = {"min": "many"}
    document["spec"]["sharedWith"] = ["inference"]
    GpuNodePool.objects.filter(pk=pool.pk).update(document=document)
    guest = submit(actors["other_lead"], "inf-1", gpus=8, namespace="inference")
    own = submit(actors["member"], "vis-1", gpus=8)
    scheduler_pass(now=T0)
    guest.refresh_from_db()
    own.refresh_from_db()
    assert not any(h.startswith(ORDER_HINT) or "of your team" in h for h in guest.hints), guest.hints
    assert ("Pool(s) vision-h100, shared with your team by team algorithm, may be meant for this pod, but the stored spec of each "
            "no longer passes validation, so whether they would take it cannot be told: team algorithm must apply the pool's "
            "YAML again (ebcloud node-pool apply -f); ask its lead before ordering another pool.") in guest.hints, guest.hints
    assert any(h.startswith("Pool(s) vision-h100 of your team may be meant for this pod") for h in own.hints), own.hints


def test_the_zones_of_all_pools_cost_one_statement(actors):
    """A second pool with a fallback zone adds no statement to reading the prospects."""

    def statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert {p.name for p in read_prospects()[0]} >= {"vision-h100"}
        return len(queries)

    vision_pool(actors)
    one = statements()
    vision_pool(actors, name="vision-b")
    assert statements() == one
