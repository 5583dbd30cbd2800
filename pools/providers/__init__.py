"""Providers: the only code that talks to the outside world (design §1).

`get_cloud_provider()` and `get_cluster_backend()` read the settings `EBCLOUD_CLOUD_PROVIDER` and
`EBCLOUD_CLUSTER_BACKEND` (environment: `EBCLOUD_CLUSTER`): `simulated` (the embedded default) for both; the cluster can also be a
real one (`kubernetes`, pools/providers/kubernetes.py). The chosen implementation is imported
when chosen, so the simulated default never loads the Kubernetes client.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from pools.providers.base import CloudProvider, ClusterBackend


def get_cloud_provider() -> CloudProvider:
    name = settings.EBCLOUD_CLOUD_PROVIDER
    if name == "simulated":
        from pools.providers.simulated import SimulatedCloud

        return SimulatedCloud()
    raise ImproperlyConfigured(f"EBCLOUD_CLOUD_PROVIDER: unknown provider {name!r} (known: {', '.join(settings.EBCLOUD_CLOUD_PROVIDERS)})")


def real_cluster() -> bool:
    """True when the cluster is a real one: kube-scheduler binds the pods and kubelets run them,
    the pod mirror reads them (pools/controllers/pod_mirror.py)."""
    return settings.EBCLOUD_CLUSTER_BACKEND == "kubernetes"


def get_cluster_backend() -> ClusterBackend:
    name = settings.EBCLOUD_CLUSTER_BACKEND
    if name == "simulated":
        from pools.providers.simulated_cluster import SimulatedCluster

        return SimulatedCluster()
    if name == "kubernetes":
        from pools.providers.kubernetes import KubernetesCluster

        return KubernetesCluster()
    raise ImproperlyConfigured(f"EBCLOUD_CLUSTER: unknown cluster {name!r} (known: {', '.join(settings.EBCLOUD_CLUSTER_BACKENDS)})")
