"""`ebcloud pdb ...`: PodDisruptionBudgets of the simulated cluster, through the REST API only.
A budget says how many of its pods a repack or a drain may evict at once.

    ebcloud pdb create -f examples/pods/nlp-pdb.yaml
    ebcloud pdb list
    ebcloud pdb get algorithm/nlp-trainers -o wide
    ebcloud pdb delete algorithm/nlp-trainers
"""

from __future__ import annotations

from typing import IO

import click

from ebcloud import output
from ebcloud.common import (
    LIST_FORMATS,
    OBJECT_FORMATS,
    api,
    file_option,
    namespaced_name,
    read_body,
    show,
)


@click.group("pdb")
def pdb() -> None:
    """Disruption budgets: how many of a team's pods may be evicted at once."""


@pdb.command("create")
@file_option("PodDisruptionBudget")
@click.option(
    "--team", metavar="SLUG", default="", help="The owning team, for members of several teams"
)
def pdb_create(file: IO[bytes], team: str) -> None:
    """Create a disruption budget from a PodDisruptionBudget file."""
    with api() as client:
        created = client.budget_create(read_body(file), team=team)
    output.echo(f"{_ref(created)} created ({_allowed(created)})")


@pdb.command("replace")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
@file_option("The whole PodDisruptionBudget")
def pdb_replace(ref: str, file: IO[bytes]) -> None:
    """Replace a disruption budget's document (as kubectl replace)."""
    with api() as client:
        replaced = client.budget_replace(ref, read_body(file))
    output.echo(f"{_ref(replaced)} replaced ({_allowed(replaced)})")


@pdb.command("list")
@click.option("-o", "--output", "fmt", type=LIST_FORMATS, help="wide, yaml or json")
@click.option("-n", "--namespace", default="", help="Only this namespace")
def pdb_list(fmt: str | None, namespace: str) -> None:
    """List the disruption budgets you may see, with how many pods each lets go now."""
    with api() as client:
        budgets = client.budgets(namespace=namespace)
    show(budgets, fmt, output.budget_table)


@pdb.command("get")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def pdb_get(ref: str, fmt: str | None) -> None:
    """Show one disruption budget."""
    with api() as client:
        found = client.budget(ref)
    show(found, fmt, output.budget_table)


@pdb.command("delete")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
def pdb_delete(ref: str) -> None:
    """Delete a disruption budget: its pods may be evicted freely again."""
    with api() as client:
        client.budget_delete(ref)
    output.echo(f"poddisruptionbudget/{ref} deleted")


def _ref(budget: dict) -> str:
    metadata = budget.get("metadata") or {}
    return f"poddisruptionbudget/{metadata.get('namespace')}/{metadata.get('name')}"


def _allowed(budget: dict) -> str:
    allowed = (budget.get("status") or {}).get("disruptionsAllowed", 0)
    return f"{allowed} disruption{'' if allowed == 1 else 's'} allowed now"
