"""The report ingest's hot path in plain SQL (portable: PostgreSQL and SQLite).

Every node sends a report every 15 s: at 10,000 nodes that is ~670 requests a second on a
2-core machine. The ORM spends about a millisecond compiling each of these statements, more
than the database takes to run them, so the four statements of a steady-state report
(authenticate, insert, update the agent state, update the heartbeat) are written out here once.
Semantics are the ORM's: the tests run the same service on both databases.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import DEFERRED

from monitoring.models import AgentCredential, NodeAgentState, NodeReport
from pools.models import Node

_CRED, _STATE, _REPORT, _NODE = (m._meta.db_table for m in (AgentCredential, NodeAgentState, NodeReport, Node))
_STATE_COLUMNS = ["acked_seq", "max_seq", "driver_version", "cuda_version", "conditions", "commands_pending"]

_AUTH_SQL = f"""
SELECT c.id, n.id, n.name, n.phase, n.pool_id, s.node_id, {", ".join("s." + c for c in _STATE_COLUMNS)}
FROM {_CRED} c JOIN {_NODE} n ON n.id = c.node_id LEFT JOIN {_STATE} s ON s.node_id = c.node_id
WHERE c.key_hash = %s AND c.revoked_at IS NULL
"""


def _instance(model, values: dict[str, Any]):
    """A model instance from some columns (by attname); the others load on access."""
    fields = model._meta.concrete_fields
    return model.from_db(connection.alias, [f.attname for f in fields], [values.get(f.attname, DEFERRED) for f in fields])


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def credential_load(key_hash: str) -> AgentCredential | None:
    """The active credential, its node (id, name, phase, pool_id; the rest loads on access)
    and the node's agent state, in one query."""
    with connection.cursor() as cursor:
        cursor.execute(_AUTH_SQL, [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    cred_id, node_id, name, phase, pool_id, state_node, *state = row
    node = _instance(Node, {"id": node_id, "name": name, "phase": phase, "pool_id": pool_id})
    credential = _instance(AgentCredential, {"id": cred_id, "node_id": node_id})
    credential.node = node
    if state_node is not None:
        state[_STATE_COLUMNS.index("conditions")] = _json(state[_STATE_COLUMNS.index("conditions")])
        node.agent_state = _instance(NodeAgentState, {"node_id": node_id, **dict(zip(_STATE_COLUMNS, state, strict=True))})
    return credential


def _dt(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def _js(value: Any) -> Any:
    return connection.ops.adapt_json_value(value, None)


def _insert_sql(*, node_id: int, reports: list, now: datetime) -> tuple[str, list]:
    """INSERT ... ON CONFLICT (node_id, seq) DO NOTHING: a replay stores nothing."""
    params: list = []
    for r in reports:
        params += [node_id, r.seq, _dt(r.at), _dt(now), r.driver_version, r.cuda_version, _js(r.gpus)]
    sql = (f"INSERT INTO {_REPORT} (node_id, seq, at, received_at, driver_version, cuda_version, gpus) VALUES "
           + ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(reports)) + " ON CONFLICT (node_id, seq) DO NOTHING")
    return sql, params


def _state_sql(*, node_id: int, acked: int, latest_seq: int | None, values: dict[str, Any]) -> tuple[str, list]:
    """Raise acked_seq to `acked`; write `values` (the latest metrics, max_seq among them) only
    where the stored max_seq is below `latest_seq`, so a late, older batch cannot overwrite
    newer metrics. One UPDATE either way: every right-hand side sees the old row."""
    sets, params = ["acked_seq = CASE WHEN acked_seq < %s THEN %s ELSE acked_seq END"], [acked, acked]
    for column, value in (values.items() if latest_seq is not None else ()):
        sets.append(f"{column} = CASE WHEN max_seq < %s THEN %s ELSE {column} END")
        adapted = _js(value) if column == "conditions" else _dt(value) if isinstance(value, datetime) else value
        params += [latest_seq, adapted]
    return f"UPDATE {_STATE} SET {', '.join(sets)} WHERE node_id = %s", [*params, node_id]


def _heartbeat_sql(*, node_id: int, now: datetime) -> tuple[str, list]:
    """A conditional UPDATE, never a read-modify-write of the node row; never backwards."""
    at = _dt(now)
    return f"UPDATE {_NODE} SET last_heartbeat = %s WHERE id = %s AND (last_heartbeat IS NULL OR last_heartbeat < %s)", [at, node_id, at]


def reports_write(*, node_id: int, reports: list, now: datetime, acked: int, latest_seq: int | None, values: dict[str, Any]) -> None:
    """Store the new reports, move the agent state on and touch the heartbeat, atomically.

    On PostgreSQL, outside a transaction, this is one statement (data-modifying CTEs, atomic
    by themselves): one round trip and no BEGIN/COMMIT. Elsewhere it is three statements in
    a transaction."""
    statements = [_state_sql(node_id=node_id, acked=acked, latest_seq=latest_seq, values=values),
                  _heartbeat_sql(node_id=node_id, now=now)]
    if reports:
        statements.insert(0, _insert_sql(node_id=node_id, reports=reports, now=now))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and connection.get_autocommit():
            *ctes, (last_sql, last_params) = statements
            names = [f"w{i}" for i in range(len(ctes))]
            sql = "WITH " + ", ".join(f"{n} AS ({q})" for n, (q, _) in zip(names, ctes, strict=True)) + " " + last_sql
            cursor.execute(sql, [p for _, ps in ctes for p in ps] + last_params)
            return
        with transaction.atomic():
            for sql, params in statements:
                cursor.execute(sql, params)
