"""The scheduler extender's decisions over plain nodes (pools/core/scheduling/extender.py): whose
pods a pool's node refuses, which refusals preemption can mend, which of kube-scheduler's
preemption candidates are kept, and how nodes outside the pools rank."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pools.core.scheduling.extender import (
    MAX_EXTENDER_PRIORITY,
    NO_TEAM,
    REASON_UNMANAGED,
    TEAM_UNKNOWN,
    UNKNOWN_VICTIM,
    Refusal,
    Victim,
    filter_nodes,
    node_scores,
    preemption_nodes,
    refusal,
    with_outside,
)
from pools.core.scheduling.nodes import (
    REASON_AFFINITY,
    REASON_CPU,
    REASON_GPU,
    REASON_GPU_MODEL,
    REASON_TAINT,
    REASON_TEAM,
    NodeState,
    Pod,
    Taint,
    Toleration,
)
from pools.core.scheduling.policies import BestFitPolicy

ALGORITHM, INFERENCE = "1", "2"  # team identities: the teams' ids as text
TRAIN = Toleration("pool", "Equal", "train", "NoSchedule")


def pool_node(name: str = "train-0", *, teams=frozenset({ALGORITHM}), gpus_free: int = 8, model: str = "A100") -> NodeState:
    """An 8-GPU node of team algorithm's pool, tainted pool=train:NoSchedule."""
    node = NodeState(name, cpu_milli=96_000, memory_mib=393_216, gpu_count=8, gpu_model=model, pool="train",
                     labels={"pool": "train"}, taints=(Taint("pool", "train"),), teams=teams, owner=ALGORITHM)  # fmt: skip
    busy = 8 - gpus_free
    if busy:
        node.bind(Pod("algorithm/owner", cpu_milli=8_000, memory_mib=1_024, gpu_count=busy, team=ALGORITHM), tuple(range(busy)))
    return node


def pod(team: str, *, gpus: int = 0, cpu: int = 4_000, **kwargs) -> Pod:
    return Pod(f"ns/p-{team}-{gpus}", cpu_milli=cpu, memory_mib=8_192, gpu_count=gpus, tolerations=(TRAIN,), team=team, **kwargs)


# --- the team rule, for every pod --------------------------------------------------------------


def test_another_teams_pods_are_refused_on_the_pool_whatever_they_ask_and_nothing_evicted_helps():
    for gpus in (0, 1):
        assert refusal(pod(INFERENCE, gpus=gpus), pool_node()) == Refusal(REASON_TEAM, True)
    assert refusal(pod(INFERENCE), pool_node(teams=frozenset({ALGORITHM, INFERENCE}))) is None  # lent to it


def test_the_owners_pods_pass_gpu_or_not():
    assert refusal(pod(ALGORITHM), pool_node()) is None
    assert refusal(pod(ALGORITHM, gpus=8), pool_node()) is None


def test_a_pod_whose_team_is_not_known_is_refused_on_every_pool():
    assert refusal(pod(TEAM_UNKNOWN), pool_node()) == Refusal(REASON_TEAM, True)
    assert refusal(pod(TEAM_UNKNOWN), None) is None  # a plain node is not the product's to refuse
    assert refusal(pod(TEAM_UNKNOWN, gpus=1), None) == Refusal(REASON_UNMANAGED, True)


def test_pods_of_no_team_run_everywhere():
    """kube-system and the cluster's DaemonSets: not a team's pods. Asking no GPU, nothing of
    ours refuses them (kube-scheduler's own filters have decided); asking GPUs, the pool's
    accounting of its GPUs still holds, but not the team rule."""
    full = pool_node(gpus_free=0)
    assert refusal(pod(NO_TEAM), full) is None
    assert refusal(pod(NO_TEAM), None) is None
    assert refusal(pod(NO_TEAM, gpus=1), pool_node()) is None
    assert refusal(pod(NO_TEAM, gpus=1), None) is None
    assert refusal(pod(NO_TEAM, gpus=1), full) == Refusal(REASON_GPU, False)


