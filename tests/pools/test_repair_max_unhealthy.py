"""A pool's `spec.autoRepairPolicy.maxUnhealthy` (seed P4, T3): how many unhealthy nodes auto
repair tolerates before it pauses, as Cluster API's MachineHealthCheck `maxUnhealthy` (a count, or
a percentage of the pool's nodes rounded down; `0` pauses at the first unhealthy node). Without it
a pool keeps the fixed rule (20% rounded down, at least one node). And a paused pool's pass reads
its paused nodes' latest repair events in one query, whatever their number. Through the real
repair pass and the simulated cloud, with the clock injected (`now`), never today's date."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.controllers.repair import pool_repair
from pools.core.documents import dump_yaml, to_document
from pools.core.errors import ValidationError
from pools.core.max_unhealthy import max_unhealthy_error, max_unhealthy_of, tolerated
from pools.core.repair import NodeHealth, repair_allowed, unhealthy_limit, zones_held
from pools.core.spec import parse_document
from pools.demo.fleet import fault_candidates
from pools.models import Node, PoolEvent
from pools.selectors.nodes import node_page
from pools.selectors.pools import catalog_current
from pools.selectors.repairs import repairs_in_progress
from pools.services import pools as services
from tests.conftest import make_document
from tests.monitoring.test_sim_faults import with_machine
from tests.pools.lifecycle_helpers import T0
from tests.pools.pod_helpers import pool_with_nodes
from tests.pools.repair_helpers import xid

FIELD = "spec.autoRepairPolicy.maxUnhealthy"


def health(n: int, unhealthy: int) -> list[NodeHealth]:
    return [NodeHealth(f"node-{i}", healthy=i >= unhealthy, unhealthy_since=T0 if i < unhealthy else None) for i in range(n)]


def faulty_pool(actors, name: str, *, nodes: int, faulty: int, **policy):
    """A pool of `nodes` Ready nodes, `faulty` of them with a reset-class Xid 48 at T0."""
    pool = pool_with_nodes(actors["lead"], name=name, nodes=nodes, **({"autoRepairPolicy": policy} if policy else {}))
    for node in pool.nodes.order_by("name")[:faulty]:
        xid(node, 48, at=T0)
    return pool


# --- the limit: pure --------------------------------------------------------------------------


def test_without_the_field_a_pool_keeps_the_fifth_rounded_down_and_at_least_one():
    totals = (0, 1, 2, 4, 5, 6, 9, 10, 14, 15, 20, 99, 100)
    assert max_unhealthy_of({}) == "20%" and max_unhealthy_of({"autoRepair": True}) == "20%"
    assert [tolerated(n) for n in totals] == [unhealthy_limit(n) for n in totals]
    assert [unhealthy_limit(n, max_unhealthy="20%") for n in totals] == [unhealthy_limit(n) for n in totals]


def test_the_default_limit_is_one_rule_with_no_fraction_beside_it():
    """The 20% was computed twice, `unhealthy_limit`'s float fraction beside `tolerated`'s "20%",
    and the two could drift. Now the gate has no fraction of its own: its default is `tolerated`'s
    (the same for every pool size), and a paused pool's message names that setting."""
    assert [unhealthy_limit(n) for n in range(1001)] == [tolerated(n) for n in range(1001)]
    with pytest.raises(TypeError):
        unhealthy_limit(10, 0.5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        repair_allowed(health(10, 0), max_unhealthy_fraction=0.5)  # type: ignore[call-arg]
    paused = repair_allowed(health(10, 3))
    assert "3 of 10 nodes (30%) are unhealthy, above the 20% limit (2 nodes in this pool)" in paused.message


def test_a_count_is_taken_as_written_and_a_percentage_is_scaled_down_as_cluster_api_does():
    """OpenShift's MachineHealthCheck examples: 40% of 25 machines tolerates 10, of 6 tolerates 2;
    `2` tolerates 2 whatever the number of machines."""
    assert [tolerated(n, "40%") for n in (25, 6, 10)] == [10, 2, 4]
    assert [tolerated(n, 2) for n in (1, 6, 100)] == [2, 2, 2]
    assert tolerated(4, "100%") == 4 and tolerated(15, "20%") == 3  # exact: 0.2 * 15 is not 3 in floats


def test_zero_tolerates_no_unhealthy_node_and_a_positive_percentage_at_least_one():
    """MHC pauses when the unhealthy count exceeds `maxUnhealthy`: at 0, the first unhealthy node.
    A positive percentage keeps the default's floor of one, so "10%" of a five-node pool still
    heals one node."""
    assert [tolerated(n, 0) for n in (1, 10)] == [0, 0]
    assert [tolerated(n, "0%") for n in (1, 10)] == [0, 0]
    assert tolerated(5, "10%") == 1 and tolerated(30, "10%") == 3


def test_the_gate_pauses_at_the_pool_s_own_limit_and_says_which():
    gate = repair_allowed(health(10, 1), node="node-0", now=T0 + timedelta(minutes=10), max_unhealthy=0)
    assert (gate.allowed, gate.reason, gate.event_type) == (False, "RepairPaused", "Warning")
    assert gate.message.startswith("1 of 10 nodes (10%) are unhealthy, above the pool's limit of 0 nodes (autoRepairPolicy.maxUnhealthy: 0)")
    assert "auto repair is paused while any node is unhealthy" in gate.message
    assert repair_allowed(health(10, 0), node="node-0", now=T0, max_unhealthy=0).reason == "NodeHealthy"
    assert repair_allowed(health(10, 3), node="node-0", now=T0 + timedelta(minutes=10), max_unhealthy=3).allowed  # the default pauses at 3
    assert "the pool's limit of 3 nodes" in repair_allowed(health(10, 4), max_unhealthy=3).message
    assert repair_allowed(health(10, 4), node="node-0", now=T0 + timedelta(minutes=10), max_unhealthy="40%").allowed
    paused = repair_allowed(health(10, 5), max_unhealthy="40%")
    assert paused.reason == "RepairPaused" and "5 of 10 nodes (50%) are unhealthy, above the 40% limit (4 nodes in this pool)" in paused.message
    with pytest.raises(ValueError):
        repair_allowed(health(3, 0), max_unhealthy="150%")


# --- the document ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 3, "0%", "40%", "100%"])
def test_a_valid_limit_is_parsed_and_round_trips(catalog, value):
    spec = parse_document(make_document(autoRepairPolicy={"maxUnhealthy": value}), catalog_current())
    assert spec.repair_max_unhealthy == value and not spec.repair_requires_approval
    assert to_document(spec)["spec"]["autoRepairPolicy"] == {"maxUnhealthy": value}
    assert parse_document(to_document(spec), catalog_current()) == spec
    assert max_unhealthy_of(to_document(spec)["spec"]) == value


def test_the_default_is_written_nowhere_and_sits_beside_require_approval(catalog):
    spec = parse_document(make_document(autoRepairPolicy={"maxUnhealthy": "20%"}), catalog_current())
    assert spec == parse_document(make_document(), catalog_current())  # the same pool
    assert "autoRepairPolicy" not in to_document(spec)["spec"]
    both = parse_document(make_document(autoRepairPolicy={"requireApproval": True, "maxUnhealthy": 1}), catalog_current())
    assert to_document(both)["spec"]["autoRepairPolicy"] == {"requireApproval": True, "maxUnhealthy": 1}


@pytest.mark.parametrize("value", [-1, "3", "101%", "1000%", "40.5%", "-5%", " 40%", "40 %", "%", "forty", True, 2.5, None, [1], 2**31])
def test_a_bad_limit_is_refused_with_its_field_path(catalog, value):
    with pytest.raises(ValidationError) as caught:
        parse_document(make_document(autoRepairPolicy={"maxUnhealthy": value}), catalog_current())
    assert [e.field for e in caught.value.errors] == [FIELD]
    assert max_unhealthy_error(value) is not None and max_unhealthy_of({"autoRepairPolicy": {"maxUnhealthy": value}}) == "20%"


def test_the_api_refuses_a_bad_limit_with_400_and_the_field_path(api, train_document):
    train_document["spec"]["autoRepairPolicy"] = {"maxUnhealthy": "120%"}
    response = api("lead").post("/api/v1/pools/", train_document, format="json")
    assert response.status_code == 400
    assert {e["field"]: e["message"] for e in response.json()["errors"]} == {FIELD: "must be a percentage from 0% to 100%"}


def test_apply_s_yaml_replace_refuses_a_bad_limit_and_keeps_a_good_one(api, train_document):
    """`ebcloud node-pool apply -f` PUTs the file's YAML to the pool."""
    assert api("lead").post("/api/v1/pools/", train_document, format="json").status_code == 201
    train_document["spec"]["autoRepairPolicy"] = {"maxUnhealthy": -2}
    bad = api("lead").put("/api/v1/pools/train-pool-a/", dump_yaml(train_document), content_type="application/yaml")
    assert bad.status_code == 400 and [e["field"] for e in bad.json()["errors"]] == [FIELD]
    train_document["spec"]["autoRepairPolicy"] = {"maxUnhealthy": "40%"}
    good = api("lead").put("/api/v1/pools/train-pool-a/", dump_yaml(train_document), content_type="application/yaml")
    assert good.status_code == 200, good.content
    assert good.json()["spec"]["autoRepairPolicy"] == {"maxUnhealthy": "40%"}


def test_changing_the_limit_is_named_in_the_update_event(actors):
    pool = pool_with_nodes(actors["lead"], name="plain", nodes=0)
    services.pool_update(user=actors["lead"], pool=pool, document=make_document("plain", nodeCount={"min": 0, "max": 6}, autoRepairPolicy={"maxUnhealthy": "40%"}))
    assert "autoRepairPolicy.maxUnhealthy 20% → 40%" in pool.events.get(reason="SpecUpdated").message


# --- through the repair pass ----------------------------------------------------------------------


def test_a_pool_with_max_unhealthy_0_pauses_at_its_first_unhealthy_node(actors):
    pool = faulty_pool(actors, "strict", nodes=5, faulty=1, maxUnhealthy=0)
    assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 0
    assert not PoolEvent.objects.filter(pool=pool, reason="RepairStarted").exists()
    [paused] = PoolEvent.objects.filter(pool=pool, reason="RepairPaused")
    assert "1 of 5 nodes (20%) are unhealthy, above the pool's limit of 0 nodes (autoRepairPolicy.maxUnhealthy: 0)" in paused.message
    default = faulty_pool(actors, "default", nodes=5, faulty=1)
    assert pool_repair(pool_id=default.pk, now=T0 + timedelta(minutes=11)) == 1  # 20%: one node is tolerated


def test_a_higher_limit_lets_a_pool_repair_what_the_default_would_pause(actors):
    """Two of five nodes faulty: 20% pauses (limit 1); `40%` (2) and `2` repair, one at a time."""
    default = faulty_pool(actors, "default", nodes=5, faulty=2)
    assert pool_repair(pool_id=default.pk, now=T0 + timedelta(minutes=11)) == 0
    assert "the 20% limit (1 node in this pool)" in PoolEvent.objects.filter(pool=default, reason="RepairPaused").first().message
    for name, value in (("percent", "40%"), ("count", 2)):
        pool = faulty_pool(actors, name, nodes=5, faulty=2, maxUnhealthy=value)
        assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11)) == 1
        assert not PoolEvent.objects.filter(pool=pool, reason="RepairPaused").exists()


