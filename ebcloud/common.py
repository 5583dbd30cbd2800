"""What every `ebcloud` command module shares: the root group's error handling, the API client,
the `-o` formats and how objects are printed, and reading a `-f FILE` body.

The command modules (`login`, `node_pool`, `order`, `pod`, `pdb`, `diagnose`, `cost`) import from here,
never from `ebcloud.cli`, which only assembles them: so there is no import cycle.
"""

from __future__ import annotations

import errno
import os
from typing import IO, Any

import click

from ebcloud import config, output
from ebcloud.client import Client
from ebcloud.errors import CliError

LIST_FORMATS = click.Choice(["wide", "yaml", "json"])
OBJECT_FORMATS = click.Choice(["wide", "yaml", "json"])


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


def api(*, require_token: bool = True) -> Client:
    return Client(config.load(), require_token=require_token)


def emit(data: Any, fmt: str) -> None:
    output.echo(output.render(data, fmt))


def nothing_found(what: str = "resources") -> None:
    output.echo(f"No {what} found.", err=True)


def show(data: Any, fmt: str | None, table: Any) -> None:
    """Print objects like kubectl: the server's objects with -o yaml|json, else `table(rows, wide)`.
    `data` is a list (a list command) or one object (a get command)."""
    if fmt in ("yaml", "json"):
        emit(data, fmt)
    elif isinstance(data, list) and not data:
        nothing_found()
    else:
        output.echo(table(data if isinstance(data, list) else [data], wide=fmt == "wide"))


def file_option(what: str):
    """`-f FILE`: the document to send, YAML or JSON (- for stdin)."""
    return click.option(
        "-f",
        "--filename",
        "file",
        type=click.File("rb"),
        required=True,
        help=f"{what} YAML or JSON; - for stdin",
    )


def namespaced_name(ctx: click.Context | None, param: click.Parameter | None, ref: str) -> str:
    """A NAMESPACE/NAME argument (pods, disruption budgets), checked before any request."""
    namespace, slash, name = ref.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise click.BadParameter(
            "expected NAMESPACE/NAME, e.g. algorithm/bert-train-0", param_hint="NAMESPACE/NAME"
        )
    return ref


def read_body(file: IO[bytes]) -> bytes:
    """The bytes of a `-f FILE` (or stdin); an empty or blank file is an error line."""
    body = file.read()
    if not body.strip():
        raise CliError(f"{_file_name(file)} is empty")
    return body


def _file_name(file: IO[bytes]) -> str:
    name = getattr(file, "name", "-")
    return "stdin" if name in ("-", "<stdin>") or not isinstance(name, str) else name
