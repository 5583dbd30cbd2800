"""The scheduler extender's pure part (seed O3, D1): the filter's verdicts and reasons are the
core's, and the 0..10 scores put exactly the simulated scheduler's choice on top."""

from __future__ import annotations

from pools.core.scheduling.extender import (
    MAX_EXTENDER_PRIORITY,
    REASON_UNMANAGED,
    filter_nodes,
    node_scores,
)
from pools.core.scheduling.nodes import PREFER_NO_SCHEDULE, REASON_GPU, NodeState, Pod, Taint
from pools.core.scheduling.policies import policy_for


def _node(name, *, gpus=8, used=0, pool="a", taints=()):
    node = NodeState(name=name, cpu_milli=96_000, memory_mib=393_216, gpu_count=gpus, pool=pool, taints=taints)
    for i in range(used):
        node.bind(Pod(f"ns/fill-{name}-{i}", cpu_milli=1000, gpu_count=1), (i,))
    return node


def test_the_filter_keeps_the_given_order_and_says_why_the_others_fail():
    states = {n.name: n for n in (_node("n1", used=8), _node("n2"), _node("n3", used=2))}
    result = filter_nodes(Pod("ns/p", gpu_count=4, team="7"), states, ["n3", "n1", "ghost", "n2"])
    assert result.passed == ["n3", "n2"]
    assert result.failed == {"n1": REASON_GPU}
    assert result.unresolvable == {"ghost": REASON_UNMANAGED}


def test_the_best_node_of_the_policy_alone_scores_ten_and_ties_share_it():
    nodes = [_node("empty"), _node("half", used=4), _node("half-too", used=4), _node("full", used=8)]
    pod = Pod("ns/p", cpu_milli=1000, gpu_count=2)
    scores = node_scores(pod, nodes, {"a": policy_for("binpack", nodes=nodes)})
    assert scores["half"] == scores["half-too"] == MAX_EXTENDER_PRIORITY
    assert 0 <= scores["empty"] < MAX_EXTENDER_PRIORITY
    assert scores["full"] == 0  # does not fit


def test_close_policy_scores_do_not_tie_after_scaling():
    """Two bestfit scores a few points apart would be equal divided by ten; the better one stays on top."""
    nodes = [_node("a7", used=7), _node("a6", used=7)]
    nodes[0].bind(Pod("ns/cpu-job", cpu_milli=8000), ())
    pod = Pod("ns/p", gpu_count=1)
    policy = policy_for("bestfit", nodes=nodes)
    raw = {n.name: policy.score(pod, n)[0] for n in nodes}
    assert raw["a7"] > raw["a6"] and raw["a7"] // 10 == raw["a6"] // 10
    scores = node_scores(pod, nodes, {"a": policy})
    assert scores == {"a7": MAX_EXTENDER_PRIORITY, "a6": raw["a6"] * 9 // 100}


def test_an_untolerated_prefer_no_schedule_taint_loses_to_any_node_without_it():
    nodes = [_node("tainted", used=7, taints=(Taint("spot", "yes", PREFER_NO_SCHEDULE),)), _node("clean")]
    scores = node_scores(Pod("ns/p", gpu_count=1), nodes, {"a": policy_for("binpack", nodes=nodes)})
    assert scores == {"tainted": 0, "clean": MAX_EXTENDER_PRIORITY}


def test_each_node_is_scored_by_its_own_pools_policy():
    nodes = [_node("s1", pool="spread"), _node("s2", pool="spread", used=4), _node("b1", pool="packed"), _node("b2", pool="packed", used=4)]
    policies = {"spread": policy_for("spread", nodes=nodes[:2]), "packed": policy_for("binpack", nodes=nodes[2:])}
    pod = Pod("ns/p", gpu_count=1)
    spread_best = max(nodes[:2], key=lambda n: policies["spread"].score(pod, n)[0]).name
    scores = node_scores(pod, nodes, policies)
    assert spread_best == "s1" and scores["s1"] > scores["s2"] and scores["b2"] > scores["b1"]
