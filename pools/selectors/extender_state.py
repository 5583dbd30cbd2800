"""The scheduler extender's cluster state, kept between requests and brought up to date from
what changed in the read model (seed D1; issue 19: p99 under 50 ms at 1,000 nodes).

Building the whole state for every request (`cluster_state` over model instances) took 3 s at
1,000 nodes and 8,000 bound pods (bench/extender.py): most of it reading the pods' JSON fields.
So the state lives in the process and each request reads only:

- the live nodes and their pools as one row of plain values each; a node whose row (or whose
  pool's row) differs from the one its NodeState was built from is built again, through
  `node_state_of` like every reader of the cluster;
- in Kubernetes mode, the pod mirror's cursor: every change the mirror applies to the read
  model moves it, and nothing else writes a mirrored pod's phase or node, so an unchanged
  cursor means unchanged bound pods. Otherwise (or in the simulated cluster, where the
  scheduler pass writes pods) each node's Running pods as the ids the database joins from an
  index, and the pods of the nodes whose ids changed. Primary keys are never reused (SQLite's
  AUTOINCREMENT, PostgreSQL's sequences), so equal ids are equal pods; the tests, whose rolled
  back rows do reuse them, start each test with an empty state.

A bound pod counts here for its resources only: nothing about a pod already running (its
tolerations, its team) changes whether another pod fits a node or how it scores. The pod being
scheduled and the nodes go through `core_pod_of` and `node_state_of`, as in the scheduler pass.
One lock serialises the requests of a process: the state is shared and updated in place.
"""

from __future__ import annotations

import gc
import json
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Aggregate, QuerySet, TextField
from django.db.models.functions import Cast

from pools.core.scheduling.fragmentation import PodShape
from pools.core.scheduling.nodes import NodeState, OversubscribedError, best_fit_gpus
from pools.core.scheduling.nodes import Pod as CorePod
from pools.models import GpuNodePool, Node, Team, WatchCursor
from pools.models.pods import Pod
from pools.providers import real_cluster
from pools.selectors.cluster import SCHEDULER_PHASES, node_state_of, pool_teams

