"""`ebcloud pod ...` and `ebcloud node-pool fragmentation` end to end against a live server."""

from __future__ import annotations

import json

import pytest

from pools.controllers.scheduler import scheduler_pass
from pools.models import PoolEvent
from pools.models.pods import Pod
from pools.providers.simulated import EVICT, failure_inject
from tests.ebcloud.cli_helpers import live, one_error_line
from tests.pools.pod_helpers import T0, TRAIN_POD, pool_with_nodes, pool_with_share_layout, submit

TRAIN_POD_FILE = str(TRAIN_POD)


@live
def test_a_member_creates_the_articles_pod_and_lists_it(ebcloud, login_as, actors):
    login_as("member")
    result = ebcloud("pod", "create", "-f", TRAIN_POD_FILE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "pod/algorithm/bert-train-0 created (Pending)"
    listed = ebcloud("pod", "list")
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "PRIORITY", "GPUS", "STATUS", "NODE", "AGE"]
    assert row.split()[:6] == ["algorithm", "bert-train-0", "100", "8", "Pending", "<none>"]
    data = json.loads(ebcloud("pod", "list", "-o", "json", "--phase", "Pending").stdout)
    assert [p["metadata"]["name"] for p in data] == ["bert-train-0"]


@live
def test_pod_why_prints_the_message_and_the_hints(ebcloud, login_as, actors):
    pool_with_nodes(actors["lead"])  # nodes without pool=train
    login_as("member")
    assert ebcloud("pod", "create", "-f", TRAIN_POD_FILE).exit_code == 0
    scheduler_pass(now=T0)
    result = ebcloud("pod", "why", "algorithm/bert-train-0")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "pod/algorithm/bert-train-0 is Pending"
    assert "Message: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling." in lines
    assert "Hints:" in lines and "nodeLabels: {pool: train}" in result.stdout


@live
def test_pod_why_for_a_running_pod_names_its_node(ebcloud, login_as, actors):
    pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "ok", gpus=1)
    scheduler_pass(now=T0)
    login_as("lead")
    result = ebcloud("pod", "why", "algorithm/ok")
    assert result.stdout.strip() == "pod/algorithm/ok is Running on node train-pool-a-0 (pool train-pool-a)"


@live
def test_pod_delete_and_a_missing_pod_is_one_error_line(ebcloud, login_as, actors):
    submit(actors["member"], "bye")
    login_as("member")
    assert ebcloud("pod", "delete", "algorithm/bye").stdout.strip() == "pod/algorithm/bye deleted"
    assert not Pod.objects.exists()
    assert one_error_line(ebcloud("pod", "why", "algorithm/bye")) == 'error: pod "algorithm/bye" not found'


@live
def test_another_teams_pod_does_not_exist(ebcloud, login_as, actors):
    submit(actors["member"], "secret")
    login_as("other_lead")
    assert one_error_line(ebcloud("pod", "why", "algorithm/secret")) == 'error: pod "algorithm/secret" not found'
    assert ebcloud("pod", "list").stderr.strip() == "No resources found."


@live
def test_an_invalid_pod_file_is_one_line_with_field_paths(ebcloud, login_as, actors, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: Bad}\nspec: {containers: []}\n")
    login_as("member")
    line = one_error_line(ebcloud("pod", "create", "-f", str(bad)))
    assert "metadata.name:" in line and "spec.containers:" in line


def test_a_reference_without_a_namespace_is_a_usage_error(ebcloud):
    result = ebcloud("pod", "why", "just-a-name")
    assert result.exit_code == 2 and "NAMESPACE/NAME" in result.stderr


@pytest.fixture
def fragmented(actors):
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"}, schedulingPolicy="spread")
    for i in range(2):
        submit(actors["member"], f"f{i}", gpus=2, checkpointable=True)
    scheduler_pass(now=T0)
    return pool


