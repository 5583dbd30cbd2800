"""A Pending pod stored before a check of its spec existed: its node affinity has a key of null,
which the API now refuses (tests/pools/pod_document_cases.py) and the scheduling core cannot
read. One such pod made every scheduler pass fail, for every team; now it waits, says why, and
the pass, the Diagnose page and the queue metric go on with the others."""

from __future__ import annotations

import pytest

from pools.controllers.scheduler import UNREADABLE_REASON, scheduler_pass
from pools.core.scheduling.nodes import NodeState, Taint
from pools.models.pods import Pod
from pools.selectors.queue import queued_pods
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

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
    assert "Delete the pod and create it again" in old.explanation
    scheduler_pass(now=T0)  # told once; the next pass goes on as well
    assert browser("lead").get(f"/pools/{pool.name}/diagnose/").status_code == 200
    template = NodeState("template", 96_000, 393_216, 8, "A100_80G", labels={"pool": "train"}, taints=(Taint("pool", "train", "NoSchedule"),))
    assert queued_pods([old], template) == []
