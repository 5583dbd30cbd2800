"""What every `ebcloud` command module shares: the root group's error handling, the API client,
the `-o` formats and how objects are printed, and reading a `-f FILE` body.

The command modules (`login`, `node_pool`, `order`, `pod`, `pdb`, `diagnose`, `cost`) import from here,
never from `ebcloud.cli`, which only assembles them: so there is no import cycle.
"""

from __future__ import annotations

import errno
import math
import os
import re
from datetime import date
from typing import IO, Any

import click

from ebcloud import config, output
from ebcloud.client import Client
from ebcloud.errors import CliError

LIST_FORMATS = click.Choice(["wide", "yaml", "json"])
OBJECT_FORMATS = click.Choice(["wide", "yaml", "json"])
# The most the server reads of any request body (config/settings.py DATA_UPLOAD_MAX_MEMORY_SIZE;
# documents are refused above EBCLOUD_MAX_SPEC_BYTES, 64 KiB by default, with the server's
# own error line): a `-f` file is read up to one byte past it, never whole.
MAX_BODY_BYTES = 2 * 1024 * 1024
_NOT_UTF8 = re.compile("[\ud800-\udfff]")  # how Python keeps argv bytes that are not UTF-8
_PATH_OPTIONS = ("-f", "--filename", "-o", "--output")  # a file's name may be any bytes


class RootGroup(click.Group):
    """Turns anything unexpected into one `error:` line instead of a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """An argument that is not UTF-8 (a name, a reason) is refused before anything runs:
        it cannot be sent in a URL or a JSON body. File names (`-f`, `-o`) may be any bytes."""
        for position, arg in enumerate(args):
            after_path_option = position > 0 and args[position - 1] in _PATH_OPTIONS
            if _NOT_UTF8.search(arg) and not after_path_option and not arg.startswith(("--filename=", "--output=")):
                raise CliError(f"the argument '{_shown(arg)}' is not valid UTF-8 text")
        return super().parse_args(ctx, args)

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


class _AsciiDigits:
    """click's integer types read text with `int()`, which takes other scripts' digits (`١` is 1)
    and underscores (`1_0` is 10): `order approve ١` approved order 1. Here a number is written
    in the digits 0-9, after an optional sign, as the server reads it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _DIGITS.fullmatch(value):
            self.fail(f"{value!r} is not a valid integer.", param, ctx)  # click's own words
        return super().convert(value, param, ctx)


_DIGITS = re.compile("[+-]?[0-9]+")


class WholeNumber(_AsciiDigits, click.types.IntParamType):
    """click.INT in the digits 0-9."""


class WholeNumberRange(_AsciiDigits, click.IntRange):
    """click.IntRange in the digits 0-9."""


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange without nan: nan compares False with both bounds, so `--interval nan`
    passed the range and `time.sleep(nan)` failed after the first poll. Give it a `max` so that
    inf (and 1e10, past what `time.sleep` takes) is out of range too."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


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


class _InputFile(click.File):
    """click's File, but a file that cannot be opened is one `error:` line and exit 1, as
    kubectl says `error: the path "x.yaml" does not exist`: no usage block, for the name was
    given as it should be."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            raise CliError(f"cannot read {_shown(os.fsdecode(value))}: {exc.message.rsplit(': ', 1)[-1]}") from exc


def file_option(what: str):
    """`-f FILE`: the document to send, YAML or JSON (- for stdin)."""
    return click.option(
        "-f",
        "--filename",
        "file",
        type=_InputFile("rb"),
        required=True,
        help=f"{what} YAML or JSON; - for stdin",
    )


def iso_day(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    """A `--from`/`--to` DATE, checked before any request."""
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError as exc:
        raise click.BadParameter("expected a date such as 2026-12-01") from exc


def namespaced_name(ctx: click.Context | None, param: click.Parameter | None, ref: str) -> str:
    """A NAMESPACE/NAME argument (pods, disruption budgets), checked before any request."""
    namespace, slash, name = ref.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise click.BadParameter(
            "expected NAMESPACE/NAME, e.g. algorithm/bert-train-0", param_hint="NAMESPACE/NAME"
        )
    return ref


def read_body(file: IO[bytes]) -> bytes:
    """The bytes of a `-f FILE` (or stdin), read up to one byte past `MAX_BODY_BYTES`: more is
    an error line, not a read of `/dev/zero` until the memory runs out. An empty or blank file
    is an error line too."""
    body = file.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise CliError(
            f"{_file_name(file)} is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB"
            f" ({MAX_BODY_BYTES} bytes), the most the server accepts"
        )
    if not body.strip():
        raise CliError(f"{_file_name(file)} is empty")
    return body


def _shown(arg: str) -> str:
    """The argument with its bytes that are not UTF-8 written as `\\xff`."""
    try:
        return arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that was no byte
        return arg.encode("utf-8", "backslashreplace").decode("ascii")


def _file_name(file: IO[bytes]) -> str:
    name = getattr(file, "name", "-")
    return "stdin" if name in ("-", "<stdin>") or not isinstance(name, str) else name
