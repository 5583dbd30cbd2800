"""The three-way merge of pool documents behind the edit form's answer to an outdated save
(pools/core/spec_merge.py): the lead's changes since the opened version go onto the current one."""

from __future__ import annotations

from pools.core.spec_merge import Conflict, merge3

BASE = {"spec": {"nodeCount": {"min": 1, "max": 4}, "systemImage": "a", "sharedWith": ["x"], "autoRenew": True}}


def test_each_side_keeps_what_only_it_changed_down_to_the_leaves():
    mine = {"spec": {"nodeCount": {"min": 2, "max": 4}, "systemImage": "b", "sharedWith": ["x"], "autoRenew": True}}
    theirs = {"spec": {"nodeCount": {"min": 1, "max": 6}, "systemImage": "a", "sharedWith": ["x", "y"], "autoRenew": True, "preemptible": False}}
    merged, conflicts = merge3(BASE, mine, theirs)
    assert merged == {"spec": {"nodeCount": {"min": 2, "max": 6}, "systemImage": "b", "sharedWith": ["x", "y"], "autoRenew": True, "preemptible": False}}
    assert conflicts == []


def test_a_removal_is_a_change_and_a_value_both_changed_keeps_the_leads():
    mine = {"spec": {"nodeCount": {"min": 1, "max": 5}, "systemImage": "a", "sharedWith": ["x"]}}  # autoRenew removed
    theirs = {"spec": {"nodeCount": {"min": 1, "max": 6}, "sharedWith": ["x"], "autoRenew": True}}  # systemImage removed
    merged, conflicts = merge3(BASE, mine, theirs)
    assert merged == {"spec": {"nodeCount": {"min": 1, "max": 5}, "sharedWith": ["x"]}}
    assert conflicts == [Conflict("spec.nodeCount.max", 5, 6)]


def test_the_same_change_on_both_sides_is_no_conflict_and_a_list_is_one_value():
    mine = {"spec": {**BASE["spec"], "sharedWith": ["x", "z"]}}
    theirs = {"spec": {**BASE["spec"], "sharedWith": ["x", "y"], "systemImage": "b"}}
    assert merge3(BASE, theirs, theirs) == (theirs, [])
    merged, conflicts = merge3(BASE, mine, theirs)
    assert merged["spec"]["sharedWith"] == ["x", "z"] and merged["spec"]["systemImage"] == "b"
    assert conflicts == [Conflict("spec.sharedWith", ["x", "z"], ["x", "y"])]
