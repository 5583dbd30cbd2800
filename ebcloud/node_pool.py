"""`ebcloud node-pool ...`: GPU node pools (kind: GpuNodePool), through the REST API only.

    ebcloud node-pool create -f examples/create-train-pool.yaml
    ebcloud node-pool describe train-pool-a
    ebcloud node-pool events train-pool-a --watch
    ebcloud node-pool fragmentation train-pool-a --plan
    ebcloud node-pool diagnose train-pool-a

The group is complete here: its `diagnose` command (the self-check table) lives in
`ebcloud.diagnose` and is added below.
"""

from __future__ import annotations

import time
from typing import IO, Any

import click
import yaml

from ebcloud import output
from ebcloud.client import Client, name_problem
from ebcloud.common import (
    LIST_FORMATS,
    OBJECT_FORMATS,
    FiniteFloatRange,
    WholeNumberRange,
    api,
    emit,
    file_option,
    nothing_found,
    read_body,
    show,
)
from ebcloud.describe import describe_pool
from ebcloud.diagnose import pool_diagnose

WATCH_INTERVAL_S = 2.0
WATCH_INTERVAL_MAX_S = 24 * 3600  # a day; `time.sleep` overflows past about 9.2e9 seconds
EVENT_WIDTHS = [7, 22, 8, 5, 0]


@click.group("node-pool")
def node_pool() -> None:
    """GPU node pools (kind: GpuNodePool)."""


def _ref(pool: dict) -> str:
    return f"gpunodepool/{(pool.get('metadata') or {}).get('name', '?')}"


def _state(pool: dict) -> str:
    status = pool.get("status") or {}
    reason = status.get("pendingReason")
    phase = status.get("phase")
    return f" ({phase}, {reason})" if reason else (f" ({phase})" if phase else "")


@node_pool.command("create")
@file_option("Pool")
@click.option(
    "--team", metavar="SLUG", default="", help="The owning team, for leads of several teams"
)
def pool_create(file: IO[bytes], team: str) -> None:
    """Create a pool from a GpuNodePool file."""
    body = read_body(file)
    with api() as client:
        pool = client.pool_create(body, team=team)
    output.echo(f"{_ref(pool)} created{_state(pool)}")


@node_pool.command("apply")
@file_option("Pool")
@click.option("--team", metavar="SLUG", default="", help="The owning team when the pool is created")
def pool_apply(file: IO[bytes], team: str) -> None:
    """Create the pool, or replace its spec when it exists."""
    body = read_body(file)
    name = _document_name(body)
    with api() as client:
        current = client.pool_or_none(name) if name else None
        if current is None:
            # New, or a file without a usable name: the server says exactly what is wrong with it.
            pool = client.pool_create(body, team=team)
            output.echo(f"{_ref(pool)} created{_state(pool)}")
            return
        pool = client.pool_replace(name, body)
    before = (current.get("metadata") or {}).get("generation")
    verb = "unchanged" if before == (pool.get("metadata") or {}).get("generation") else "configured"
    output.echo(f"{_ref(pool)} {verb}{_state(pool)}")


def _document_name(body: bytes) -> str:
    """The file's metadata.name, or "" when it has none we can read or none a pool can have: the
    file is then created, and the server says exactly what is wrong with it (nesting too deep,
    a bad date, the name, ...), as `create` would."""
    try:
        document = yaml.safe_load(body)
    except (yaml.YAMLError, RecursionError, ValueError):
        return ""
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and not name_problem(name, "pool") else ""


@node_pool.command("list")
@click.option("-o", "--output", "fmt", type=LIST_FORMATS, help="wide, yaml or json")
@click.option("--team", metavar="SLUG", default="", help="Only this team's pools")
@click.option("--gpu-model", metavar="MODEL", default="", help="e.g. A100_80G")
@click.option("--phase", default="", help="e.g. Pending, Ready")
def pool_list(fmt: str | None, team: str, gpu_model: str, phase: str) -> None:
    """List the pools you may see."""
    with api() as client:
        pools = client.pools(team=team, gpuModel=gpu_model, phase=phase)
    show(pools, fmt, output.pool_table)


@node_pool.command("get")
@click.argument("name")
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def pool_get(name: str, fmt: str | None) -> None:
    """Show one pool (the server's document with -o yaml|json)."""
    with api() as client:
        pool = client.pool(name)
    show(pool, fmt, output.pool_table)


