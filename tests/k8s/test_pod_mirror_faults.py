"""The pod mirror against a sick API server: it never stalls (every call is bounded, a watch
link gone silent is dropped and watched again, `sync` keeps its deadline), and a failing API
server is retried with client-go's Reflector backoff and one log line per streak, not one a
second. Faults come from tests/k8s/fault_proxy.py in front of the real test API server."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

import pytest
from kubernetes import config

from pools.controllers import pod_mirror
from pools.controllers.pod_mirror import PodMirror
from pools.models import Pod
from tests.k8s.fault_proxy import Blackhole, Fault, FaultProxy, SilentLink, kubeconfig
from tests.k8s.helpers import pod
from tests.k8s.test_api_faults import within

pytestmark = pytest.mark.django_db(transaction=True)
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def fast(on_kubernetes, settings, monkeypatch):
    """Calls time out after 1 s, watches end after 2 s (the product's: 30 s and 60 s)."""
    settings.EBCLOUD_KUBE_TIMEOUT_SECONDS = 1.0
    monkeypatch.setattr(pod_mirror, "WATCH_SECONDS", 2)


def mirror_through(server: str, control_plane, tmp_path, *, tls: bool) -> PodMirror:
    from pools.providers.kubernetes_pods import ClusterPods

    path = kubeconfig(tmp_path / "kubeconfig", server, token=control_plane.token, cafile=control_plane.work / "ca.crt" if tls else None)
    return PodMirror(ClusterPods(config.new_client_from_config(config_file=path)), clock=lambda: NOW)


def test_sync_returns_by_its_deadline_when_the_api_server_never_answers(fast, control_plane, tmp_path):
    mirror = mirror_through(Blackhole().url, control_plane, tmp_path, tls=True)
    started = time.monotonic()
    within(40, mirror.sync, seconds=3)
    assert time.monotonic() - started < 12  # the deadline, and at most one call's timeouts past it
    assert mirror.stats.reconnects >= 1


def test_a_watch_link_gone_silent_is_dropped_and_watched_again(fast, control_plane, core, namespace, tmp_path):
    link = SilentLink(control_plane.api_port)
    mirror = mirror_through(link.url, control_plane, tmp_path, tls=True)
    mirror.relist()
    runner = threading.Thread(target=mirror.sync, kwargs={"seconds": 12}, daemon=True)
    started = time.monotonic()
    runner.start()
    time.sleep(1)
    link.cut()  # the watch open now hears nothing more, and neither do the idle pooled connections
    core.create_namespaced_pod(namespace, pod(namespace, "after-the-cut", node_selector={"kubernetes.io/hostname": "nowhere"}))
    runner.join(timeout=40)
    assert not runner.is_alive() and time.monotonic() - started < 16
    assert Pod.objects.filter(namespace=namespace, name="after-the-cut").count() == 1
    assert mirror.stats.reconnects >= 1


def test_a_failing_api_server_is_retried_with_a_growing_delay_and_one_warning(fast, control_plane, tmp_path, caplog):
    proxy = FaultProxy(control_plane.api_port, control_plane.work / "ca.crt")
    mirror = mirror_through(proxy.url, control_plane, tmp_path, tls=False)
    mirror.relist()
    proxy.faults.append(Fault("GET", r"/api/v1/pods\?.*watch=true", 500, "etcdserver: leader changed", times=3))
    with caplog.at_level(logging.DEBUG, logger="ebcloud.pod_mirror"):
        mirror.sync(seconds=15)  # the fourth watch starts 5.6 s on, plus each try's calls under load; the streak's end is logged when it ends
    refused = [r for r in proxy.requests("GET", r"/api/v1/pods\?.*watch=true") if r[2] == 500]
    assert len(refused) == 3
    first, second, third = (at for *_, at in refused)
    assert second - first >= 0.8 and third - second >= 1.6  # the delay doubles: not one try a second
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "InternalError" not in warnings[0]
    assert "(etcdserver: leader changed (500)): retrying from the last stored resourceVersion in 0.8 s (failure 1 in a row" in warnings[0]
    assert "pod mirror watching again after" in caplog.text  # the streak's end, once


def test_the_backoff_starts_again_after_two_quiet_minutes():
    clock = [1000.0]
    backoff = pod_mirror._Backoff(clock=lambda: clock[0])
    delays = [backoff.failed(ConnectionError("refused")) for _ in range(8)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    clock[0] += 121
    assert backoff.failed(ConnectionError("refused")) == 0.8
