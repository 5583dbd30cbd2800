"""Insert many rows fast, in one statement: PostgreSQL's COPY, one `executemany` elsewhere
(issue 9).

Metering one hour of a 200,000-pod fleet writes ~220,000 usage and ~600,000 cost records.
`bulk_create` on PostgreSQL sends them as one array per column (Django's UNNEST insert), and
psycopg quotes every string of a text array in Python; COPY streams the rows through psycopg's
C dumpers instead, about five times faster. On SQLite `bulk_create` splits rows into batches of
999 parameters (a statement per ~60 rows); one `executemany` of a one-row INSERT is a single
call into the driver's C loop. Either way the number of statements does not grow with the
rows. Rows get no primary key back (callers that need them use `bulk_create`); everything else
is what `bulk_create` would store.

`Unsaved` builds the instances themselves without `Model.__init__`, for the same reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from operator import attrgetter

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models.base import ModelState

# Field types whose Python value psycopg writes as the database expects, as is.
_PLAIN = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveSmallIntegerField,
    models.PositiveBigIntegerField,
    models.DecimalField,
    models.BooleanField,
    models.ForeignKey,
)


def bulk_insert(model: type[models.Model], objects: Sequence[models.Model], *, with_pk: bool = False) -> int:
    """Insert unsaved instances; `with_pk` writes the primary keys they carry. Returns the count."""
    with inserting(model, objects, with_pk=with_pk) as count:
        return count


@contextmanager
def inserting(model: type[models.Model], objects: Sequence[models.Model], *, with_pk: bool = False) -> Iterator[int]:
    """`bulk_insert` that finishes when the block ends (it yields the count). On PostgreSQL the
    rows stream to the server as they are written and it stores them while the block runs, so
    the block's own Python work overlaps the server's: metering allocates an hour while its
    ~41,000 usage rows are stored (issue 9). A query in the block raises `ConnectionBusy` (on
    PostgreSQL it would wait for the COPY, which waits for the block: for ever). An error in
    the block leaves none of the rows (it aborts the COPY; elsewhere the rows' savepoint is
    rolled back)."""
    if not objects:
        yield 0
        return
    fields = [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    with ExitStack() as writing:  # open until the block ends: the COPY, or the rows' savepoint
        writing.enter_context(connection.wrap_database_errors)  # the driver's errors as Django's, as for any query
        write_rows = _copy_rows if connection.vendor == "postgresql" else _insert_rows
        write_rows(writing, table, columns, fields, objects)
        with connection.execute_wrapper(_busy):
            yield len(objects)


def _copy_rows(writing: ExitStack, table: str, columns: str, fields: list, objects: Sequence[models.Model]) -> None:
    """PostgreSQL: COPY the rows; the COPY stays open on `writing`."""
    # One C-level attribute read per row for every column; only the columns that need it
    # (JSON, naive datetimes, other types) are converted afterwards.
    values = attrgetter(*(f.attname for f in fields)) if len(fields) > 1 else (lambda obj, a=fields[0].attname: (getattr(obj, a),))
    convert = [(i, c) for i, c in enumerate(_converter(f) for f in fields) if c is not None]
    cursor = writing.enter_context(connection.cursor())
    write = writing.enter_context(cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN")).write_row
    for obj in objects:
        row = list(values(obj))
        for i, c in convert:
            row[i] = c(row[i])
        write(row)


def _insert_rows(writing: ExitStack, table: str, columns: str, fields: list, objects: Sequence[models.Model]) -> None:
    """Elsewhere: one `executemany` in a savepoint that stays open on `writing`."""
    db = connections[DEFAULT_DB_ALIAS]  # the connection itself: `connection` is a per-context proxy, resolved on every use
    rows = [[f.get_db_prep_save(f.pre_save(obj, True), connection=db) for f in fields] for obj in objects]
    writing.enter_context(transaction.atomic())
    cursor = writing.enter_context(connection.cursor())
    cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})", rows)


class ConnectionBusy(RuntimeError):
    """A query was sent while `inserting` still writes rows on the connection."""


def _busy(execute, sql, params, many, context):
    raise ConnectionBusy("the database connection is writing rows until the `inserting` block ends; query after it")


def json_text(value, encoder=None, _cache: dict = {}) -> str | None:  # noqa: B006 (the cache)
    """`json.dumps(value)` as Django's JSONField would store it, remembered per distinct label
    set: an hour's ~660,000 rows carry a few thousand distinct label dicts (issue 9)."""
    if value is None:
        return None
    if encoder is None and type(value) is dict:
        try:
            key = tuple(value.items())
            text = _cache.get(key)
        except TypeError:  # a nested, unhashable value: not remembered
            return json.dumps(value)
        if text is None:
            if len(_cache) > 100_000:
                _cache.clear()
            text = _cache[key] = json.dumps(value)
        return text
    return json.dumps(value, cls=encoder)