def test_nodes_outside_the_pools_refuse_only_a_teams_gpu_pods():
    assert refusal(pod(ALGORITHM, gpus=1), None) == Refusal(REASON_UNMANAGED, True)
    assert refusal(pod(ALGORITHM), None) is None


# --- what preemption can mend ------------------------------------------------------------------


def test_resources_held_by_other_pods_are_a_refusal_preemption_can_mend_unless_the_node_is_too_small():
    node = pool_node(gpus_free=0)
    assert refusal(pod(ALGORITHM, gpus=1), node) == Refusal(REASON_GPU, False)
    assert refusal(pod(ALGORITHM, gpus=9), node) == Refusal(REASON_GPU, True)
    assert refusal(pod(ALGORITHM, cpu=100_000), pool_node()) == Refusal(REASON_CPU, True)


def test_taints_affinity_and_gpu_models_are_refusals_preemption_cannot_mend():
    untolerating = Pod("ns/p", cpu_milli=1_000, gpu_count=1, team=ALGORITHM)
    assert refusal(untolerating, pool_node()) == Refusal(REASON_TAINT, True)
    elsewhere = pod(ALGORITHM, gpus=1, node_selector={"pool": "infer"})
    assert refusal(elsewhere, pool_node()) == Refusal(REASON_AFFINITY, True)
    assert refusal(pod(ALGORITHM, gpus=1, gpu_models=("H100",)), pool_node()) == Refusal(REASON_GPU_MODEL, True)


def test_filter_sorts_the_refusals_into_failed_and_unresolvable():
    states = {"full": pool_node("full", gpus_free=0), "free": pool_node("free"),
              "theirs": pool_node("theirs", teams=frozenset({INFERENCE}))}  # fmt: skip
    result = filter_nodes(pod(ALGORITHM, gpus=1), states, ["full", "free", "theirs", "plain"])
    assert result.passed == ["free"]
    assert result.failed == {"full": REASON_GPU}
    assert result.unresolvable == {"theirs": REASON_TEAM, "plain": REASON_UNMANAGED}


def test_preemption_keeps_only_the_candidates_where_evicting_pods_lets_the_pod_run_and_may():
    """The owners' node, full: kube-scheduler would evict its pods for another team's pod; and
    on a lent node a guest's pod runs on the free capacity: it never evicts the owner's pods."""
    states = {"owners": pool_node("owners", gpus_free=0), "lent": pool_node("lent", teams=frozenset({ALGORITHM, INFERENCE}), gpus_free=0)}
    owners_pods = {name: [Victim("algorithm/owner", ALGORITHM)] for name in ("owners", "lent", "plain")}
    guests_pods = [Victim("algorithm/owner", INFERENCE)]
    assert preemption_nodes(pod(INFERENCE, gpus=1), states, owners_pods) == []
    assert preemption_nodes(pod(INFERENCE, gpus=1), states, {"lent": guests_pods, "owners": guests_pods}) == ["lent"]  # its own team's pods
    assert preemption_nodes(pod(INFERENCE, gpus=1), states, {"lent": [UNKNOWN_VICTIM]}) == []  # a victim not mirrored yet counts as the owner's
    assert preemption_nodes(pod(ALGORITHM, gpus=1), states, owners_pods) == ["owners", "lent"]
    assert preemption_nodes(pod(ALGORITHM, gpus=1, gpu_models=("H100",)), states, owners_pods) == []
    assert preemption_nodes(pod(INFERENCE), states, {"lent": guests_pods, "plain": owners_pods["plain"]}) == ["lent", "plain"]  # CPU only: plain nodes are not ours
    assert preemption_nodes(pod(NO_TEAM, gpus=1), states, owners_pods) == list(owners_pods)  # a critical DaemonSet pod may preempt
    assert preemption_nodes(pod(TEAM_UNKNOWN, gpus=1), states, owners_pods) == []


