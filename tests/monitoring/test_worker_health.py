"""/healthz for load balancers, and the workers' liveness on /metrics (the last success of each
periodic task, the queue's depth), which deploy/prometheus-rules.yaml alerts on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.humanhash import uuid
from django_q.models import OrmQ, Schedule, Success
from django_q.monitor import save_task
from django_q.scheduler import scheduler
from django_q.tasks import async_task
from prometheus_client.parser import text_string_to_metric_families

from monitoring.metrics import worker_metrics

ROLLUP = "monitoring.rollup_pool_samples"
METER = "billing.meter_pending"
LAST_SUCCESS = "ebcloud_task_last_success_timestamp_seconds"


def scrape() -> dict[tuple[str, tuple], float]:
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}


def run_schedule(name: str) -> Success:
    """Let django-q2's scheduler fire the schedule `name` (the others are not due), as a
    `qcluster` does; with the test settings' `sync` the worker runs it at once and files the
    result through django-q2's monitor. Returns the success it recorded."""
    Schedule.objects.exclude(name=name).update(next_run=timezone.now() + timedelta(hours=1))
    Schedule.objects.filter(name=name).update(next_run=timezone.now() - timedelta(seconds=1))
    scheduler(broker=get_broker())
    return Success.objects.filter(group=name).latest("stopped")


def record_success(group: str, *, func: str = "monitoring.tasks.rollup_pool_samples", stopped=None) -> None:
    """A finished task's package as the worker hands it to django-q2's monitor."""
    stopped, (name, task_id) = stopped or timezone.now(), uuid()
    package = {"id": task_id, "name": name, "func": func, "args": (),
               "kwargs": {}, "group": group, "started": stopped - timedelta(seconds=1), "stopped": stopped, "result": {}, "success": True}  # fmt: skip
    save_task(package, get_broker())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def default_database_unreachable(tmp_path) -> Iterator[None]:
    """The default connection pointed at a database that is not there (PostgreSQL: a closed
    port on this host; SQLite: a file in a missing directory), the real one put back after."""
    original = connections["default"]
    broken_settings = {**original.settings_dict}
    if original.vendor == "sqlite":
        broken_settings["NAME"] = str(tmp_path / "missing" / "ebcloud.sqlite3")
    else:
        broken_settings.update(HOST="127.0.0.1", PORT=str(closed_port()))
    broken = type(original)(broken_settings, alias="default")
    connections["default"] = broken
    try:
        yield
    finally:
        broken.close()
        connections["default"] = original


# --- /healthz --------------------------------------------------------------------------------


def test_healthz_is_ok_while_the_database_answers(db):
    client = Client()
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert "no-store" in response["Cache-Control"]
    assert not response.cookies  # no session, no CSRF cookie
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


def test_healthz_is_503_with_a_short_reason_when_the_database_is_unreachable(db, tmp_path, caplog):
    with default_database_unreachable(tmp_path):
        response = Client(raise_request_exception=False).get("/healthz")
    assert response.status_code == 503, response.content
    assert response.json() == {"status": "unavailable", "reason": "the database did not answer"}
    assert "no-store" in response["Cache-Control"]
    assert "/healthz: the database did not answer" in caplog.text
    assert Client().get("/healthz").status_code == 200  # the real connection is back


def test_healthz_answers_a_plain_http_probe_where_other_paths_redirect_to_https(db, settings):
    settings.SECURE_SSL_REDIRECT = True
    client = Client()  # its handler reads the settings at its first request
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 301


def test_healthz_runs_one_query(db):
    client = Client()
    client.get("/healthz")
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/healthz").status_code == 200
    assert [q["sql"] for q in queries.captured_queries] == ["SELECT 1"]


# --- the workers on /metrics -----------------------------------------------------------------


def test_metrics_show_a_periodic_tasks_last_success_once_the_workers_ran_it(db):
    before = scrape()
    assert not [key for key in before if key[0] == LAST_SUCCESS]  # no success yet: no sample
    assert before[("ebcloud_task_queue_depth", ())] == 0
    success = run_schedule(ROLLUP)
    values = scrape()
    assert values[(LAST_SUCCESS, (("every", "1m"), ("task", ROLLUP)))] == success.stopped.timestamp()
    assert [key for key in values if key[0] == LAST_SUCCESS] == [(LAST_SUCCESS, (("every", "1m"), ("task", ROLLUP)))]
    record_success(METER, func="billing.tasks.meter_pending")
    assert (LAST_SUCCESS, (("every", "1h"), ("task", METER))) in scrape()


def test_one_off_schedules_have_no_series(db):
    Schedule.objects.create(name="pools.autoscale_soon", func="pools.tasks.autoscale_all", schedule_type=Schedule.ONCE, repeats=1)
    record_success("pools.autoscale_soon", func="pools.tasks.autoscale_all")
    assert not [key for key in scrape() if key[0] == LAST_SUCCESS]


def test_the_queue_depth_counts_the_tasks_waiting_for_a_worker(db):
    for _ in range(3):
        async_task("monitoring.tasks.rollup_pool_samples", sync=False)  # queued: no worker runs
    assert OrmQ.objects.count() == 3
    assert scrape()[("ebcloud_task_queue_depth", ())] == 3
    [(taken, _)] = get_broker().dequeue()[:1]  # a worker holds one: not waiting any more
    assert OrmQ.objects.filter(pk=taken).exists()
    assert scrape()[("ebcloud_task_queue_depth", ())] == 2


def test_the_worker_metrics_cost_two_queries_whatever_the_history(db):
    record_success(ROLLUP)
    with CaptureQueriesContext(connection) as few:
        worker_metrics(timezone.now())
    start = timezone.now() - timedelta(hours=2)
    for minute in range(60):
        record_success(ROLLUP, stopped=start + timedelta(minutes=minute))
        record_success("pools.reconcile_all", func="pools.tasks.reconcile_all", stopped=start + timedelta(minutes=minute))
    with CaptureQueriesContext(connection) as many:
        last, _ = worker_metrics(timezone.now())
    assert len(few) == len(many) == 2
    assert {s.labels["task"] for s in last.samples} == {ROLLUP, "pools.reconcile_all"}


def test_per_minute_successes_do_not_prune_the_hourly_meterings_last_one(db, monkeypatch):
    """django-q2 keeps its last successes per schedule (`save_limit_per`), so the per-minute
    tasks' history does not push the hourly metering's latest success out of /metrics."""
    assert Conf.SAVE_LIMIT_PER == "group"
    monkeypatch.setattr(Conf, "SAVE_LIMIT", 5)
    start = timezone.now() - timedelta(minutes=30)
    record_success(METER, func="billing.tasks.meter_pending", stopped=start)
    for minute in range(1, 20):
        record_success(ROLLUP, stopped=start + timedelta(minutes=minute))
    assert Success.objects.filter(group=ROLLUP).count() == 5
    assert scrape()[(LAST_SUCCESS, (("every", "1h"), ("task", METER)))] == pytest.approx(start.timestamp())
