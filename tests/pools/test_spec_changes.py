"""A pool update's `SpecUpdated` event names what changed (design §3: the timeline is how users
debug). Changing `spec.alerts` was logged as "Spec updated: formatting only" while the
generation went up and the alert rule changed; dropping a custom `alerts` block went unmentioned."""

from __future__ import annotations

import copy
from dataclasses import fields
from pathlib import Path

from pools.core.documents import load_yaml
from pools.core.spec import PoolSpec, parse_document
from pools.models import PoolEvent
from pools.selectors.pools import catalog_current
from pools.services import pools as services
from tests.pools.lifecycle_helpers import T0

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train-pool-with-scaling.yaml"


def test_every_spec_field_is_described_when_it_changes_or_is_immutable():
    """A field added to PoolSpec without a description here would change pools silently."""
    described = {attr for attr, _ in services.DESCRIBED_FIELDS}
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
    message = services._describe_change(spec(base), spec(changed))
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


def test_an_update_made_on_a_pool_read_before_another_names_what_it_changed_from_then(actors):
    """Two resizes at once (the web and the CLI): the second is applied under the pool's lock
    after the first, and its event says what it changed from the first's value, not from the
    value both read (six concurrent scales each said "nodeCount.min 0 → N")."""
    pool = services.pool_create(user=actors["lead"], document=load_yaml(EXAMPLE.read_text()), now=T0)
    read_before = type(pool).objects.get(pk=pool.pk)
    before = spec(pool.document).max_nodes
    services.pool_resize(user=actors["lead"], pool=pool, max_nodes=before + 1, now=T0)
    services.pool_resize(user=actors["lead"], pool=read_before, max_nodes=before + 2, now=T0)
    messages = list(PoolEvent.objects.filter(pool=pool, reason="SpecUpdated").order_by("pk").values_list("message", flat=True))
    assert messages == [f"Spec updated: nodeCount.max {before} → {before + 1}", f"Spec updated: nodeCount.max {before + 1} → {before + 2}"]