FREEZE_AFTER_NODES = 100  # nodes whose pods were read again in one refresh: a first read, or a large change
_NODE_ROW = ("id", "name", "phase", "unschedulable", "gpu_count", "pool_id", "labels_text", "taints_text", "cluster_fault")
_POOL_ROW = ("id", "document_text", "team_id", "node_type_id", "gpu_model_id")
_POD_ROW = ("id", "node_id", "namespace", "name", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_shares", "gpu_indices_text", "priority", "submitted_at")


@dataclass
class _Bound:
    node_id: int
    pod: CorePod | None  # None: a row the core refuses
    gpus: tuple[int, ...]  # recorded indices; empty: the GPUs it fits best when bound
    order: tuple  # the scheduler pass's order of Running pods: priority (highest first), submitted, id


@dataclass
class ExtenderState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: dict[int, tuple] = field(default_factory=dict)  # node id -> the row its state was built from
    pool_rows: dict[int, tuple] = field(default_factory=dict)  # pool id -> the row its nodes were built from
    states: dict[int, NodeState] = field(default_factory=dict)  # node id -> its state
    pools: dict[str, GpuNodePool] = field(default_factory=dict)  # pool name -> pool (for its policy)
    pods: dict[int, _Bound] = field(default_factory=dict)  # Running pod id -> where it runs
    on_node: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))  # node id -> pod ids
    shapes: Counter = field(default_factory=Counter)  # PodShape -> bound pods of that shape
    cursor: tuple | None = None
    ids_on: dict[int, str] = field(default_factory=dict)  # node id -> its Running pods' ids, joined, as last read
    version: int = 0  # changes whenever a pod is bound or unbound (what `shapes` counts changed)
    workloads: dict = field(default_factory=dict)  # the last fgd workload, by what it was learnt from
    generation: int = 0  # changes whenever any node or bound pod changed
    passed: tuple = ()  # the last filter's (pod name, pod shape, generation, nodes passed)
    waiting: tuple = ()  # (mirror cursor, shapes of the Pending pods) in Kubernetes mode
    namespace_labels: dict[str, tuple[float, str | None]] = field(default_factory=dict)  # namespace -> (trusted until, its team label; None: unreadable)

    def reset(self) -> None:
        """Forget everything: the next refresh reads the whole read model."""
        with self.lock:
            fresh = ExtenderState()
            for name in ("rows", "pool_rows", "states", "pools", "pods", "on_node", "shapes", "cursor", "ids_on", "version", "workloads", "generation", "passed", "waiting", "namespace_labels"):
                setattr(self, name, getattr(fresh, name))

    def refresh(self) -> dict[str, NodeState]:
        """Bring the state up to date with the read model (call with `lock` held); the live
        nodes by name."""
        dirty = self._nodes() | self._pods()
        for node_id in dirty:
            self._rebind(node_id)
        self.generation += bool(dirty)
        if len(dirty) >= FREEZE_AFTER_NODES:
            _freeze_long_lived()
        return {state.name: state for state in self.states.values()}

    def _nodes(self) -> set[int]:
        """Nodes gone are dropped, nodes new or changed (or of a changed pool) built again: their ids."""
        texts = {"labels_text": Cast("labels", TextField()), "taints_text": Cast("taints", TextField())}
        live = Node.objects.filter(phase__in=SCHEDULER_PHASES).annotate(**texts)
        pools = GpuNodePool.objects.filter(pk__in=live.values("pool_id")).annotate(document_text=Cast("document", TextField()))
        pool_rows = {row[0]: row for row in _fetched(pools.values_list(*_POOL_ROW))}
        pool_rows[0] = tuple(_fetched(Team.objects.values_list("id", "slug")))  # spec.sharedWith names teams by slug
        rows = {row[0]: row for row in _fetched(live.values_list(*_NODE_ROW))}
        if rows == self.rows and pool_rows == self.pool_rows:
            return set()
        for pk in self.rows.keys() - rows.keys():
            del self.rows[pk]
            self._forget(self.states.pop(pk))
        changed_pools = {pk for pk, row in pool_rows.items() if self.pool_rows.get(pk) != row}
        teams_changed = 0 in changed_pools  # a team named by a pool's sharedWith appeared or went
        changed = {pk for pk, row in rows.items() if self.rows.get(pk) != row or row[5] in changed_pools or teams_changed}
        self.pool_rows = pool_rows
        related = ("pool", "pool__node_type", "pool__gpu_model", "pool__team")
        nodes = list(Node.objects.filter(pk__in=changed).select_related(*related)) if changed else []
        teams = pool_teams({node.pool_id: node.pool for node in nodes}.values())
        for node in nodes:
            if node.pk in self.states:
                self._forget(self.states[node.pk])
            self.states[node.pk] = node_state_of(node, teams[node.pool_id])
            self.pools[node.pool.name] = node.pool
            self.rows[node.pk] = rows[node.pk]
        return changed

    def _pods(self) -> set[int]:
        """The nodes whose Running pods changed, their pods read again: the ids of those nodes.
        Each node's Running pods are compared as the list of their ids that the database joins
        from an index (pods' phase, deletion, node and id) without reading the rows: 1,000
        short strings instead of 8,000 (pod, node) pairs; only the changed nodes' pods are read."""
        cursor = _mirror_cursor()
        if cursor is not None and cursor == self.cursor:
            return set()
        running = Pod.objects.live().filter(phase=Pod.Phase.RUNNING, node__isnull=False)
        ids = dict(_fetched(running.values("node_id").annotate(ids=_Joined(Cast("id", TextField()))).values_list("node_id", "ids")))
        self.cursor = cursor
        dirty = {node_id for node_id in ids.keys() | self.ids_on.keys() if ids.get(node_id) != self.ids_on.get(node_id)}
        for node_id in dirty:
            for pk in self.on_node.pop(node_id, ()):
                del self.pods[pk]
        self.ids_on = ids
        self._read(running.filter(node_id__in=dirty) if dirty else None)
        return dirty

    def _read(self, rows: QuerySet | None) -> None:
        """These pods, read as plain values (resources, recorded GPUs, order)."""
        if rows is None:
            return
        rows = rows.annotate(gpu_indices_text=Cast("gpu_indices", TextField()))
        for pk, node_id, namespace, name, cpu, memory, gpus, milli, shares, indices, priority, submitted in rows.values_list(*_POD_ROW).iterator(chunk_size=10_000):
            try:
                pod = CorePod(f"{namespace}/{name}", cpu_milli=cpu, memory_mib=memory, gpu_count=gpus, gpu_milli=milli if gpus else 0, gpu_shares=shares)
            except ValueError:
                pod = None  # a row the core refuses takes nothing, as in cluster_state
            recorded = tuple(json.loads(indices)) if indices and indices != "[]" else ()
            self.pods[pk] = _Bound(node_id, pod, recorded, (-priority, submitted, pk))
            self.on_node[node_id].add(pk)

    def _rebind(self, node_id: int) -> None:
        """A node's pods bound again from an empty node, in the scheduler pass's order, so that
        pods without recorded GPUs are counted on the GPUs the pass would count them on."""
        state = self.states.get(node_id)
        if state is None:
            return
        self._forget(state)
        for bound in sorted((self.pods[pk] for pk in self.on_node[node_id]), key=lambda b: b.order):
            if bound.pod is None:
                continue
            gpus = bound.gpus or (best_fit_gpus(bound.pod, state.gpu_free) if bound.pod.gpu_count else ()) or ()
            try:
                state.bind(bound.pod, gpus)
            except (OversubscribedError, ValueError):
                continue  # recorded state disagrees with the node; the core refuses to oversubscribe
            self.shapes[PodShape.of(bound.pod)] += 1
            self.version += 1

    def _forget(self, state: NodeState) -> None:
        """Unbind everything from `state`."""
        for name in list(state.bound):
            binding = state.unbind(name)
            self.shapes[PodShape.of(binding.pod)] -= 1
            self.version += 1


