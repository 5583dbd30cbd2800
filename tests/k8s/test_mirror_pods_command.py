"""`manage.py mirror_pods` with its default `--seconds 0` ("until interrupted"), against the real
test API server: the command handed `PodMirror.sync` `seconds=float("inf")`, whose first watch
timeout, `int(inf)`, raised OverflowError, so the default crashed at once with a traceback."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection

from pools.models import Pod, Team
from tests.k8s.helpers import pod

pytestmark = pytest.mark.django_db(transaction=True)


def _mirrored(namespace: str) -> bool:
    """Whether the mirror has written a pod of `namespace` (False while SQLite's shared in-memory
    test database holds the table for the mirror's write)."""
    try:
        return Pod.objects.filter(namespace=namespace).exists()
    except OperationalError:
        return False


def test_mirror_pods_by_default_mirrors_until_interrupted(on_kubernetes, core, namespace):
    """Ctrl-C (a real SIGINT, sent once the pod is mirrored) ends it quietly; a mirror that
    returned or raised first leaves the signal unsent."""
    Team.objects.get_or_create(slug="algorithm", defaults={"name": "Algorithm"})
    core.patch_namespace(namespace, {"metadata": {"labels": {"ebcloud.io/team": "algorithm"}}})
    core.create_namespaced_pod(namespace, pod(namespace, "waiting-0", node_selector={"kubernetes.io/hostname": "nowhere"}))
    returned = threading.Event()

    def interrupt_once_mirrored() -> None:
        deadline = time.monotonic() + 60
        try:
            while not returned.is_set() and time.monotonic() < deadline and not _mirrored(namespace):
                time.sleep(0.2)
        finally:
            connection.close()
        if not returned.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_mirrored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as from a terminal (ignored in a suite run with `&`)
    watcher.start()
    try:
        call_command("mirror_pods")
    finally:
        returned.set()
        watcher.join()
        signal.signal(signal.SIGINT, previous)
    assert Pod.objects.filter(namespace=namespace, name="waiting-0").exists()
