"""config/db_loaders.py: PostgreSQL timestamps parsed in C give exactly what Django's loader gives
(issue 9: it is on every query that reads a timestamp)."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

LITERALS = [
    "2026-12-15 09:59:00+00",
    "2026-12-15 09:59:00.123456+00",
    "2026-12-15 09:59:00.5+00",
    "2026-03-29 01:30:00+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
]


def _load(cursor, literal: str):
    try:
        cursor.execute("SELECT %s::timestamptz", [literal])
        return cursor.fetchone()[0]
    except Exception as exc:  # noqa: BLE001 (both loaders must fail alike)
        return type(exc)


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_timestamps_load_exactly_as_djangos_own_loader(zone):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    from config.db_loaders import FastTzLoader

    with connection.cursor() as fast, connection.cursor() as django:
        fast.execute(f"SET TIME ZONE '{zone}'")
        register_tzloader(connection.timezone, django.cursor)  # Django's loader on this cursor
        assert issubclass(connection.connection.adapters.get_loader(1184, 0), FastTzLoader)
        for literal in [*LITERALS, "infinity", "-infinity"]:
            ours, theirs = _load(fast, literal), _load(django, literal)
            assert ours == theirs, literal
            if not isinstance(ours, type):
                assert ours.tzinfo == theirs.tzinfo and ours.utcoffset() == theirs.utcoffset()
        fast.execute("SET TIME ZONE 'UTC'")
