"""A Pending pod's hints list every failing check per pool of its team, and the change they
suggest, applied, lets the pod bind (issue 21 item 2; seed T2).

The property runs over generated mismatches between pods and pools: labels the node selector
and the required affinity ask for, taints, GPU models, requests larger than a node. For each
pool that the explanation gives a change for, the pod with that change passes every filter on
the pool's node and the scheduler binds it there; and the hint's text names what it changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pools.core.scheduling.explain import explain
from pools.core.scheduling.nodes import (
    NODE_SELECTOR_OPERATORS,
    NodeSelectorRequirement,
    NodeState,
    Pod,
    Taint,
    Toleration,
    filter_node,
)
from pools.core.scheduling.pod_fixes import apply_fix, fix_text, pool_fixes
from pools.core.scheduling.schedule import schedule

KEYS = ("pool", "gpu-class", "zone", "size")
VALUES = ("train", "a100", "b", "4", "10")
TAINTS = (Taint("pool", "train", "NoSchedule"), Taint("dedicated", "", "NoExecute"), Taint("gpu", "h100", "NoSchedule"), Taint("soft", "x", "PreferNoSchedule"))
MODELS = ("A100", "H100", "T4")

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
requirements = st.builds(
    lambda key, op, values: NodeSelectorRequirement(key, op, values if op in ("In", "NotIn") else values[:1] if op in ("Gt", "Lt") else ()),
    st.sampled_from(KEYS), st.sampled_from(NODE_SELECTOR_OPERATORS), st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True).map(tuple),
)  # fmt: skip


@st.composite
def fleets(draw) -> list[NodeState]:
    nodes = []
    for p in range(draw(st.integers(1, 3))):
        pool_labels, pool_taints = draw(labels), tuple(draw(st.lists(st.sampled_from(TAINTS), max_size=3, unique=True)))
        gpus = draw(st.sampled_from((0, 1, 2, 4, 8)))
        model = draw(st.sampled_from(MODELS)) if gpus else ""
        for i in range(draw(st.integers(1, 3))):
            nodes.append(NodeState(
                name=f"pool{p}-{i}", pool=f"pool{p}", cpu_milli=draw(st.sampled_from((16_000, 96_000))), memory_mib=131_072,
                gpu_count=gpus, gpu_model=model, labels={**pool_labels, **draw(labels.filter(lambda d: "zone" in d) | st.just({}))},
                taints=pool_taints, unschedulable=draw(st.booleans()) and draw(st.booleans()), ready=draw(st.booleans()) or draw(st.booleans()),
            ))  # fmt: skip
    return nodes


@st.composite
def pods(draw) -> Pod:
    gpus = draw(st.sampled_from((0, 1, 2, 8, 16)))
    milli = draw(st.sampled_from((250, 1000))) if gpus == 1 else 0
    # what a real cluster's pod may ask as ebcloud.io/gpu-milli beside or instead of whole GPUs
    shares = draw(st.sampled_from((0, 500, 1500))) if gpus >= 2 else draw(st.sampled_from((0, 1000))) if milli == 1000 else 0
    tolerations = [Toleration(t.key, "Equal" if t.value else "Exists", t.value, t.effect) for t in draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True))]
    return Pod(
        name="team/p", cpu_milli=draw(st.sampled_from((1_000, 32_000, 200_000))), memory_mib=draw(st.sampled_from((1_024, 262_144))),
        gpu_count=gpus, gpu_milli=milli, gpu_shares=shares, gpu_models=tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True))) if gpus else (),
        tolerations=tuple(tolerations), node_selector=draw(labels),
        affinity_terms=tuple(tuple(term) for term in draw(st.lists(st.lists(requirements, min_size=1, max_size=3), max_size=2))),
    )  # fmt: skip


def empty_copy(node: NodeState) -> NodeState:
    return NodeState(name=node.name, pool=node.pool, cpu_milli=node.cpu_milli, memory_mib=node.memory_mib, gpu_count=node.gpu_count,
                     gpu_model=node.gpu_model, labels=dict(node.labels), taints=node.taints, ready=node.ready, unschedulable=node.unschedulable)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(fleets(), pods())
def test_the_suggested_change_applied_lets_the_pod_bind_on_that_pool(nodes, pod):
    explanation = explain(pod, nodes)
    fixes = pool_fixes(pod, nodes)
    pools = {n.pool for n in nodes}
    fixed_pools = {f.pool for f in fixes}
    # Every pool whose every node fails a filter on emptiness has its fix; the others only wait.
    for name in pools:
        members = [n for n in nodes if n.pool == name]
        assert (name in fixed_pools) == all(filter_node(pod, n) is not None for n in members)
    for fix in fixes:
        node = next(n for n in nodes if n.name == fix.node)
        if not fix.by_pod:
            assert not node.ready or node.unschedulable
            continue
        changed = apply_fix(pod, fix)
        assert filter_node(changed, node) is None, (fix, changed)
        decision = schedule(changed, [empty_copy(node)], "bestfit")
        assert decision.node == node.name
        text = fix_text(fix, where=f"pool {fix.pool}")
        assert all(check in text for check in fix.checks)
        assert all(f'key: "{t.key}"' in text for t in fix.tolerations)
        assert all(key in text for key in fix.node_selector)
        assert any(check in hint for hint in explanation.hints for check in fix.checks)


def test_every_failing_check_of_a_pool_is_in_one_hint_not_only_the_first():
    """The pool's taint, its labels and its GPU model: kube-scheduler names only the taint."""
    node = NodeState(name="t-0", pool="train-a", cpu_milli=96_000, memory_mib=131_072, gpu_count=8, gpu_model="A100",
                     labels={"pool": "infer"}, taints=(Taint("pool", "train", "NoSchedule"),))  # fmt: skip
    pending = Pod(name="team/p", cpu_milli=1_000, memory_mib=1_024, gpu_count=1, gpu_models=("H100",), node_selector={"pool": "train"})
    explanation = explain(pending, [node])
    assert explanation.message == "0/1 nodes are available: 1 node(s) had untolerated taint(s). preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    (hint,) = explanation.hints
    assert hint.startswith("pool train-a (1 node): 3 checks fail: untolerated taint pool=train:NoSchedule; "
                           "the pod's nodeSelector needs pool=train but its nodes have pool=infer; "
                           "the pod allows GPU models H100 but these nodes offer A100.")  # fmt: skip
    assert "set nodeSelector pool: infer; allow GPU model A100 (annotation ebcloud.io/gpu-models)." in hint
    assert "add nodeLabels: {pool: train} to the pool spec" in hint
    assert hint.endswith('Also add to the pod spec:\ntolerations:\n- key: "pool"\n  operator: "Equal"\n  value: "train"\n  effect: "NoSchedule"')
