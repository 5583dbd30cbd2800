"""Two scheduler workers at once (design §5): two processes run `manage.py schedule --once`
against the same PostgreSQL database at the same moment; no pod is bound twice, no node is
oversubscribed, every bind has exactly one `Scheduled` event. PostgreSQL only (the binders'
advisory lock is PostgreSQL's; SQLite has one writer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from pools.models import Node, PoolEvent
from pools.models.pods import Pod
from tests.pools.pod_helpers import pool_with_nodes, submit

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent workers need PostgreSQL (SQLite has one writer)"),
    pytest.mark.django_db(transaction=True),
]


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def test_two_schedulers_at_once_never_bind_twice_or_oversubscribe(actors):
    pool_with_nodes(actors["lead"], nodes=2, node_labels={"pool": "train"})
    for i in range(30):
        submit(actors["member"], f"race-{i}", gpus=1)
    env = {**os.environ, "DATABASE_URL": _database_url(), "EBCLOUD_TESTING": "false"}
    command = [sys.executable, "manage.py", "schedule", "--once", "--now", "2026-12-01T08:00:00Z"]
    workers = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
    assert Pod.objects.filter(phase="Running").count() == 16
    for node in Node.objects.all():
        assert Pod.objects.filter(node=node, phase="Running").aggregate(n=Sum("gpu_count"))["n"] == 8
        used = [i for p in Pod.objects.filter(node=node, phase="Running") for i in p.gpu_indices]
        assert sorted(used) == list(range(8))
    assert PoolEvent.objects.filter(reason="Scheduled").count() == 16
