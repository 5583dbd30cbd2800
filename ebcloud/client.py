"""A small REST client of `/api/v1/`: one method per endpoint, every failure a `CliError`.

Errors come back as `{"errors": [{"field": "spec.nodeCount.min", "message": ...}]}`; they are
joined into one line that keeps each field path, so the user sees exactly what to fix.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx

from ebcloud import __version__
from ebcloud.config import Config
from ebcloud.errors import CliError

API = "/api/v1"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


def login_hint(server: str = "") -> str:
    return f"ebcloud login --server {server or 'URL'}"


def error_line(payload: Any) -> str:
    """`{"errors": [...]}` -> `field: message; field: message` (a message without a field stands alone)."""
    items = payload.get("errors") if isinstance(payload, dict) else None
    if not isinstance(items, list) or not items:
        return ""
    parts = []
    for item in items:
        if not isinstance(item, dict):
            parts.append(str(item))
            continue
        field, message = (
            str(item.get("field") or ""),
            " ".join(str(item.get("message") or "").split()),
        )
        parts.append(f"{field}: {message}" if field else message)
    return "; ".join(parts)


class Client:
    """Talks to one server with one token; `subject` names the object for 404 messages."""

    def __init__(
        self,
        config: Config,
        *,
        transport: httpx.BaseTransport | None = None,
        require_token: bool = True,
    ):
        if not config.server:
            raise CliError(f"not logged in: run {login_hint()}")
        if require_token and not config.token:
            raise CliError(f"not logged in: run {login_hint(config.server)}")
        self.server = config.server
        headers = {"Accept": "application/json", "User-Agent": f"ebcloud/{__version__}"}
        if config.token:
            headers["Authorization"] = f"Token {config.token}"
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=TIMEOUT, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- auth ------------------------------------------------------------------------------

    def obtain_token(self, username: str, password: str) -> str:
        data = self._request(
            "POST", "/auth/token/", json={"username": username, "password": password}, auth=False
        )
        token = data.get("token") if isinstance(data, dict) else None
        if not token:
            raise CliError(f"the server at {self.server} returned no token")
        return str(token)

    # --- pools -----------------------------------------------------------------------------

    def pools(self, **filters: str) -> list[dict]:
        params = {key: value for key, value in filters.items() if value}
        return _items(self._request("GET", "/pools/", params=params))

    def pool(self, name: str) -> dict:
        return self._request("GET", _pool_path(name), subject=_pool(name))

    def pool_or_none(self, name: str) -> dict | None:
        try:
            return self.pool(name)
        except NotFound:
            return None

    def pool_create(self, body: bytes, *, team: str = "") -> dict:
        params = {"team": team} if team else None
        return self._request("POST", "/pools/", content=body, params=params, headers=YAML)

    def pool_replace(self, name: str, body: bytes) -> dict:
        return self._request(
            "PUT", _pool_path(name), content=body, headers=YAML, subject=_pool(name)
        )

    def pool_scale(self, name: str, *, min_nodes: int | None, max_nodes: int | None) -> dict:
        body = {
            key: value
            for key, value in (("min", min_nodes), ("max", max_nodes))
            if value is not None
        }
        return self._request("POST", _pool_path(name) + "scale/", json=body, subject=_pool(name))

    def pool_delete(self, name: str) -> dict | None:
        """None when the pool is gone (204); the pool document while it drains (202)."""
        return self._request("DELETE", _pool_path(name), subject=_pool(name))

    def pool_events(self, name: str) -> list[dict]:
        return _items(self._request("GET", _pool_path(name) + "events/", subject=_pool(name)))

    def pool_diagnose(self, name: str) -> dict:
        return self._request("GET", _pool_path(name) + "diagnose/", subject=_pool(name))

    # --- orders ----------------------------------------------------------------------------

    def orders(self, *, status: str = "", start: str | None = None, end: str | None = None) -> list[dict]:
        params = {key: value for key, value in (("status", status), ("from", start), ("to", end)) if value}
        return _items(self._request("GET", "/orders/", params=params or None))

    def order(self, order_id: int) -> dict:
        return self._request("GET", f"/orders/{order_id}/", subject=f"order {order_id}")

    def order_approve(self, order_id: int) -> dict:
        return self._request("POST", f"/orders/{order_id}/approve/", subject=f"order {order_id}")

    def order_reject(self, order_id: int, *, reason: str) -> dict:
        return self._request(
            "POST",
            f"/orders/{order_id}/reject/",
            json={"reason": reason},
            subject=f"order {order_id}",
        )

    # --- pods ------------------------------------------------------------------------------

    def pods(self, **filters: str) -> list[dict]:
        params = {key: value for key, value in filters.items() if value}
        return _items(self._request("GET", "/pods/", params=params))

    def pod(self, ref: str) -> dict:
        return self._request("GET", _pod_path(ref), subject=_pod(ref))

    def pod_create(self, body: bytes, *, team: str = "") -> dict:
        params = {"team": team} if team else None
        return self._request("POST", "/pods/", content=body, params=params, headers=YAML)

    def pod_delete(self, ref: str) -> None:
        self._request("DELETE", _pod_path(ref), subject=_pod(ref))

    # --- disruption budgets ----------------------------------------------------------------

    def budgets(self, **filters: str) -> list[dict]:
        params = {key: value for key, value in filters.items() if value}
        return _items(self._request("GET", "/poddisruptionbudgets/", params=params))

    def budget(self, ref: str) -> dict:
        return self._request("GET", _budget_path(ref), subject=_budget(ref))

    def budget_create(self, body: bytes, *, team: str = "") -> dict:
        params = {"team": team} if team else None
        return self._request(
            "POST", "/poddisruptionbudgets/", content=body, params=params, headers=YAML
        )

    def budget_replace(self, ref: str, body: bytes) -> dict:
        return self._request(
            "PUT", _budget_path(ref), content=body, headers=YAML, subject=_budget(ref)
        )

    def budget_delete(self, ref: str) -> None:
        self._request("DELETE", _budget_path(ref), subject=_budget(ref))

    # --- fragmentation ---------------------------------------------------------------------

    def pool_fragmentation(self, name: str, *, plan: bool = False) -> dict:
        params = {"plan": "1"} if plan else None
        return self._request(
            "GET", _pool_path(name) + "fragmentation/", params=params, subject=_pool(name)
        )

    def pool_fragmentation_apply(self, name: str, *, max_nodes: int = 1, shares: bool = False) -> dict:
        return self._request(
            "POST",
            _pool_path(name) + "fragmentation/apply/",
            json={"maxNodes": max_nodes, "shares": shares},
            subject=_pool(name),
        )

    # --- transport -------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, *, subject: str = "", auth: bool = True, **kwargs
    ) -> Any:
        try:
            response = self._http.request(method, API + path, **kwargs)
        except httpx.TimeoutException as exc:
            raise CliError(f"cannot reach the server at {self.server}: timed out") from exc
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the server at {self.server}: {_reason(exc)}") from exc
        if response.status_code == 204:
            return None
        payload = _json(response)
        if response.is_success:
            if payload is _NOT_JSON:
                raise CliError(
                    f"the server at {self.server} answered {method} {API}{path} with something other than JSON: is it an ebcloud server?"
                )
            return payload
        raise self._error(response, payload, method=method, path=path, subject=subject, auth=auth)

    def _error(
        self,
        response: httpx.Response,
        payload: Any,
        *,
        method: str,
        path: str,
        subject: str,
        auth: bool,
    ) -> CliError:
        status = response.status_code
        detail = error_line(payload)
        if not detail:
            # Not our error shape: a proxy, a wrong URL, a crash. Say what answered, not a guess.
            return CliError(
                f"the server at {self.server} answered {method} {API}{path} with HTTP {status} {response.reason_phrase}".rstrip()
            )
        if status == 401 and auth:
            return CliError(
                f"not authorized ({detail}): log in again with {login_hint(self.server)}"
            )
        if status == 404 and subject:
            return NotFound(f"{subject} not found")
        return CliError(detail)


class NotFound(CliError):
    pass


YAML = {"Content-Type": "application/yaml"}
_NOT_JSON = object()


def _pool(name: str) -> str:
    return f'pool "{name}"'


# Kubernetes' name rules, as the server applies them: pools and namespaces are DNS-1123 labels,
# pods and disruption budgets DNS-1123 subdomains.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_RULES = {
    "pool": (63, _LABEL, "a DNS-1123 label"),
    "namespace": (63, _LABEL, "a DNS-1123 label"),
    "pod": (253, _SUBDOMAIN, "a DNS-1123 subdomain"),
    "poddisruptionbudget": (253, _SUBDOMAIN, "a DNS-1123 subdomain"),
}
_SHOWN = 40  # of a refused name, the characters echoed


def name_problem(value: str, what: str) -> str:
    """Why `value` cannot be the name of a `what` ("pool", "namespace", "pod",
    "poddisruptionbudget"), "" when it can. The value is shown cut short, its control
    characters escaped: no newline or escape sequence reaches the terminal."""
    longest, rule, words = _RULES[what]
    if len(value) <= longest and rule.match(value):
        return ""
    shown = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in shown)
    letters = "lower-case letters, digits, '-' and '.'" if rule is _SUBDOMAIN else "lower-case letters, digits and '-'"
    return (f'"{shown}" is not a valid {what} name ({words}: at most {longest} {letters}, '
            "starting and ending with a letter or digit)")


def _segment(value: str, what: str) -> str:
    """One path segment, checked against the name rule of `what` before any request, then
    percent-encoded. No name outside the rule exists to find, and sending one failed in the
    HTTP client instead: "." and ".." were resolved (`pods/algorithm/..` is the pod list), a
    100,000-character name was an `InvalidURL` traceback line."""
    if problem := name_problem(value, what):
        raise CliError(problem)
    return quote(value, safe="")


def _pool_path(name: str) -> str:
    return f"/pools/{_segment(name, 'pool')}/"


def _pod(ref: str) -> str:
    return f'pod "{ref}"'


def _pod_path(ref: str) -> str:
    namespace, _, name = ref.partition("/")
    return f"/pods/{_segment(namespace, 'namespace')}/{_segment(name, 'pod')}/"


def _budget(ref: str) -> str:
    return f'poddisruptionbudget "{ref}"'


def _budget_path(ref: str) -> str:
    namespace, _, name = ref.partition("/")
    return f"/poddisruptionbudgets/{_segment(namespace, 'namespace')}/{_segment(name, 'poddisruptionbudget')}/"


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return _NOT_JSON


def _items(payload: Any) -> list[dict]:
    """A list endpoint's items, whether the server paginates (`{"results": [...]}`) or not."""
    if isinstance(payload, dict) and isinstance(payload.get("results"), list):
        return payload["results"]
    return payload if isinstance(payload, list) else []


def _reason(exc: httpx.TransportError) -> str:
    text = str(exc).strip()
    cause = exc.__cause__ or exc.__context__
    while not text and cause is not None:
        text, cause = str(cause).strip(), cause.__cause__ or cause.__context__
    return text or type(exc).__name__
