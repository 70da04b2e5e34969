"""Health, readiness and Prometheus metrics of a tenon service process.

:class:`Observability` (:mod:`.server`) is the small HTTP server kubelet probes and Prometheus scrapes;
:mod:`.metrics` holds the metric objects services record into, named like Karpenter's. Wiring, in the service
runtime::

    observability = Observability(service=name)          # port from TENON_HEALTH_PORT, default 8081
    observability.add_readiness_check("nats", lambda: (event_log.connected, "not connected to NATS"))
    await observability.start()
    ...
    await observability.stop()
"""

from tenon.runtime.observability import metrics
from tenon.runtime.observability.server import (
    DEFAULT_PORT,
    CheckOutcome,
    Observability,
    ObservabilityConfigError,
    ReadinessCheck,
    port_from_env,
)

__all__ = [
    "DEFAULT_PORT",
    "CheckOutcome",
    "Observability",
    "ObservabilityConfigError",
    "ReadinessCheck",
    "metrics",
    "port_from_env",
]