def test_the_node_condition_and_the_repairs_page_state_the_pool_s_limit(actors):
    """A pool of five with one faulty node is paused only by its own `maxUnhealthy: 0`: the pages
    read that limit too (the default pool beside it is not listed as paused)."""
    strict = faulty_pool(actors, "strict", nodes=5, faulty=1, maxUnhealthy=0)
    faulty_pool(actors, "default", nodes=5, faulty=1)
    now = T0 + timedelta(minutes=11)
    admin = actors["admin"]
    rows = {r.node: r for r in repairs_in_progress(user=admin, now=now)}
    node = strict.nodes.order_by("name").first()
    assert set(rows) == {node.name}
    assert rows[node.name].stage.startswith("repair paused") and "the pool's limit of 0 nodes" in rows[node.name].detail
    [condition] = [c for c in node_page(user=admin, node=node, now=now)["conditions"] if c["type"] == "AcceleratedHardwareReady"]
    assert "not started" in condition["message"] and "autoRepairPolicy.maxUnhealthy: 0" in condition["message"]


def test_the_fault_injector_and_the_demo_read_the_pool_s_limit(actors):
    """`inject_fault` warns that a fault pauses a pool of `maxUnhealthy: 0`, and the demo makes no
    node of such a pool fail (its first fault would pause it)."""
    strict = pool_with_nodes(actors["lead"], name="strict", nodes=3, autoRepairPolicy={"maxUnhealthy": 0})
    default = pool_with_nodes(actors["lead"], name="default", nodes=3)
    nodes = list(Node.objects.select_related("pool"))
    names = {n.name for n in fault_candidates(nodes, agents={n.name for n in nodes}, now=T0)}
    assert names == {n.name for n in nodes if n.pool_id == default.pk}
    node = strict.nodes.order_by("name").first()
    with_machine(node)
    err = StringIO()
    call_command("inject_fault", node.name, "--gpu", "0", "--xid", "48", stdout=StringIO(), stderr=err)
    assert "1 of 3 nodes of pool strict are unhealthy" in err.getvalue() and "more than the 0 it tolerates" in err.getvalue()


