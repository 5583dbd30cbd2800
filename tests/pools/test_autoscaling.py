"""The HPA-style autoscaling core: HPA docs/KEP-853 worked examples, the article's rule (seed
D3/O4), the T6 overnight incident, and property tests for the invariants."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.autoscaling import (
    DEFAULT_SCALING_SPEC,
    REASONS,
    MetricTarget,
    ScalingDecision,
    ScalingPolicy,
    ScalingRules,
    ScalingSpec,
    burst_ceiling,
    decide,
    evaluate_metric,
    scale_down_limit,
    scale_up_limit,
)
from pools.core.scaling_history import ScalingHistory
from pools.core.spec import POOL_SCALING_DEFAULTS

T0 = datetime(2025, 3, 3, 2, 0, tzinfo=UTC)
TOL = (0.1, 0.1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def load(memory: float | None, queue: float | None) -> dict[str, float]:
    values = {"gpu-memory": memory, "queued_pods": queue}
    return {name: value for name, value in values.items() if value is not None}


def rules(window: int = 0, *policies: tuple[str, int, int], select: str = "Max") -> ScalingRules:
    return ScalingRules(
        stabilization_window_seconds=window,
        policies=tuple(ScalingPolicy(kind, value, period) for kind, value, period in policies),
        select_policy=select,
    )


# A metric whose recommendation is exactly its value (HPA AverageValue with target 1 and zero
# tolerance), so the worked examples can say "the metrics want N replicas".
WANTS = MetricTarget(type="Pods", name="wants", target=1.0, target_type="AverageValue")
HPA_DEFAULT_UP = rules(0, ("Percent", 100, 15), ("Pods", 4, 15))
HPA_DEFAULT_DOWN = rules(300, ("Percent", 100, 15))


def wanting(
    up: ScalingRules = HPA_DEFAULT_UP, down: ScalingRules = HPA_DEFAULT_DOWN
) -> ScalingSpec:
    return ScalingSpec(
        metrics=(WANTS,),
        scale_up=replace(up, tolerance=0.0),
        scale_down=replace(down, tolerance=0.0),
        combine="Any",
    )


def once(
    spec: ScalingSpec,
    current: int,
    metrics: dict[str, float],
    *,
    min_nodes: int = 1,
    max_nodes: int = 40,
    history: ScalingHistory | None = None,
    now: datetime = T0,
) -> ScalingDecision:
    """One decision from a fresh (or given) history."""
    return decide(
        spec=spec,
        current=current,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        metrics=metrics,
        history=history or ScalingHistory(),
        now=now,
    )


@dataclass
class Pool:
    """A pool driven tick by tick, storing history through JSON as the Django side will."""

    spec: ScalingSpec
    nodes: int
    min_nodes: int = 1
    max_nodes: int = 1000
    history: ScalingHistory = field(default_factory=ScalingHistory)
    log: list[tuple[datetime, ScalingDecision]] = field(default_factory=list)

    def tick(self, now: datetime, metrics: dict[str, float]) -> ScalingDecision:
        decision = decide(
            spec=self.spec,
            current=self.nodes,
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            metrics=metrics,
            history=self.history,
            now=now,
        )
        self.history = ScalingHistory.from_json(json.dumps(decision.history.to_json()))
        self.nodes = decision.desired
        self.log.append((now, decision))
        return decision

    def run(self, start: float, end: float, every: float, metrics: dict[str, float]) -> None:
        t = start
        while t < end:
            self.tick(at(t), metrics)
            t += every

    def changes(self) -> list[tuple[float, int, int]]:
        return [
            ((now - T0).total_seconds(), d.current, d.desired) for now, d in self.log if d.changed
        ]


DAY = load(80, 5)  # within tolerance on memory, short queue: the pool holds its size
PRESSURE = load(95, 30)  # memory above 85% (beyond tolerance) AND more than 10 queued
QUIET = load(10, 0)


# --- the contract with pools/core/spec.py -----------------------------------------------------------


def test_the_spec_dataclasses_have_the_field_names_the_parser_imports():
    def names(cls):
        return [f.name for f in dataclasses.fields(cls)][:4]

    assert names(ScalingPolicy) == ["type", "value", "period_seconds"]
    assert names(ScalingRules)[:3] == ["stabilization_window_seconds", "policies", "select_policy"]
    assert names(MetricTarget)[:3] == ["type", "name", "target"]
    assert names(ScalingSpec) == ["metrics", "scale_up", "scale_down", "combine"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_SCALING_SPEC.combine = "Any"


def test_the_default_spec_carries_the_articles_numbers():
    spec = DEFAULT_SCALING_SPEC
    assert spec.metrics == (
        MetricTarget("Resource", "gpu-memory", 85.0),
        MetricTarget("Pods", "queued_pods", 10.0),
    )
    assert spec.combine == "All"
    assert spec.scale_up.stabilization_window_seconds == 300
    assert spec.scale_up.policies == (
        ScalingPolicy("Percent", 20, 60),
        ScalingPolicy("Pods", 1, 60),
    )
    assert spec.scale_up.select_policy == "Max"
    assert spec.scale_down.stabilization_window_seconds == 1800
    assert spec.scale_down.policies == (ScalingPolicy("Pods", 1, 120),)


# --- metrics -----------------------------------------------------------------------------------


def test_a_ratio_within_ten_percent_of_the_target_keeps_the_current_size():
    # 93/85 = 1.094 and 11/10 = 1.1: both inside HPA's default tolerance of 0.1
    decision = once(DEFAULT_SCALING_SPEC, 10, load(93, 11))
    assert (decision.desired, decision.reason) == (10, "WithinTolerance")
    assert all(m.within_tolerance for m in decision.metrics)


def test_utilisation_beyond_tolerance_recommends_ceil_of_current_times_ratio():
    status = evaluate_metric(DEFAULT_SCALING_SPEC.metrics[0], 95, current=10, tolerances=TOL)
    assert status.recommendation == math.ceil(10 * 95 / 85) == 12
    assert not status.within_tolerance


def test_the_queue_is_a_threshold_on_the_whole_pool_queue_by_default():
    status = evaluate_metric(DEFAULT_SCALING_SPEC.metrics[1], 30, current=4, tolerances=TOL)
    assert (status.target_type, status.ratio, status.recommendation) == ("Value", 3.0, 12)


def test_average_value_reads_the_queue_as_queued_pods_per_node():
    metric = MetricTarget("Pods", "queued_pods", 10.0, target_type="AverageValue")
    status = evaluate_metric(metric, 30, current=4, tolerances=TOL)
    assert (status.ratio, status.recommendation) == (0.75, 3)


def test_a_scale_up_tolerance_of_zero_makes_any_excess_over_target_count():
    strict = replace(
        DEFAULT_SCALING_SPEC, scale_up=replace(DEFAULT_SCALING_SPEC.scale_up, tolerance=0.0)
    )
    lenient = once(DEFAULT_SCALING_SPEC, 10, load(90, 20))
    exact = once(strict, 10, load(90, 20))
    assert lenient.desired == 10
    assert exact.desired == 11


def test_combine_all_scales_up_only_when_memory_and_queue_both_ask_for_more():
    def nodes_after(metrics):
        return once(DEFAULT_SCALING_SPEC, 10, metrics, min_nodes=2).desired

    assert nodes_after(load(95, 5)) == 10  # memory alone
    assert nodes_after(load(40, 300)) == 10  # queue alone
    assert nodes_after(load(95, 30)) == 12  # both: the smaller ask (memory's 12, not 30)


def test_combine_all_scales_down_only_when_every_metric_allows_it():
    def nodes_after(metrics):
        spec = replace(DEFAULT_SCALING_SPEC, scale_down=rules(0, ("Percent", 100, 60)))
        return once(spec, 10, metrics).desired

    assert nodes_after(load(10, 30)) == 10  # idle memory but a queue
    assert nodes_after(load(10, 0)) == 2  # both low: the highest of (2, 0)


def test_combine_any_takes_the_highest_recommendation_like_hpa():
    spec = replace(DEFAULT_SCALING_SPEC, combine="Any", scale_up=rules(0, ("Percent", 900, 60)))
    decision = once(spec, 10, load(40, 30), max_nodes=100)
    assert decision.raw_recommendation == 30
    assert decision.desired == 30


def test_a_missing_metric_never_lets_the_pool_shrink():
    spec = replace(DEFAULT_SCALING_SPEC, combine="Any", scale_down=rules(0, ("Percent", 100, 60)))
    decision = once(spec, 10, load(None, 0))
    assert decision.desired == 10
    assert decision.metrics[0].value is None


def test_a_missing_metric_blocks_scale_up_under_all_but_not_under_any():
    for combine, expected in (("All", 10), ("Any", 12)):
        spec = replace(DEFAULT_SCALING_SPEC, combine=combine, scale_up=rules(0, ("Pods", 2, 60)))
        decision = once(spec, 10, {"queued_pods": 50, "gpu-memory": float("nan")})
        assert decision.desired == expected, combine


def test_an_empty_pool_starts_a_first_node_on_its_queue_alone():
    pool = Pool(DEFAULT_SCALING_SPEC, nodes=0, min_nodes=0, max_nodes=10)
    first = pool.tick(T0, load(None, 30))
    assert first.metrics[0].recommendation is None  # no utilisation on zero nodes
    assert first.raw_recommendation == 3  # ceil(30 / 10), HPA's scale-from-zero
    assert (first.desired, first.reason) == (1, "ScaleUpLimit")
    assert first.limiting_policy == ScalingPolicy("Pods", 1, 60)  # 20% of 0 is 0


# --- the article's rule (seed D3, O4) ----------------------------------------------------------


def test_the_article_rule_adds_two_nodes_to_a_ten_node_pool_after_five_minutes_of_pressure():
    pool = Pool(DEFAULT_SCALING_SPEC, nodes=10, min_nodes=2, max_nodes=40)
    pool.run(-1800, 0, 15, DAY)  # HPA's 15 s sync period
    pool.run(0, 600, 15, PRESSURE)
    first_change = pool.changes()[0]
    assert first_change == (285, 10, 12)  # 20 samples = five minutes; 2 nodes = 20% of 10
    held = [d.reason for now, d in pool.log if T0 <= now < at(285)]
    assert set(held) == {"ScaleUpStabilized"}


def test_scale_up_steps_are_about_twenty_percent_and_never_jump_to_max():
    spec = replace(DEFAULT_SCALING_SPEC, combine="Any")
    pool = Pool(spec, nodes=10, min_nodes=2, max_nodes=40)
    pool.run(-1800, 0, 60, DAY)
    pool.run(0, 900, 60, load(95, 300))
    steps = [(before, after) for _, before, after in pool.changes()]
    assert steps == [(10, 12), (12, 15), (15, 18), (18, 22), (22, 27), (27, 33), (33, 40)]
    limited = [d for _, d in pool.log if d.reason == "ScaleUpLimit"]
    assert limited[0].limiting_policy == ScalingPolicy("Percent", 20, 60)


def test_a_two_node_pool_still_grows_by_a_whole_node():
    pool = Pool(replace(DEFAULT_SCALING_SPEC, combine="Any"), nodes=2, min_nodes=1, max_nodes=40)
    decision = pool.tick(T0, load(95, 300))
    assert decision.desired == 3


def test_scale_down_waits_thirty_minutes_then_removes_one_node_every_two_minutes():
    pool = Pool(DEFAULT_SCALING_SPEC, nodes=10, min_nodes=2, max_nodes=40)
    pool.run(-1800, 0, 15, DAY)
    pool.run(0, 3600, 15, QUIET)
    changes = pool.changes()
    assert changes[0] == (1785, 10, 9)  # the last busy sample (t = -15 s) left the window
    assert [after - before for _, before, after in changes] == [-1] * 8
    assert [b[0] - a[0] for a, b in zip(changes, changes[1:], strict=False)] == [120] * 7
    assert pool.nodes == 2
    reasons = {d.reason for now, d in pool.log if T0 <= now < at(1785)}
    assert reasons == {"ScaleDownStabilized"}
    between = {d.reason for now, d in pool.log if at(1785) < now < at(1905)}
    assert between == {"ScaleDownLimit"}


# --- T6: the overnight collapse ----------------------------------------------------------------


def overnight(spec: ScalingSpec) -> Pool:
    pool = Pool(spec, nodes=10, min_nodes=2, max_nodes=10)
    pool.run(-3600, 0, 15, DAY)
    pool.run(0, 25 * 60, 15, QUIET)  # a 25-minute dip at 02:00
    pool.run(25 * 60, 2 * 3600, 15, DAY)
    return pool


def test_a_short_overnight_dip_does_not_shrink_the_pool_with_the_thirty_minute_window():
    pool = overnight(DEFAULT_SCALING_SPEC)
    assert pool.changes() == []
    assert pool.nodes == 10


def test_the_same_dip_collapses_the_pool_to_its_minimum_with_a_sixty_second_window():
    eager = replace(
        DEFAULT_SCALING_SPEC,
        scale_down=replace(DEFAULT_SCALING_SPEC.scale_down, stabilization_window_seconds=60),
    )
    pool = overnight(eager)
    sizes = [d.desired for _, d in pool.log]
    assert min(sizes) == 2
    assert pool.log[-1][1].desired < 10  # and the day load alone never brings it back


# --- HPA documentation and KEP-853 worked examples ---------------------------------------------


def test_hpa_docs_scale_down_takes_ten_percent_above_forty_replicas_and_four_below():
    spec = wanting(down=rules(0, ("Pods", 4, 60), ("Percent", 10, 60)))
    pool = Pool(spec, nodes=80, min_nodes=1)
    pool.run(0, 20 * 60, 60, {"wants": 10})
    sizes = [after for _, _, after in pool.changes()]
    # 80 -> 72 (8 = 10%); at 72 "10% is 7.2 but the number is rounded up to 8"; 4 at a time <= 40
    assert sizes == [72, 64, 57, 51, 45, 40, 36, 32, 28, 24, 20, 16, 12, 10]


def test_hpa_docs_select_policy_min_removes_no_more_than_five_pods_a_minute():
    spec = wanting(down=rules(0, ("Percent", 10, 60), ("Pods", 5, 60), select="Min"))
    pool = Pool(spec, nodes=80, min_nodes=1)
    pool.run(0, 6 * 60, 60, {"wants": 10})
    assert [after for _, _, after in pool.changes()][:6] == [75, 70, 65, 60, 55, 50]


def test_hpa_docs_disabled_scale_down_never_removes_a_node():
    spec = wanting(down=rules(0, select="Disabled"))
    pool = Pool(spec, nodes=10, min_nodes=1)
    pool.run(0, 600, 60, {"wants": 1})
    assert pool.changes() == []
    assert pool.log[-1][1].reason == "ScaleDownDisabled"


def test_disabled_scale_up_is_reported_as_such():
    pool = Pool(wanting(up=rules(0, select="Disabled")), nodes=3, min_nodes=1)
    assert pool.tick(T0, {"wants": 9}).reason == "ScaleUpDisabled"


def test_kep_story_1_percent_900_goes_from_one_to_ten_to_a_hundred_to_a_thousand():
    pool = Pool(wanting(up=rules(0, ("Percent", 900, 60))), nodes=1, min_nodes=1, max_nodes=1000)
    pool.run(0, 300, 60, {"wants": 5000})
    assert [after for _, _, after in pool.changes()] == [10, 100, 1000]
    assert pool.log[2][1].reason == "TooManyReplicas"  # 100 -> 1000 is capped by max, not rate


def test_kep_story_2_one_pod_per_ten_minutes_scale_down():
    pool = Pool(wanting(down=rules(0, ("Pods", 1, 600))), nodes=1000, min_nodes=1)
    pool.run(0, 1260, 60, {"wants": 10})
    assert pool.changes() == [(0, 1000, 999), (600, 999, 998), (1200, 998, 997)]


def test_hpa_docs_stabilization_window_uses_the_highest_recommendation_of_five_minutes():
    spec = wanting(down=rules(300, ("Percent", 100, 15)))
    history = ScalingHistory().record(at=at(-200), recommendation=10)

    def desired(now):
        return once(spec, 10, {"wants": 4}, max_nodes=20, history=history, now=now)

    held = desired(T0)
    assert (held.desired, held.reason, held.stabilized) == (10, "ScaleDownStabilized", 10)
    assert desired(at(100)).desired == 4  # the 10 is exactly 300 s old: outside (now-300, now]


def test_kep_story_5_picks_the_largest_of_ten_minutes_of_recommendations():
    spec = wanting(down=rules(600, ("Pods", 5, 60)))
    pool = Pool(spec, nodes=10, min_nodes=1)
    for minute, wanted in enumerate([10, 9, 8, 9, 9, 8, 9, 8, 9, 8]):
        assert pool.tick(at(60 * minute), {"wants": wanted}).desired == 10
    assert pool.tick(at(600), {"wants": 7}).desired == 9


def test_kep_story_6_picks_the_smallest_of_five_minutes_of_recommendations():
    # HPA's window is half-open, (now - 300 s, now], so six samples fit only if they are a
    # little less than a minute apart; the KEP's arithmetic assumes they all fit.
    spec = wanting(up=rules(300, ("Pods", 20, 60)))
    pool = Pool(spec, nodes=2, min_nodes=1)
    for tick, wanted in enumerate([2, 3, 19, 10, 3, 4]):
        assert pool.tick(at(55 * tick), {"wants": wanted}).desired == 2
    assert pool.tick(at(55 * 6), {"wants": 7}).desired == 3


def test_scale_events_count_against_a_policy_until_they_leave_its_period():
    spec = wanting(up=rules(0, ("Pods", 2, 60)))
    history = ScalingHistory().record(at=at(-59), change=2)
    blocked = once(spec, 5, {"wants": 9}, max_nodes=20, history=history)
    assert (blocked.desired, blocked.reason, blocked.scale_limit) == (5, "ScaleUpLimit", 5)
    freed = once(spec, 5, {"wants": 9}, max_nodes=20, history=history, now=at(1))
    assert freed.desired == 7


def test_a_recent_scale_down_raises_the_period_start_for_scale_up():
    history = ScalingHistory().record(at=at(-30), change=-3)
    up = rules(0, ("Pods", 4, 60), ("Percent", 50, 60))
    assert scale_up_limit(current=7, rules=up, history=history, now=T0) == (
        15,  # the period began at 10 nodes: ceil(10 * 1.5)
        ScalingPolicy("Percent", 50, 60),
    )
    down = rules(0, ("Pods", 4, 60), select="Min")
    assert scale_down_limit(current=7, rules=down, history=history, now=T0)[0] == 6


# --- bounds, reasons, validation ---------------------------------------------------------------


def test_a_pool_above_its_max_goes_straight_to_max():
    decision = once(DEFAULT_SCALING_SPEC, 14, PRESSURE, min_nodes=2, max_nodes=10)
    assert (decision.desired, decision.reason) == (10, "TooManyReplicas")
    assert decision.history.recommendations == ()  # HPA stores no recommendation here
    assert decision.history.events == ((T0, -4),)


def test_a_pool_below_its_min_goes_straight_to_min():
    decision = once(DEFAULT_SCALING_SPEC, 0, QUIET, min_nodes=2, max_nodes=10)
    assert (decision.desired, decision.reason) == (2, "TooFewReplicas")


def test_a_recommendation_beyond_max_is_capped_with_too_many_replicas():
    decision = once(wanting(), 8, {"wants": 30}, max_nodes=10)
    assert (decision.desired, decision.reason) == (10, "TooManyReplicas")


def test_a_recommendation_below_min_is_floored_with_too_few_replicas():
    decision = once(
        wanting(down=rules(0, ("Percent", 100, 15))), 8, {"wants": 1}, min_nodes=3, max_nodes=10
    )
    assert (decision.desired, decision.reason) == (3, "TooFewReplicas")


def test_decide_refuses_min_above_max_and_naive_times():
    kwargs = dict(spec=DEFAULT_SCALING_SPEC, current=3, metrics={}, history=ScalingHistory())
    with pytest.raises(ValueError, match="above max"):
        decide(min_nodes=5, max_nodes=4, now=T0, **kwargs)
    with pytest.raises(ValueError, match="timezone-aware"):
        decide(min_nodes=1, max_nodes=4, now=datetime(2025, 1, 1), **kwargs)


def test_the_decision_carries_the_limiting_policy_and_metric_values_as_json():
    spec = replace(DEFAULT_SCALING_SPEC, combine="Any", scale_up=rules(0, ("Percent", 20, 60)))
    decision = once(spec, 10, load(95, 300), min_nodes=2)
    summary = json.loads(json.dumps(decision.to_dict()))
    assert summary["from"] == 10 and summary["to"] == 12
    assert summary["reason"] == "ScaleUpLimit"
    assert summary["limitingPolicy"] == {"type": "Percent", "value": 20, "period_seconds": 60}
    assert [m["value"] for m in summary["metrics"]] == [95, 300]
    assert "(Percent 20 per 60s allows 12)" in decision.message


# --- history -----------------------------------------------------------------------------------


def test_decide_records_the_raw_recommendation_and_the_scale_event():
    decision = once(wanting(), 4, {"wants": 6})
    assert decision.history == ScalingHistory(((T0, 6),), ((T0, 2),))


def test_record_returns_a_new_history_and_leaves_the_old_one_alone():
    empty = ScalingHistory()
    one = empty.record(at=T0, recommendation=3, change=0)
    assert empty == ScalingHistory()
    assert one.recommendations == ((T0, 3),) and one.events == ()


def test_prune_drops_entries_that_no_window_can_see_again():
    history = (
        ScalingHistory()
        .record(at=at(-600), recommendation=1, change=1)
        .record(at=at(-599), recommendation=2, change=-1)
    )
    pruned = history.prune(T0, timedelta(seconds=600))
    assert pruned == history.prune(T0, 600) == ScalingHistory(((at(-599), 2),), ((at(-599), -1),))


def test_from_json_accepts_nothing_and_json_text():
    assert ScalingHistory.from_json(None) == ScalingHistory.from_json({}) == ScalingHistory()
    text = json.dumps(ScalingHistory().record(at=T0, recommendation=4).to_json())
    assert ScalingHistory.from_json(text).recommendations == ((T0, 4),)


moments = st.integers(min_value=-86400, max_value=86400).map(at)


@given(
    st.lists(st.tuples(moments, st.integers(0, 10_000)), max_size=20),
    st.lists(st.tuples(moments, st.integers(-500, 500).filter(bool)), max_size=20),
)
def test_history_round_trips_through_json(recs, events):
    history = ScalingHistory(tuple(sorted(recs)), tuple(sorted(events)))
    stored = json.loads(json.dumps(history.to_json()))
    assert ScalingHistory.from_json(stored) == history


# --- invariants ----------------------------------------------------------------------------------

policies = st.lists(
    st.builds(
        ScalingPolicy,
        st.sampled_from(["Pods", "Percent"]),
        st.integers(1, 200),
        st.integers(1, 600),
    ),
    min_size=1,
    max_size=3,
).map(tuple)
scaling_rules = st.builds(
    ScalingRules, st.integers(0, 900), policies, st.sampled_from(["Max", "Min", "Disabled"])
)
specs = st.builds(
    ScalingSpec,
    st.just(DEFAULT_SCALING_SPEC.metrics),
    scaling_rules,
    scaling_rules,
    st.sampled_from(["All", "Any"]),
)
steps = st.lists(
    st.tuples(st.integers(1, 240), st.floats(0, 100), st.floats(0, 400)), min_size=1, max_size=40
)


@st.composite
def scenarios(draw):
    min_nodes = draw(st.integers(0, 5))
    max_nodes = draw(st.integers(min_nodes, 60))
    return draw(specs), min_nodes, max_nodes, draw(st.integers(0, 70)), draw(steps)


def simulate(scenario):
    spec, min_nodes, max_nodes, nodes, script = scenario
    pool = Pool(spec, nodes=nodes, min_nodes=min_nodes, max_nodes=max_nodes)
    t = 0
    for dt, memory, queue in script:
        t += dt
        pool.tick(at(t), load(memory, queue))
    return pool


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_result_is_never_outside_min_and_max(scenario):
    pool = simulate(scenario)
    for _, decision in pool.log:
        assert pool.min_nodes <= decision.desired <= pool.max_nodes
        assert decision.reason in REASONS


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_period_ever_changes_more_nodes_than_its_policies_allow(scenario):
    pool = simulate(scenario)
    events: list[tuple[datetime, int]] = []  # the full log, never pruned
    for now, d in pool.log:
        in_range = pool.min_nodes <= d.current <= pool.max_nodes
        rules_ = pool.spec.scale_up if d.desired > d.current else pool.spec.scale_down
        if in_range and d.changed:
            assert rules_.select_policy != "Disabled"
            up = d.desired > d.current
            allowed = []
            for p in rules_.policies:
                recent = [c for t, c in events if t > now - timedelta(seconds=p.period_seconds)]
                start = d.current - sum(recent)  # nodes when the policy's period began
                if p.type == "Pods":
                    allowed.append(start + p.value if up else start - p.value)
                elif up:
                    allowed.append(math.ceil(start * (1 + p.value / 100)))
                else:
                    allowed.append(int(start * (1 - p.value / 100)))
            pick = max if (rules_.select_policy == "Max") == up else min
            if up:
                assert d.desired <= pick(allowed)
            else:
                assert d.desired >= pick(allowed)
        if d.changed:
            events.append((now, d.delta))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_pool_never_shrinks_below_the_highest_recommendation_in_the_down_window(scenario):
    pool = simulate(scenario)
    spec = pool.spec
    recs: list[tuple[datetime, int]] = []
    for now, d in pool.log:
        if not pool.min_nodes <= d.current <= pool.max_nodes:
            continue

        def window(seconds, now=now, raw=d.raw_recommendation):
            return [raw] + [r for t, r in recs if t > now - timedelta(seconds=seconds)]

        highest = max(window(spec.scale_down.stabilization_window_seconds))
        lowest = min(window(spec.scale_up.stabilization_window_seconds))
        assert d.desired >= min(d.current, highest)
        assert d.desired <= max(d.current, lowest)
        recs.append((now, d.raw_recommendation))


# --- the pools' defaults: the article's rule at its own numbers (issue 20 item 4) ----------------


@pytest.mark.parametrize(
    ("memory", "queue", "grows"),
    [(86, 11, True), (85.5, 30, True), (85, 11, False), (86, 10, False), (93, 11, True), (60, 40, False)],
)
def test_the_pools_default_rule_fires_exactly_above_85_percent_and_10_queued_pods(memory, queue, grows):
    """Seed D3/O4: "GPU memory above 85% and more than 10 queued pods". The pools' defaults have
    no tolerance (`POOL_TOLERANCE`), so the rule fires at exactly those numbers; HPA's 10%
    (DEFAULT_SCALING_SPEC) would hold at 93% and 11 pods (see the test above)."""
    decision = once(POOL_SCALING_DEFAULTS, 2, load(memory, queue), min_nodes=2)
    assert (decision.desired > 2) is grows, decision


@pytest.mark.parametrize(
    ("baseline", "max_nodes", "burst_max_nodes", "ceiling"),
    [
        (2, 6, 0, 6),  # no burst limit of its own: up to nodeCount.max
        (2, 6, 2, 4),  # spec.burst.maxNodes above the monthly nodes
        (2, 6, 9, 6),  # never above nodeCount.max
        (7, 6, 2, 7),  # never below the paid monthly nodes (the max was lowered under them)
        (0, 3, 1, 1),  # a pool whose monthly nodes are gone bursts from zero
    ],
)
def test_burst_ceiling_is_the_monthly_baseline_plus_burst_under_the_max(baseline, max_nodes, burst_max_nodes, ceiling):
    """One rule for the autoscaler's upper bound, Diagnose's burst limit and the pending-pod
    hints (seed D3): they call `burst_ceiling` and cannot drift apart."""
    assert burst_ceiling(baseline=baseline, max_nodes=max_nodes, burst_max_nodes=burst_max_nodes) == ceiling
