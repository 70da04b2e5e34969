"""Server-side printing: the cells kubectl shows come from these functions."""

from __future__ import annotations

import pytest

from devtools.sandbox.resources import DEFAULT_REGISTRY
from devtools.sandbox.tables import human_duration, render_table, wants_table


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (40 * 86400, "40d"),
        (-1, "<invalid>"),
    ],
)
def test_human_duration_matches_kubectl(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_table_accept_header_detection() -> None:
    kubectl_accept = (
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
        "g=meta.k8s.io,application/json"
    )
    assert wants_table(kubectl_accept)
    assert not wants_table("application/json")
    assert not wants_table(None)


def test_pod_and_node_rows() -> None:
    pods = DEFAULT_REGISTRY.resource("v1", "Pod")
    terminating = {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:00Z",
        },
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "containerStatuses": [
                {"name": "a", "ready": True, "restartCount": 2},
                {"name": "b", "ready": False, "restartCount": 1},
            ],
        },
    }
    table = render_table(pods, [terminating], now=1767225600 + 90)  # 2026-01-01T00:01:30Z
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert table["rows"][0]["cells"][:7] == ["p", "1/2", "Terminating", 3, "90s", "10.0.0.9", "n1"]
    assert table["rows"][0]["object"]["metadata"]["namespace"] == "default"
    nodes = DEFAULT_REGISTRY.resource("v1", "Node")
    cordoned = {
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    row = render_table(nodes, [cordoned], with_columns=False)
    assert "columnDefinitions" not in row
    assert row["rows"][0]["cells"][1:3] == ["NotReady,SchedulingDisabled", "worker"]
