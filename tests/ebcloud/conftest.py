"""Fixtures of the CLI's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_request(monkeypatch):
    """Any request fails the test (its line would say so)."""

    def request(self, method, path, **kwargs):
        raise AssertionError(f"a request was made: {method} {path}")

    monkeypatch.setattr("ebcloud.client.Client._request", request)