@live
def test_node_pool_fragmentation_shows_the_report_the_plan_and_applies_it(ebcloud, login_as, fragmented):
    login_as("lead")
    report = ebcloud("node-pool", "fragmentation", "train-pool-a")
    assert report.exit_code == 0, report.stderr
    assert "nodes allocated < 50%: train-pool-a-0, train-pool-a-1" in report.stdout
    assert "Freed nodes" not in report.stdout
    plan = ebcloud("node-pool", "fragmentation", "train-pool-a", "--plan")
    assert "GPU-hours saved per week: 1344" in plan.stdout and "POD" in plan.stdout
    applied = ebcloud("node-pool", "fragmentation", "train-pool-a", "--apply", "--max-nodes", "1")
    assert applied.exit_code == 0, applied.stderr
    assert "Applied: moved 1 pod(s)" in applied.stdout
    assert PoolEvent.objects.filter(pool=fragmented, reason="Repacked").count() == 1


@live
def test_node_pool_fragmentation_applies_the_gpu_share_part(ebcloud, login_as, actors):
    pool = pool_with_share_layout(actors)
    login_as("lead")
    plan = ebcloud("node-pool", "fragmentation", "train-pool-a", "--plan")
    assert "Packing GPU shares: moving" in plan.stdout and "frees 1 whole GPU(s)" in plan.stdout
    assert ebcloud("node-pool", "fragmentation", "train-pool-a", "--shares").exit_code == 2  # only with --apply
    applied = ebcloud("node-pool", "fragmentation", "train-pool-a", "--apply", "--shares")
    assert applied.exit_code == 0, applied.stderr
    assert "Applied: moved" in applied.stdout
    assert PoolEvent.objects.filter(pool=pool, reason="Repacked").exists()
    scheduler_pass(now=T0)
    assert Pod.objects.get(name="waiting").phase == Pod.Phase.RUNNING


@live
def test_node_pool_fragmentation_starts_a_waiting_share_the_packing_makes_room_for(ebcloud, login_as, actors):
    pool_with_share_layout(actors, {0: [("a1", 500), ("a2", 100)], 1: [("b1", 500), ("b2", 100)]}, milli=800, cpu="1", memory="1Gi")
    login_as("lead")
    plan = ebcloud("node-pool", "fragmentation", "train-pool-a", "--plan")
    assert "Packing GPU shares: moving 2 pod(s) starts 1 waiting pod(s): algorithm/waiting" in plan.stdout
    applied = ebcloud("node-pool", "fragmentation", "train-pool-a", "--apply", "--shares")
    assert applied.exit_code == 0, applied.stderr
    assert "Started: 1 waiting pod(s): algorithm/waiting" in applied.stdout
    assert Pod.objects.get(name="waiting").phase == Pod.Phase.RUNNING


@live
def test_node_pool_fragmentation_says_why_running_nodes_stay(ebcloud, login_as, fragmented):
    failure_inject(step=EVICT, times=None, token_prefix="algorithm/f", message="disruption budget")
    login_as("lead")
    plan = ebcloud("node-pool", "fragmentation", "train-pool-a", "--plan")
    assert plan.exit_code == 0, plan.stderr
    assert "Repack plan: no moves free a running node." in plan.stdout and "Running nodes that stay (2): " in plan.stdout
    assert "a disruption budget keeps pod algorithm/f0 in place" in plan.stdout and "algorithm/f1 in place" in plan.stdout


@live
def test_a_member_cannot_apply_a_repack(ebcloud, login_as, fragmented):
    login_as("member")
    assert "only leads of team algorithm" in one_error_line(ebcloud("node-pool", "fragmentation", "train-pool-a", "--apply"))


def test_pod_why_makes_a_console_link_in_a_hint_a_whole_url_on_the_server():
    """The order hint's `/pools/new/?team=...` is a path on the server: a terminal cannot follow it."""
    from ebcloud import output

    pod = {"metadata": {"namespace": "algorithm", "name": "big"}, "status": {"phase": "Pending", "hints": [
        "No pool of your team can run this pod: it needs 16 GPUs on one node. A lead of team algorithm can order a pool of node type "
        "GPU_16_CARD (16 GPUs per node) with GPU model H100_80G: /pools/new/?team=algorithm&gpu_model=H100_80G&node_type=GPU_16_CARD",
        "see https://kubernetes.io/pools/x and spec.zones/pools/y as written",
    ]}}  # fmt: skip
    text = output.pod_why(pod, server="http://127.0.0.1:8000")
    assert text.splitlines()[2].endswith(": http://127.0.0.1:8000/pools/new/?team=algorithm&gpu_model=H100_80G&node_type=GPU_16_CARD")
    assert "  - see https://kubernetes.io/pools/x and spec.zones/pools/y as written" in text
