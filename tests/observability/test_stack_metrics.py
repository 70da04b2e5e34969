"""``tenon up --json`` reports ``metrics``: the local stack gives every service process a health port of its
own, scrapes each one's ``/metrics`` while it runs, and adds the values up by metric name."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from devtools.cli.up import scraped_metrics
from devtools.stack import LocalStack, metric_values
from tenon.runtime.observability import Observability


class Running:
    """Stands in for a service's Popen: alive."""

    def poll(self) -> None:
        return None


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there any more


@pytest.fixture
async def scheduler() -> AsyncIterator[Observability]:
    registry = CollectorRegistry()
    created = Counter(
        "karpenter_nodeclaims_created_total",
        "",
        ["reason", "nodepool", "min_values_relaxed"],
        registry=registry,
    )
    created.labels(reason="provisioned", nodepool="default", min_values_relaxed="false").inc()
    created.labels(reason="provisioned", nodepool="gpu", min_values_relaxed="false").inc()
    Counter("karpenter_nodes_created_total", "", ["nodepool", "zone"], registry=registry).labels(
        nodepool="default", zone="z1"
    ).inc()
    Histogram(
        "karpenter_scheduler_scheduling_duration_seconds", "", ["controller"], registry=registry
    ).labels(controller="provisioner").observe(0.25)
    async with Observability(0, "scheduler", host="127.0.0.1", registry=registry) as server:
        yield server


@pytest.fixture
def stack(tmp_path: Path, scheduler: Observability) -> LocalStack:
    local = LocalStack(run_dir=tmp_path)
    local.health_ports = {
        "scheduler": scheduler.port,
        "pod-watcher": closed_port(),
        "disruption": closed_port(),
    }
    local.processes = {"scheduler": Running(), "pod-watcher": Running()}  # type: ignore[dict-item]
    return local  # disruption has exited: not scraped


def test_scrape_reads_each_running_service_and_says_why_one_had_nothing(stack: LocalStack) -> None:
    texts, unavailable = stack.scrape_metrics()
    assert list(texts) == ["scheduler"]
    assert "karpenter_nodeclaims_created_total{" in texts["scheduler"]
    assert list(unavailable) == ["pod-watcher"]
    assert unavailable["pod-watcher"].startswith(
        f"no metrics on 127.0.0.1:{stack.health_ports['pod-watcher']}: "
    )


def test_values_are_summed_by_name_over_labels_and_services() -> None:
    scheduler = (
        "# TYPE karpenter_nodeclaims_created_total counter\n"
        'karpenter_nodeclaims_created_total{nodepool="a",reason="provisioned"} 1.0\n'
        'karpenter_nodeclaims_created_total{nodepool="b",reason="provisioned"} 1.0\n'
        "# TYPE karpenter_scheduler_scheduling_duration_seconds histogram\n"
        'karpenter_scheduler_scheduling_duration_seconds_bucket{le="0.5"} 1.0\n'
        'karpenter_scheduler_scheduling_duration_seconds_bucket{le="+Inf"} 1.0\n'
        "karpenter_scheduler_scheduling_duration_seconds_count 1.0\n"
        "karpenter_scheduler_scheduling_duration_seconds_sum 0.25\n"
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 3.5\n"
    )
    disruption = (
        "# TYPE tenon_decisions_total counter\n"
        'tenon_decisions_total{service="disruption",type="DisruptionRequested"} 2.0\n'
        "# TYPE karpenter_nodeclaims_created_total counter\n"
        "karpenter_nodeclaims_created_total 0.0\n"
    )
    assert metric_values([scheduler, disruption]) == {
        "karpenter_nodeclaims_created_total": 2.0,
        "karpenter_scheduler_scheduling_duration_seconds_count": 1.0,
        "karpenter_scheduler_scheduling_duration_seconds_sum": 0.25,
        "tenon_decisions_total": 2.0,
    }


async def test_tenon_up_reports_metrics_by_name_and_what_was_unavailable(stack: LocalStack) -> None:
    found: dict[str, Any] = await scraped_metrics(stack)
    metrics: Mapping[str, float] = found["metrics"]
    assert metrics["karpenter_nodeclaims_created_total"] == 2.0
    assert metrics["karpenter_nodes_created_total"] == 1.0
    assert metrics["karpenter_scheduler_scheduling_duration_seconds_count"] == 1.0
    assert metrics["tenon_event_loop_lag_seconds"] >= 0.0  # the server's own gauge
    assert list(found["metricsUnavailable"]) == ["pod-watcher"]


def test_every_service_process_gets_a_loopback_health_port_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: dict[str, dict[str, str]] = {}
    local = LocalStack(run_dir=tmp_path)
    monkeypatch.setattr(
        local, "_spawn", lambda key, command, extra=None: spawned.__setitem__(key, dict(extra or {}))
    )
    for key in (local.start_service("scheduler"), local.start_service("scheduler", replica=2)):
        assert spawned[key]["TENON_HEALTH_PORT"] == str(local.health_ports[key])
        assert spawned[key]["TENON_HEALTH_HOST"] == "127.0.0.1"
    assert local.health_ports["scheduler"] != local.health_ports["scheduler#2"]
