"""tenon's services, one package each; they share nothing but the event log.

A service is a pure decider (state, input -> decisions), an executor that carries the decisions out, and a
settings object; :mod:`tenon.runtime` runs them. Each package's ``service`` module defines ``SERVICE``, a
:class:`tenon.runtime.service.ServiceDefinition`. A service may import ``proto``, :mod:`tenon.core`,
:mod:`tenon.domain` and :mod:`tenon.runtime`, never another service (``make lint`` checks it).

:data:`SERVICES` is the one list of them that ``tenon run``, ``tenon replay`` and the local stack read. It
names modules rather than importing them, so that ``tenon tap --help`` does not pay for every service's
imports. Which of them run together depends on the provider: a Cluster API cluster runs ``launcher-capi``, an
AWS one ``launcher-ec2`` and ``interruption-handler`` (``deploy/overlays``, ``devtools.stack``).
"""

from __future__ import annotations

import importlib
from typing import Any

SERVICES: dict[str, str] = {
    "pod-watcher": "tenon.services.pod_watcher.service",
    "scheduler": "tenon.services.scheduler.service",
    "launcher-capi": "tenon.services.launcher_capi.service",
    "disruption": "tenon.services.disruption.service",
    "launcher-ec2": "tenon.services.launcher_ec2.service",
    "interruption-handler": "tenon.services.interruption_handler.service",
}
"""Service name -> the module holding its ``SERVICE`` definition."""


def definition(name: str) -> Any:
    """The :class:`~tenon.runtime.service.ServiceDefinition` of service ``name`` (KeyError if unknown)."""
    if name not in SERVICES:
        raise KeyError(f"unknown service {name!r} (known: {', '.join(SERVICES)})")
    return importlib.import_module(SERVICES[name]).SERVICE
