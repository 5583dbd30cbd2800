"""Property (hypothesis): whatever pods arrive, finish and preempt one another over several
passes, no node is ever oversubscribed in CPU, memory or any GPU's milli, and every Running pod
passes every filter on its node (seed O3; issue 4 item 7, here through the database), its
team's among them: two teams' pools carry the same labels and taints, and no pod ever runs on
the other team's (design §3)."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools.controllers.scheduler import scheduler_pass
from pools.core.scheduling.nodes import MILLI, static_filter_reason
from pools.models.pods import Pod
from pools.selectors.cluster import cluster_state, core_pod_of, live_nodes
from tests.pools.pod_helpers import T0, pool_with_nodes, submit

POD = st.fixed_dictionaries(
    {
        "gpus": st.sampled_from([0, 1, 1, 2, 4, 8]),
        "milli": st.sampled_from([None, None, 250, 500, 700]),
        "priority": st.integers(0, 3),
        "checkpointable": st.booleans(),
        "cpu": st.sampled_from(["1", "8", "32"]),
        "duration": st.sampled_from([None, "10m", "30m"]),
        "tolerate": st.sampled_from(["train", None]),
        "team": st.sampled_from(["algorithm", "algorithm", "inference"]),
    }
)


@pytest.fixture
def cluster(actors):
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"}, schedulingPolicy="bestfit")
    pool_with_nodes(actors["other_lead"], name="infer-a", nodes=1, node_labels={"pool": "train"})
    return actors


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(POD, max_size=6), min_size=1, max_size=4))
def test_no_node_is_ever_oversubscribed_and_every_bind_passes_the_filters(cluster, batches):
    Pod.objects.all().delete()
    now = T0
    for b_index, batch in enumerate(batches):
        for p_index, pod in enumerate(batch):
            milli = pod["milli"] if pod["gpus"] == 1 else None
            submitter = cluster["member"] if pod["team"] == "algorithm" else cluster["other_lead"]
            submit(submitter, f"p{b_index}-{p_index}", namespace=pod["team"], gpus=pod["gpus"], milli=milli, priority=pod["priority"],
                   checkpointable=pod["checkpointable"], cpu=pod["cpu"], memory="8Gi", duration=pod["duration"],
                   tolerate=pod["tolerate"])  # fmt: skip
        scheduler_pass(now=now)
        now += timedelta(minutes=15)
        nodes = live_nodes()
        running = list(Pod.objects.filter(phase="Running"))
        states = cluster_state(nodes, running)
        assert sum(len(s.bound) for s in states.values()) == len(running)  # nothing refused: fits as recorded
        per_gpu: dict[tuple[str, int], int] = defaultdict(int)
        for pod in running:
            node = next(n for n in nodes if n.pk == pod.node_id)
            assert static_filter_reason(core_pod_of(pod), states[node.name]) is None
            assert node.pool.team_id == pod.team_id
            for index in pod.gpu_indices:
                per_gpu[(node.name, index)] += pod.gpu_milli
        assert all(used <= MILLI for used in per_gpu.values())
        for state in states.values():
            assert state.cpu_used <= state.cpu_milli and state.memory_used <= state.memory_mib
        pending = Pod.objects.filter(phase="Pending").exclude(explanation="Waiting for the next scheduler pass.")
        for pod in pending.exclude(reason__in=("Preempted", "NodeLost")):
            filters = pod.explanation.split(". preemption: ", 1)[0]  # what preemption then found counts the nodes again
            counts = [int(part.split(" ", 1)[0]) for part in filters.split(": ", 1)[1].rstrip(".").split(", ")]
            assert sum(counts) == (2 if pod.namespace == "algorithm" else 1)  # they add up to the team's nodes
