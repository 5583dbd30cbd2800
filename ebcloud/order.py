"""`ebcloud order ...`: orders for monthly capacity; platform admins approve or reject them,
through the REST API only.

    ebcloud order list --status Pending
    ebcloud order list --from 2026-12-01 --to 2026-12-31 -o wide
    ebcloud order approve 1
    ebcloud order reject 2 --reason "no A100 capacity this month"
"""

from __future__ import annotations

import click

from ebcloud import output
from ebcloud.common import LIST_FORMATS, OBJECT_FORMATS, WholeNumber, api, iso_day, show


@click.group("order")
def order() -> None:
    """Orders for monthly capacity; platform admins approve or reject them."""


@order.command("list")
@click.option("--status", default="", help="Pending, Approved, Paying, Rejected, Paid, Failed or Withdrawn")
@click.option("--from", "start", callback=iso_day, metavar="DATE", help="Only orders paid on or after this day (UTC)")
@click.option("--to", "end", callback=iso_day, metavar="DATE", help="Only orders paid on or before this day (UTC, inclusive)")
@click.option("-o", "--output", "fmt", type=LIST_FORMATS, help="wide, yaml or json")
def order_list(status: str, start: str | None, end: str | None, fmt: str | None) -> None:
    """List the orders you may see, newest first; with --from/--to, those the account paid then."""
    with api() as client:
        orders = client.orders(status=status, start=start, end=end)
    show(orders, fmt, output.order_table)


@order.command("get")
@click.argument("order_id", metavar="ID", type=WholeNumber())
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def order_get(order_id: int, fmt: str | None) -> None:
    """Show one order."""
    with api() as client:
        found = client.order(order_id)
    show(found, fmt, output.order_table)


@order.command("approve")
@click.argument("order_id", metavar="ID", type=WholeNumber())
def order_approve(order_id: int) -> None:
    """Approve a Pending order (platform admins)."""
    with api() as client:
        decided = client.order_approve(order_id)
    output.echo(f"order/{order_id} {str(decided.get('status', 'approved')).lower()}")


@order.command("reject")
@click.argument("order_id", metavar="ID", type=WholeNumber())
@click.option("--reason", required=True, help="Why; the team lead reads it in the pool's events")
def order_reject(order_id: int, reason: str) -> None:
    """Reject a Pending order with a reason (platform admins)."""
    with api() as client:
        decided = client.order_reject(order_id, reason=reason)
    output.echo(f"order/{order_id} {str(decided.get('status', 'rejected')).lower()}")
