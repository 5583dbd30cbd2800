"""`ebcloud pod ...` and `ebcloud node-pool fragmentation`: pods of the simulated cluster and the
fragmentation report, through the REST API only (seed O3, T2, C3).

    ebcloud pod create -f examples/train-pod.yaml
    ebcloud pod list
    ebcloud pod why algorithm/bert-train-0
    ebcloud pod delete algorithm/bert-train-0
    ebcloud node-pool fragmentation train-pool-a --plan
"""

from __future__ import annotations

from typing import IO

import click

from ebcloud import output
from ebcloud.cli import (
    LIST_FORMATS,
    OBJECT_FORMATS,
    _read,
    api,
    cli,
    emit,
    node_pool,
    show,
)


def _ref(ctx: click.Context | None, param: click.Parameter | None, ref: str) -> str:
    namespace, slash, name = ref.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise click.BadParameter(
            "expected NAMESPACE/NAME, e.g. algorithm/bert-train-0", param_hint="NAMESPACE/NAME"
        )
    return ref


@cli.group("pod")
def pod() -> None:
    """Pods of the simulated cluster: submit, list, ask why one is Pending, delete."""


@pod.command("create")
@click.option(
    "-f",
    "--filename",
    "file",
    type=click.File("rb"),
    required=True,
    help="Pod YAML or JSON; - for stdin",
)
@click.option(
    "--team", metavar="SLUG", default="", help="The owning team, for members of several teams"
)
def pod_create(file: IO[bytes], team: str) -> None:
    """Submit a pod from a Pod file; the scheduler binds it on its next pass."""
    body = _read(file)
    with api() as client:
        created = client.pod_create(body, team=team)
    metadata, status = created.get("metadata") or {}, created.get("status") or {}
    click.echo(
        f"pod/{metadata.get('namespace')}/{metadata.get('name')} created ({status.get('phase')})"
    )


@pod.command("list")
@click.option("-o", "--output", "fmt", type=LIST_FORMATS, help="wide, yaml or json")
@click.option("-n", "--namespace", default="", help="Only this namespace")
@click.option("--phase", default="", help="Pending, Running, Succeeded, Failed or Evicted")
def pod_list(fmt: str | None, namespace: str, phase: str) -> None:
    """List the pods you may see."""
    with api() as client:
        pods = client.pods(namespace=namespace, phase=phase)
    show(pods, fmt, output.pod_table)


@pod.command("get")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=_ref)
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def pod_get(ref: str, fmt: str | None) -> None:
    """Show one pod."""
    with api() as client:
        found = client.pod(ref)
    show(found, fmt, output.pod_table)


@pod.command("why")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=_ref)
def pod_why(ref: str) -> None:
    """Why a pod is Pending: the scheduler's message and what to change."""
    with api() as client:
        found = client.pod(ref)
    click.echo(output.pod_why(found))


@pod.command("delete")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=_ref)
def pod_delete(ref: str) -> None:
    """Delete a pod (its GPUs are free at once)."""
    with api() as client:
        client.pod_delete(ref)
    click.echo(f"pod/{ref} deleted")


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
    type=click.IntRange(min=1, max=100),
    default=1,
    show_default=True,
    help="Disruption budget: nodes drained at once",
)
@click.option("-o", "--output", "fmt", type=click.Choice(["yaml", "json"]), help="yaml or json")
def pool_fragmentation(
    name: str, plan: bool, apply_: bool, max_nodes: int, fmt: str | None
) -> None:
    """A pool's fragmentation report: allocation per node, free GPU fragments, repack plan."""
    with api() as client:
        if apply_:
            report = client.pool_fragmentation_apply(name, max_nodes=max_nodes)
        else:
            report = client.pool_fragmentation(name, plan=plan)
    if fmt:
        emit(report, fmt)
    else:
        click.echo(output.fragmentation_text(report))
