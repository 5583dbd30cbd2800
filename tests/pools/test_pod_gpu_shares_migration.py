"""Migrations 0027 and 0028 tell how many thousandths each pod already stored asked as
`ebcloud.io/gpu-milli` (`Pod.gpu_shares`), which the pod mirror's watch may never read again:
every pod holding part of one GPU asked its share, one holding a whole GPU may have asked all
1000, and a real cluster's pod may have asked whole GPUs and shares too, or more than 1000."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from pools.models.pods import Pod

BEFORE = ("pools", "0026_sim_node_cordoned_for_drain")
FLAGGED = ("pools", "0027_pod_gpu_shares")


def document(limits: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}


@pytest.mark.django_db(transaction=True)
def test_pods_stored_before_say_which_resource_they_asked():
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([BEFORE])
        old = executor.loader.project_state([BEFORE]).apps.get_model("pools", "Pod")
        rows = {
            "share": (1, 600, {"ebcloud.io/gpu-milli": "600"}),
            "all-shares": (1, 1000, {"ebcloud.io/gpu-milli": "1000"}),
            "whole": (1, 1000, {"nvidia.com/gpu": "1"}),
            "both": (1, 1000, {"nvidia.com/gpu": "1", "ebcloud.io/gpu-milli": "0"}),
            "whole-and-share": (2, 1000, {"nvidia.com/gpu": "1", "ebcloud.io/gpu-milli": "500"}),
            "over-one": (2, 1000, {"ebcloud.io/gpu-milli": "1500"}),
            "cpu": (0, 0, {"cpu": "1"}),
        }
        for name, (gpus, milli, limits) in rows.items():
            old.objects.create(namespace="algorithm", name=name, gpu_count=gpus, gpu_milli=milli, document=document(limits))
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        asked = {"share": 600, "all-shares": 1000, "whole": 0, "both": 0, "whole-and-share": 500, "over-one": 1500, "cpu": 0}
        assert dict(Pod.objects.values_list("name", "gpu_shares")) == asked
        executor = MigrationExecutor(connection)
        executor.migrate([FLAGGED])  # rolled back: 0027's flag, as 0027 set it
        flagged = executor.loader.project_state([FLAGGED]).apps.get_model("pools", "Pod")
        assert dict(flagged.objects.values_list("name", "gpu_shares")) == {name: name in ("share", "all-shares") for name in asked}
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        assert dict(Pod.objects.values_list("name", "gpu_shares")) == asked
    finally:
        Pod.objects.all().delete()
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
