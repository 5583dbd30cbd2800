"""The pod mirror against a real kube-apiserver: list + watch into the read model, requests as
kube-scheduler counts them, namespaces' teams, deletion, 410 Gone, and an API server restarted
mid-watch that loses and duplicates nothing."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from django.db import OperationalError, connection
from kubernetes import client

from pools.controllers.pod_mirror import PodMirror
from pools.models import NamespaceTeam, Pod, Team, WatchCursor
from pools.providers import kubernetes_pods
from pools.providers.kubernetes_pods import ClusterPods
from pools.selectors.namespaces import namespace_owner
from tests.k8s.helpers import pod, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def mirror(kube) -> PodMirror:
    return PodMirror(ClusterPods(kube), clock=lambda: NOW)


@pytest.fixture
def team(db) -> Team:
    return Team.objects.get_or_create(slug="algorithm", defaults={"name": "Algorithm"})[0]


def waiting(namespace: str, name: str) -> client.V1Pod:
    """A pod no node takes (so no other test's node runs it)."""
    return pod(namespace, name, node_selector={"kubernetes.io/hostname": "nowhere"})


def counted(rows) -> int:
    """The rows' count, or -1 while the mirror's thread writes: SQLite's shared in-memory test
    database locks a whole table for the writer (a file database in WAL mode, as the product
    runs, lets readers go on)."""
    try:
        return rows.count()
    except OperationalError:
        return -1


def label_namespace(core, namespace: str, team: str) -> None:
    core.patch_namespace(namespace, {"metadata": {"labels": {"ebcloud.io/team": team}}})


def ours(namespace: str):
    return Pod.objects.filter(namespace=namespace)


def test_a_relist_mirrors_every_pod_with_the_requests_kube_scheduler_counts(mirror, core, namespace, team, unique):
    label_namespace(core, namespace, team.slug)
    init = client.V1Container(
        name="init",
        image="x",
        resources=client.V1ResourceRequirements(requests={"cpu": "20", "memory": "1Gi"}),
    )
    main = client.V1Container(
        name="main", image="x",
        resources=client.V1ResourceRequirements(requests={"cpu": "1500m", "memory": "64Gi"}, limits={"nvidia.com/gpu": "4", "memory": "64Gi"}),
    )  # fmt: skip
    side = client.V1Container(
        name="side",
        image="x",
        resources=client.V1ResourceRequirements(requests={"cpu": "500m", "memory": "512Mi"}),
    )
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="trainer", namespace=namespace, labels={"project": "nlp"}, annotations={"ebcloud.io/checkpointable": "true"}),
        spec=client.V1PodSpec(
            containers=[main, side], init_containers=[init], automount_service_account_token=False,
            tolerations=[client.V1Toleration(key="pool", operator="Equal", value="train", effect="NoSchedule")],
            node_selector={"gpu-class": unique},  # no node has it: the pod stays Pending
        ),
    )  # fmt: skip
    core.create_namespaced_pod(namespace, body)
    mirror.relist()
    row = ours(namespace).get()
    assert row.uid and row.team == team and row.phase == "Pending" and row.node is None
    assert (row.cpu_milli, row.memory_mib, row.gpu_count, row.gpu_milli) == (
        20_000,
        66_048,
        4,
        1000,
    )  # init wins on CPU; a limit alone sets the GPU request
    assert (
        row.labels == {"project": "nlp"}
        and row.checkpointable
        and row.node_selector == {"gpu-class": unique}
    )
    assert row.tolerations[0] == {
        "key": "pool",
        "operator": "Equal",
        "value": "train",
        "effect": "NoSchedule",
    }
    assert {t["key"] for t in row.tolerations[1:]} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }  # the API server's defaults
    assert WatchCursor.objects.get(resource="pods").resource_version