def test_preemption_drops_a_candidate_whose_victims_would_not_make_room_on_its_gpus():
    """kube-scheduler counts a node's GPUs as one number: with seven whole-GPU pods and a share
    of the eighth GPU, it evicts one whole-GPU pod for a two-GPU pod, which would then still not
    fit (one whole GPU free, the other partly used). Two whole-GPU victims make room; so does
    one with the share."""
    node = pool_node("sevens", gpus_free=8)
    for i in range(7):
        node.bind(Pod(f"algorithm/whole-{i}", cpu_milli=1_000, memory_mib=1_024, gpu_count=1, team=ALGORITHM), (i,))
    node.bind(Pod("algorithm/share", cpu_milli=1_000, memory_mib=1_024, gpu_count=1, gpu_milli=600, team=ALGORITHM), (7,))
    two = pod(ALGORITHM, gpus=2)
    whole, share = (Victim(f"algorithm/{name}", ALGORITHM) for name in ("whole-6", "share"))
    assert preemption_nodes(two, {"sevens": node}, {"sevens": [whole]}) == []
    assert preemption_nodes(two, {"sevens": node}, {"sevens": [whole, Victim("algorithm/whole-5", ALGORITHM)]}) == ["sevens"]
    assert preemption_nodes(two, {"sevens": node}, {"sevens": [whole, share]}) == ["sevens"]
    assert preemption_nodes(two, {"sevens": node}, {"sevens": [whole, UNKNOWN_VICTIM]}) == []  # frees nothing in our view
    assert len(node.bound) == 8  # judged on a copy


@given(gpus=st.integers(0, 9), free=st.integers(0, 8), teams=st.sampled_from([ALGORITHM, INFERENCE, NO_TEAM, TEAM_UNKNOWN]),
       lent=st.booleans(), known=st.booleans())  # fmt: skip
def test_a_kept_candidate_is_never_one_the_filter_refuses_for_good(gpus, free, teams, lent, known):
    """Invariant: preemption's candidates and the filter's resolvable refusals are one rule."""
    states = {"n": pool_node("n", teams=frozenset({ALGORITHM, INFERENCE}) if lent else frozenset({ALGORITHM}), gpus_free=free)}
    names = ["n"] if known else ["m"]
    p = pod(teams, gpus=gpus)
    result = filter_nodes(p, states, names)
    assert (preemption_nodes(p, states, {name: [Victim("algorithm/owner", teams)] for name in names}) == names) == (not result.unresolvable)
    assert len(result.passed) + len(result.failed) + len(result.unresolvable) == 1


# --- scores ------------------------------------------------------------------------------------


def test_a_cpu_only_pod_is_scored_on_cpu_alone_and_prefers_nodes_outside_the_pools():
    """It takes no GPU anywhere: bestfit scores the CPU and the unchanged free GPUs; a plain
    node takes nothing from a pool and ranks first, the pool's nodes keep their order below."""
    nodes = [pool_node("busy", gpus_free=2), pool_node("idle")]
    cpu_only = pod(ALGORITHM)
    policy = BestFitPolicy()
    assert policy.score(cpu_only, nodes[0])[1] == () and policy.score(cpu_only, nodes[1])[1] == ()
    scores = node_scores(cpu_only, nodes, {"train": policy})
    assert scores == {"busy": MAX_EXTENDER_PRIORITY, "idle": scores["idle"]} and scores["idle"] < MAX_EXTENDER_PRIORITY
    with_plain = with_outside(scores, ["plain"])
    assert with_plain["plain"] == MAX_EXTENDER_PRIORITY > with_plain["busy"] > with_plain["idle"]
    assert with_outside(scores, []) == scores


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.integers(0, MAX_EXTENDER_PRIORITY), max_size=8))
def test_moving_the_pools_nodes_below_plain_nodes_keeps_their_order(scores):
    moved = with_outside(scores, ["plain!"])
    assert moved["plain!"] == MAX_EXTENDER_PRIORITY
    for a, b in ((a, b) for a in scores for b in scores):
        if scores[a] > scores[b] and scores[b] > 0:
            assert moved[a] > moved[b]
        assert 0 <= moved[a] < MAX_EXTENDER_PRIORITY
