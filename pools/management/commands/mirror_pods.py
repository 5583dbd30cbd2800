"""`manage.py mirror_pods`: the pod mirror of a real cluster (EBCLOUD_CLUSTER=kubernetes), a
long-running process beside the worker: list + watch of every pod into the read model
(pools/controllers/pod_mirror.py). `--seconds N` mirrors for N seconds and exits."""

from __future__ import annotations

import threading

from django.core.management.base import BaseCommand, CommandError

from pools.management.arguments import seconds_or_zero
from pools.providers import real_cluster


class Command(BaseCommand):
    help = "Mirror a real cluster's pods (list + watch) into the pages, the autoscaler and metering."

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=seconds_or_zero, default=0.0,
                            help="Stop after this many seconds, at most a day (default 0: run until interrupted)")

    def handle(self, *args, seconds: float = 0.0, **options):
        if not real_cluster():
            raise CommandError("mirror_pods needs a real cluster: set EBCLOUD_CLUSTER=kubernetes (and EBCLOUD_KUBECONFIG)")
        # The Kubernetes client is loaded only in that mode.
        from pools.controllers.pod_mirror import PodMirror

        stop = threading.Event()
        try:
            stats = PodMirror().sync(seconds=seconds or float("inf"), stop=stop)
        except KeyboardInterrupt:
            stop.set()
            return
        self.stdout.write(
            f"mirrored {stats.events} change(s) and {stats.listed} listed pod(s): {stats.applied.created} new, "
            f"{stats.applied.updated} updated, {stats.applied.deleted} deleted; {stats.relists} list(s), {stats.reconnects} reconnect(s)"
        )