@pytest.mark.parametrize(
    ("asked", "annotations", "recorded"),
    [
        ({"nvidia.com/gpu": "40000"}, {}, {"gpu_count": 32_767, "gpu_milli": 1000}),
        ({"nvidia.com/gpu": "9223372036854775807", "ebcloud.io/gpu-milli": "5000"}, {}, {"gpu_count": 32_767, "gpu_shares": 0}),
        ({"ebcloud.io/gpu-milli": "9000000000000"}, {}, {"gpu_count": 32_767, "gpu_shares": 32_767_000}),
        ({"cpu": "3000000"}, {}, {"cpu_milli": 2**31 - 1}),
        ({"memory": "10Ei"}, {}, {"memory_mib": 2**31 - 1}),
        ({"cpu": "1"}, {"ebcloud.io/duration": "100000000h"}, {"duration_seconds": 10 * 365 * 86400}),
    ],
)
def test_a_pod_asking_more_than_the_read_model_holds_is_recorded_at_the_most_a_pod_may_ask(mirror, core, namespace, asked, annotations, recorded):
    """The API server takes a pod asking 40,000 GPUs, 3 million CPUs or 10 EiB, or annotated to
    run for 100 million hours; the read model's columns hold none of those numbers (on
    PostgreSQL the INSERT fails), and one such pod failed every write of the mirror's batch, so
    no pod was mirrored any more. It is recorded at the most the product's API lets a pod ask,
    which no node has, and the pods beside it are mirrored."""
    body = waiting(namespace, "greedy")
    body.metadata.annotations = annotations
    body.spec.containers[0].resources = client.V1ResourceRequirements(limits=asked, requests=asked)
    core.create_namespaced_pod(namespace, body)
    core.create_namespaced_pod(namespace, waiting(namespace, "modest"))
    mirror.relist()
    assert set(ours(namespace).values_list("name", flat=True)) == {"greedy", "modest"}
    row = ours(namespace).get(name="greedy")
    assert {field: getattr(row, field) for field in recorded} == recorded


def test_a_reason_longer_than_the_read_model_holds_is_cut_to_it(mirror, core, namespace):
    """A kubelet that refuses a pod for an extended resource says `OutOf<resource>`, and a
    resource's name may be as long as 316 characters; anyone allowed to write a pod's status
    may set a reason of any length. The row keeps its first 40 characters, and the pods beside
    it are mirrored."""
    reason = "OutOf" + "example.com/" + "r" * 60
    core.create_namespaced_pod(namespace, waiting(namespace, "refused"))
    core.patch_namespaced_pod_status("refused", namespace, {"status": {"phase": "Failed", "reason": reason}})
    core.create_namespaced_pod(namespace, waiting(namespace, "modest"))
    mirror.relist()
    assert set(ours(namespace).values_list("name", flat=True)) == {"refused", "modest"}
    assert ours(namespace).get(name="refused").reason == reason[:40]


def hostile_annotation(body: client.V1Pod) -> None:
    body.metadata.annotations = {"note": "a\x00b"}


def hostile_args(body: client.V1Pod) -> None:
    body.spec.containers[0].args = ["--sep=\x00"]


@pytest.mark.parametrize("make_hostile", [hostile_annotation, hostile_args])
def test_a_nul_character_in_a_pod_is_read_as_a_replacement_character(mirror, core, namespace, make_hostile):
    """Go's strings, and so the API server, hold U+0000 (an annotation, a container's argument);
    PostgreSQL's jsonb and text refuse it, and one such pod failed the mirror's whole batch. It
    is read as U+FFFD, and the pods beside it are mirrored."""
    body = waiting(namespace, "nul")
    make_hostile(body)
    core.create_namespaced_pod(namespace, body)
    core.create_namespaced_pod(namespace, waiting(namespace, "modest"))
    mirror.relist()
    assert set(ours(namespace).values_list("name", flat=True)) == {"nul", "modest"}
    document = json.dumps(ours(namespace).get(name="nul").document)
    assert "\\u0000" not in document and "\\ufffd" in document


@pytest.mark.parametrize("status", [{"phase": "Failed", "reason": "Out\x00Of"}, {"phase": "Running", "startTime": "0000-01-01T00:00:01Z"}])
def test_a_status_writer_s_nul_or_year_zero_does_not_stop_the_mirror(mirror, core, namespace, status):
    """Anyone allowed to write a pod's status may set a reason with a NUL in it, or a start in
    the year 0000, which the API server keeps and Python's datetime cannot hold: the relist
    raised, and the watch ended the mirror's process. The reason's NUL is read as U+FFFD, the
    start as unknown; the pods beside it are mirrored, by the relist and by the watch."""
    core.create_namespaced_pod(namespace, waiting(namespace, "odd"))
    core.patch_namespaced_pod_status("odd", namespace, {"status": status}, _preload_content=False)  # the client's own model refuses year 0
    core.create_namespaced_pod(namespace, waiting(namespace, "modest"))
    mirror.relist()
    assert set(ours(namespace).values_list("name", flat=True)) == {"odd", "modest"}
    row = ours(namespace).get(name="odd")
    assert "\x00" not in row.reason and row.started_at is None
    core.patch_namespaced_pod_status("odd", namespace, {"status": {**status, "message": "again"}}, _preload_content=False)
    core.create_namespaced_pod(namespace, waiting(namespace, "later"))
    mirror.sync(seconds=3)
    assert set(ours(namespace).values_list("name", flat=True)) == {"odd", "modest", "later"}


