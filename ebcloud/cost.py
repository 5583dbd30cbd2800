"""`ebcloud cost export`: the chargeback CSV or the FOCUS 1.2 dataset, streamed to a file.

    ebcloud cost export --by-labels team,project,gpu-class --from 2026-12-01 --to 2026-12-31
    ebcloud cost export --format focus -o december-focus.csv

The rows are the server's `GET /api/v1/costs/?format=csv|focus`, written as they arrive, so a
month of a large fleet never sits in memory. Label keys go verbatim (`gpu-class`).
"""

from __future__ import annotations

import json
import sys

import click
import httpx

from ebcloud import config, output
from ebcloud.client import API, Client, error_line
from ebcloud.common import iso_day
from ebcloud.errors import CliError


@click.group("cost")
def cost() -> None:
    """Costs split by team, project, GPU class and namespace (chargeback)."""


@cost.command("export")
@click.option(
    "--by-labels",
    "by",
    default="team,project,gpu-class",
    show_default=True,
    help="Comma-separated label keys to group by",
)
@click.option(
    "--from",
    "start",
    callback=iso_day,
    metavar="DATE",
    help="First day (UTC); default the 1st of this month",
)
@click.option(
    "--to", "end", callback=iso_day, metavar="DATE", help="Last day (UTC, inclusive); default today"
)
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "focus"]), default="csv", show_default=True
)
@click.option(
    "--detail",
    is_flag=True,
    help="csv: every hourly cost record instead of grouped totals; "
    "focus: a row per node and workload (slow for a large fleet)",
)
@click.option(
    "--granularity",
    type=click.Choice(["daily", "hourly"]),
    default="daily",
    show_default=True,
    help="focus: a usage row per cost line and day, or per hour",
)
@click.option(
    "-o",
    "--output",
    "path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to FILE instead of stdout",
)
def cost_export(
    by: str,
    start: str | None,
    end: str | None,
    fmt: str,
    detail: bool,
    granularity: str,
    path: str | None,
) -> None:
    """Export costs as CSV (grouped by label keys) or as a FOCUS 1.2 dataset."""
    params = {"by": by, "format": fmt}
    if start:
        params["from"] = start
    if end:
        params["to"] = end
    if detail:
        params["detail"] = "1"
    if fmt == "focus" and not detail:
        params["granularity"] = granularity
    with Client(config.load()) as client:
        rows = _stream(client, params, path)
    if path:
        output.echo(f"wrote {rows} rows to {path}", err=True)


def _stream(client: Client, params: dict, path: str | None) -> int:
    """Copy the CSV body to `path` (stdout when None) chunk by chunk; returns the number of data
    rows. The file is opened only once the server has accepted the query, so a refused export
    neither creates it nor truncates the one already there."""
    http = client._http
    lines = 0
    try:
        with http.stream("GET", API + "/costs/", params=params) as response:
            if not response.is_success:
                response.read()
                try:
                    detail = error_line(response.json())
                except (json.JSONDecodeError, ValueError):
                    detail = ""
                raise CliError(
                    detail or f"the server at {client.server} answered HTTP {response.status_code}"
                )
            out = open(path, "wb") if path else sys.stdout.buffer  # noqa: SIM115
            try:
                for chunk in response.iter_bytes():
                    lines += chunk.count(b"\n")
                    out.write(chunk)
                out.flush()
            finally:
                if path:
                    out.close()
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the server at {client.server}: {exc}") from exc
    return max(lines - 1, 0)
