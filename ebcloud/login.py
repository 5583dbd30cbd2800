"""`ebcloud login`: get an API token and store it with the server URL in the config file
(mode 0600); later commands read both from there (or from EBCLOUD_SERVER / EBCLOUD_TOKEN).

    ebcloud login --server http://127.0.0.1:8000
"""

from __future__ import annotations

import os

import click

from ebcloud import config, output
from ebcloud.client import Client


@click.command()
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
    output.echo(f"Logged in to {server} as {username} (token stored in {path}).")
    if os.environ.get(config.ENV_TOKEN):
        output.echo(f"note: {config.ENV_TOKEN} is set and overrides the stored token.", err=True)
