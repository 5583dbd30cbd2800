"""Where the CLI finds its server and token.

The user's config file (`$EBCLOUD_CONFIG`, else `~/.config/ebcloud/config.yaml`) holds the server
URL and the token that `ebcloud login` stored; it is written with mode 0600 because the token is a
credential. `EBCLOUD_SERVER` and `EBCLOUD_TOKEN` override the file, for CI and scripts.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import yaml

from ebcloud.errors import CliError

ENV_CONFIG = "EBCLOUD_CONFIG"
ENV_SERVER = "EBCLOUD_SERVER"
ENV_TOKEN = "EBCLOUD_TOKEN"


@dataclass(frozen=True)
class Config:
    server: str = ""
    token: str = ""
    username: str = ""


def config_path() -> Path:
    explicit = os.environ.get(ENV_CONFIG, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base) / "ebcloud" / "config.yaml"


def normalize_server(url: str) -> str:
    """`http://host:8000/` -> `http://host:8000`; a URL without http(s)://, or one that the URL
    parsers refuse (`http://[::1`, a port of 99999), is one error line, not a crash."""
    url = url.strip().rstrip("/")
    expected = "expected http://HOST[:PORT] or https://HOST[:PORT]"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what checks it
        httpx.URL(url)  # the client's parser: a host it cannot encode, a control character
    except (ValueError, httpx.InvalidURL) as exc:
        raise CliError(f"invalid server URL {url!r}: {str(exc).rstrip('.')}; {expected}") from exc
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"invalid server URL {url!r}: {expected}")
    return url


def read_file(path: Path | None = None) -> Config:
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise CliError(f"cannot read the config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CliError(f"cannot read the config file {path}: not UTF-8 text (byte {exc.start + 1})") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CliError(f"cannot read the config file {path}: not valid YAML") from exc
    if not isinstance(data, dict):
        raise CliError(f"cannot read the config file {path}: expected a mapping of server, token")
    return Config(
        server=str(data.get("server") or ""),
        token=str(data.get("token") or ""),
        username=str(data.get("username") or ""),
    )


def load() -> Config:
    """The file's settings, with `EBCLOUD_SERVER` / `EBCLOUD_TOKEN` taking precedence."""
    stored = read_file()
    server = os.environ.get(ENV_SERVER, "").strip() or stored.server
    token = os.environ.get(ENV_TOKEN, "").strip() or stored.token
    if problem := _token_problem(token):
        if os.environ.get(ENV_TOKEN, "").strip():
            raise CliError(f"the token in {ENV_TOKEN} is malformed ({problem}): set it to the token `ebcloud login` stores, or unset it")
        raise CliError(f"the token saved in {config_path()} is malformed ({problem}): run `ebcloud login` again")
    return Config(
        server=normalize_server(server) if server else "", token=token, username=stored.username
    )


def _token_problem(token: str) -> str:
    """What makes `token` unsendable, "" when nothing. A token is one word of visible ASCII; a
    newline (a hand-edited file) made the HTTP client refuse the header, reported as "cannot
    reach the server" with the token printed. The token itself is never shown."""
    for index, char in enumerate(token):
        if not "!" <= char <= "~":
            return f"it holds {_CHAR_NAMES.get(char, ascii(char))} at character {index + 1}"
    return ""


_CHAR_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}


def save(config: Config, path: Path | None = None) -> Path:
    """Write the file atomically, readable by its owner only (0600; its folder 0700 when new)."""
    path = path or config_path()
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = {"server": config.server, "token": config.token}
        if config.username:
            data["username"] = config.username
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        fd, tmp = tempfile.mkstemp(prefix=".config-", dir=path.parent)  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CliError(f"cannot write the config file {path}: {exc.strerror or exc}") from exc
    return path
