"""`ebcloud`: node pools and orders from the terminal, through the REST API only (design §4).

    ebcloud login --server http://127.0.0.1:8000
    ebcloud node-pool create -f examples/create-train-pool.yaml
    ebcloud node-pool describe train-pool-a
    ebcloud order approve 1

Tables like kubectl for people, `-o yaml|json` for machines; on failure one line on stderr
(`error: spec.nodeCount.min: ...`) and exit code 1. Usage mistakes exit 2, as click does.
"""

from __future__ import annotations

import errno
import os
import time
from typing import IO, Any

import click
import yaml

from ebcloud import __version__, config, output
from ebcloud.client import Client
from ebcloud.describe import describe_pool
from ebcloud.errors import CliError

WATCH_INTERVAL_S = 2.0
LIST_FORMATS = click.Choice(["wide", "yaml", "json"])
OBJECT_FORMATS = click.Choice(["wide", "yaml", "json"])
EVENT_WIDTHS = [7, 22, 8, 5, 0]


class RootGroup(click.Group):
    """Turns anything unexpected into one `error:` line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except OSError as exc:
            if exc.errno == errno.EPIPE or os.environ.get("EBCLOUD_DEBUG"):
                raise
            raise CliError(str(exc)) from exc
        except Exception as exc:
            if os.environ.get("EBCLOUD_DEBUG"):
                raise
            raise CliError(
                f"unexpected {type(exc).__name__}: {exc} (set EBCLOUD_DEBUG=1 for a traceback)"
            ) from exc


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ebcloud")
def cli() -> None:
    """Manage GPU node pools and their orders on an EBCloud control plane."""


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="ebcloud")


def api(*, require_token: bool = True) -> Client:
    return Client(config.load(), require_token=require_token)


def emit(data: Any, fmt: str) -> None:
    click.echo(output.render(data, fmt))


def nothing_found(what: str = "resources") -> None:
    click.echo(f"No {what} found.", err=True)


def show(data: Any, fmt: str | None, table: Any) -> None:
    """Print objects like kubectl: the server's objects with -o yaml|json, else `table(rows, wide)`.
    `data` is a list (a list command) or one object (a get command)."""
    if fmt in ("yaml", "json"):
        emit(data, fmt)
    elif isinstance(data, list) and not data:
        nothing_found()
    else:
        click.echo(table(data if isinstance(data, list) else [data], wide=fmt == "wide"))


# --- login -----------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--server",
    metavar="URL",
    help="Control plane URL, e.g. http://127.0.0.1:8000 (default: the stored one)",
)
@click.option("--username", "-u", help="Prompted for when missing")
@click.option("--password", "-p", help="Prompted for (hidden) when missing")
def login(server: str | None, username: str | None, password: str | None) -> None:
    """Get an API token and store it with the server URL in the config file (mode 0600)."""
    stored = config.read_file()
    server = server or os.environ.get(config.ENV_SERVER, "") or stored.server
    if not server:
        raise click.UsageError("Missing option '--server'.")
    server = config.normalize_server(server)
    if not username:
        username = click.prompt("Username", default=stored.username or None)
    if password is None:
        password = click.prompt("Password", hide_input=True)
    with Client(config.Config(server=server), require_token=False) as client:
        token = client.obtain_token(username, password)
    path = config.save(config.Config(server=server, token=token, username=username))
    click.echo(f"Logged in to {server} as {username} (token stored in {path}).")
    if os.environ.get(config.ENV_TOKEN):
        click.echo(f"note: {config.ENV_TOKEN} is set and overrides the stored token.", err=True)


# --- node pools ------------------------------------------------------------------------------


@cli.group("node-pool")
def node_pool() -> None:
    """GPU node pools (kind: GpuNodePool)."""


def _read(file: IO[bytes]) -> bytes:
    body = file.read()
    if not body.strip():
        raise CliError(f"{_file_name(file)} is empty")
    return body


def _file_name(file: IO[bytes]) -> str:
    name = getattr(file, "name", "-")
    return "stdin" if name in ("-", "<stdin>") or not isinstance(name, str) else name


def _ref(pool: dict) -> str:
    return f"gpunodepool/{(pool.get('metadata') or {}).get('name', '?')}"


def _state(pool: dict) -> str:
    status = pool.get("status") or {}
    reason = status.get("pendingReason")
    phase = status.get("phase")
    return f" ({phase}, {reason})" if reason else (f" ({phase})" if phase else "")


@node_pool.command("create")
@click.option(
    "-f",
    "--filename",
    "file",
    type=click.File("rb"),
    required=True,
    help="Pool YAML or JSON; - for stdin",
)
@click.option(
    "--team", metavar="SLUG", default="", help="The owning team, for leads of several teams"
)
def pool_create(file: IO[bytes], team: str) -> None:
    """Create a pool from a GpuNodePool file."""
    body = _read(file)
    with api() as client:
        pool = client.pool_create(body, team=team)
    click.echo(f"{_ref(pool)} created{_state(pool)}")


@node_pool.command("apply")
@click.option(
    "-f",
    "--filename",
    "file",
    type=click.File("rb"),
    required=True,
    help="Pool YAML or JSON; - for stdin",
)
@click.option("--team", metavar="SLUG", default="", help="The owning team when the pool is created")
def pool_apply(file: IO[bytes], team: str) -> None:
    """Create the pool, or replace its spec when it exists."""
    body = _read(file)
    name = _document_name(body)
    with api() as client:
        current = client.pool_or_none(name) if name else None
        if current is None:
            # New, or a file without a usable name: the server says exactly what is wrong with it.
            pool = client.pool_create(body, team=team)
            click.echo(f"{_ref(pool)} created{_state(pool)}")
            return
        pool = client.pool_replace(name, body)
    before = (current.get("metadata") or {}).get("generation")
    verb = "unchanged" if before == (pool.get("metadata") or {}).get("generation") else "configured"
    click.echo(f"{_ref(pool)} {verb}{_state(pool)}")


def _document_name(body: bytes) -> str:
    try:
        document = yaml.safe_load(body)
    except yaml.YAMLError:
        return ""
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name and "/" not in name else ""


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
    click.echo(describe_pool(pool, events))


@node_pool.command("events")
@click.argument("name")
@click.option(
    "--watch", "-w", is_flag=True, help="Keep polling and print new or updated events until Ctrl-C"
)
@click.option("--interval", type=click.FloatRange(min=0.1), default=WATCH_INTERVAL_S, hidden=True)
def pool_events(name: str, watch: bool, interval: float) -> None:
    """List a pool's events, oldest first."""
    with api() as client:
        if not watch:
            events = client.pool_events(name)
            if events:
                click.echo(output.event_table(events))
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
                    click.echo(line)
                header = False
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@node_pool.command("scale")
@click.argument("name")
@click.option(
    "--min", "min_nodes", type=click.IntRange(min=0), help="New nodeCount.min (monthly baseline)"
)
@click.option("--max", "max_nodes", type=click.IntRange(min=1), help="New nodeCount.max")
def pool_scale(name: str, min_nodes: int | None, max_nodes: int | None) -> None:
    """Change a pool's nodeCount.min and/or nodeCount.max."""
    if min_nodes is None and max_nodes is None:
        raise click.UsageError("give --min, --max or both")
    with api() as client:
        pool = client.pool_scale(name, min_nodes=min_nodes, max_nodes=max_nodes)
    count = (pool.get("spec") or {}).get("nodeCount") or {}
    click.echo(
        f"{_ref(pool)} scaled (min {count.get('min')}, max {count.get('max')}){_state(pool)}"
    )