def _converter(field: models.Field):
    """How a field's attribute becomes the value COPY writes; None when it is written as is."""
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        texts: dict[int, str | None] = {}  # this call's rows share their label dicts: by identity

        def to_json(value):
            text = texts.get(id(value), _ABSENT)
            if text is _ABSENT:
                text = texts[id(value)] = json_text(value, encoder)
            return text

        return to_json
    if isinstance(field, _PLAIN):
        return None
    if isinstance(field, models.DateTimeField):

        texts: dict[datetime, str] = {}  # this call's rows share their moments (an hour's rows, its hour)

        def moment(value):
            if isinstance(value, datetime) and value.tzinfo is not None:
                # Aware: its ISO text, formatted once per distinct value; the driver would format
                # it again for every row (~1 µs, half of writing an hour's usage row).
                text = texts.get(value)
                if text is None:
                    text = texts[value] = value.isoformat()
                return text
            return field.get_db_prep_save(value, connection=connection)  # naive: through Django, which warns

        return moment
    return lambda value: field.get_db_prep_save(value, connection=connection)


class Unsaved:
    """A fast constructor of unsaved model instances for rows that are only written (issue 9).

    `Model.__init__` costs ~15 µs (signals, a descriptor per field); metering builds ~660,000
    instances an hour. This sets the same attributes directly: every concrete field's value
    (its default when not given), a foreign key given as an object stored as `<name>_id` and
    cached like `__init__` caches it, so `record.pool` reads it without a query. Values are
    taken as given (no conversion), as `__init__` does.
    """

    def __init__(self, model: type[models.Model]):
        self.model = model
        self.defaults: dict = {}
        self.mutable: list[tuple[str, object]] = []
        # (name, attname, the attribute of the related object the column holds)
        self.relations: list[tuple[str, str, str]] = []
        for f in model._meta.concrete_fields:
            if f.primary_key:
                self.defaults[f.attname] = None
                continue
            if f.is_relation:
                self.relations.append((f.name, f.attname, f.target_field.attname))
            default = f.get_default()
            if isinstance(default, (dict, list, set)):
                self.mutable.append((f.attname, f.get_default))
            self.defaults[f.attname] = default

    def __call__(self, **values) -> models.Model:
        obj = _new_object(self.model)
        cache = {}
        for name, attname, target in self.relations:
            related = values.pop(name, _ABSENT)
            if related is not _ABSENT:
                cache[name] = related
                values[attname] = None if related is None else getattr(related, target)
        state = ModelState()
        state.fields_cache = cache
        data = self.defaults.copy()
        for attname, default in self.mutable:
            if attname not in values:
                data[attname] = default()
        data.update(values)
        data["_state"] = state
        obj.__dict__ = data
        return obj

    def with_values(self, related: dict, values: dict) -> models.Model:
        """The fast path for a builder that gives every column: `values` maps each concrete
        field's attname (`id` None, foreign keys as `<name>_id`) to its value, `related` the
        foreign-key objects to cache by field name. `values` becomes the instance's dict."""
        obj = _new_object(self.model)
        state = ModelState()
        state.fields_cache = related
        values["_state"] = state
        obj.__dict__ = values
        return obj

    def attnames(self) -> set[str]:
        """The keys `with_values` expects."""
        return set(self.defaults)


_ABSENT = object()
_new_object = object.__new__
