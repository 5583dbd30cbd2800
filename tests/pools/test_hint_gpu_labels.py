"""A Pending pod's hint never tells a lead to label a pool as a GPU it does not have (seed T2).

A pod with `nodeSelector: {gpu-class: l40s}` waiting beside a T4 pool was told "add nodeLabels:
{gpu-class: l40s} to the pool spec": done, the pod lands on a T4. A label whose key names
the GPU model (`gpu-class`, `nvidia.com/gpu.product`, `cloud.google.com/gke-accelerator`) is offered
to a pool only with a value that names the pool's own model; any other label (`pool: fh`) is
offered as before.
"""

from __future__ import annotations

from pools.core.diagnose.blockers import pool_blockers
from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import NodeSelectorRequirement, NodeState, Pod
from pools.core.scheduling.pod_fixes import node_checks


def t4(**labels: str) -> NodeState:
    return NodeState("batch-spot-t4-0", 16000, 64 * 1024, 1, "T4", pool="batch-spot-t4", labels=labels)


def a100(**labels: str) -> NodeState:
    return NodeState("train-0", 128000, 1024 * 1024, 8, "A100_80G", pool="train", labels=labels)


def pod(**kw) -> Pod:
    return Pod("algorithm/w", cpu_milli=1000, memory_mib=1024, gpu_count=1, team="algorithm", **kw)


def test_a_gpu_label_naming_another_model_is_never_offered_to_the_pool():
    wants_l40s = pod(node_selector={"gpu-class": "l40s"})
    for node in (t4(), t4(**{"gpu-class": "t4"})):
        fix = node_checks(wants_l40s, node)
        assert fix.pool_labels == {}
        assert "nodeLabels" not in explain(wants_l40s, [node]).hints[0]
        (blocker,) = pool_blockers(wants_l40s, node)
        assert "spec.nodeLabels" not in blocker.fix and "nodeSelector" in blocker.fix


def test_a_gpu_label_naming_the_pools_own_model_is_offered():
    """`a100`, `A100-80G`, `nvidia-a100-sxm4-80gb` all name A100_80G; an affinity's `In` list
    offers the value that names the node's model, not its first."""
    for value in ("a100", "A100-80G", "NVIDIA-A100-SXM4-80GB"):
        assert node_checks(pod(node_selector={"gpu-class": value}), a100()).pool_labels == {"gpu-class": value}
    term = ((NodeSelectorRequirement("cloud.google.com/gke-accelerator", "In", ("nvidia-l4", "nvidia-tesla-t4")),),)
    fix = node_checks(pod(affinity_terms=term), t4())
    assert fix.pool_labels == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert "add nodeLabels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}" in explain(pod(affinity_terms=term), [t4()]).hints[0]


def test_other_labels_are_offered_as_before():
    fix = node_checks(pod(node_selector={"pool": "fh", "gpu-class": "h100"}), a100(pool="train"))
    assert fix.pool_labels == {"pool": "fh"}
    assert fix.node_selector == {"pool": "train", "gpu-class": None}


def test_only_keys_that_name_a_model_are_held_to_it_and_the_whole_model_must_match():
    """Review: a key merely containing "gpu" (`nvidia.com/gpu.present`, `gpu-pool`) was held to
    the model, and a value matching the model's first word passed (`rtx-4090` for RTX_A6000,
    `nvidia-a100-80gb` for a 40 GB A100)."""
    for key, value in (("gpu", "true"), ("nvidia.com/gpu.present", "true"), ("accelerator", "nvidia"), ("gpu-pool", "fh")):
        assert node_checks(pod(node_selector={key: value}), t4()).pool_labels == {key: value}
    present = ((NodeSelectorRequirement("nvidia.com/gpu.present", "Exists", ()),),)
    assert node_checks(pod(affinity_terms=present), t4()).pool_labels == {"nvidia.com/gpu.present": ""}
    a6000 = NodeState("ws-0", 64000, 256 * 1024, 4, "RTX_A6000", pool="ws")
    assert node_checks(pod(node_selector={"gpu-class": "rtx-4090"}), a6000).pool_labels == {}
    a100_40g = NodeState("infer-0", 128000, 1024 * 1024, 8, "A100", pool="infer")
    assert node_checks(pod(node_selector={"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}), a100_40g).pool_labels == {}
    assert node_checks(pod(node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}), a100_40g).pool_labels != {}


def test_a_key_the_spec_refuses_is_never_offered_to_the_pool():
    """`ebcloud.io/pool: no-such-pool` was offered as a node label; the spec refuses the key (QA)."""
    for key in ("ebcloud.io/pool", "kubernetes.io/hostname"):
        fix = node_checks(pod(node_selector={key: "elsewhere"}), t4())
        assert fix.pool_labels == {} and fix.node_selector == {key: None}
        assert "nodeLabels" not in explain(pod(node_selector={key: "elsewhere"}), [t4()]).hints[0]
