"""The Cluster API field cases, on the demo YAML the end-to-end demo uses (deploy/examples/capi-demo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tenon.core import parse_objects, solve

DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "capi-demo"
CLUSTER = ("nodepool.yaml", "machinedeployments.yaml", "daemonset.yaml")


def demo_docs(*files: str, unpriced: bool = False) -> list[tuple[str, int, Any]]:
    docs = []
    for name in files:
        for i, doc in enumerate(yaml.safe_load_all((DEMO / name).read_text())):
            if unpriced and doc["kind"] == "MachineDeployment":
                doc["metadata"]["annotations"].pop("tenon.sh/price-per-hour")
            docs.append((name, i, doc))
    return docs


def types_bought(files: tuple[str, ...], unpriced: bool = False) -> list[str]:
    plan = solve(parse_objects(demo_docs(*files, unpriced=unpriced)))
    assert plan.unschedulable == ()
    return sorted(nc.instance_type for nc in plan.node_claims)


def test_one_3_vcpu_pod_gets_c3_8():
    assert types_bought((*CLUSTER, "workload-one-3cpu.yaml")) == ["c3-8"]


def test_eight_1_vcpu_pods_get_c3_16_and_c3_4():
    assert types_bought((*CLUSTER, "workload-eight-1cpu.yaml")) == ["c3-16", "c3-4"]


def test_without_prices_the_3_vcpu_pod_still_gets_c3_8_and_says_the_price_is_estimated():
    assert types_bought((*CLUSTER, "workload-one-3cpu.yaml"), unpriced=True) == ["c3-8"]
    plan = solve(parse_objects(demo_docs(*CLUSTER, "workload-one-3cpu.yaml", unpriced=True)))
    assert plan.node_claims[0].price_estimated and plan.to_json()["nodeClaims"][0]["priceEstimated"] is True


def test_explanation_names_the_losers_and_why():
    plan = solve(parse_objects(demo_docs(*CLUSTER, "workload-one-3cpu.yaml")))
    considered = {
        c["instanceType"]: c["verdict"] for c in plan.to_json()["nodeClaims"][0]["explanation"]["considered"]
    }
    assert considered["c3-8"].startswith("chosen")
    assert considered["c3-4"].startswith("too small: needs cpu=3, has 1900m")
    assert considered["c3-16"].startswith("fallback")