@node_pool.command("describe")
@click.argument("name")
def pool_describe(name: str) -> None:
    """Show a pool's spec, status and recent events, like kubectl describe."""
    with api() as client:
        pool = client.pool(name)
        events = client.pool_events(name)
    output.echo(describe_pool(pool, events))


@node_pool.command("events")
@click.argument("name")
@click.option(
    "--watch", "-w", is_flag=True, help="Keep polling and print new or updated events until Ctrl-C"
)
@click.option(
    "--interval", type=FiniteFloatRange(min=0.1, max=WATCH_INTERVAL_MAX_S), default=WATCH_INTERVAL_S, hidden=True
)
def pool_events(name: str, watch: bool, interval: float) -> None:
    """List a pool's events, oldest first."""
    with api() as client:
        if not watch:
            events = client.pool_events(name)
            if events:
                output.echo(output.event_table(events))
            else:
                nothing_found("events")
            return
        _watch_events(client, name, interval)


def _watch_events(client: Client, name: str, interval: float) -> None:
    seen: dict[Any, tuple] = {}
    header = True
    try:
        while True:
            fresh = []
            for event in output.chronological(client.pool_events(name)):
                key, version = event.get("id"), (event.get("count"), event.get("lastTimestamp"))
                if seen.get(key) != version:
                    seen[key] = version
                    fresh.append(event)
            if fresh:
                widths = [
                    max(w, *(len(str(e.get(k) or "")) for e in fresh))
                    for w, k in zip(
                        EVENT_WIDTHS, ("type", "reason", "", "count", "message"), strict=True
                    )
                ]
                rows = [output.event_row(e) for e in fresh]
                for line in output.table_lines(
                    output.EVENT_HEADERS, rows, with_header=header, widths=widths
                ):
                    output.echo(line)
                header = False
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@node_pool.command("scale")
@click.argument("name")
@click.option(
    "--min", "min_nodes", type=WholeNumberRange(min=0), help="New nodeCount.min (monthly baseline)"
)
@click.option("--max", "max_nodes", type=WholeNumberRange(min=1), help="New nodeCount.max")
def pool_scale(name: str, min_nodes: int | None, max_nodes: int | None) -> None:
    """Change a pool's nodeCount.min and/or nodeCount.max."""
    if min_nodes is None and max_nodes is None:
        raise click.UsageError("give --min, --max or both")
    with api() as client:
        pool = client.pool_scale(name, min_nodes=min_nodes, max_nodes=max_nodes)
    count = (pool.get("spec") or {}).get("nodeCount") or {}
    output.echo(
        f"{_ref(pool)} scaled (min {count.get('min')}, max {count.get('max')}){_state(pool)}"
    )


@node_pool.command("delete")
@click.argument("name")
def pool_delete(name: str) -> None:
    """Delete a pool (its nodes are drained and released first)."""
    with api() as client:
        pool = client.pool_delete(name)
    if pool is None:
        output.echo(f"gpunodepool/{name} deleted")
    else:
        output.echo(f"gpunodepool/{name} deleting{_state(pool)}")


@node_pool.command("fragmentation")
@click.argument("name")
@click.option(
    "--plan", is_flag=True, help="Also show the repack plan: moves, freed nodes, GPU-hours saved"
)
@click.option(
    "--apply", "apply_", is_flag=True, help="Apply the repack plan (team leads, platform admins)"
)
@click.option(
    "--max-nodes",
    type=WholeNumberRange(min=1, max=100),
    default=1,
    show_default=True,
    help="Disruption budget: nodes drained at once",
)
@click.option(
    "--shares",
    is_flag=True,
    help="With --apply: apply the plan's other part, which packs GPU shares into fewer GPUs",
)
@click.option("-o", "--output", "fmt", type=click.Choice(["yaml", "json"]), help="yaml or json")
def pool_fragmentation(
    name: str, plan: bool, apply_: bool, max_nodes: int, shares: bool, fmt: str | None
) -> None:
    """A pool's fragmentation report: allocation per node, free GPU fragments, repack plan."""
    if shares and not apply_:
        raise click.UsageError("--shares goes with --apply")
    with api() as client:
        if apply_:
            report = client.pool_fragmentation_apply(name, max_nodes=max_nodes, shares=shares)
        else:
            report = client.pool_fragmentation(name, plan=plan)
    if fmt:
        emit(report, fmt)
    else:
        output.echo(output.fragmentation_text(report))


# The self-check table: `ebcloud node-pool diagnose NAME`.
node_pool.add_command(pool_diagnose)
