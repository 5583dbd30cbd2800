"""Pods stored before a check of their spec existed: a node affinity with a key of null, which
the API now refuses (tests/pools/pod_document_cases.py) and the scheduling core cannot read. One
such Pending pod made every scheduler pass fail, for every team; now it waits, says why, and the
pass, the Diagnose page, the queue metric and /metrics go on with the others. A Running one (an
earlier release placed it: a key of null was "no such label") is counted for what it holds, and
the pass, the fragmentation pages and the scale-down read the cluster as before."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from pools.controllers.scale_down import removable_burst_nodes
from pools.controllers.scheduler import UNREADABLE_REASON, scheduler_pass
from pools.core.scheduling.nodes import NodeState, Taint
from pools.models.pods import Pod
from pools.selectors.cluster import live_nodes
from pools.selectors.diagnose import pool_diagnose
from pools.selectors.queue import queued_pods
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

NULL_KEY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": None, "operator": "NotIn", "values": ["x"]}, {"key": "pool", "operator": "In", "values": ["train"]}]}]}}}  # fmt: skip

pytestmark = pytest.mark.django_db


def test_a_pod_the_core_cannot_read_waits_and_says_why_while_the_others_are_placed(actors, browser):
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "old")
    submit(actors["member"], "fine")
    old = Pod.objects.get(name="old")
    term = {"matchExpressions": [{"key": None, "operator": "In", "values": ["train"]}]}
    Pod.objects.filter(pk=old.pk).update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}})
    scheduler_pass(now=T0)
    assert Pod.objects.get(name="fine").node is not None
    old.refresh_from_db()
    assert (old.phase, old.reason, old.node) == ("Pending", UNREADABLE_REASON, None)
    assert "cannot read (spec.affinity: key and values must be strings" in old.explanation
    assert old.explanation.endswith("Delete the pod and create it again from its manifest.")
    scheduler_pass(now=T0)  # told once; the next pass goes on as well
    assert browser("lead").get(f"/pools/{pool.name}/diagnose/").status_code == 200
    pending = next(c for c in pool_diagnose(pool=pool, now=T0 + timedelta(minutes=20)).checks if c.id == "pods-pending")
    assert pending.status == "failing" and f"The scheduler cannot read {old.key}: an earlier release stored it" in pending.cause
    assert pending.action.startswith(f"Delete {old.key} and create it again") and any(d.startswith(f"{old.key}: Pending") for d in pending.details)
    template = NodeState("template", 96_000, 393_216, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train", "NoSchedule"),))
    assert queued_pods([old], template) == []
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200


def test_a_running_pod_whose_affinity_the_core_cannot_read_is_counted_and_the_rest_goes_on(actors, browser):
    pool = pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    submit(actors["member"], "placed-before", gpus=4)
    scheduler_pass(now=T0)
    Pod.objects.filter(name="placed-before").update(affinity=NULL_KEY)
    submit(actors["member"], "next", gpus=8)
    submit(actors["member"], "no-room", gpus=8)
    scheduler_pass(now=T0)
    placed = dict(Pod.objects.values_list("name", "phase"))
    assert placed == {"placed-before": "Running", "next": "Running", "no-room": "Pending"}  # its 4 GPUs are counted on its node
    for url in ("/fragmentation/", f"/pools/{pool.name}/fragmentation/"):
        assert browser("lead").get(url).status_code == 200, url
    held = Pod.objects.get(name="placed-before").node
    removable = removable_burst_nodes([held], live_nodes(), limit=1)
    assert removable.chosen == [] and held.name in removable.kept  # nowhere is known to take it


def test_a_pod_whose_stored_affinity_is_no_mapping_is_told_once_and_waits(actors, caplog):
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "list-affinity")
    Pod.objects.filter(name="list-affinity").update(affinity=[{"nodeAffinity": {}}])  # an AttributeError in the core, not a TypeError
    submit(actors["member"], "beside-it")
    with caplog.at_level("ERROR", logger="ebcloud.scheduler"):
        for _ in range(3):
            scheduler_pass(now=T0)
    assert dict(Pod.objects.values_list("name", "reason")) == {"list-affinity": UNREADABLE_REASON, "beside-it": "Scheduled"}
    assert Pod.objects.get(name="beside-it").node is not None
    told = [r.getMessage() for r in caplog.records if "list-affinity" in r.getMessage()]
    assert len(told) == 1 and "is not a valid pod for the scheduling core" in told[0]


@pytest.mark.parametrize(("field", "path"), [("labels", "metadata.labels"), ("node_selector", "spec.nodeSelector")])
def test_a_pod_whose_other_stored_fields_the_core_refuses_is_in_every_pool_s_diagnose_of_its_team(actors, field, path):
    """Read without its affinity it is still refused: it is shown on each pool of its team, not
    left out as though nothing waited (found by review)."""
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "odd")
    Pod.objects.filter(name="odd").update(**{field: ["x"]})
    scheduler_pass(now=T0)
    odd = Pod.objects.get(name="odd")
    assert odd.reason == UNREADABLE_REASON and f"cannot read ({path}: " in odd.explanation
    pending = next(c for c in pool_diagnose(pool=pool, now=T0 + timedelta(minutes=20)).checks if c.id == "pods-pending")
    assert f"The scheduler cannot read {odd.key}" in pending.cause and f"({path}: " in pending.cause


def test_a_borrowers_unreadable_pod_is_not_on_the_lenders_diagnose(actors):
    """Read without its refused field, the pod is aimed at its own team's pool only: the pool lent
    to its team is not told to delete a pod its team cannot touch (found by review)."""
    lender = pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, sharedWith=["inference"])
    own = pool_with_nodes(actors["other_lead"], name="infer-pool", node_labels={"pool": "infer"}, taints=[{"key": "pool", "value": "infer", "effect": "NoSchedule"}])
    submit(actors["other_lead"], "theirs", namespace="inference", pool_affinity="infer", tolerate="infer")
    Pod.objects.filter(name="theirs").update(labels=["x"])
    scheduler_pass(now=T0)
    later = T0 + timedelta(minutes=20)
    lenders = next(c for c in pool_diagnose(pool=lender, now=later).checks if c.id == "pods-pending")
    owners = next(c for c in pool_diagnose(pool=own, now=later).checks if c.id == "pods-pending")
    assert lenders.status == "ok" and "inference/theirs" not in lenders.found + " ".join(lenders.details)
    assert "The scheduler cannot read inference/theirs" in owners.cause
