"""Xid classification, the repair ladder, pool gates and the driver/CUDA check (pools.core.repair)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.repair import (
    CUDA_MIN_DRIVER,
    LADDER,
    NodeHealth,
    RepairAttempt,
    RepairPolicy,
    XidEvent,
    classify,
    cuda_driver_condition,
    fault_persisted,
    next_action,
    repair_allowed,
    unavailable_repair,
)

T0 = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)
APPLICATION_XIDS = [13, 31, 43, 94]
RESET_XIDS = [46, 48, 62, 64, 74, 95, 109, 119, 120, 140]


def minutes(n):
    return T0 + timedelta(minutes=n)


# --- classification ----------------------------------------------------------------------


@pytest.mark.parametrize("xid", APPLICATION_XIDS)
def test_application_xids_are_events_only(xid):
    cls = classify(xid)
    assert (cls.kind, cls.action, cls.alert) == ("application", "none", False)
    decision = next_action([XidEvent(xid, minutes(0), gpu_index=2)], minutes(30))
    assert decision.action == "none"
    assert decision.reason == "ApplicationXid"
    assert decision.xid == xid and decision.gpu_index == 2


@pytest.mark.parametrize("xid", RESET_XIDS)
def test_reset_class_xids_start_with_a_gpu_reset_of_that_gpu(xid):
    assert classify(xid).kind == "reset"
    decision = next_action([XidEvent(xid, minutes(0), gpu_index=5)], minutes(15))
    assert (decision.action, decision.reason, decision.gpu_index) == (
        "reset_gpu",
        "ResetClassXid",
        5,
    )


def test_xid_79_replaces_the_node_at_once():
    cls = classify(79)
    assert (cls.kind, cls.action, cls.alert, cls.nvidia_action) == (
        "fatal",
        "replace",
        True,
        "RESTART_BM",
    )
    decision = next_action([XidEvent(79, minutes(0), gpu_index=1)], minutes(0))
    assert (decision.action, decision.reason, decision.gpu_index) == ("replace", "FatalXid", 1)
    assert "GPU has fallen off the bus" in decision.message


def test_xid_79_is_not_closed_by_a_reset_or_a_reboot():
    history = [
        XidEvent(79, minutes(0), 1),
        RepairAttempt("reset_gpu", minutes(1), True, 1),
        RepairAttempt("reboot", minutes(2), True),
    ]
    assert next_action(history, minutes(3)).action == "replace"


@pytest.mark.parametrize(
    ("xid", "mnemonic", "description"),
    [
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus"),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "DBE (Double Bit Error) ECC Error"),
        (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception"),
        (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault"),
        (119, "GSP_RPC_TIMEOUT", "GSP RPC timeout"),
    ],
)
def test_each_xid_carries_its_catalog_name_and_description(xid, mnemonic, description):
    assert (classify(xid).mnemonic, classify(xid).description) == (mnemonic, description)


def test_an_unknown_xid_raises_an_alert_but_takes_no_action():
    cls = classify(999)
    assert (cls.kind, cls.action, cls.alert) == ("unknown", "none", True)
    decision = next_action([XidEvent(999, minutes(0), 0)], minutes(20))
    assert (decision.action, decision.reason) == ("none", "UnknownXid")
    assert "a person should look" in decision.message


@pytest.mark.parametrize("bad", [-1, True, "48", 4.8])
def test_classify_rejects_values_that_are_not_xids(bad):
    with pytest.raises(ValueError):
        classify(bad)


def test_a_quiet_node_needs_nothing():
    decision = next_action([], minutes(0))
    assert (decision.action, decision.reason) == ("none", "NoOpenFault")


# --- the ladder --------------------------------------------------------------------------


def test_escalation_goes_reset_then_reboot_then_replace():
    history = [XidEvent(48, minutes(0), 3)]
    assert next_action(history, minutes(15)).action == "reset_gpu"

    history.append(RepairAttempt("reset_gpu", minutes(16), True, 3))
    assert next_action(history, minutes(17)).reason == "NoOpenFault"

    history.append(XidEvent(48, minutes(120), 3))
    decision = next_action(history, minutes(135))
    assert (decision.action, decision.reason) == ("reboot", "FaultRecurred")
    assert "came back within 24h of reset_gpu" in decision.message

    history += [RepairAttempt("reboot", minutes(140), True, 3), XidEvent(95, minutes(600), 3)]
    decision = next_action(history, minutes(615))
    assert (decision.action, decision.reason, decision.gpu_index) == ("replace", "FaultRecurred", 3)


def test_window_expiry_resets_the_ladder():
    history = [
        XidEvent(48, minutes(0), 0),
        RepairAttempt("reset_gpu", minutes(10), True, 0),
        XidEvent(48, minutes(60), 0),
        RepairAttempt("reboot", minutes(70), True),
    ]
    a_day_later = T0 + timedelta(hours=25)
    history.append(XidEvent(48, a_day_later, 0))
    assert next_action(history, a_day_later + timedelta(minutes=10)).action == "reset_gpu"
    longer = RepairPolicy(window=timedelta(hours=30))
    assert next_action(history, a_day_later + timedelta(minutes=10), longer).action == "replace"


def test_failed_repair_escalates_at_once():
    history = [XidEvent(119, minutes(0), 4), RepairAttempt("reset_gpu", minutes(12), False, 4)]
    decision = next_action(history, minutes(13))
    assert (decision.action, decision.reason, decision.gpu_index) == ("reboot", "RepairFailed", 4)
    assert "reset_gpu at" in decision.message and "failed and Xid 119" in decision.message

    history.append(RepairAttempt("reboot", minutes(20), False, 4))
    assert next_action(history, minutes(21)).action == "replace"


def test_a_failed_replacement_is_retried_and_never_goes_beyond_replace():
    history = [XidEvent(79, minutes(0), 0), RepairAttempt("replace", minutes(1), False, 0)]
    decision = next_action(history, minutes(2))
    assert (decision.action, decision.reason) == ("replace", "RepairFailed")


def test_a_repair_in_progress_blocks_a_second_action():
    history = [
        XidEvent(48, minutes(0), 1),
        RepairAttempt("reset_gpu", minutes(10), None, 1),
        XidEvent(79, minutes(11), 1),
    ]
    decision = next_action(history, minutes(12))
    assert (decision.action, decision.reason) == ("none", "RepairInProgress")


def test_a_reset_of_another_gpu_does_not_count_as_a_recurrence():
    history = [
        XidEvent(48, minutes(0), 0),
        RepairAttempt("reset_gpu", minutes(10), True, 0),
        XidEvent(48, minutes(60), 6),
    ]
    decision = next_action(history, minutes(75))
    assert (decision.action, decision.gpu_index) == ("reset_gpu", 6)


def test_a_reboot_counts_against_every_gpu_on_the_node():
    history = [
        XidEvent(62, minutes(0), 0),
        RepairAttempt("reboot", minutes(10), True, 0),
        XidEvent(64, minutes(60), 7),
    ]
    assert next_action(history, minutes(75)).action == "replace"


def test_a_burst_of_xids_in_one_incident_does_not_skip_rungs():
    history = [
        XidEvent(xid, minutes(0) + timedelta(seconds=s), 2)
        for s, xid in enumerate([48, 64, 48, 95, 48])
    ]
    assert next_action(history, minutes(15)).action == "reset_gpu"


def test_tries_per_action_retries_a_rung_before_climbing():
    policy = RepairPolicy(tries_per_action=2)
    history = [
        XidEvent(46, minutes(0), 0),
        RepairAttempt("reset_gpu", minutes(10), True, 0),
        XidEvent(46, minutes(60), 0),
    ]
    decision = next_action(history, minutes(70), policy)
    assert (decision.action, decision.reason) == ("reset_gpu", "FaultRecurred")
    history += [RepairAttempt("reset_gpu", minutes(71), True, 0), XidEvent(46, minutes(90), 0)]
    assert next_action(history, minutes(100), policy).action == "reboot"


def test_a_successful_replacement_starts_a_new_ladder():
    history = [
        XidEvent(79, minutes(0), 0),
        RepairAttempt("replace", minutes(5), True, 0),
        XidEvent(48, minutes(300), 2),
    ]
    assert next_action(history, minutes(310)).action == "reset_gpu"


def test_future_events_are_ignored():
    assert next_action([XidEvent(79, minutes(10), 0)], minutes(0)).action == "none"


@pytest.mark.parametrize("kwargs", [{"window": timedelta(0)}, {"tries_per_action": 0}])
def test_policy_rejects_nonsense(kwargs):
    with pytest.raises(ValueError):
        RepairPolicy(**kwargs)


def test_a_repair_attempt_must_be_a_rung_of_the_ladder():
    with pytest.raises(ValueError):
        RepairAttempt("none", minutes(0), True)


# --- hypothesis ---------------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.sampled_from(RESET_XIDS + APPLICATION_XIDS + [79, 999]),
        st.integers(min_value=0, max_value=3),  # gpu
        st.booleans(),  # did the repair work
        st.integers(min_value=1, max_value=60),  # minutes to the next fault
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(min_value=1, max_value=3))
def test_the_ladder_never_de_escalates_inside_a_window(script, tries):
    """Follow each decision, record its outcome, add the next fault: until a replacement
    works (a new machine), the rungs chosen never go down. The whole run fits in 24 h."""
    policy = RepairPolicy(tries_per_action=tries)
    history, now, rungs = [], T0, []
    for xid, gpu, worked, gap in script:
        now += timedelta(minutes=gap)
        history.append(XidEvent(xid, now, gpu))
        decision = next_action(history, now, policy)
        if decision.action == "none":
            continue
        rungs.append(LADDER.index(decision.action))
        history.append(RepairAttempt(decision.action, now, worked, decision.gpu_index))
        if decision.action == "replace" and worked:
            assert rungs == sorted(rungs)
            rungs = []
    assert rungs == sorted(rungs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(APPLICATION_XIDS),
            st.integers(0, 1440),
            st.one_of(st.none(), st.integers(0, 7)),
        ),
        max_size=30,
    )
)
def test_the_action_for_an_application_xid_is_always_none(events):
    history = [XidEvent(xid, T0 + timedelta(minutes=m), gpu) for xid, m, gpu in events]
    assert next_action(history, T0 + timedelta(hours=24)).action == "none"
    assert all(classify(xid).action == "none" for xid, _, _ in events)


# --- pool gates ---------------------------------------------------------------------------


def pool(n, unhealthy=(), since=None, extra=None):
    return [
        NodeHealth(
            f"node-{i}",
            healthy=i not in unhealthy,
            unhealthy_since=since if i in unhealthy else None,
            **(extra or {}).get(i, {}),
        )
        for i in range(n)
    ]


def test_repair_is_paused_when_more_than_20_percent_of_the_pool_is_unhealthy():
    gate = repair_allowed(pool(10, unhealthy={0, 1, 2}, since=minutes(0)))
    assert (gate.allowed, gate.reason, gate.event_type) == (False, "RepairPaused", "Warning")
    assert "3 of 10 nodes (30%)" in gate.message and "20% limit" in gate.message


def test_exactly_20_percent_unhealthy_may_still_repair():
    nodes = pool(10, unhealthy={0, 1}, since=minutes(0))
    assert repair_allowed(nodes).allowed
    assert repair_allowed(nodes, node="node-0", now=minutes(10)).allowed


def test_a_small_pool_can_always_heal_one_node():
    nodes = pool(2, unhealthy={1}, since=minutes(0))
    assert repair_allowed(nodes, node="node-1", now=minutes(11)).allowed
    assert repair_allowed(pool(2, unhealthy={0, 1}, since=minutes(0))).reason == "RepairPaused"


def test_repairs_are_serial_per_pool():
    nodes = pool(10, unhealthy={0, 1}, since=minutes(0), extra={1: {"repairing": True}})
    gate = repair_allowed(nodes, node="node-0", now=minutes(30))
    assert (gate.allowed, gate.reason) == (False, "RepairInProgress")
    assert "one node at a time" in gate.message and "node-1" in gate.message
    assert repair_allowed(nodes, node="node-1", now=minutes(30)).reason == "RepairInProgress"
    assert repair_allowed(pool(10, {0}, minutes(0)), in_progress=["node-9"]).allowed is False
    assert repair_allowed(pool(10, {0}, minutes(0)), in_progress="node-9").message.endswith(
        "node-9 is being repaired"
    )
    assert repair_allowed(nodes, in_progress=[], node="node-0", now=minutes(30)).allowed


def test_a_gpu_fault_must_persist_ten_minutes_before_repair():
    nodes = pool(4, unhealthy={0}, since=minutes(0))
    gate = repair_allowed(nodes, node="node-0", now=minutes(5))
    assert (gate.allowed, gate.reason, gate.retry_at) == (
        False,
        "WaitingForFaultToPersist",
        minutes(10),
    )
    assert repair_allowed(nodes, node="node-0", now=minutes(10)).allowed


def test_xid_79_does_not_wait_for_the_fault_to_persist():
    nodes = pool(4, unhealthy={0}, since=minutes(0), extra={0: {"fatal": True}})
    assert repair_allowed(nodes, node="node-0", now=minutes(0)).allowed
    assert fault_persisted(nodes[0], minutes(0))


def test_a_healthy_node_is_not_repaired():
    gate = repair_allowed(pool(3), node="node-2", now=minutes(0))
    assert (gate.allowed, gate.reason) == (False, "NodeHealthy")


def test_an_unhealthy_node_without_a_start_time_has_not_persisted():
    assert not fault_persisted(NodeHealth("n", healthy=False), minutes(60))


def test_the_gate_rejects_bad_arguments():
    with pytest.raises(ValueError):
        repair_allowed(pool(3), max_unhealthy=-1)
    with pytest.raises(ValueError):
        repair_allowed(pool(3, {0}, minutes(0)), node="node-0")
    with pytest.raises(ValueError):
        repair_allowed(pool(3), node="missing", now=minutes(0))


# --- driver / CUDA -------------------------------------------------------------------------


def test_a_driver_too_old_for_the_workload_cuda_is_reported():
    condition = cuda_driver_condition("535.104.05", "12.4")
    assert (condition.type, condition.status) == ("CudaDriverMismatch", "True")
    assert condition.reason == "DriverBelowToolkitMinimum"
    assert condition.message == "workload CUDA 12.4 needs driver >= 550.54.14, node has 535.104.05"


def test_a_driver_below_the_minor_version_floor_cannot_start_cuda_at_all():
    condition = cuda_driver_condition("520.61.05", "12.2")
    assert condition.reason == "DriverTooOldForCudaMajor"
    assert condition.message == "workload CUDA 12.2 needs driver >= 535.54.03, node has 520.61.05"


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [("12.2", "535.54.03"), ("12.0", "525.60.13"), ("11.8", "520.61.05"), ("12.4", "550.54.14")],
)
def test_the_minimum_driver_table_matches_nvidias(cuda, driver):
    assert CUDA_MIN_DRIVER[tuple(int(p) for p in cuda.split("."))] == driver
    assert cuda_driver_condition(driver, cuda) is None


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [("535.104.05", "12.2"), ("570.26", "12.8"), ("550.54.14", "11.8"), ("535.104.05", "10.2")],
)
def test_a_new_enough_driver_reports_nothing(driver, cuda):
    assert cuda_driver_condition(driver, cuda) is None


def test_a_patch_release_uses_its_minor_release_minimum():
    assert cuda_driver_condition("550.54.14", "12.4.1") is None
    assert cuda_driver_condition("545.23.08", "12.4.1").reason == "DriverBelowToolkitMinimum"


def test_a_two_part_driver_version_compares_correctly():
    assert cuda_driver_condition("570.26", "12.8") is None
    assert cuda_driver_condition("570.25", "12.8").message.endswith("node has 570.25")


def test_a_cuda_release_missing_from_the_table_is_unknown_unless_the_driver_settles_it():
    assert cuda_driver_condition("575.51.03", "12.7") is None
    assert cuda_driver_condition("560.35.03", "12.7").status == "Unknown"
    assert cuda_driver_condition("515.43.04", "12.7").reason == "DriverTooOldForCudaMajor"
    assert cuda_driver_condition("999.0", "14.0").reason == "UnknownCudaVersion"


@pytest.mark.parametrize(("driver", "cuda"), [("", "12.4"), ("535", "twelve"), ("r535", "12.4")])
def test_versions_that_cannot_be_read_are_rejected(driver, cuda):
    with pytest.raises(ValueError):
        cuda_driver_condition(driver, cuda)


@pytest.mark.parametrize(("driver", "cuda"), [("٥٣٥.١٠٤.٠٥", "12.4"), ("535.104.05", "١٢.٤"), ("５５０.54.14", "12.4")])
def test_versions_are_written_in_ascii_digits(driver, cuda):
    """`\\d` and int() read other scripts' digits: "٥٣٥.١٠٤" passed for driver 535.104 (unparseable: no condition)."""
    with pytest.raises(ValueError):
        cuda_driver_condition(driver, cuda)


def test_a_node_out_of_the_clusters_use_is_replaced_after_half_an_hour_with_one_message_while_it_lasts():
    fault = "its Node is not Ready (Ready=Unknown)"
    assert unavailable_repair(fault, minutes(0), minutes(29)) is None
    assert unavailable_repair("", None, minutes(90)) is None
    at_30, at_90 = unavailable_repair(fault, minutes(0), minutes(30)), unavailable_repair(fault, minutes(0), minutes(90))
    assert (at_30.action, at_30.reason, at_30.gpu_index, at_30.xid) == ("replace", "NodeUnavailable", None, None)
    assert at_30 == at_90  # a pause or a repair left to a person repeats it: written once
    assert at_30.message == (
        "the cluster has run no pod on the node since 2025-03-01 08:00 UTC, over 30m: its Node is not Ready (Ready=Unknown); the node must be replaced"
    )
