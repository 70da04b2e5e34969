"""The Grafana dashboard shows what an operator asks first (pending pods, claims by phase, cost per hour,
decision latency, disruption decisions, consumer lag), and every series it queries is one tenon exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tenon.runtime.observability import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tenon.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exposed_names() -> set[str]:
    names = {"tenon_event_loop_lag_seconds"}  # the health server's own gauge
    for family in metrics.REGISTRY.collect():
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_panels_cover_what_an_operator_asks_first() -> None:
    titles = {p["title"] for p in dashboard()["panels"]}
    assert {
        "Pending pods",
        "NodeClaims by phase",
        "Cost per hour",
        "Decision latency",
        "Disruption decisions",
        "Event log consumer lag",
    } <= titles


def test_every_query_names_only_metrics_tenon_exposes() -> None:
    known = exposed_names()
    queried = set()
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), (panel["title"], expr)
            queried |= set(re.findall(r"\b(?:karpenter|tenon)_[a-z_]+\b", expr))
    assert queried - known == set()
    assert {
        "karpenter_pods_state",
        "tenon_eventlog_consumer_lag",
        "karpenter_nodepools_cost_total",
    } <= queried


def test_panels_have_unique_ids_and_use_the_datasource_variable() -> None:
    board = dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "nodepool"]