def test_namespaces_belong_to_the_team_of_their_label_or_an_admins_mapping(
    mirror, core, namespace, unique, team
):
    other = Team.objects.create(slug=f"vision-{unique}", name=f"Vision {unique}")
    core.create_namespaced_pod(namespace, waiting(namespace, "a"))
    mirror.relist()
    assert ours(namespace).get().team is None  # neither label nor mapping: admins only
    label_namespace(core, namespace, team.slug)
    mirror.relist()
    assert ours(namespace).get().team == team
    NamespaceTeam.objects.create(namespace=namespace, team=other)
    mirror.relist()
    assert ours(namespace).get().team == other  # the admin's mapping wins over the label


def test_a_pod_made_with_kubectl_in_a_team_s_own_namespace_is_the_team_s(mirror, core, namespace, team):
    """`namespace_owner`'s rule (docs/operator.md, Teams): a team's own namespace (its slug) is
    the team's before any pod was submitted through the product there (no mapping yet), and
    over a label naming another team; its pods are billed to it, not to the pool's owner."""
    own = Team.objects.create(slug=namespace, name="Own")
    label_namespace(core, namespace, team.slug)
    core.create_namespaced_pod(namespace, waiting(namespace, "kubectl-made"))
    mirror.relist()
    assert ours(namespace).get().team == own == namespace_owner(namespace)


def test_the_watch_follows_creates_status_changes_and_deletes(mirror, core, namespace, team):
    label_namespace(core, namespace, team.slug)
    mirror.relist()
    core.create_namespaced_pod(namespace, waiting(namespace, "job-1"))
    core.create_namespaced_pod(namespace, waiting(namespace, "job-2"))
    core.delete_namespaced_pod("job-2", namespace, grace_period_seconds=0)

    def condition():  # kube-scheduler finds no node for it and says why
        status = core.read_namespaced_pod("job-1", namespace).status
        return next(
            (
                c.message
                for c in status.conditions or ()
                if c.type == "PodScheduled" and c.reason == "Unschedulable"
            ),
            None,
        )

    message = wait_for(condition, what="kube-scheduler's verdict")
    mirror.sync(seconds=3)
    pending = ours(namespace).get(name="job-1")
    assert (pending.phase, pending.reason, pending.explanation) == (
        "Pending",
        "Unschedulable",
        message,
    )
    gone = ours(namespace).get(name="job-2")
    assert gone.deleted_at is not None and not Pod.objects.live().filter(pk=gone.pk).exists()
    core.create_namespaced_pod(namespace, waiting(namespace, "job-2"))  # the same name again: a new pod
    mirror.sync(seconds=2)
    assert (
        ours(namespace).filter(name="job-2").count() == 2
        and Pod.objects.live().filter(namespace=namespace, name="job-2").count() == 1
    )


def test_a_list_whose_continue_token_expired_between_pages_is_listed_again_whole(control_plane, kube, core, namespace, monkeypatch):
    """Pages of one pod; between the first and the second, a pod is added and etcd compacted
    (the API server restarted, its watch cache after the compaction): the second page's token
    has expired (410), and the list is made again whole, the new pod in it."""
    for i in range(3):
        core.create_namespaced_pod(namespace, waiting(namespace, f"p{i}"))
    monkeypatch.setattr(kubernetes_pods, "PAGE_SIZE", 1)
    source, compacted = ClusterPods(kube), []
    paged = source.core.list_pod_for_all_namespaces

    def listing(*args, **kwargs):
        if kwargs.get("_continue") and not compacted:
            core.create_namespaced_pod(namespace, waiting(namespace, "late"))
            control_plane.compact_etcd()
            control_plane.restart_apiserver()
            compacted.append(True)
        return paged(*args, **kwargs)

    monkeypatch.setattr(source.core, "list_pod_for_all_namespaces", listing)
    pods, _ = source.list()
    assert compacted and {p["metadata"]["name"] for p in pods if p["metadata"]["namespace"] == namespace} == {"p0", "p1", "p2", "late"}


