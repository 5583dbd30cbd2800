"""Bounded lists, the Kubernetes way (API concepts, "Retrieving large results sets in chunks").

A list is complete unless the client passes `?limit=N` (1 to 1000); then it gets at most N items
and, while more remain, a `Link: <url>; rel="next"` header (RFC 8288) whose URL is the request's
own with `continue=TOKEN` added, filters and ordering kept. The last chunk has no `Link`. The body
stays a JSON array, so a client that never passes `limit` sees no change (the `ebcloud` CLI
passes none).

Why only a `Link` header: Kubernetes carries the token in the list's `metadata.continue`, but our
lists are bare arrays and an envelope would break every client; RFC 8288's `rel="next"` is the
standard place for it when the body cannot hold it (GitHub's API, the DRF link-header paginators),
and its URL is all a client needs, so an `X-Continue` header would only repeat it (RFC 6648
retired `X-` headers).

The token is a keyset cursor: the sort key values of the chunk's last item, in the list's own
order with the primary key as the last tiebreak. The next chunk is "the items after these keys",
not "from offset N", so rows added or removed between chunks neither skip nor repeat an item. It
is signed with SECRET_KEY for the list's path (django.core.signing): opaque to clients, and a
tampered, malformed or foreign one is a 400 naming `continue`, never a 500. It never expires
(nothing is kept on the server), so Kubernetes' 410 for a compacted token does not arise. It
carries sort keys only: the next chunk is read from the caller's own queryset, so another
team's token shows nothing of theirs.

Sources: an unsliced QuerySet is cut in SQL (a WHERE on the keys and a LIMIT: pools, orders,
pods); a list, or a sliced QuerySet (a selector's bounded window, e.g. a pool's latest 100
events), is sorted by its keys and cut in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from functools import reduce
from operator import or_
from typing import Any

from django.core import signing
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q, QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.response import Response

from pools.core.errors import ValidationError
from pools.core.numbers import parse_whole_number

MAX_LIMIT = 1000
MAX_TOKEN = 4096  # far above any token given out (its keys are names and times)
SALT = "pools.api.chunking"
BAD_TOKEN = "not a continue token of this list: list again without continue"

PARAMETERS = [
    OpenApiParameter(
        "limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        description='At most this many items. While more remain, the `Link` header gives the next chunk\'s URL (`rel="next"`); without `limit` the list is complete',
    ),
    OpenApiParameter(
        "continue", str,
        description="The token in the previous chunk's `Link` URL: the items after that chunk, in the same order (rows added or removed meanwhile shift nothing)",
    ),
    OpenApiParameter(
        "Link", str, OpenApiParameter.HEADER, response=[200],
        description='`<URL>; rel="next"` (RFC 8288) when `limit` cut the list: the next chunk\'s URL, with the other parameters kept; absent on the last chunk',
    ),
]


def listed(items: Any) -> dict[int, OpenApiResponse]:
    """The 200 of a chunked list endpoint, for `extend_schema(responses=...)`. drf-spectacular
    names an action's operation `_list` only for a bare list serializer, so an action that
    returns a list also names its `operation_id`."""
    return {200: OpenApiResponse(items, description='All items; with `limit`, one chunk, and a `Link: <URL>; rel="next"` header while more remain')}


@dataclass(frozen=True)
class Chunk:
    items: list
    next_token: str  # "" on the last chunk


def chunked_response(request, source: QuerySet | Sequence, render: Callable[[list], Any], *, ordering: Sequence[str] = ()) -> Response:
    """The list's response: `render(items)` of the chunk the request asks for, with the `Link`
    header while more remain. `ordering` (Django-style terms, `-` for descending, `__` into
    attributes or dict keys) is the order of a list source; a QuerySet's is its own."""
    limit = limit_param(request)
    token = request.query_params.get("continue", "")
    chunk = take(source, limit=limit, token=token, ordering=ordering, scope=request.path)
    if not chunk.next_token:
        return Response(render(chunk.items))
    params = request.query_params.copy()
    params["continue"] = chunk.next_token
    url = request.build_absolute_uri(request.path) + "?" + params.urlencode()
    return Response(render(chunk.items), headers={"Link": f'<{url}>; rel="next"'})


def limit_param(request) -> int | None:
    if "limit" not in request.query_params:
        return None
    try:
        limit = parse_whole_number(request.query_params["limit"])
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"must be a whole number from 1 to {MAX_LIMIT}", field="limit")
    return limit