def test_a_paused_pass_reads_as_many_queries_for_five_paused_nodes_as_for_two(actors):
    """`_pause_said` read each paused node's latest repair event with a query of its own: a
    pool-wide pause cost a query per faulty node every pass."""
    counts = {}
    for faulty in (2, 5):
        pool = faulty_pool(actors, f"paused-{faulty}", nodes=6, faulty=faulty)
        pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=11))  # says the pause once per node
        with CaptureQueriesContext(connection) as queries:
            assert pool_repair(pool_id=pool.pk, now=T0 + timedelta(minutes=12)) == 0
        counts[faulty] = len(queries)
        assert [e.count for e in PoolEvent.objects.filter(pool=pool, reason="RepairPaused")] == [1] * faulty
    assert counts[2] == counts[5]


def test_zones_are_held_as_kubernetes_node_lifecycle_controller_holds_its_evictions():
    """Every zone with no node in use holds them all (full disruption everywhere), whatever its
    size; one zone wholly out while another is in use is that zone's own loss, replaced as
    usual; a partial disruption (more than 2 and at least 55% out) holds a zone of at most 50
    nodes, and a larger one goes on at the pools' one-repair-at-a-time pace."""
    assert zones_held({"a": (1, 1)}) == {"a"}
    assert zones_held({"a": (2, 2), "b": (3, 3)}) == {"a", "b"}
    assert zones_held({"a": (1, 1), "b": (0, 4)}) == set()
    assert zones_held({"a": (3, 3), "b": (0, 10)}) == set()  # wholly out beside a zone in use: its own loss (review)
    assert zones_held({"a": (3, 5), "b": (0, 4)}) == {"a"}
    assert zones_held({"a": (2, 3)}) == set()  # two out is never a partial disruption
    assert zones_held({"a": (3, 6)}) == set()  # under 55%
    assert zones_held({"a": (40, 60)}) == set()  # a large zone: slowed, not stopped
    assert zones_held({"a": (0, 0)}) == set() and zones_held({}) == set()
