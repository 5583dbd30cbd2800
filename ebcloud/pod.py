"""`ebcloud pod ...`: pods of the simulated cluster, through the REST API only (seed O3, T2).
The pool's fragmentation report (`ebcloud node-pool fragmentation`) is in `ebcloud.node_pool`.

    ebcloud pod create -f examples/train-pod.yaml
    ebcloud pod list
    ebcloud pod why algorithm/bert-train-0
    ebcloud pod delete algorithm/bert-train-0
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


@click.group("pod")
def pod() -> None:
    """Pods of the simulated cluster: submit, list, ask why one is Pending, delete."""


@pod.command("create")
@file_option("Pod")
@click.option(
    "--team", metavar="SLUG", default="", help="The owning team, for members of several teams"
)
def pod_create(file: IO[bytes], team: str) -> None:
    """Submit a pod from a Pod file; the scheduler binds it on its next pass."""
    body = read_body(file)
    with api() as client:
        created = client.pod_create(body, team=team)
    metadata, status = created.get("metadata") or {}, created.get("status") or {}
    output.echo(
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
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
@click.option("-o", "--output", "fmt", type=OBJECT_FORMATS, help="wide, yaml or json")
def pod_get(ref: str, fmt: str | None) -> None:
    """Show one pod."""
    with api() as client:
        found = client.pod(ref)
    show(found, fmt, output.pod_table)


@pod.command("why")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
def pod_why(ref: str) -> None:
    """Why a pod is Pending: the scheduler's message and what to change."""
    with api() as client:
        found = client.pod(ref)
    output.echo(output.pod_why(found, server=client.server))


@pod.command("delete")
@click.argument("ref", metavar="NAMESPACE/NAME", callback=namespaced_name)
def pod_delete(ref: str) -> None:
    """Delete a pod (its GPUs are free at once)."""
    with api() as client:
        client.pod_delete(ref)
    output.echo(f"pod/{ref} deleted")
