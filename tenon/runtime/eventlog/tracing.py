"""W3C trace context in message headers: one trace follows a Pending pod through every service.

Publishing injects the current context (``traceparent``/``tracestate``) into the headers; the consumer runner
extracts it and runs the handler inside a CONSUMER span that is a child of the producer's span, so whatever the
handler publishes carries the same trace id. Spans go wherever the process's tracer provider sends them
(:func:`configure_tracing` sets one up from ``OTEL_*`` environment variables; without it they are no-ops).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

_tracer = trace.get_tracer("tenon.eventlog")


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current trace context to ``headers`` (in place) and return them."""
    propagate.inject(headers)
    return headers


def _recording() -> bool:
    """Whether an SDK tracer provider is installed (spans are recorded and exported somewhere)."""
    return type(trace.get_tracer_provider()).__name__ not in {"ProxyTracerProvider", "NoOpTracerProvider"}


@contextlib.contextmanager
def publish_span(subject: str, event_type: str) -> Iterator[None]:
    if not _recording():
        yield  # nothing would record it; the caller's context (if any) is still injected into the headers
        return
    with _tracer.start_as_current_span(
        f"{subject} publish",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "tenon.event.type": event_type,
        },
    ):
        yield


@contextlib.contextmanager
def consume_span(subject: str, headers: Mapping[str, str], consumer: str, sequence: int) -> Iterator[None]:
    if "traceparent" not in headers:
        yield
        return
    parent = propagate.extract(headers)
    if not _recording():
        # nobody records spans in this process: only carry the caller's context through, so what the handler
        # publishes still continues the caller's trace (a third of the cost of a non-recording span)
        token = otel_context.attach(parent)
        try:
            yield
        finally:
            otel_context.detach(token)
        return
    with _tracer.start_as_current_span(
        f"{subject} process",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.consumer.group.name": consumer,
            "messaging.message.id": str(sequence),
        },
    ):
        yield


def configure_tracing(service_name: str) -> None:
    """Install an SDK tracer provider when ``OTEL_TRACES_EXPORTER=console`` (the SDK's own exporters read
    the other ``OTEL_*`` variables); otherwise leave the no-op default, which costs nothing."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "none") != "console":
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
