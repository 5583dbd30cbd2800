"""Fixtures shared by the pools tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cluster_away(tmp_path) -> dict[str, str]:
    """The settings of a real cluster whose API server does not answer (port 9, discard): a
    test applies them when the cluster should go away, before or after building its pools."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: away\n"
        "clusters: [{name: away, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: away, context: {cluster: away, user: away}}]\nusers: [{name: away, user: {}}]\n"
    )
    return {"EBCLOUD_CLUSTER_BACKEND": "kubernetes", "EBCLOUD_KUBECONFIG": str(kubeconfig)}
