"""The report ingest's hot path in plain SQL (portable: PostgreSQL and SQLite).

Every node sends a report every 15 s: at 10,000 nodes that is ~670 requests a second on a
2-core machine. The ORM spends about a millisecond compiling each of these statements, more
than the database takes to run them, so the four statements of a steady-state report
(authenticate, insert, update the agent state, update the heartbeat) are written out here once.
Semantics are the ORM's: the tests run the same service on both databases.

On PostgreSQL the steady state's next report (the common case: one report, the next sequence
number) is stored by the authentication's own statement, so a report is one round trip, one
statement and one commit (credential_load_storing_next); any other batch is authenticated, then
written in one statement (reports_write). Each round trip wakes two processes on a 2-core
machine, and a slow VM pays for every wake-up (issue 23 item 2, docs/benchmarks.md).

These statements are also *prepared* (server-side binding, psycopg's
`prepare=True`), so each is planned once per database connection instead of once per report:
planning the three-table authentication join took longer than running it, and PostgreSQL's CPU
per report fell from 0.80 to 0.43 ms (docs/benchmarks.md). Django leaves prepared statements
off because a transaction-pooling PgBouncer loses them unless it tracks them
(max_prepared_statements, 1.21+); EBCLOUD_AGENT_PREPARED_STATEMENTS=false turns them off here.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models.base import ModelState

try:  # psycopg 3 (a project dependency); without it there is no PostgreSQL to prepare on
    from django.db.backends.postgresql.base import CursorDebugWrapper, ServerBindingCursor
except (ImportError, ImproperlyConfigured):  # pragma: no cover
    ServerBindingCursor = None

from monitoring.models import ROTATED, AgentCredential, GpuErrorEvent, NodeAgentState, NodeReport
from pools.models import Node

_CRED, _STATE, _REPORT, _NODE = (m._meta.db_table for m in (AgentCredential, NodeAgentState, NodeReport, Node))
_XID = GpuErrorEvent._meta.db_table
_XID_COLUMNS = ["node_id", "report_seq", "position", "gpu_index", "xid", "at", "kind", "action", "mnemonic", "received_at"]
_STATE_COLUMNS = ["acked_seq", "max_seq", "driver_version", "cuda_version", "conditions", "commands_pending"]

_AUTH_SQL = f"""
SELECT c.id, (c.predecessor_in_grace AND c.revoked_at IS NULL), n.id, n.name, n.phase, n.pool_id, n.gpu_count, s.node_id,
       {", ".join("s." + c for c in _STATE_COLUMNS)}
FROM {_CRED} c JOIN {_NODE} n ON n.id = c.node_id LEFT JOIN {_STATE} s ON s.node_id = c.node_id
WHERE c.key_hash = %s AND (c.revoked_at IS NULL OR (c.revoked_reason = '{ROTATED}' AND c.revoked_at > %s))
"""


if ServerBindingCursor is not None:

    class _PreparedCursor(ServerBindingCursor):
        """Binds parameters on the server and prepares every statement it runs; psycopg keeps
        the prepared statements per connection (LRU of 100), so with persistent connections
        (CONN_MAX_AGE) each is planned once per worker process."""

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True, binary=binary)

    class _PreparedDebugWrapper(CursorDebugWrapper):
        """Logs a prepared statement (DEBUG, tests counting queries) with its parameters
        inlined: psycopg keeps no text of a prepared execution where Django's logger looks."""

        def execute(self, sql, params=None):
            with self.debug_sql(self.db.ops.compose_sql(sql, params)):
                return CursorWrapper.execute(self, sql, params)


def _db():
    """The default database's wrapper, looked up once per call: every attribute read through
    the `django.db.connection` proxy costs a context-local lookup (~16k instructions), and
    the hot path made about thirty of them per report."""
    return connections[DEFAULT_DB_ALIAS]