@node_pool.command("delete")
@click.argument("name")
def pool_delete(name: str) -> None:
    """Delete a pool (its nodes are drained and released first)."""
    with api() as client:
        pool = client.pool_delete(name)
    if pool is None:
        click.echo(f"gpunodepool/{name} deleted")
    else:
        click.echo(f"gpunodepool/{name} deleting{_state(pool)}")


# --- orders ----------------------------------------------------------------------------------


@cli.group("order")
def order() -> None:
    """Orders for monthly capacity; platform admins approve or reject them."""


@order.command("list")
@click.option("--status", default="", help="Pending, Approved, Rejected, Paid or Failed")
@click.option("-o", "--output", "fmt", type=LIST_FORMATS, help="wide, yaml or json")
def order_list(status: str, fmt: str | None) -> None:
    """List the orders you may see, newest first."""
    with api() as client:
        orders = client.orders(status=status)
    show(orders, fmt, output.order_table)


@order.command("get")
@click.argument("order_id", metavar="ID", type=int)
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def order_get(order_id: int, fmt: str | None) -> None:
    """Show one order."""
    with api() as client:
        found = client.order(order_id)
    show(found, fmt, output.order_table)


@order.command("approve")
@click.argument("order_id", metavar="ID", type=int)
def order_approve(order_id: int) -> None:
    """Approve a Pending order (platform admins)."""
    with api() as client:
        decided = client.order_approve(order_id)
    click.echo(f"order/{order_id} {str(decided.get('status', 'approved')).lower()}")


@order.command("reject")
@click.argument("order_id", metavar="ID", type=int)
@click.option("--reason", required=True, help="Why; the team lead reads it in the pool's events")
def order_reject(order_id: int, reason: str) -> None:
    """Reject a Pending order with a reason (platform admins)."""
    with api() as client:
        decided = client.order_reject(order_id, reason=reason)
    click.echo(f"order/{order_id} {str(decided.get('status', 'rejected')).lower()}")


# Pods and the fragmentation report (they register on `cli` and `node_pool` above).
from ebcloud import cli_pods  # noqa: E402, F401

# Costs: `ebcloud cost export` (billing).
from ebcloud.cost import cost as cost_group  # noqa: E402

cli.add_command(cost_group)

# The self-check table: `ebcloud node-pool diagnose NAME` (registers on `node_pool`).
from ebcloud import cli_diagnose  # noqa: E402, F401