def test_a_cursor_the_server_no_longer_keeps_is_answered_by_a_relist(
    control_plane, mirror, core, namespace, team
):
    old = core.list_namespaced_pod(namespace).metadata.resource_version
    core.create_namespaced_pod(namespace, waiting(namespace, "kept"))
    core.create_namespaced_pod(namespace, waiting(namespace, "churn"))
    core.delete_namespaced_pod("churn", namespace, grace_period_seconds=0)
    control_plane.compact_etcd()
    control_plane.restart_apiserver()  # its watch cache starts after the compaction
    WatchCursor.objects.update_or_create(resource="pods", defaults={"resource_version": old})
    Pod.objects.create(
        namespace=namespace, name="ghost", team=team, uid="00000000-dead-beef-0000-000000000000"
    )
    stats = mirror.sync(seconds=2)
    assert stats.relists == 1
    assert ours(namespace).get(name="kept").uid
    assert ours(namespace).get(name="ghost").deleted_at is not None  # deleted while nobody watched


def test_a_cursor_ahead_of_the_server_is_answered_by_a_relist(mirror, core, namespace, team, caplog):
    """A cursor the server has not reached (its etcd restored from a backup, or the kubeconfig
    now names another cluster): a watch from it was silent until the server caught up, and the
    mirror, which keeps its cursor across restarts, watched again from it for ever, without a
    line, while pods deleted meanwhile stayed Running in the read model."""
    ahead = str(int(core.list_namespaced_pod(namespace).metadata.resource_version) + 10_000_000)
    WatchCursor.objects.update_or_create(resource="pods", defaults={"resource_version": ahead})
    Pod.objects.create(namespace=namespace, name="ghost", team=team, uid="00000000-dead-beef-0000-000000000001")
    core.create_namespaced_pod(namespace, waiting(namespace, "new"))
    with caplog.at_level("WARNING", logger="ebcloud.pod_mirror"):
        stats = mirror.sync(seconds=8)
    assert stats.relists == 1
    assert ours(namespace).get(name="new").uid and ours(namespace).get(name="ghost").deleted_at is not None
    assert WatchCursor.objects.get(resource="pods").resource_version != ahead
    assert any("has not reached resourceVersion" in r.getMessage() for r in caplog.records)


def test_an_api_server_restarted_mid_watch_loses_and_duplicates_nothing(
    control_plane, mirror, core, namespace, team
):
    label_namespace(core, namespace, team.slug)
    mirror.relist()
    stop = threading.Event()

    def run():
        try:
            mirror.sync(seconds=60, stop=stop)
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    for i in range(20):
        core.create_namespaced_pod(namespace, waiting(namespace, f"before-{i}"))
    runner.start()
    wait_for(lambda: counted(ours(namespace)) == 20, what="the first pods mirrored")
    control_plane.restart_apiserver()
    for i in range(20):
        core.create_namespaced_pod(namespace, waiting(namespace, f"after-{i}"))
    for i in range(0, 20, 2):
        core.delete_namespaced_pod(f"before-{i}", namespace, grace_period_seconds=0)
    wait_for(
        lambda: counted(Pod.objects.live().filter(namespace=namespace)) == 30 and counted(ours(namespace)) == 40,
        what="the pods after the restart",
    )
    stop.set()
    runner.join(timeout=70)
    cluster = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items}
    assert (
        set(Pod.objects.live().filter(namespace=namespace).values_list("uid", flat=True)) == cluster
    )
    assert ours(namespace).values("uid").distinct().count() == ours(namespace).count() == 40
    assert mirror.stats.reconnects >= 1


def test_a_database_error_mid_batch_is_retried_from_what_was_committed(mirror, core, namespace, team, monkeypatch):
    from pools.controllers import pod_mirror

    mirror.relist()
    real, failures = pod_mirror.pods_apply, []

    def flaky(changes, **kwargs):
        if not failures:
            failures.append(len(changes))
            raise OperationalError("database is locked")
        return real(changes, **kwargs)

    monkeypatch.setattr(pod_mirror, "pods_apply", flaky)
    monkeypatch.setattr(pod_mirror, "RETRY_SECONDS", 0.1)
    core.create_namespaced_pod(namespace, waiting(namespace, "after-a-failure"))
    stats = mirror.sync(seconds=4)
    assert failures and stats.reconnects == 1
    assert ours(namespace).filter(name="after-a-failure").count() == 1  # delivered again after the rollback
