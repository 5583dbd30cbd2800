"""NoExecute taints evict running pods, as Kubernetes' taint manager does: the pure verdict
(pools/core/scheduling/taint_eviction.py) and the scheduler pass that acts on it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.core.node_labels import ClusterNodeState, drifted, node_fix
from pools.core.scheduling.nodes import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    Taint,
    Toleration,
)
from pools.core.scheduling.taint_eviction import (
    TimedTaint,
    TimedToleration,
    carried_time_added,
    noexecute_eviction,
    time_added_of,
    time_added_text,
    timed_taints,
    timed_tolerations,
    with_time_added,
)
from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from pools.services import pods as pod_services
from tests.pools.pod_helpers import T0, pod_document, pool_with_nodes, submit

POOL_TOLERATION = {"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}
MAINTENANCE = {"key": "maintenance", "effect": NO_EXECUTE}  # what node_sync writes for a spec's taint (value "")


# --- the pure verdict ---------------------------------------------------------------------


def taint(key="maintenance", effect=NO_EXECUTE, added=None, value=""):
    return TimedTaint(Taint(key, value, effect), added)


def toleration(key="maintenance", operator="Exists", effect=NO_EXECUTE, seconds=None, value=""):
    return TimedToleration(Toleration(key, operator, value, effect), seconds)


def test_an_untolerated_noexecute_taint_evicts_at_once():
    eviction = noexecute_eviction([taint(added=T0 - timedelta(days=1))], [], now=T0)
    assert (eviction.taint.key, eviction.at, eviction.tolerated, eviction.due(T0)) == ("maintenance", T0, False, True)


@pytest.mark.parametrize("effect", [NO_SCHEDULE, PREFER_NO_SCHEDULE])
def test_other_effects_never_evict(effect):
    assert noexecute_eviction([taint(effect=effect)], [], now=T0) is None


def test_tolerations_without_seconds_tolerate_forever_and_an_empty_key_exists_tolerates_every_taint():
    assert noexecute_eviction([taint()], [toleration()], now=T0) is None
    everything = TimedToleration(Toleration("", "Exists", "", ""))
    assert noexecute_eviction([taint(), taint("other", value="x")], [everything], now=T0) is None


def test_toleration_seconds_count_from_the_taint_or_the_binding_whichever_is_later():
    eviction = noexecute_eviction([taint(added=T0)], [toleration(seconds=300)], now=T0 + timedelta(seconds=10))
    assert (eviction.at, eviction.seconds, eviction.due(T0 + timedelta(seconds=299))) == (T0 + timedelta(seconds=300), 300, False)
    assert eviction.due(T0 + timedelta(seconds=300))
    later = noexecute_eviction([taint(added=T0)], [toleration(seconds=300)], now=T0 + timedelta(hours=1), bound_at=T0 + timedelta(minutes=50))
    assert later.at == T0 + timedelta(minutes=55)


def test_unknown_or_future_times_count_as_now_and_zero_or_negative_seconds_mean_at_once():
    now = T0 + timedelta(hours=1)
    assert noexecute_eviction([taint()], [toleration(seconds=60)], now=now).at == now + timedelta(seconds=60)
    assert noexecute_eviction([taint(added=now + timedelta(days=1))], [toleration(seconds=60)], now=now).at == now + timedelta(seconds=60)
    for seconds in (0, -5):
        assert noexecute_eviction([taint(added=T0)], [toleration(seconds=seconds)], now=now).due(now)


def test_the_first_matching_toleration_is_used_and_the_soonest_deadline_wins():
    # Kubernetes' GetMatchingTolerations: the first toleration that tolerates a taint is the one used.
    forever_first = [toleration(key="", effect=""), toleration(seconds=60)]
    assert noexecute_eviction([taint(added=T0)], forever_first, now=T0) is None
    timed_first = [toleration(seconds=60), toleration(key="", effect="")]
    assert noexecute_eviction([taint(added=T0)], timed_first, now=T0).at == T0 + timedelta(seconds=60)
    two = [taint("a", added=T0), taint("b", added=T0 + timedelta(seconds=100))]
    eviction = noexecute_eviction(two, [toleration("a", seconds=600), toleration("b", seconds=60)], now=T0 + timedelta(seconds=120))
    assert (eviction.taint.key, eviction.at) == ("b", T0 + timedelta(seconds=160))
    # One untolerated taint among tolerated ones evicts at once.
    assert noexecute_eviction(two, [toleration("a")], now=T0).taint.key == "b"


def test_stored_shapes_read_and_date_noexecute_taints_only():
    stored = [{"key": "pool", "value": "train", "effect": NO_SCHEDULE}, MAINTENANCE]
    dated = with_time_added(stored, T0)
    assert dated == [stored[0], {**MAINTENANCE, "timeAdded": "2026-12-01T08:00:00Z"}]
    assert with_time_added(dated, T0 + timedelta(hours=1)) is None
    assert [t.added for t in timed_taints(dated)] == [None, T0]
    assert time_added_of(time_added_text(T0 + timedelta(microseconds=5))) == T0 + timedelta(microseconds=5)
    assert time_added_of("yesterday") is None and with_time_added([{**MAINTENANCE, "timeAdded": "yesterday"}], T0)[0]["timeAdded"] == "2026-12-01T08:00:00Z"
    tolerations = timed_tolerations([{"key": "k", "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": 30}, {"key": "", "operator": "Exists"}])
    assert [t.seconds for t in tolerations] == [30, None] and tolerations[1].toleration == Toleration("", "Exists", "", "")


def test_a_dated_taint_is_still_the_taint_node_sync_applied():
    dated = with_time_added([MAINTENANCE], T0)
    observed = ClusterNodeState(taints=(("maintenance", "", NO_EXECUTE),))
    assert not drifted(applied_labels={}, applied_taints=dated, cordoned=False, observed=observed)
    fix = node_fix(wanted_labels={}, wanted_taints=[{**MAINTENANCE, "value": ""}], applied_labels={}, applied_taints=dated, cordoned=False, observed=observed)
    assert not (fix.apply or fix.rows_changed)


def test_rewriting_a_nodes_taints_keeps_the_clock_of_a_noexecute_taint_that_stays():
    dated = with_time_added([MAINTENANCE, {"key": "pool", "value": "train", "effect": NO_SCHEDULE}], T0)
    spec_changed = [{"key": "pool", "value": "train", "effect": NO_SCHEDULE}, {**MAINTENANCE}, {"key": "gone", "value": "", "effect": NO_EXECUTE}]
    assert carried_time_added(dated, spec_changed) == [spec_changed[0], {**MAINTENANCE, "timeAdded": "2026-12-01T08:00:00Z"}, spec_changed[2]]


# --- the scheduler pass ---------------------------------------------------------------------


@pytest.fixture
def running(actors):
    """train-pool-a with two nodes and one 8-GPU pod running on train-pool-a-0 since T0."""
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    pod = submit(actors["member"], "bert", gpus=8)
    scheduler_pass(now=T0)
    pod.refresh_from_db()
    assert (pod.phase, pod.node.name) == ("Running", "train-pool-a-0")
    return pod


def taint_node(name, *taints):
    node = Node.objects.get(name=name)
    node.taints = [*node.taints, *taints]
    node.save(update_fields=["taints"])


def tolerate(pod, *tolerations):
    """The pod's stored tolerations: the pool's, then these (stored as the API keeps them)."""
    Pod.objects.filter(pk=pod.pk).update(tolerations=[POOL_TOLERATION, *tolerations])


def test_the_reviewers_probe_an_untolerated_noexecute_taint_evicts_on_the_next_pass(running):
    taint_node("train-pool-a-0", MAINTENANCE)
    result = scheduler_pass(now=T0 + timedelta(minutes=10))
    running.refresh_from_db()
    assert result.requeued == ["algorithm/bert"]
    assert (running.phase, running.reason, running.node, running.gpu_indices, running.started_at) == ("Pending", "TaintManagerEviction", None, [], None)
    assert "NoExecute taint {maintenance: } of node train-pool-a-0, not tolerated" in running.explanation
    event = PoolEvent.objects.get(reason="TaintManagerEviction")
    assert (event.type, event.node.name) == ("Warning", "train-pool-a-0")
    assert event.message.startswith("Marking for deletion Pod algorithm/bert: node train-pool-a-0 has taint {maintenance: }:NoExecute")
    scheduler_pass(now=T0 + timedelta(minutes=11))  # placed again, never on the tainted node
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-1")


def test_a_pod_tolerating_for_300_seconds_leaves_300_seconds_after_the_taint_appeared(running):
    tolerate(running, {"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": 300})
    taint_node("train-pool-a-0", MAINTENANCE)
    t1 = T0 + timedelta(hours=1)
    scheduler_pass(now=t1)  # the pass that first sees the taint dates it
    assert Node.objects.get(name="train-pool-a-0").taints[-1]["timeAdded"] == time_added_text(t1)
    assert scheduler_pass(now=t1 + timedelta(seconds=299)).requeued == []
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-0")
    assert scheduler_pass(now=t1 + timedelta(seconds=300)).requeued == ["algorithm/bert"]
    running.refresh_from_db()
    assert (running.phase, running.reason) == ("Pending", "TaintManagerEviction")
    assert "tolerated for 300s only" in running.explanation
    event = PoolEvent.objects.get(reason="TaintManagerEviction")
    assert "which the pod tolerates for 300s only" in event.message


def test_a_taint_that_carries_its_time_added_is_counted_from_then_and_kept(running):
    tolerate(running, {"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": 300})
    t1 = T0 + timedelta(hours=1)
    taint_node("train-pool-a-0", {**MAINTENANCE, "timeAdded": time_added_text(t1)})
    assert scheduler_pass(now=t1 + timedelta(seconds=299)).requeued == []
    assert Node.objects.get(name="train-pool-a-0").taints[-1]["timeAdded"] == time_added_text(t1)
    assert scheduler_pass(now=t1 + timedelta(seconds=300)).requeued == ["algorithm/bert"]


def test_a_toleration_without_seconds_keeps_the_pod_for_ever(running):
    tolerate(running, {"key": "maintenance", "operator": "Equal", "value": "", "effect": NO_EXECUTE})
    taint_node("train-pool-a-0", MAINTENANCE)
    for later in (timedelta(minutes=1), timedelta(days=30)):
        assert scheduler_pass(now=T0 + later).requeued == []
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-0")
    assert not PoolEvent.objects.filter(reason="TaintManagerEviction").exists()


@pytest.mark.parametrize("seconds", [2**63 - 2, 3 * 10**11])
def test_a_toleration_past_the_calendars_end_keeps_the_pod_and_the_pass_runs(running, seconds):
    """The API takes any int64 tolerationSeconds, as kube-apiserver does: a deadline past the
    year 9999 failed every scheduler pass, for every team, while the pod ran (hostile-input
    probe). It is read as for ever."""
    tolerate(running, {"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": seconds})
    taint_node("train-pool-a-0", MAINTENANCE)
    assert noexecute_eviction([taint(added=T0)], [toleration(seconds=seconds)], now=T0) is None
    assert scheduler_pass(now=T0 + timedelta(minutes=1)).requeued == []
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-0")


@pytest.mark.parametrize("effect", [NO_SCHEDULE, PREFER_NO_SCHEDULE])
def test_noschedule_and_prefernoschedule_taints_never_move_a_running_pod(running, effect):
    taint_node("train-pool-a-0", {"key": "maintenance", "value": "", "effect": effect})
    assert scheduler_pass(now=T0 + timedelta(days=1)).requeued == []
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-0")
    assert "timeAdded" not in Node.objects.get(name="train-pool-a-0").taints[-1]


def test_an_empty_key_exists_toleration_tolerates_every_noexecute_taint(running):
    Pod.objects.filter(pk=running.pk).update(tolerations=[{"key": "", "operator": "Exists", "value": "", "effect": ""}])
    taint_node("train-pool-a-0", MAINTENANCE, {"key": "gpu-fault", "value": "xid-79", "effect": NO_EXECUTE})
    assert scheduler_pass(now=T0 + timedelta(days=1)).requeued == []
    running.refresh_from_db()
    assert (running.phase, running.node.name) == ("Running", "train-pool-a-0")


def test_only_the_pods_that_do_not_tolerate_leave_and_their_room_is_used_in_the_same_pass(actors):
    pool_with_nodes(actors["lead"], nodes=1, node_labels={"pool": "train"})
    staying, leaving = submit(actors["member"], "staying", gpus=4), submit(actors["member"], "leaving", gpus=4)
    scheduler_pass(now=T0)
    tolerate(staying, {"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE})
    tolerate(leaving)
    waiting = submit(actors["member"], "waiting", gpus=4)
    Pod.objects.filter(pk=waiting.pk).update(tolerations=[POOL_TOLERATION, {"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE}])
    taint_node("train-pool-a-0", MAINTENANCE)
    result = scheduler_pass(now=T0 + timedelta(minutes=1))
    assert (result.requeued, result.scheduled) == (["algorithm/leaving"], ["algorithm/waiting"])
    phases = dict(Pod.objects.values_list("name", "phase"))
    assert phases == {"staying": "Running", "leaving": "Pending", "waiting": "Running"}


def test_toleration_seconds_submitted_through_the_api_are_honoured(actors):
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    document = pod_document("bert", gpus=8)
    document["spec"]["tolerations"].append({"key": "maintenance", "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": 300})
    pod_services.pod_create(user=actors["member"], document=document, now=T0)
    scheduler_pass(now=T0)
    taint_node("train-pool-a-0", MAINTENANCE)
    assert scheduler_pass(now=T0 + timedelta(seconds=10)).requeued == []  # dates the taint
    assert scheduler_pass(now=T0 + timedelta(seconds=309)).requeued == []
    assert scheduler_pass(now=T0 + timedelta(seconds=310)).requeued == ["algorithm/bert"]
