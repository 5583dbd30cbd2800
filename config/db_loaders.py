"""Timestamps from PostgreSQL parsed in C (issue 9: measured, not assumed).

With psycopg 3 Django loads every `timestamptz` value through its own loader, a Python
subclass of psycopg's pure-Python `TimestamptzLoader` (it then sets Django's time zone):
~7 µs a value on the benchmark machine, so reading a day of a pool's per-minute samples
(1,440 rows) costs ~10 ms of a page view and reading a 20,000-node fleet's state ~0.5 s of a
reconcile pass. This loader gives the same result in ~0.3 µs: PostgreSQL writes timestamps in
ISO form (Django's connections keep the default `DateStyle`) in the session time zone, which
Django sets to its own, so `datetime.fromisoformat` parses them and, like Django's loader, the
time zone is then Django's. Anything else (`infinity`, BC dates, another `DateStyle`) goes to
Django's loader. Installed on every new PostgreSQL connection (`connection_created`).
"""

from __future__ import annotations

from datetime import datetime


def install(sender, connection, **kwargs) -> None:
    """`connection_created` receiver: replace the connection's `timestamptz` text loader."""
    if connection.vendor != "postgresql":
        return
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader, is_psycopg3

    if not is_psycopg3:
        return
    from psycopg.postgres import types
    from psycopg.pq import Format

    adapters = connection.connection.adapters
    django_loader = adapters.get_loader(types["timestamptz"].oid, Format.TEXT)
    if django_loader is None or not issubclass(django_loader, BaseTzLoader) or issubclass(django_loader, FastTzLoader):
        return

    class ConnectionTzLoader(FastTzLoader, django_loader):
        pass

    adapters.register_loader("timestamptz", ConnectionTzLoader)


class FastTzLoader:
    """Mixed in before Django's loader (which carries `timezone`): C parsing, same values."""

    def load(self, data):
        try:
            value = datetime.fromisoformat(bytes(data).decode())
        except ValueError:
            return super().load(data)
        # In a UTC session the parsed zone is already Django's (`timezone.utc`): `replace` would
        # cost ~2 µs a value, more than the parsing, and a pass reads ~130,000 timestamps.
        return value if value.tzinfo is self.timezone else value.replace(tzinfo=self.timezone)
