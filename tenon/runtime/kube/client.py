"""Connecting to a cluster: a kubeconfig path (as in the field: one for the workload cluster, one for the
Cluster API management cluster) or, without one, the in-cluster service account."""

from __future__ import annotations

from kubernetes_asyncio import client, config

from tenon.runtime.kube.resources import Kube


async def load_kube(kubeconfig: str | None = None, *, context: str | None = None) -> Kube:
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)
    return Kube(client.ApiClient(configuration))