def _freeze_long_lived() -> None:
    """After a large read, move what the process holds (the state's objects among them) out of
    the garbage collector's reach: its full collections otherwise scan the ~100,000 objects of
    the state and stalled one call in a hundred by 100 ms (bench/extender.py). Garbage is
    collected first, so nothing unreachable is kept; frozen objects are still freed when no
    longer referenced, unless they are part of a reference cycle (the state's objects are not;
    a few of the current request's may be, and are kept: a large read is rare)."""
    gc.collect()
    gc.freeze()


class _Joined(Aggregate):
    """Every row's text joined into one string (SQLite's group_concat, PostgreSQL's string_agg)."""

    function = "GROUP_CONCAT"
    output_field = TextField()

    def as_postgresql(self, compiler, connection, **extra_context):
        template = "%(function)s(%(expressions)s, '|' ORDER BY %(expressions)s)"  # ordered: equal sets join equally
        return self.as_sql(compiler, connection, function="STRING_AGG", template=template, **extra_context)


def _fetched(rows: QuerySet) -> list[tuple]:
    """The rows as the database driver returns them, without Django's per-row conversions: these
    rows are compared with the rows of the last request, never shown (a third of the time of a
    request at 1,000 nodes and 8,000 pods went into converting them)."""
    try:
        sql, params = rows.order_by().query.sql_with_params()
    except EmptyResultSet:  # a filter on an empty list of ids
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _mirror_cursor() -> tuple | None:
    """The pod mirror's position in Kubernetes mode (None elsewhere: always read the pairs)."""
    if not real_cluster():
        return None
    return WatchCursor.objects.filter(resource="pods").values_list("resource_version", "updated_at").first()


STATE = ExtenderState()
