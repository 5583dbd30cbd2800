"""Nodes keep the pool's labels and taints, level-triggered (design §1, seed C4): a step of the
lifecycle pass (`NodeDrift`, pools/controllers/lifecycle.py) that makes every registered node
carry what the pool's spec gives it now, puts back what someone else removed or changed, and
cordons again a drained node someone uncordoned. Pure decisions: pools/core/node_labels.py.

The cordon follows the row's phase where that is unambiguous. A Draining, Cordoned or
Repairing row (`CORDONED_PHASES`: a drain, a repair waiting or under way) must be cordoned, so
it is cordoned again whoever lifted it. A Ready row says nothing about the cordon: an
administrator may have run `kubectl cordon` on it (to look at the machine, to keep it free), and
the control plane does not own that field then, so it leaves it alone, as it always has. The one
Ready row whose cordon is ours is one the repair pass cordoned (its last cordon event is
`NodeCordoned`, `RepairStarted` or `RepairFailed`) and made Ready without lifting it: a pass
killed between the row and the cluster call by an older release, which wrote the row first
(pools/controllers/repair_cordon.py now lifts the cordon before it writes Ready). The product's
own rule says that node must be schedulable (its repair ended, its row says Ready), so it is
uncordoned with the event that pass did not write (`RepairSucceeded` after a reset or reboot,
else `NodeUncordoned`). An administrator's cordon of a Ready node after the repair's last event
is still left alone.

How the pass over every pool finds the pools to visit, cheaply (issue 9: a quiet pool costs no
statement of its own, and no spec is parsed for it):
- the cluster's nodes are read once per pass (`observe`: one `ClusterBackend.nodes_state`
  call, one list on Kubernetes, one query on the simulated cluster);
- a spec edit bumps the pool's `generation`: a pool whose `observedGeneration` lags and that
  has registered nodes gets this step, which parses the spec and rolls it out;
- otherwise what the nodes should carry is what we applied last, stored on the Node rows
  (`labels`, `taints`, read with the pool's other rows anyway), so comparing those with the
  cluster finds drift without the spec. This holds because the rows are written only after the
  cluster took the apply, and `observedGeneration` does not move past a spec that could not be
  rolled out to every node (`ReconcilePass.hold_generation`). A cache of parsed specs per (pool,
  generation) would do as well but needs invalidating (a pool id is reused after a rolled-back
  test on SQLite, a team renamed changes a label) and still parses after every restart.
The per-pool pass (`pool_reconcile`) always runs this step with the parsed spec.

The cluster's answers never stop the pass (design: failures are Warning events retried with
backoff): a cluster that cannot be read makes drift wait a pass, the pool's other steps (orders,
provisioning) going on; a node the cluster refuses to relabel, taint, cordon or give its GPU
shares gets a Warning event naming the call and the API's answer, and is retried after a
backoff (`node_refused`, the node's `attempts` and `step_due_at`, as provisioning retries a
failed step) while the pool's other nodes are put right; its `last_error` keeps the pool's
pendingReason saying why until a try succeeds.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.db import transaction

from pools.controllers.context import ReconcilePass
from pools.core import lifecycle as rules
from pools.core.node_labels import (
    CORDONED_PHASES,
    REGISTERED_PHASES,
    ClusterNodeState,
    ObservedNodes,
    fault_now,
    fault_start,
    node_fix,
    taint_dict,
)
from pools.core.podspec import GPU_SHARE_RESOURCE
from pools.core.scheduling.taint_eviction import carried_time_added
from pools.core.spec import effective_node_labels
from pools.models import Node, PoolEvent
from pools.providers.base import ClusterBackend, ProviderError
from pools.services.events import WARNING

logger = logging.getLogger("ebcloud.lifecycle")


def wanted_labels(p: ReconcilePass, node: Node) -> dict[str, str]:
    return effective_node_labels(p.spec, zone=node.zone.name, billing=node.billing, team=p.pool.team.slug)


def wanted_taints(p: ReconcilePass) -> list[dict[str, str]]:
    return [taint_dict(t.key, t.value, t.effect) for t in p.spec.node_taints]


class Unread(ObservedNodes):
    """The cluster's nodes when they could not be read this pass: none is known or judged, so no
    drift or fault is seen (`lifecycle_rules.steps_needed`), and `nodes_sync` waits a pass
    rather than asking again for each pool: an API server that hangs costs one timeout per
    pass, not one per pool."""

    def __init__(self, why: str):
        super().__init__()
        self.why = why


def observe(cluster: ClusterBackend, names: Sequence[str]) -> ObservedNodes:
    """The cluster's view of these nodes in one read; `Unread` when the cluster cannot be read
    now (the pass goes on: drift waits a pass)."""
    if not names:
        return ObservedNodes()
    try:
        return ObservedNodes(cluster.nodes_state(names=names), names)
    except ProviderError as exc:
        logger.warning("reading the cluster's nodes failed (%s); drift is checked next pass", exc.message)
        return Unread(exc.message)
    except Exception as exc:  # whatever the backend raises must not stop the pass
        logger.warning("reading the cluster's nodes failed; drift is checked next pass", exc_info=True)
        return Unread(f"{type(exc).__name__}: {exc}"[:300])


def nodes_sync(p: ReconcilePass) -> None:
    """Make every registered node of the pool carry what its spec wants (module docstring).

    Provider calls first, then the rows and one event per node and kind (`NodeLabeled`,
    `NodeTainted`, `NodeCordoned`, `RepairSucceeded` or `NodeUncordoned`, `GpuSharesAdvertised`):
    a pass killed between them applies again (idempotent)."""
    registered = list(p.live_nodes().filter(phase__in=REGISTERED_PHASES))
    if not registered:
        return
    observed = p.observed if p.observed is not None else observe(p.cluster, [n.name for n in registered])
    if isinstance(observed, Unread):  # the spec waits for a cluster that can be read; the pool's other steps go on
        p.hold_generation = True
        p.stall(f"ClusterRefused: {observed.why}; the nodes' labels and taints are checked next pass")
        p.event("NodeDriftDeferred", f"The labels and taints of the pool's nodes could not be checked: {observed.why}; the next pass retries", type=WARNING)
        return
    faults_record(p, registered, observed)
    nodes = [n for n in registered if n.ready_at is not None]
    taints = wanted_taints(p)
    left = repair_cordons_left([n for n in nodes if n.phase == Node.Phase.READY and getattr(observed.get(n.name), "unschedulable", False)])
    done = []
    for node in nodes:
        seen = observed.get(node.name)
        if seen is None:  # not in the cluster now: a Node that comes back differs from its row, and is fixed then
            continue
        labels = wanted_labels(p, node)
        fix = node_fix(
            wanted_labels=labels, wanted_taints=taints, applied_labels=node.labels or {}, applied_taints=node.taints or [],
            cordoned=node.phase in CORDONED_PHASES, observed=seen,
        )  # fmt: skip
        uncordon = left.get(node.pk)
        if not (fix.apply or fix.cordon or fix.advertise or uncordon):
            if node.last_error:  # put right meanwhile (by someone, or a kubelet): nothing is waiting any more
                Node.objects.filter(pk=node.pk).update(attempts=0, step_due_at=None, last_error="")
            continue
        if node.step_due_at is not None and p.now < node.step_due_at:  # backing off after a refusal
            p.hold_generation = True
            continue
        try:
            if fix.apply:
                p.cluster.node_apply(name=node.name, labels=labels, taints=taints, applied_taints=node.taints or ())
            if fix.cordon:
                p.cluster.cordon(name=node.name, mark=True)  # ours again: whoever lifted it, it was schedulable
            if uncordon:
                p.cluster.uncordon(name=node.name)
            if fix.advertise:  # only a real cluster's Node lacks it (ClusterBackend's docstring)
                p.cluster.advertise_gpu_shares(name=node.name)
        except ProviderError as exc:
            p.hold_generation = True
            node_refused(p, node, exc, event_reason="NodeUpdateFailed", said=f"Labels, taints, cordon or GPU shares of {node.name} not applied")
            continue
        done.append((node, labels, fix, uncordon))
    _record(p, done, taints)


def faults_record(p: ReconcilePass, nodes: Sequence[Node], observed: Mapping[str, ClusterNodeState]) -> None:
    """Each node's `cluster_fault` as the cluster shows it now, with a `NodeUnavailable` Warning
    when the cluster stops running pods on it and `NodeAvailable` when it runs them again; the
    row is what the autoscaler, Diagnose and the extender read its readiness from, and the repair
    pass, from `cluster_fault_since`, how long it has lasted (a fault reworded, NotReady after
    the Node came back without its GPUs, goes on from when it started). Each change is one
    conditional UPDATE, so two passes write one event."""
    for node in nodes:
        fault = fault_now(observed, name=node.name, gpu_count=node.gpu_count, leaving=bool(node.release_reason))
        if fault is None:
            continue
        if fault and fault == node.cluster_fault and node.cluster_fault_since is None:  # written by a release without the column
            Node.objects.filter(pk=node.pk, cluster_fault=fault, cluster_fault_since__isnull=True).update(cluster_fault_since=p.now)
            node.cluster_fault_since = p.now
        if fault == node.cluster_fault:
            continue
        since = fault_start(fault, was=node.cluster_fault, was_since=node.cluster_fault_since, now=p.now)
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, cluster_fault=node.cluster_fault).update(cluster_fault=fault, cluster_fault_since=since):
                continue
            if fault:
                p.event("NodeUnavailable", f"{node.name} takes no pods in the cluster: {fault}. Its room is not counted until it does", node=node, type=WARNING)
            else:
                p.event("NodeAvailable", f"{node.name} takes pods in the cluster again", node=node)
        node.cluster_fault, node.cluster_fault_since = fault, since


# The events of the repair pass's cordons and uncordons (pools/controllers/repair.py, repair_cordon.py).
REPAIR_CORDONS = ("NodeCordoned", "RepairStarted", "RepairFailed")
REPAIR_UNCORDONS = ("NodeUncordoned", "RepairSucceeded")
# Why a node in a cordoned phase must stay cordoned, for its `NodeCordoned` event.
CORDONED_BECAUSE = {"Draining": "while it is drained", "Cordoned": "while its GPU fault waits for repair", "Repairing": "while it is repaired"}


def repair_cordons_left(ready_cordoned: Sequence[Node]) -> dict[int, str]:
    """Of these Ready nodes the cluster shows cordoned, those whose cordon is the repair pass's
    own, left by a pass killed before it lifted it (module docstring), with the reason of the
    event to write when it is lifted. One query, and none when no Ready node is cordoned."""
    if not ready_cordoned:
        return {}
    last: dict[int, str] = {}
    rows = PoolEvent.objects.filter(node__in=ready_cordoned, reason__in=REPAIR_CORDONS + REPAIR_UNCORDONS)
    for node_id, reason in rows.order_by("node_id", "-last_timestamp", "-pk").values_list("node_id", "reason"):
        last.setdefault(node_id, reason)
    return {pk: "RepairSucceeded" if reason == "RepairStarted" else "NodeUncordoned" for pk, reason in last.items() if reason in REPAIR_CORDONS}


def node_refused(p: ReconcilePass, node: Node, exc: ProviderError, *, event_reason: str, said: str, **row) -> None:
    """A node whose cluster call failed: a Warning event with what was not done and the API's
    answer, the pool's pendingReason (this pass's stall, then the node's `last_error` while it
    waits), and its next try after a backoff (`attempts`, `step_due_at`: exponential, as a failed
    provisioning step), so a refusal that lasts is asked about less and less often. `row`:
    other fields of the node to write with it (a phase)."""
    attempts = node.attempts + 1
    delay = rules.backoff(attempts, base_seconds=settings.EBCLOUD_BACKOFF_BASE_SECONDS, cap_seconds=settings.EBCLOUD_BACKOFF_CAP_SECONDS)
    summary = f"{exc.reason}: {exc.message}"
    p.stall(summary)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(attempts=attempts, step_due_at=p.now + delay, last_error=summary[:500], **row)
        p.event(event_reason, f"{said}: {exc.message}; retrying in {rules.format_duration(delay)}", node=node, type=WARNING)


def _record(p: ReconcilePass, done: list, taints: list[dict[str, str]]) -> None:
    """The rows of the nodes changed (one UPDATE per distinct label set: a pool's nodes differ
    only by zone and billing kind) and their events, in one transaction."""
    groups: dict[str, tuple[dict, list, list[int]]] = defaultdict(lambda: ({}, [], []))
    for node, labels, fix, _ in done:
        if fix.rows_changed:
            kept = carried_time_added(node.taints or (), taints)  # a NoExecute taint that stays keeps its clock
            key = repr((sorted(labels.items()), kept))
            groups[key][0].update(labels)
            groups[key][1][:] = kept
            groups[key][2].append(node.pk)
    recovered = [node.pk for node, *_ in done if node.last_error or node.attempts or node.step_due_at]
    with transaction.atomic():
        for labels, kept, pks in groups.values():
            Node.objects.filter(pk__in=pks).update(labels=labels, taints=kept)
        if recovered:  # a refusal of an earlier pass is over
            Node.objects.filter(pk__in=recovered).update(attempts=0, step_due_at=None, last_error="")
        for node, _, fix, uncordon in done:
            if fix.labels:
                p.event("NodeLabeled", f"Labels of {node.name} {fix.labels}", node=node)
            if fix.taints:
                p.event("NodeTainted", f"Taints of {node.name} {fix.taints}", node=node)
            if fix.cordon:
                p.event("NodeCordoned", f"Node {node.name} was made schedulable by someone else {CORDONED_BECAUSE[node.phase]}: cordoned again", node=node)
            if uncordon == "RepairSucceeded":
                p.event(uncordon, f"Repair of {node.name} succeeded: the node takes pods again (the cordon an interrupted pass left in the cluster is lifted)", node=node)
            elif uncordon:
                p.event(uncordon, f"Node {node.name} takes new pods again: its repair is over (the cordon an interrupted pass left in the cluster is lifted)", node=node)
            if fix.advertise:
                p.event("GpuSharesAdvertised", f"{node.name} advertises {GPU_SHARE_RESOURCE} again, 1000 per GPU it offers (none while it offers no GPU), so GPU shares are scheduled only where a GPU is", node=node)
