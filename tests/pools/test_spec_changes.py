"""A pool update's `SpecUpdated` event names what changed (design §3: the timeline is how users
debug). Changing `spec.alerts` was logged as "Spec updated: formatting only" while the
generation went up and the alert rule changed; dropping a custom `alerts` block went unmentioned."""

from __future__ import annotations

import copy
from dataclasses import fields
from pathlib import Path

from pools.core.documents import load_yaml
from pools.core.spec import PoolSpec, parse_document
from pools.core.spec_changes import DESCRIBED_FIELDS, describe_change
from pools.models import PoolEvent
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from tests.pools.lifecycle_helpers import T0

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train-pool-with-scaling.yaml"


def test_every_spec_field_is_described_when_it_changes_or_is_immutable():
    """A field added to PoolSpec without a description here would change pools silently."""
    described = {attr for attr, _ in DESCRIBED_FIELDS}
    immutable = {attr for _, attr in services.IMMUTABLE_FIELDS} | {"name"}
    assert not described & immutable
    assert {f.name for f in fields(PoolSpec)} == described | immutable


def spec(document: dict) -> PoolSpec:
    return parse_document(document, catalog_current())


def test_each_alert_setting_that_changes_is_named_as_the_document_spells_it(actors):  # the catalog
    base = load_yaml(EXAMPLE.read_text())
    changed = copy.deepcopy(base)
    changed["spec"]["alerts"] = {"allocationHigh": {"percent": 80}, "utilizationLow": {"enabled": False},
                                 "nodesNotReady": {"count": 2, "for": "15m"}}  # fmt: skip
    message = describe_change(spec(base), spec(changed))
    assert message == (
        "Spec updated: alerts.allocationHigh.percent 90 → 80, alerts.utilizationLow.enabled true → false, "
        "alerts.nodesNotReady.count 1 → 2, alerts.nodesNotReady.for 5m → 15m"
    )


def test_adding_and_dropping_an_alerts_block_is_on_the_pool_s_timeline(actors):
    """The issue's repro: the scaling example applied with `alerts: {pendingPods: {olderThan:
    30m}}` (generation +1, the rule changes), then the README's PUT without the block."""
    document = load_yaml(EXAMPLE.read_text())
    pool = services.pool_create(user=actors["lead"], document=document, now=T0)
    with_alerts = copy.deepcopy(document)
    with_alerts["spec"]["alerts"] = {"pendingPods": {"olderThan": "30m"}}
    pool = services.pool_update(user=actors["lead"], pool=pool, document=with_alerts, now=T0)
    assert pool.generation == 2
    updates = PoolEvent.objects.filter(pool=pool, reason="SpecUpdated").order_by("pk")
    assert updates.last().message == "Spec updated: alerts.pendingPods.olderThan 15m → 30m"
    services.pool_update(user=actors["lead"], pool=pool, document=document, now=T0)
    assert updates.last().message == "Spec updated: alerts.pendingPods.olderThan 30m → 15m"


def test_a_resize_made_on_a_pool_read_before_another_keeps_the_other_and_names_what_it_changed_from(actors):
    """Two resizes at once (the web and the CLI), one of max and one of min: the second is
    applied under the pool's lock after the first, to the document as the first left it, so
    both take effect (the second wrote back the document both had read, undoing the first), and
    its event names the value it changed from then (six concurrent scales each said
    "nodeCount.min 0 → N")."""
    pool = services.pool_create(user=actors["lead"], document=load_yaml(EXAMPLE.read_text()), now=T0)
    read_before = type(pool).objects.get(pk=pool.pk)
    first = spec(pool.document)
    services.pool_resize(user=actors["lead"], pool=pool, max_nodes=first.max_nodes + 2, now=T0)
    services.pool_resize(user=actors["lead"], pool=read_before, min_nodes=first.min_nodes + 1, now=T0)
    pool.refresh_from_db()
    assert pool.document["spec"]["nodeCount"] == {"min": first.min_nodes + 1, "max": first.max_nodes + 2}
    messages = list(PoolEvent.objects.filter(pool=pool, reason="SpecUpdated").order_by("pk").values_list("message", flat=True))
    assert messages == [f"Spec updated: nodeCount.max {first.max_nodes} → {first.max_nodes + 2}",
                        f"Spec updated: nodeCount.min {first.min_nodes} → {first.min_nodes + 1}"]  # fmt: skip
    services.pool_resize(user=actors["lead"], pool=read_before, max_nodes=first.max_nodes + 3, now=T0)  # still the old read
    assert PoolEvent.objects.filter(reason="SpecUpdated").latest("pk").message == f"Spec updated: nodeCount.max {first.max_nodes + 2} → {first.max_nodes + 3}"
