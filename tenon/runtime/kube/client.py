"""Connecting to a cluster: a kubeconfig path (as in the field: one for the workload cluster, one for the
Cluster API management cluster) or, without one, the in-cluster service account."""

from __future__ import annotations

from contextlib import suppress

from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from yarl import URL

from tenon.runtime.kube.resources import Kube


async def load_kube(
    kubeconfig: str | None = None, *, context: str | None = None, component: str | None = None
) -> Kube:
    """A client of the cluster ``kubeconfig`` names (the in-cluster service account without one). Its
    requests carry the ``User-Agent`` ``tenon-<component>`` (``tenon`` without one): the API server's audit
    log (its ``userAgent`` field) tells the services apart by it, where every one of them said
    ``OpenAPI-Generator/<version>/python``."""
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)
    api = client.ApiClient(configuration)
    api.user_agent = f"tenon-{component}" if component else "tenon"
    read_environment_once(api, configuration)
    return Kube(api)


def read_environment_once(api: client.ApiClient, configuration: client.Configuration) -> None:
    """Look up the proxy for the API server once, and stop the session looking it up on every request.

    kubernetes-asyncio's session trusts the environment, and aiohttp then reads the proxy variables and
    ``~/.netrc`` in a worker thread before *every* request: two executor round trips each, 2,000 for the
    1,000 pod nominations of a burst, each one a GIL hand-off and an event-loop turn on a busy service. The
    environment does not change while a service runs, so the proxy (``HTTPS_PROXY``/``NO_PROXY``, as before)
    is resolved here, unless the kubeconfig names one (``proxy-url``), which wins as it did. ``~/.netrc``
    credentials for the API server are no longer read: a kubeconfig or the service account authenticates.
    """
    rest = api.rest_client
    if not configuration.proxy and configuration.host:
        with suppress(LookupError):
            proxy, auth = get_env_proxy_for_url(URL(configuration.host))
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    rest.pool_manager._trust_env = False  # no public setter; the session reads it per request
