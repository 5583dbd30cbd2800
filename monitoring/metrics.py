"""Prometheus `/metrics` (prometheus-client): per-pool gauges for the operators' dashboards.

A custom Collector reads the database at scrape time in a few aggregate queries
(monitoring/selectors.py), so every process of the web tier reports the same numbers and no
in-process state is needed.

Access (setting `EBCLOUD_METRICS_TOKEN`): with a token, a scrape must send
`Authorization: Bearer <token>` (from anywhere); without one, only the loopback interface may
scrape (a Prometheus or exporter on the same host), whatever DEBUG says. Everything else is 403.

Per pool: capacity, nodeCount.min/max, nodes by phase and billing kind (monthly baseline,
on-demand burst, preemptible) and the controller's desired nodes per billing kind, GPUs
allocated to Running pods, pending pods that would fit the pool (`queued_pods`, as the
autoscaler counts them) and how long the oldest has waited, nodes not ready, GPU memory and
utilisation (deploy/prometheus-rules.yaml alerts on these like the pools' default alert rules); per node the heartbeat age; per budget
(a pool's `spec.budget` or a team budget; a deleted pool's, as `name#id`, while its leases are
still charged) this month's spend, its limit and their ratio. The
query count does not grow with pools, nodes, pods or budgets.

The workers (django-q2): per recurring schedule, when its task last succeeded, and how many
tasks wait in the queue, so that stopped or stuck workers show (deploy/prometheus-rules.yaml:
EbcloudWorkersStalled, EbcloudTaskQueueGrowing). Two queries, whatever the task history holds.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_q.models import OrmQ, Schedule, Success
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from billing.budget_sync import budgets_in_force_q
from billing.models import Budget
from billing.month_spend import budget_statuses_of
from monitoring import selectors

LOOPBACK = {"127.0.0.1", "::1"}
BUDGET_LABELS = ["scope", "pool", "team", "currency"]


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
        allocated = GaugeMetricFamily("ebcloud_pool_allocated_gpus", "GPUs requested by the pool's Running pods (a GPU share counts milli/1000)", labels=pool_labels)
        pending = GaugeMetricFamily("ebcloud_pool_pending_pods", "Pending pods of the pool's team that would fit one of its nodes (queued_pods)", labels=pool_labels)
        oldest = GaugeMetricFamily("ebcloud_pool_oldest_pending_pod_age_seconds", "Seconds the longest-waiting Pending pod that fits the pool has waited since it last became Pending (0 when none waits)", labels=pool_labels)
        not_ready = GaugeMetricFamily("ebcloud_pool_not_ready_nodes", "Joined nodes of the pool that are not ready: heartbeat lost (Unknown) or Repairing", labels=pool_labels)
        desired = GaugeMetricFamily("ebcloud_pool_desired_nodes", "Nodes the controller wants per billing kind (monthly baseline, on-demand burst, preemptible)", labels=["pool", "billing"])
        stats = selectors.pool_stats()
        gpus_allocated = selectors.allocated_gpus(pool_ids=[s.pool.pk for s in stats])
        queued = selectors.pending_pods_by_pool(s.pool for s in stats)
        for s in stats:
            p = s.pool
            values = [p.name, p.team.slug, p.gpu_model.name, p.zone.name]
            capacity.add_metric(values, s.capacity_gpus)
            min_nodes.add_metric(values, p.min_nodes)
            max_nodes.add_metric(values, p.max_nodes)
            allocated.add_metric(values, gpus_allocated.get(p.pk, 0.0))
            if p.pk in queued:
                waiting = queued[p.pk]
                pending.add_metric(values, len(waiting))
                oldest.add_metric(values, max(0.0, (now - waiting[0].pending_since).total_seconds()) if waiting else 0.0)
            not_ready.add_metric(values, s.not_ready_nodes)
            for (phase, billing), n in sorted(s.nodes.items()):
                nodes.add_metric([p.name, phase, billing], n)
            for billing, counts in sorted((p.node_counts or {}).items()):
                if isinstance(counts, dict) and "desired" in counts:
                    desired.add_metric([p.name, billing], counts["desired"])
            if s.fb_total_mib:
                memory.add_metric([p.name], s.fb_used_mib / s.fb_total_mib)
            if s.gpu_util_avg is not None:
                util.add_metric([p.name], s.gpu_util_avg)
        heartbeat = GaugeMetricFamily("ebcloud_node_heartbeat_age_seconds", "Seconds since the node agent's last heartbeat", labels=["pool", "node"])
        for pool, node, age in selectors.heartbeat_ages(now=now):
            heartbeat.add_metric([pool, node], age)
        yield from (capacity, min_nodes, max_nodes, nodes, not_ready, desired, allocated, pending, oldest, memory, util, heartbeat)
        yield from budget_metrics(now)
        yield from worker_metrics(now)


def budget_metrics(now) -> list[GaugeMetricFamily]:
    """This month's spend against every budget in force this month (`budgets_in_force_q`: a
    team's, a live pool's, or a deleted pool's whose leases are still charged this month), in
    the same queries whatever their number. A pool is labelled with its ledger name, so that a
    deleted pool (`name#id`) and a new pool of its name stay two series, as in the reports."""
    limit = GaugeMetricFamily("ebcloud_budget_limit", "Monthly budget amount", labels=BUDGET_LABELS)
    spent = GaugeMetricFamily("ebcloud_budget_spent", "Cost charged against the budget this month", labels=BUDGET_LABELS)
    ratio = GaugeMetricFamily("ebcloud_budget_used_ratio", "Spent this month over the monthly budget (1 = the whole budget)", labels=BUDGET_LABELS)
    forecast = GaugeMetricFamily("ebcloud_budget_forecast_ratio", "Run-rate forecast for the month over the budget (after 3 days of data)", labels=BUDGET_LABELS)
    budgets = Budget.objects.filter(budgets_in_force_q(now)).select_related("pool", "team").order_by("team__slug", "pool__name", "pk")
    for status in budget_statuses_of(budgets, now=now):
        b = status.budget
        values = ["pool" if b.pool_id else "team", b.pool.ledger_name if b.pool_id else "", b.team.slug, b.currency]
        limit.add_metric(values, float(b.monthly_amount))
        spent.add_metric(values, float(status.spent))
        if b.monthly_amount:
            ratio.add_metric(values, float(status.spent / b.monthly_amount))
            if status.forecast is not None:
                forecast.add_metric(values, float(status.forecast / b.monthly_amount))
    return [limit, spent, ratio, forecast]


# How often a schedule runs, as the `every` label ("1m" for the per-minute controllers).
EVERY = {Schedule.HOURLY: "1h", Schedule.DAILY: "1d", Schedule.WEEKLY: "1w", Schedule.BIWEEKLY: "2w", Schedule.MONTHLY: "1mo",
         Schedule.BIMONTHLY: "2mo", Schedule.QUARTERLY: "3mo", Schedule.YEARLY: "1y", Schedule.CRON: "cron"}  # fmt: skip


def worker_metrics(now) -> list[GaugeMetricFamily]:
    """The workers' liveness, in two queries: every recurring schedule with the stop time of its
    group's latest success, and the count of the queue's waiting tasks. django-q2's scheduler
    files a schedule's tasks under the group of its name; its partial `success_index` leads
    with the group, and `Q_CLUSTER["save_limit_per"] = "group"` keeps at most `save_limit` (250)
    successes per group, so each schedule reads at most that many rows, whatever the history
    of failures or of other tasks. One-off schedules (`*_soon`) have no series."""
    last = GaugeMetricFamily(
        "ebcloud_task_last_success_timestamp_seconds",
        "Unix time at which the periodic task last finished successfully (no sample until its first success)",
        labels=["task", "every"],
    )
    depth = GaugeMetricFamily("ebcloud_task_queue_depth", "Tasks queued for the workers and not yet taken (a dead worker's task counts again after the retry delay)")
    latest = Success.objects.filter(group=OuterRef("name")).order_by("-stopped").values("stopped")[:1]
    schedules = Schedule.objects.exclude(schedule_type=Schedule.ONCE).exclude(repeats=0).exclude(name=None).exclude(name="")
    for name, kind, minutes, stopped in schedules.annotate(last=Subquery(latest)).order_by("name").values_list("name", "schedule_type", "minutes", "last"):
        if stopped is not None:
            last.add_metric([name, f"{minutes or 1}m" if kind == Schedule.MINUTES else EVERY.get(kind, kind)], stopped.timestamp())
    waiting = OrmQ.objects.aggregate(n=Count("pk", filter=Q(lock__lte=now) | Q(lock=None)))["n"]
    depth.add_metric([], waiting)
    return [last, depth]


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