def _cursor(db):
    """A cursor for the hot statements: prepared on PostgreSQL, Django's own elsewhere. Wrapped
    like `connection.cursor()`, so errors are translated and the queries are logged (tests,
    DEBUG) the same way."""
    if db.vendor != "postgresql" or ServerBindingCursor is None or not settings.EBCLOUD_AGENT_PREPARED_STATEMENTS:
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    if raw.prepare_threshold is None:  # Django's default: preparing is off
        # Prepare only what asks for it: Django's own cursors bind on the client, and psycopg
        # never prepares those; a threshold this high never triggers on its own.
        raw.prepare_threshold = 2**31
    cursor = _PreparedCursor(raw)
    return _PreparedDebugWrapper(cursor, db) if db.queries_logged else db.make_cursor(cursor)


def _instance(model, alias: str, values: dict[str, Any]):
    """A model instance from some columns (by attname), the others deferred (they load on
    access, as after `.only()`). What `Model.from_db` makes, without walking every field of
    the model twice (Node has 26): that was two fifths of the authentication's instructions.
    No pre_init/post_init signals are sent; nothing listens to them for these models."""
    instance = model.__new__(model)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, alias
    instance.__dict__.update(values)
    return instance


@functools.cache
def _relations():
    """(credential -> node, node -> agent state, agent state -> node): the caches a relation
    assignment fills, filled directly (the assignment checks routers and types first)."""
    return (AgentCredential._meta.get_field("node"), Node._meta.get_field("agent_state"),
            NodeAgentState._meta.get_field("node"))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def credential_load(key_hash: str, now: datetime) -> AgentCredential | None:
    """The active credential (or one rotated out, in its grace at `now`), its node (id, name,
    phase, pool_id, gpu_count; the rest loads on access) and the node's agent state, in one query."""
    db = _db()
    with _cursor(db) as cursor:
        cursor.execute(_AUTH_SQL, [key_hash, db.ops.adapt_datetimefield_value(now)])
        row = cursor.fetchone()
    return None if row is None else _credential(db, row)


def _credential(db, row) -> AgentCredential:
    """The credential, its node and the node's agent state from a row that begins with
    _AUTH_SQL's columns (_next_report_sql's adds one after them)."""
    cred_id, in_grace, node_id, name, phase, pool_id, gpu_count, state_node, *state = row
    credential_node, node_state, state_node_field = _relations()
    node = _instance(Node, db.alias, {"id": node_id, "name": name, "phase": phase, "pool_id": pool_id, "gpu_count": gpu_count})
    credential = _instance(AgentCredential, db.alias, {"id": cred_id, "node_id": node_id, "predecessor_in_grace": bool(in_grace)})
    credential_node.set_cached_value(credential, node)
    if state_node is not None:
        values = dict(zip(_STATE_COLUMNS, state[:len(_STATE_COLUMNS)], strict=True))
        values["conditions"] = _json(values["conditions"])
        agent_state = _instance(NodeAgentState, db.alias, {"node_id": node_id, **values})
        node_state.set_cached_value(node, agent_state)
        state_node_field.set_cached_value(agent_state, node)
    return credential