def take(source: QuerySet | Sequence, *, limit: int | None, token: str = "", ordering: Sequence[str] = (), scope: str = "") -> Chunk:
    """The chunk after `token` (from the start without one), at most `limit` items (all without).
    `scope` names the list (its path): a token is good for the list that gave it out only."""
    if isinstance(source, QuerySet) and not source.query.is_sliced:
        terms = ordering_of(source)
        queryset = source.order_by(*terms)
        if token:
            try:
                queryset = queryset.filter(_after_q(terms, _cursor(token, terms, scope)))
            except (DjangoValidationError, ValueError, TypeError):  # a key of another type than its field's
                raise ValidationError(BAD_TOKEN, field="continue") from None
        rows = list(queryset if limit is None else queryset[: limit + 1])
    else:
        terms = list(ordering) or (ordering_of(source) if isinstance(source, QuerySet) else [])
        if not terms:
            raise TypeError("a list source needs its ordering")
        rows = _sorted(list(source), terms)
        if token:
            cursor = _cursor(token, terms, scope)
            rows = [row for row in rows if _is_after(_key(row, terms), cursor, terms)]
    if limit is None or len(rows) <= limit:
        return Chunk(rows, "")
    rows = rows[:limit]
    return Chunk(rows, _token(_key(rows[-1], terms), terms, scope))


def ordering_of(queryset: QuerySet) -> list[str]:
    """The queryset's order (its `order_by`, else its model's), each field once, ending with
    the primary key."""
    query = queryset.query
    terms = list(query.order_by) or (list(queryset.model._meta.ordering) if query.default_ordering else [])
    if not all(isinstance(term, str) and term.lstrip("-") and term != "?" for term in terms):
        raise TypeError(f"keyset chunks need field names to order by, not {terms!r}")
    fields = list(dict.fromkeys(term.lstrip("-") for term in terms))  # a field twice sorts as its first
    terms = [next(term for term in terms if term.lstrip("-") == field) for field in fields]
    if not any(field in ("pk", queryset.model._meta.pk.name) for field in fields):
        terms.append("pk")
    return terms


# --- the token: the last item's keys, typed, signed for the list ----------------------------

_TYPES: dict[str, tuple[type, Callable[[Any], Any], Callable[[Any], Any]]] = {
    # tag: (Python type, to JSON, from JSON)
    "s": (str, str, str),
    "i": (int, int, int),
    "t": (datetime, datetime.isoformat, datetime.fromisoformat),
    "d": (date, date.isoformat, date.fromisoformat),
    "m": (Decimal, str, Decimal),
}


def _encode(value: Any) -> list:
    for tag, (kind, dump, _) in _TYPES.items():
        if isinstance(value, kind) and not isinstance(value, bool) and not (kind is date and isinstance(value, datetime)):
            return [tag, dump(value)]
    raise TypeError(f"keyset chunks cannot sort by a {type(value).__name__} ({value!r})")


def _decode(pair: Any) -> Any:
    tag, raw = pair  # ValueError/TypeError unless a pair
    kind, _, load = _TYPES[tag]  # KeyError for an unknown tag
    if kind in (str, int) and type(raw) is not kind:
        raise TypeError(tag)
    return load(raw)


def _token(values: list, terms: list[str], scope: str) -> str:
    return signing.Signer(salt=f"{SALT}:{scope.rstrip('/')}").sign_object({"o": terms, "k": [_encode(v) for v in values]})


def _cursor(token: str, terms: list[str], scope: str) -> list:
    if len(token) > MAX_TOKEN:
        raise ValidationError(BAD_TOKEN, field="continue")
    try:
        payload = signing.Signer(salt=f"{SALT}:{scope.rstrip('/')}").unsign_object(token)
        values = [_decode(pair) for pair in payload["k"]]
        same_order = payload["o"] == terms and len(values) == len(terms)
    except (signing.BadSignature, ValueError, TypeError, KeyError, InvalidOperation, UnicodeError):
        raise ValidationError(BAD_TOKEN, field="continue") from None
    if not same_order:
        raise ValidationError("this continue token belongs to the list in another order: list again without it", field="continue")
    return values


# --- keys: read from rows, compared in SQL or in Python -------------------------------------

def _key(row: Any, terms: list[str]) -> list:
    values = []
    for term in terms:
        value = row
        for part in term.lstrip("-").split("__"):
            value = value.get(part) if isinstance(value, dict) else getattr(value, part)
        values.append(value)
    return values


def _after_q(terms: list[str], values: list) -> Q:
    """Rows after the cursor: (k1 after v1) or (k1 = v1 and k2 after v2) or ..."""
    clauses, equal = [], Q()
    for term, value in zip(terms, values, strict=True):
        field = term.lstrip("-")
        clauses.append(equal & Q(**{f"{field}__{'lt' if term.startswith('-') else 'gt'}": value}))
        equal &= Q(**{field: value})
    return reduce(or_, clauses)


def _sorted(rows: list, terms: list[str]) -> list:
    """Sorted by the terms, last term first (Python's sort is stable)."""
    for index in reversed(range(len(terms))):
        rows.sort(key=lambda row, term=terms[index]: _key(row, [term])[0], reverse=terms[index].startswith("-"))
    return rows


def _is_after(key: list, cursor: list, terms: list[str]) -> bool:
    for value, mark, term in zip(key, cursor, terms, strict=True):
        if value != mark:
            try:
                return (value < mark) if term.startswith("-") else (value > mark)
            except TypeError:
                raise ValidationError(BAD_TOKEN, field="continue") from None
    return False
