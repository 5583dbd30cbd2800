"""Prometheus `/metrics` (prometheus-client): per-pool gauges for the operators' dashboards.

A custom Collector reads the database at scrape time in a few aggregate queries
(monitoring/selectors.py), so every process of the web tier reports the same numbers and no
in-process state is needed.

Access (setting `EBCLOUD_METRICS_TOKEN`): with a token, a scrape must send
`Authorization: Bearer <token>` (from anywhere); without one, only the loopback interface may
scrape (a Prometheus or exporter on the same host), whatever DEBUG says. Everything else is 403.

Not exported yet: allocated GPUs and pending pods (pods are not tracked per pool yet) and budget
use (no budgets yet); the rollup's PoolSample keeps columns for the first two.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from monitoring import selectors

LOOPBACK = {"127.0.0.1", "::1"}


class PoolCollector:
    def collect(self):
        now = timezone.now()
        pool_labels = ["pool", "team", "gpu_model", "zone"]
        capacity = GaugeMetricFamily("ebcloud_pool_capacity_gpus", "GPUs on the pool's joined nodes (Ready, Cordoned, Draining, Repairing, Unknown)", labels=pool_labels)
        min_nodes = GaugeMetricFamily("ebcloud_pool_min_nodes", "The pool's nodeCount.min (monthly baseline)", labels=pool_labels)
        max_nodes = GaugeMetricFamily("ebcloud_pool_max_nodes", "The pool's nodeCount.max", labels=pool_labels)
        nodes = GaugeMetricFamily("ebcloud_pool_nodes", "Nodes of the pool by phase and billing kind", labels=["pool", "phase", "billing"])
        memory = GaugeMetricFamily("ebcloud_pool_gpu_memory_used_ratio", "GPU memory used over total on the pool's reporting nodes", labels=["pool"])
        util = GaugeMetricFamily("ebcloud_pool_gpu_utilization_percent", "Mean GPU utilisation of the pool's reporting nodes", labels=["pool"])
        for s in selectors.pool_stats():
            p = s.pool
            values = [p.name, p.team.slug, p.gpu_model.name, p.zone.name]
            capacity.add_metric(values, s.capacity_gpus)
            min_nodes.add_metric(values, p.min_nodes)
            max_nodes.add_metric(values, p.max_nodes)
            for (phase, billing), n in sorted(s.nodes.items()):
                nodes.add_metric([p.name, phase, billing], n)
            if s.fb_total_mib:
                memory.add_metric([p.name], s.fb_used_mib / s.fb_total_mib)
            if s.gpu_util_avg is not None:
                util.add_metric([p.name], s.gpu_util_avg)
        heartbeat = GaugeMetricFamily("ebcloud_node_heartbeat_age_seconds", "Seconds since the node agent's last heartbeat", labels=["pool", "node"])
        for pool, node, age in selectors.heartbeat_ages(now=now):
            heartbeat.add_metric([pool, node], age)
        yield from (capacity, min_nodes, max_nodes, nodes, memory, util, heartbeat)


def scrape_allowed(request: HttpRequest) -> bool:
    token = settings.EBCLOUD_METRICS_TOKEN
    if token:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        return header.startswith("Bearer ") and hmac.compare_digest(header[7:].strip().encode(), token.encode())
    return request.META.get("REMOTE_ADDR") in LOOPBACK


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        return HttpResponse("forbidden: set EBCLOUD_METRICS_TOKEN and send it as a Bearer token\n", status=403, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
