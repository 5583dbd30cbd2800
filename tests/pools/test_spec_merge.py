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


def test_a_mapping_the_opened_version_lacked_merges_key_by_key():
    """Labels added on both sides to a pool that had none were one value each, so the lead's
    set replaced the other's (found by a QA sweep); and removing the last label is removing
    that key, not the whole mapping with the keys the other side added."""
    base = {"spec": {"systemImage": "a"}}
    mine = {"metadata": {"labels": {"env": "a"}}, "spec": {"systemImage": "a", "nodeLabels": {"a": "1"}}}
    theirs = {"metadata": {"labels": {"owner": "b"}}, "spec": {"systemImage": "a", "nodeLabels": {"b": "1"}}}
    merged, conflicts = merge3(base, mine, theirs)
    assert merged == {"metadata": {"labels": {"owner": "b", "env": "a"}}, "spec": {"systemImage": "a", "nodeLabels": {"b": "1", "a": "1"}}}
    assert conflicts == []
    labelled = {"metadata": {"labels": {"env": "a"}}, "spec": {}}
    merged, conflicts = merge3(labelled, {"metadata": {}, "spec": {}}, {"metadata": {"labels": {"env": "a", "owner": "b"}}, "spec": {}})
    assert merged == {"metadata": {"labels": {"owner": "b"}}, "spec": {}} and conflicts == []
    merged, _ = merge3(labelled, {"metadata": {}, "spec": {}}, labelled)
    assert merged == {"metadata": {}, "spec": {}}  # removed on one side, untouched on the other: gone, no empty mapping left


def test_a_scaling_block_is_one_value():
    scaling = {"spec": {"scaling": {"default": {"metrics": []}}}}
    merged, conflicts = merge3({"spec": {}}, scaling, {"spec": {"scaling": {"scaleUp": {"policies": []}}}})
    assert merged == scaling and [c.path for c in conflicts] == ["spec.scaling"]
