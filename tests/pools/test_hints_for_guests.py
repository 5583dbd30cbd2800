"""A Pending pod's hints on a pool lent to its team (`spec.sharedWith`) never send it to the
owner's commands or spec (each a 404 to the guest's team), and a change they suggest is pasted
as written (found by a QA sweep of the demo)."""

from __future__ import annotations

import yaml

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import NodeState, Pod
from pools.core.scheduling.pod_fixes import yaml_value
from pools.core.scheduling.waiting import PoolProspect, starting_hint, waiting_hints

OWNER, GUEST = "team:algorithm", "team:inference"


def node(name="train-pool-a-1", *, gpus=8, labels=None, pool="train-pool-a") -> NodeState:
    return NodeState(name, cpu_milli=96000, memory_mib=1_000_000, gpu_count=gpus, gpu_model="A100_80G", pool=pool,
                     labels=labels or {}, teams=frozenset({OWNER, GUEST}), owner=OWNER)


def pod(team=GUEST, **kwargs) -> Pod:
    return Pod("inference/guest", gpu_count=8, team=team, **kwargs)


def test_a_guest_waiting_for_a_lent_pools_payment_or_nodes_is_shown_none_of_its_commands():
    paying = PoolProspect(template=node(), min_nodes=1, max_nodes=3, awaiting_payment=(5,))
    starting = PoolProspect(template=node(), min_nodes=1, max_nodes=3, starting_nodes=(("train-pool-a-1", "Provisioning"),))
    for prospect in (paying, starting):
        (guest,) = waiting_hints(pod(), [prospect])
        (owner,) = waiting_hints(pod(team=OWNER), [prospect])
        assert "ebcloud node-pool" not in guest and "ebcloud node-pool" in owner, (guest, owner)
    assert "ebcloud node-pool" not in starting_hint(starting, 1, guest=True)
    assert "`ebcloud node-pool events train-pool-a`" in starting_hint(starting, 1)


def test_a_guest_is_told_to_ask_for_a_lent_pools_labels_and_the_labels_paste_as_written():
    lent = node(labels={"pool": "train"})
    asks = pod(node_selector={"lend": "yes"})
    (hint,) = [h for h in explain(asks, [lent]).hints if "nodeLabels" in h]
    assert 'ask the lead of the team that lends it to add nodeLabels: {lend: "yes"} to the pool spec' in hint
    assert yaml.safe_load('{lend: "yes"}') == {"lend": "yes"}
    (own,) = [h for h in explain(pod(team=OWNER, node_selector={"lend": "yes"}), [lent]).hints if "nodeLabels" in h]
    assert 'add nodeLabels: {lend: "yes"} to the pool spec' in own and "ask the lead" not in own
    assert [yaml_value(v) for v in ("train", "yes", "1.0", "~", "a100")] == ["train", '"yes"', '"1.0"', '"~"', "a100"]


def test_a_pool_with_no_ready_node_yet_that_will_take_the_pod_is_no_never_fits():
    small = node("small-1", gpus=2, pool="small")
    coming = node("train-pool-a-template", gpus=8)
    assert any("no node can ever fit it" in h for h in explain(pod(), [small]).hints)
    assert not any("no node can ever fit it" in h for h in explain(pod(), [small], coming=[coming]).hints)


def test_a_label_that_exists_or_bounds_a_number_is_suggested_as_yaml_that_reads_back():
    """`Exists` asks for any value, `Gt 10` for 11: both read as text once quoted."""
    from pools.core.scheduling.nodes import NodeSelectorRequirement

    terms = ((NodeSelectorRequirement("spot", "Exists", ()), NodeSelectorRequirement("gen", "Gt", ("10",))),)
    (hint,) = [h for h in explain(pod(team=OWNER, affinity_terms=terms), [node()]).hints if "nodeLabels" in h]
    assert 'add nodeLabels: {gen: "11", spot: ""} to the pool spec' in hint
    assert yaml.safe_load('{gen: "11", spot: ""}') == {"gen": "11", "spot": ""}
