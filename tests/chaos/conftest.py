"""Chaos tests (issue 9 §2): real worker processes on PostgreSQL, one `kill -9`ed mid-task.

Every test here spawns `manage.py`-like processes (tests/chaos/killable.py) against the test
database, so the data they read must be committed (`transactional_db`), and they need
PostgreSQL: row locks, `skip_locked` and concurrent writers, none of which SQLite has.
"""

from __future__ import annotations

import pytest

from tests.chaos import workers


@pytest.fixture
def fast_cloud(settings):
    """The test's own passes run the simulated cloud like the workers do: steps of 0 seconds."""
    settings.EBCLOUD_SIM_STEP_SECONDS = dict.fromkeys(settings.SIM_STEP_SECONDS_REALISTIC, 0)


@pytest.fixture(autouse=True)
def reap_workers():
    yield
    workers.reap()


@pytest.fixture
def env():
    return workers.worker_env()
