"""The one exception the CLI shows: a single readable line on stderr and exit code 1."""

from __future__ import annotations

import click

from ebcloud.output import escape


class CliError(click.ClickException):
    """`error: <message>` on stderr, exit 1 (usage errors stay click's exit 2)."""

    exit_code = 1

    def show(self, file=None) -> None:
        # One line, whatever the server's message holds: control characters escaped.
        click.echo(f"error: {escape(self.format_message())}", file=file, err=True)