@functools.cache
def _next_report_sql() -> str:
    """_AUTH_SQL, and in the same statement the steady state's next report stored: where the
    node's state has no gap (acked_seq = max_seq = the report's seq - 1), the same driver and
    CUDA versions and the node is not terminated (and is the one the batch names, if it names
    one) and has the GPUs the report names (its caller sends only reports without a repeated
    index), the report is inserted, the agent state moved on and the heartbeat touched, as
    reports_write would. Elsewhere nothing is written and the row alone comes back, for the
    general path. The last column says whether the report was stored; the state UPDATE
    re-checks the sequence numbers under its row lock, so of two requests racing with one
    report only one stores it."""
    def cast(model, column: str) -> str:  # INSERT ... SELECT gives its parameters no column types
        field = model._meta.get_field(column)
        return "text" if field.get_internal_type() == "CharField" else field.db_type(connections[DEFAULT_DB_ALIAS])

    report_columns = ["seq", "at", "received_at", "driver_version", "cuda_version", "gpus"]
    state_sets = ["acked_seq", "max_seq", "fb_used_mib", "fb_total_mib", "gpu_util_avg", "last_report_at"]
    return f"""
WITH auth (credential_id, predecessor_in_grace, node_id, name, phase, pool_id, gpu_count, state_node, {", ".join(_STATE_COLUMNS)}) AS ({_AUTH_SQL}),
go AS (SELECT a.node_id FROM auth a WHERE a.state_node IS NOT NULL AND a.phase <> %s AND a.gpu_count > %s AND a.acked_seq = %s
       AND a.max_seq = %s AND a.driver_version = %s AND a.cuda_version = %s AND a.name = COALESCE(%s::text, a.name)),
stored AS (INSERT INTO {_REPORT} (node_id, {", ".join(report_columns)})
           SELECT go.node_id, {", ".join(f"%s::{cast(NodeReport, c)}" for c in report_columns)} FROM go
           ON CONFLICT (node_id, seq) DO NOTHING),
beat AS (UPDATE {_NODE} SET last_heartbeat = %s FROM go
         WHERE {_NODE}.id = go.node_id AND ({_NODE}.last_heartbeat IS NULL OR {_NODE}.last_heartbeat < %s)),
moved AS (UPDATE {_STATE} SET {", ".join(f"{c} = %s" for c in state_sets)} FROM go
          WHERE {_STATE}.node_id = go.node_id AND {_STATE}.acked_seq = %s AND {_STATE}.max_seq = %s
          RETURNING 1)
SELECT auth.*, EXISTS (SELECT 1 FROM moved) FROM auth
"""


def credential_load_storing_next(key_hash: str, *, report, node_name: str | None, values: dict[str, Any], now: datetime,
                                 terminated: str) -> tuple[AgentCredential | None, bool]:
    """credential_load, and on PostgreSQL outside a transaction the steady state's next report
    (`report`, its state `values`: fb_used_mib, fb_total_mib, gpu_util_avg) stored in the same
    statement: one round trip per report instead of two (_next_report_sql). Returns the
    credential as it was before (None if not active) and whether the report was stored;
    elsewhere it only loads the credential and stores nothing."""
    db = _db()
    if db.vendor != "postgresql" or not db.get_autocommit():
        return credential_load(key_hash, now), False
    ops = db.ops
    previous, at, received = report.seq - 1, ops.adapt_datetimefield_value(report.at), ops.adapt_datetimefield_value(now)
    params = [key_hash, received, terminated, max((g["index"] for g in report.gpus), default=-1), previous, previous, report.driver_version, report.cuda_version, node_name,
              report.seq, at, received, report.driver_version, report.cuda_version, ops.adapt_json_value(report.gpus, None),
              received, received,
              report.seq, report.seq, values["fb_used_mib"], values["fb_total_mib"], values["gpu_util_avg"], at,
              previous, previous]
    with _cursor(db) as cursor:
        cursor.execute(_next_report_sql(), params)
        row = cursor.fetchone()
    if row is None:
        return None, False
    return _credential(db, row), row[-1]


def _insert_sql(ops, *, node_id: int, reports: list, now: datetime) -> tuple[str, list]:
    """INSERT ... ON CONFLICT (node_id, seq) DO NOTHING: a replay stores nothing."""
    params: list = []
    received = ops.adapt_datetimefield_value(now)
    for r in reports:
        params += [node_id, r.seq, ops.adapt_datetimefield_value(r.at), received, r.driver_version, r.cuda_version,
                   ops.adapt_json_value(r.gpus, None)]
    sql = (f"INSERT INTO {_REPORT} (node_id, seq, at, received_at, driver_version, cuda_version, gpus) VALUES "
           + ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(reports)) + " ON CONFLICT (node_id, seq) DO NOTHING")
    return sql, params


