"""Journey: a team lead guards the team's NLP training pods with a disruption budget in the
browser (Pods -> Disruption budgets -> Add), is told which field is wrong when the budget is,
and reads on the list and on the pod's page how many of its pods may be evicted now. Every page
passes axe."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from tests.pools.pod_helpers import labelled_pods_running

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, reset_sequences=True)]

EXAMPLE = (EXAMPLES / "pods" / "nlp-pdb.yaml").read_text()


def test_a_lead_adds_a_disruption_budget_and_sees_what_it_allows(browse, actors):
    labelled_pods_running(actors, ("nlp-0", "nlp-1"), {"project": "nlp"})
    lead = browse("lead")
    lead.goto("/pods/")
    lead.follow("main a:has-text('Disruption budgets')")
    assert "No disruption budgets yet" in lead.page.inner_text("main table")
    lead.follow("main a:has-text('Add a disruption budget')")
    lead.page.fill("#id_document", EXAMPLE.replace("maxUnavailable: 1", "maxUnavailable: 1\n  minAvailable: 1"))
    lead.follow("main button:has-text('Add')")
    assert "spec: minAvailable and maxUnavailable cannot be both set" in lead.page.inner_text("main [role=alert]")
    lead.page.fill("#id_document", EXAMPLE)
    lead.follow("main button:has-text('Add')")
    assert lead.page.url.endswith("/disruption-budgets/")
    row = lead.page.locator("main table tbody tr", has_text="nlp-trainers").inner_text()
    assert "project=nlp" in row and "2 healthy, at least 1 must stay: 1 may be evicted now" in row
    lead.goto("/pods/algorithm/nlp-0/")
    assert "nlp-trainers: 2 healthy, at least 1 must stay: 1 may be evicted now" in lead.page.inner_text("main")
