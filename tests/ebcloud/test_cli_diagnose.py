"""`ebcloud node-pool diagnose NAME` end to end against a live server (issue 8 §3, seed T5).

The CLI prints the server's self-check table like `kubectl describe`; its exit status follows
kubectl (0 when the command ran, 1 on an error), and `--exit-code` makes a failing check exit 3
for scripts.
"""

from __future__ import annotations

import json
from datetime import timedelta

import yaml
from django.utils import timezone

from ebcloud.diagnose import diagnosis_text
from pools.controllers.scheduler import scheduler_pass
from pools.services import pods as pod_services
from tests.conftest import make_document
from tests.ebcloud.cli_helpers import live, one_error_line
from tests.pools.lifecycle_helpers import approved_pool, reconcile, run_until
from tests.pools.pod_helpers import pod_document, pool_with_nodes


def stuck_pod_pool(actors):
    """The article's pool whose nodes lack the `pool: train` label its pod asks for (T2)."""
    pool = pool_with_nodes(actors["lead"])
    pod_services.pod_create(user=actors["member"], document=pod_document("bert-train-0", gpus=4), now=timezone.now() - timedelta(minutes=40))
    scheduler_pass(now=timezone.now() - timedelta(minutes=39))
    return pool


@live
def test_diagnose_prints_the_table_and_each_finding_with_cause_and_action(ebcloud, login_as, actors):
    stuck_pod_pool(actors)
    login_as("lead")
    result = ebcloud("node-pool", "diagnose", "train-pool-a")
    assert result.exit_code == 0, result.stderr  # like kubectl describe: the command ran
    lines = result.stdout.splitlines()
    assert lines[0] == "Pool:     train-pool-a"
    assert lines[2].startswith("Status:   FAILING (1 failing,")
    assert lines[4].split() == ["STATUS", "CHECK", "SYMPTOM"]
    assert ["FAILING", "pods-pending", "Pods", "Pending", "for", "a", "long", "time"] in [line.split() for line in lines]
    block = lines.index("pods-pending: Pods Pending for a long time [FAILING]")
    assert lines[block + 1].startswith("  Found:         1 Pending pod aimed at this pool, 1 of them for over 15m")
    assert lines[block + 2].startswith("  Likely cause:  Affinity label missing on nodes")
    assert lines[block + 3].startswith("  First action:  Run `ebcloud pod why algorithm/bert-train-0`")
    assert "    - algorithm/bert-train-0: Pending 40m" in result.stdout
    assert "scale-up: Scale-up keeps failing [OK]" in result.stdout


@live
def test_exit_code_flag_and_machine_output(ebcloud, login_as, actors):
    stuck_pod_pool(actors)
    login_as("member")
    assert ebcloud("node-pool", "diagnose", "train-pool-a", "--exit-code").exit_code == 3
    as_json = ebcloud("node-pool", "diagnose", "train-pool-a", "-o", "json")
    assert as_json.exit_code == 0
    body = json.loads(as_json.stdout)
    assert body["summary"]["status"] == "failing"
    assert {c["id"]: c["status"] for c in body["checks"]}["pods-pending"] == "failing"
    as_yaml = yaml.safe_load(ebcloud("node-pool", "diagnose", "train-pool-a", "-o", "yaml").stdout)
    assert [c["id"] for c in as_yaml["checks"]] == [c["id"] for c in body["checks"]]


@live
def test_a_healthy_pool_exits_0_even_with_exit_code_and_another_team_gets_not_found(ebcloud, login_as, actors):
    pool_with_nodes(actors["lead"])
    login_as("lead")
    assert ebcloud("node-pool", "diagnose", "train-pool-a", "--exit-code").exit_code == 0
    login_as("other_lead")
    assert one_error_line(ebcloud("node-pool", "diagnose", "train-pool-a")) == 'error: pool "train-pool-a" not found'


@live
def test_scaling_back_down_prints_the_status_after_the_withdrawal_and_diagnose_sees_no_failure(ebcloud, login_as, actors):
    """`scale --min 3`, then `scale --min 2`: the second withdraws the grow order in its own
    request, so its line must not say that order awaits approval, and a withdrawal the lead
    chose is no failed scale-up in `diagnose` (T1, T5)."""
    pool = approved_pool(actors, make_document(nodeCount={"min": 2, "max": 8}))
    ready = run_until(pool, timezone.now() - timedelta(hours=1))
    login_as("lead")
    assert ebcloud("node-pool", "scale", "train-pool-a", "--min", "3").exit_code == 0
    grow = pool.orders.get(kind="grow")
    assert reconcile(pool, ready).pending_reason == f"OrderPending: order #{grow.pk} awaits approval by a platform admin"
    result = ebcloud("node-pool", "scale", "train-pool-a", "--min", "2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "gpunodepool/train-pool-a scaled (min 2, max 8) (Ready)\n"
    assert pool.orders.get(pk=grow.pk).status == "Withdrawn"
    diagnosis = ebcloud("node-pool", "diagnose", "train-pool-a").stdout
    assert "scale-up: Scale-up keeps failing [OK]" in diagnosis and f"order #{grow.pk}" not in diagnosis

def test_the_text_shows_cause_and_action_only_for_checks_that_are_not_ok():
    diagnosis = {
        "pool": "p", "checkedAt": "2026-12-01T08:00:00Z", "summary": {"status": "warning", "failing": 0, "warning": 1, "unknown": 0, "ok": 1},
        "checks": [
            {"id": "a", "title": "A", "status": "ok", "found": "fine", "cause": "", "action": "", "details": []},
            {"id": "b", "title": "B", "status": "warning", "found": "odd", "cause": "why", "action": "do", "details": ["x\n y"]},
        ],
    }  # fmt: skip
    text = diagnosis_text(diagnosis)
    assert "a: A [OK]\n  Found:         fine\n\nb: B [WARNING]\n" in text  # requirement ids are for maintainers, not printed
    assert text.endswith("  Likely cause:  why\n  First action:  do\n  Items:\n    - x y")
