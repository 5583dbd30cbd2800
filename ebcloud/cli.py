"""`ebcloud`: node pools and orders from the terminal, through the REST API only (design §4).

    ebcloud login --server http://127.0.0.1:8000
    ebcloud node-pool create -f examples/create-train-pool.yaml
    ebcloud node-pool describe train-pool-a
    ebcloud order approve 1

Tables like kubectl for people, `-o yaml|json` for machines; on failure one line on stderr
(`error: spec.nodeCount.min: ...`) and exit code 1. Usage mistakes exit 2, as click does.

This module only builds the root group and adds one module's command or group per verb:
`login`, `node_pool` (with `diagnose`), `order`, `pod`, `pdb` and `cost`. Their shared helpers are in
`ebcloud.common`; none of them imports this module.
"""

from __future__ import annotations

import click

from ebcloud import __version__
from ebcloud.common import RootGroup
from ebcloud.cost import cost
from ebcloud.login import login
from ebcloud.node_pool import node_pool
from ebcloud.order import order
from ebcloud.pdb import pdb
from ebcloud.pod import pod


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ebcloud")
def cli() -> None:
    """Manage GPU node pools and their orders on an EBCloud control plane."""


cli.add_command(login)
cli.add_command(node_pool)
cli.add_command(order)
cli.add_command(pod)
cli.add_command(pdb)
cli.add_command(cost)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="ebcloud")
