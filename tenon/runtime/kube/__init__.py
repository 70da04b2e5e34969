"""Kubernetes access for tenon's services: plain dicts over kubernetes-asyncio's ApiClient.

Services record Kubernetes objects in events as they are, so they read and write them as JSON dicts rather
than generated models: :class:`Kube` wraps a kubernetes-asyncio ``ApiClient`` (which handles kubeconfig,
in-cluster config, bearer tokens and client certificates) with a small, uniform API for any kind, core or
custom (:mod:`.resources`), and :mod:`.watching` turns list+watch into a stream of changes that survives
disconnects and ``410 Gone`` by re-listing.
"""

from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.resources import (
    DAEMONSETS,
    EVENTS,
    MACHINEDEPLOYMENTS,
    MACHINES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    Kube,
    KubeApiError,
    ResourceRef,
)
from tenon.runtime.kube.watching import Relisted, WatchChange, list_and_watch

__all__ = [
    "DAEMONSETS",
    "EVENTS",
    "MACHINEDEPLOYMENTS",
    "MACHINES",
    "NODECLAIMS",
    "NODEPOOLS",
    "NODES",
    "PODS",
    "Kube",
    "KubeApiError",
    "Relisted",
    "ResourceRef",
    "WatchChange",
    "list_and_watch",
    "load_kube",
]
