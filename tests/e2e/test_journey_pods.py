"""Journey (b), issue #8 item 2: a team lead submits a pod that cannot be scheduled and reads,
on the pod's page, the scheduler's kube-style explanation and the hint of what to change
(seed T2). The article's training pod asks for nodes labelled `pool=train`; the pool's nodes
only carry `gpu-class=a100`, so the hint names the node label to add."""

from __future__ import annotations

import pytest
from django.utils import timezone

from pools.controllers.scheduler import scheduler_pass
from tests.e2e.browser import TIMEOUT_MS
from tests.pools.pod_helpers import TRAIN_POD, pool_with_nodes

# Sequences reset: order and node names in the screenshots are the same on every run.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]


def test_a_lead_reads_why_a_pod_is_pending_and_what_to_change(browse, actors):
    pool_with_nodes(actors["lead"])  # train-pool-a: 2 Ready nodes, gpu-class=a100, taint pool=train
    lead = browse("lead")
    lead.goto("/pods/")
    lead.follow("main a:has-text('Submit a pod')")
    lead.page.fill("#id_document", TRAIN_POD.read_text())
    lead.page.locator("#id_document").evaluate("area => { area.scrollTop = 0; area.blur(); }")
    lead.shot("lead-07-pod-form")
    lead.follow("main button:has-text('Submit')")
    assert lead.page.url.endswith("/pods/algorithm/bert-train-0/")
    assert "Pending" in lead.page.inner_text("#pod-status")

    scheduler_pass(now=timezone.now())  # the scheduler's next pass, in-process
    # The Pending pod's status box polls every 5 s (htmx) and shows the explanation by itself.
    lead.page.wait_for_selector(
        "#pod-status .explanation:has-text('nodes are available')", timeout=TIMEOUT_MS
    )
    lead.landed()
    explanation = lead.page.inner_text("#pod-status .explanation")
    assert (
        explanation
        == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    hints = lead.page.locator("#pod-status .hints li").all_inner_texts()
    assert any(
        "pool train-pool-a (2 nodes): required node affinity not met" in h
        and "nodeLabels: {pool: train}" in h
        for h in hints
    ), hints
    lead.shot("lead-08-pod-pending-why")

    lead.goto("/pods/")  # the list says why as well
    assert "didn't match Pod's node affinity/selector" in lead.page.inner_text("#pod-table")