def _state_sql(ops, *, node_id: int, acked: int, latest_seq: int | None, values: dict[str, Any]) -> tuple[str, list]:
    """Raise acked_seq to `acked`; write `values` (the latest metrics, max_seq among them) only
    where the stored max_seq is below `latest_seq`, so a late, older batch cannot overwrite
    newer metrics. One UPDATE either way: every right-hand side sees the old row."""
    sets, params = ["acked_seq = CASE WHEN acked_seq < %s THEN %s ELSE acked_seq END"], [acked, acked]
    for column, value in (values.items() if latest_seq is not None else ()):
        sets.append(f"{column} = CASE WHEN max_seq < %s THEN %s ELSE {column} END")
        if column == "conditions":
            value = ops.adapt_json_value(value, None)
        elif isinstance(value, datetime):
            value = ops.adapt_datetimefield_value(value)
        params += [latest_seq, value]
    return f"UPDATE {_STATE} SET {', '.join(sets)} WHERE node_id = %s", [*params, node_id]


def _heartbeat_sql(ops, *, node_id: int, now: datetime) -> tuple[str, list]:
    """A conditional UPDATE, never a read-modify-write of the node row; never backwards."""
    at = ops.adapt_datetimefield_value(now)
    return f"UPDATE {_NODE} SET last_heartbeat = %s WHERE id = %s AND (last_heartbeat IS NULL OR last_heartbeat < %s)", [at, node_id, at]


def reports_write(*, node_id: int, reports: list, now: datetime, acked: int, latest_seq: int | None, values: dict[str, Any]) -> None:
    """Store the new reports, move the agent state on and touch the heartbeat, atomically.

    On PostgreSQL, outside a transaction, this is one statement (data-modifying CTEs, atomic
    by themselves): one round trip and no BEGIN/COMMIT. Elsewhere it is three statements in
    a transaction."""
    db = _db()
    ops = db.ops
    statements = [_state_sql(ops, node_id=node_id, acked=acked, latest_seq=latest_seq, values=values),
                  _heartbeat_sql(ops, node_id=node_id, now=now)]
    if reports:
        statements.insert(0, _insert_sql(ops, node_id=node_id, reports=reports, now=now))
    with _cursor(db) as cursor:
        if db.vendor == "postgresql" and db.get_autocommit():
            *ctes, (last_sql, last_params) = statements
            names = [f"w{i}" for i in range(len(ctes))]
            sql = "WITH " + ", ".join(f"{n} AS ({q})" for n, (q, _) in zip(names, ctes, strict=True)) + " " + last_sql
            cursor.execute(sql, [p for _, ps in ctes for p in ps] + last_params)
            return
        with transaction.atomic(using=db.alias):
            for sql, params in statements:
                cursor.execute(sql, params)


def xids_insert(rows: list[GpuErrorEvent], *, chunk: int = 500) -> set[tuple[int, int]]:
    """Insert the Xids not stored yet (INSERT ... ON CONFLICT DO NOTHING RETURNING); returns
    (report_seq, position) of those this call inserted. Of two requests delivering the same Xid,
    one inserts it: the other's insert waits for the first's transaction, then skips it."""
    db = _db()
    ops = db.ops
    inserted: set[tuple[int, int]] = set()
    with db.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            params: list = []
            part = rows[start:start + chunk]
            for x in part:
                params += [x.node_id, x.report_seq, x.position, x.gpu_index, x.xid, ops.adapt_datetimefield_value(x.at),
                           x.kind, x.action, x.mnemonic, ops.adapt_datetimefield_value(x.received_at)]
            values = "(" + ", ".join(["%s"] * len(_XID_COLUMNS)) + ")"
            cursor.execute(f"INSERT INTO {_XID} ({', '.join(_XID_COLUMNS)}) VALUES {', '.join([values] * len(part))} "
                           "ON CONFLICT (node_id, report_seq, position) DO NOTHING RETURNING report_seq, position", params)
            inserted.update((seq, position) for seq, position in cursor.fetchall())
    return inserted
