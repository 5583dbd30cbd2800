"""The one exception the CLI shows: a single readable line on stderr and exit code 1."""

from __future__ import annotations

import click


class CliError(click.ClickException):
    """`error: <message>` on stderr, exit 1 (usage errors stay click's exit 2)."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=True)
