"""The event log: the one thing tenon's services share.

Layers, lowest first (each module one concept):

* :mod:`.records` — what the log stores and returns (``LogRecord``, ``PublishResult``) and its errors.
* :mod:`.interface` — :class:`EventLog`, the small interface every service codes against: ``publish``,
  ``append`` (optimistic concurrency on an aggregate subject), ``read`` (ordered, ephemeral: tap, replay,
  projection rebuilds), ``consumer`` (a durable worker), ``last_subject_sequence``.
* :mod:`.runner` — the consumer runner shared by both implementations: bounded concurrency, per-subject
  order, ack only after the handler's side effects succeed, nak with backoff, dead-letter after the configured
  attempts or at once for undecodable messages, graceful drain on stop.
* :mod:`.memory` — :class:`InMemoryEventLog`, for fast unit tests of pure logic (same semantics, no broker).
* :mod:`.jetstream` — :class:`JetStreamEventLog` on a real NATS JetStream server, with
  :mod:`.provisioning` (idempotent streams and consumers) and :mod:`.connection` (servers, auth, TLS).
* :mod:`.tracing` — W3C trace context in message headers, so one trace spans several services.

The transport seam is the same idea as httpx's: code takes an ``EventLog``; tests hand it the in-memory one,
integration tests and production the JetStream one.
"""

from tenon.runtime.eventlog.interface import ConsumerRunner, EventLog, Handler
from tenon.runtime.eventlog.records import (
    ConcurrencyConflict,
    ConsumerSettings,
    EventLogError,
    LogRecord,
    PermanentError,
    PublishResult,
    TransientError,
)

__all__ = [
    "ConcurrencyConflict",
    "ConsumerRunner",
    "ConsumerSettings",
    "EventLog",
    "EventLogError",
    "Handler",
    "LogRecord",
    "PermanentError",
    "PublishResult",
    "TransientError",
]
