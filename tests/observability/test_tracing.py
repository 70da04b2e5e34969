"""Traces leave the process the way ``OTEL_*`` says: OTLP/HTTP to a collector (here a stub on loopback that
decodes what the SDK's exporter sends), JSON on stdout, or nowhere; one trace spans the producing and the
consuming service."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tenon.runtime.eventlog.tracing import configure_tracing, span_exporters

PRODUCER = """
import json
from tenon.runtime.eventlog.tracing import configure_tracing, inject, publish_span
provider = configure_tracing("pod-watcher")
with publish_span("tenon.pending", "PendingBatch"):
    headers = inject({})
provider.shutdown()
print(json.dumps(headers))
"""

CONSUMER = """
import json, sys
from tenon.runtime.eventlog.tracing import configure_tracing, consume_span, publish_span
provider = configure_tracing("scheduler")
headers = json.loads(sys.argv[1])
with consume_span("tenon.pending", headers, "scheduler", 42):
    with publish_span("tenon.nodeclaim.default-abc12", "NodeClaimPlanned"):
        pass
provider.shutdown()
"""

CARRIER = """
import json
from tenon.runtime.eventlog.tracing import consume_span, inject, publish_span
parent = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
with consume_span("tenon.pending", parent, "scheduler", 7):
    with publish_span("tenon.nodeclaim.default-abc12", "NodeClaimPlanned"):
        inside = inject({})
with publish_span("tenon.pending", "PendingBatch"):
    outside = inject({})
print(json.dumps([inside, outside]))
"""


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


@dataclass
class CollectorStub:
    """An OTLP/HTTP trace receiver: what an OpenTelemetry Collector's ``otlp`` receiver does on /v1/traces."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)

    async def receive(self, request: web.Request) -> web.Response:
        self.content_types.append(request.headers.get("Content-Type", ""))
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: a.value.string_value for a in span.attributes},
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


@pytest.fixture
async def collector() -> AsyncIterator[CollectorStub]:
    stub = CollectorStub()
    app = web.Application()
    app.router.add_post("/v1/traces", stub.receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stub.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield stub
    finally:
        await runner.cleanup()


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(values)
    return env


async def _python(script: str, *args: str, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_otlp_exporter_sends_one_trace_across_two_services(collector: CollectorStub) -> None:
    env = _env(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
    headers = await _python(PRODUCER, env=env)
    assert "traceparent" in json.loads(headers)
    await _python(CONSUMER, headers.strip(), env=env)

    by_name = {span.name: span for span in collector.spans}
    assert set(by_name) == {
        "tenon.pending publish",
        "tenon.pending process",
        "tenon.nodeclaim.default-abc12 publish",
    }
    produced, consumed, decided = (
        by_name["tenon.pending publish"],
        by_name["tenon.pending process"],
        by_name["tenon.nodeclaim.default-abc12 publish"],
    )
    assert (produced.service, consumed.service, decided.service) == ("pod-watcher", "scheduler", "scheduler")
    assert produced.trace_id == consumed.trace_id == decided.trace_id
    assert consumed.parent_span_id == produced.span_id
    assert decided.parent_span_id == consumed.span_id
    assert consumed.attributes["messaging.consumer.group.name"] == "scheduler"
    assert set(collector.content_types) == {"application/x-protobuf"}


async def test_the_traces_endpoint_variable_wins_and_service_name_can_be_overridden(
    collector: CollectorStub,
) -> None:
    env = _env(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",  # nothing listens there: must not be used
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{collector.url}/v1/traces",
        OTEL_SERVICE_NAME="pod-watcher-eu1",
    )
    await _python(PRODUCER, env=env)
    assert [(s.service, s.name) for s in collector.spans] == [("pod-watcher-eu1", "tenon.pending publish")]


async def test_console_exporter_prints_spans_as_json(collector: CollectorStub) -> None:
    out = await _python(PRODUCER, env=_env(OTEL_TRACES_EXPORTER="console"))
    assert '"name": "tenon.pending publish"' in out
    assert '"service.name": "pod-watcher"' in out
    assert collector.spans == []


async def test_a_process_that_records_nothing_still_carries_its_callers_trace_and_adds_none_of_its_own() -> (
    None
):
    inside, outside = json.loads(await _python(CARRIER, env=_env()))
    assert inside["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert outside == {}


def test_none_disabled_or_unset_installs_nothing() -> None:
    for env in (
        {},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
    ):
        assert span_exporters(env) == []
        assert configure_tracing("scheduler", env) is None


def test_an_unknown_exporter_is_an_error_naming_the_variable_and_the_rest_still_exports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="tenon.tracing"):
        exporters = span_exporters({"OTEL_TRACES_EXPORTER": "zipkin, console"})
    assert [type(e).__name__ for e in exporters] == ["ConsoleSpanExporter"]
    [record] = caplog.records
    assert record.getMessage() == "OTEL_TRACES_EXPORTER: unknown exporter left out"
    assert record.__dict__["exporter"] == "zipkin"
