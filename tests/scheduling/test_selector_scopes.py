"""Which running pods a pod (anti-)affinity term selects: by expressions or labels, in the pod's own
namespace, in the namespaces it lists, or in every namespace (``namespaceSelector: {}``); a term without a
selector selects none. A pending pod keeps away from exactly the running pods its term selects."""

from __future__ import annotations

from typing import Any

import pytest

from tests.scheduling.builders import catalog, itype, node, node_pool, plan_for, pod, where

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def keeping_away(selector: dict[str, Any] | None, key: str, **scope: Any) -> dict[str, Any]:
    term: dict[str, Any] = {"topologyKey": key, **scope}
    if selector is not None:
        term["labelSelector"] = selector
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


DB_IN = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]}
HAS_APP = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
NOT_DB = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}
DB_X = {"matchLabels": {"app": "db", "tier": "x"}}
DB_Y = {"matchLabels": {"app": "db", "tier": "y"}}
TIER_X = {"matchLabels": {"tier": "x"}}


@pytest.mark.parametrize(
    ("selector", "scope", "avoids_the_db"),
    [
        (DB_IN, {"namespaceSelector": {}}, True),
        (DB_IN, {}, False),  # its own namespace only: the db runs in another
        (DB_IN, {"namespaces": ["data"]}, True),
        (DB_IN, {"namespaces": ["web", "other"]}, False),
        (HAS_APP, {"namespaceSelector": {}}, True),
        (NOT_DB, {"namespaceSelector": {}}, False),
        (DB_X, {"namespaceSelector": {}}, True),
        (DB_Y, {"namespaceSelector": {}}, False),
        (TIER_X, {"namespaces": ["data"]}, True),
        ({}, {"namespaces": ["data"]}, True),  # the empty selector selects every pod
        (None, {"namespaceSelector": {}}, False),  # no selector selects none
    ],
)
@pytest.mark.parametrize("key", [HOST, ZONE])
def test_a_pod_keeps_away_from_the_running_pods_its_term_selects(
    selector: dict[str, Any] | None, scope: dict[str, Any], avoids_the_db: bool, key: str
) -> None:
    docs = [
        node_pool(),
        catalog(itype("t", 4, 8, 0.1, zones=("z1", "z2"))),
        node("n1", "4", "8Gi", labels={ZONE: "z1", HOST: "n1"}),
        node("n2", "4", "8Gi", labels={ZONE: "z2", HOST: "n2"}),
        pod("db-0", "1", "1Gi", {"app": "db", "tier": "x"}, namespace="data", nodeName="n1"),
        pod(
            "web-0",
            "1",
            "1Gi",
            {"role": "web"},
            namespace="web",
            affinity=keeping_away(selector, key, **scope),
        ),
    ]
    assert where(plan_for(*docs))["web/web-0"] == ("n2" if avoids_the_db else "n1")
