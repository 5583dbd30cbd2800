"""`spec.alerts` (issue 20 item 3; seed comparison table "capacity water-level alerts", T4, O4):
the seed's pool is watched with the defaults, every rule can change its numbers or be turned off,
and bad input names its field path (400 from the API)."""

from __future__ import annotations

import pytest

from pools.core.alerting import DEFAULT_ALERTS, AlertRule
from pools.core.documents import dump_yaml, load_yaml, to_document
from pools.core.errors import ValidationError
from pools.core.spec import parse_document
from tests.conftest import make_document
from tests.pools.test_spec import CATALOG, article


def with_alerts(alerts) -> dict:
    document = article()
    document["spec"]["alerts"] = alerts
    return document


def errors(alerts) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        parse_document(with_alerts(alerts), CATALOG)
    return {e.field: e.message for e in caught.value.errors}


def test_the_seeds_pool_gets_the_default_rules():
    spec = parse_document(article(), CATALOG)
    assert spec.alerts == DEFAULT_ALERTS
    assert spec.alerts.allocation_high == AlertRule(True, 90, 600)
    assert spec.alerts.utilization_low == AlertRule(True, 30, 24 * 3600)  # below 30% is low utilisation
    assert spec.alerts.pending_pods == AlertRule(True, 0, 15 * 60)  # over 15 minutes points at prewarming or stock
    assert spec.alerts.nodes_not_ready == AlertRule(True, 1, 5 * 60)


def test_each_rule_takes_its_own_numbers_and_keeps_the_defaults_of_the_rest():
    spec = parse_document(with_alerts({
        "allocationHigh": {"percent": 80, "for": "15m"},
        "utilizationLow": {"enabled": False},
        "pendingPods": {"olderThan": "1h30m"},
        "nodesNotReady": {"count": "any", "for": "2m"},
    }), CATALOG)  # fmt: skip
    assert spec.alerts.allocation_high == AlertRule(True, 80, 900)
    assert spec.alerts.utilization_low.enabled is False
    assert spec.alerts.pending_pods.window_s == 5400
    assert spec.alerts.nodes_not_ready == AlertRule(True, 1, 120)


def test_every_problem_is_named_with_its_field_path():
    assert errors({
        "allocationHigh": {"percent": 0, "for": "10 minutes"},
        "utilizationLow": {"percent": 101, "for": "30s", "threshold": 3},
        "pendingPods": {"percent": 5, "olderThan": "200h"},
        "nodesNotReady": {"count": "some", "enabled": "no"},
        "memoryHigh": {},
    }) == {
        "spec.alerts.allocationHigh.percent": "must be at least 1",
        "spec.alerts.allocationHigh.for": "'10 minutes' is not a duration such as 30m, 120s or 1h30m",
        "spec.alerts.utilizationLow.percent": "must be at most 100",
        "spec.alerts.utilizationLow.for": "must be whole minutes from 1m to 168h",
        "spec.alerts.utilizationLow.threshold": "unknown field",
        "spec.alerts.pendingPods.percent": "unknown field",
        "spec.alerts.pendingPods.olderThan": "must be whole minutes from 1m to 168h",
        "spec.alerts.nodesNotReady.count": "must be an integer",
        "spec.alerts.nodesNotReady.enabled": "must be true or false",
        "spec.alerts.memoryHigh": "unknown field",
    }  # fmt: skip
    assert errors([]) == {"spec.alerts": "must be a mapping"}


def test_the_alerts_block_round_trips_and_specs_built_in_code_write_only_what_differs():
    document = with_alerts({"allocationHigh": {"percent": 80}, "nodesNotReady": {"enabled": False}})
    assert load_yaml(dump_yaml(document)) == document
    spec = parse_document(document, CATALOG)
    written = to_document(spec)
    assert written["spec"]["alerts"] == {"allocationHigh": {"percent": 80}, "nodesNotReady": {"enabled": False}}
    assert parse_document(written, CATALOG).alerts == spec.alerts
    assert "alerts" not in to_document(parse_document(article(), CATALOG))["spec"]


def test_the_api_answers_400_with_the_field_path(api):
    response = api("lead").post("/api/v1/pools/", make_document("alerting", alerts={"pendingPods": {"olderThan": "soon"}}), format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "spec.alerts.pendingPods.olderThan", "message": "'soon' is not a duration such as 30m, 120s or 1h30m"}]


def test_the_api_keeps_the_alerts_block_as_written(api):
    document = make_document("alerting", nodeCount={"min": 0, "max": 4}, alerts={"allocationHigh": {"percent": 85, "for": "20m"}})
    response = api("lead").post("/api/v1/pools/", document, format="json")
    assert response.status_code == 201, response.content
    assert api("lead").get("/api/v1/pools/alerting/").json()["spec"]["alerts"] == {"allocationHigh": {"percent": 85, "for": "20m"}}
