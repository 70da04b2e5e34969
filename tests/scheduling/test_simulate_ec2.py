"""``tenon simulate`` on Karpenter's AWS manifests: an EC2NodeClass with no InstanceCatalog of its name is
planned with the catalog launcher-ec2 would build from what tenon ships (us-east-1 types and on-demand prices,
spot prices estimated), so the what-if buys what the live launcher would; an estimated price says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenon.cli.main import main
from tenon.core import InputError, parse_object

EC2_DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "ec2-demo" / "nodepool.yaml"


def inflate(replicas: int, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": "inflate"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            },
        },
    }


def plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: dict[str, Any]) -> dict[str, Any]:
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "-f", str(EC2_DEMO), "-f", str(pods), "-o", "json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_an_ec2_nodeclass_alone_is_planned_with_the_shipped_catalog(tmp_path, capsys):
    result = plan(tmp_path, capsys, inflate(8, "1"))
    claims = result["nodeClaims"]
    assert claims and result["unschedulable"] == []
    assert sorted(p for c in claims for p in c["pods"]) == sorted(f"default/inflate-{i}" for i in range(8))
    for claim in claims:
        # the demo pool asks for c/m/r generation > 4, amd64
        assert claim["instanceType"][0] in "cmr" and "g." not in claim["instanceType"]
        assert claim["zone"].startswith("us-east-1")
        if claim["capacityType"] == "spot":
            assert claim["priceEstimated"] is True
            assert "estimated price" in claim["explanation"]["chosen"]


def test_on_demand_only_is_priced_from_the_shipped_table_not_estimated(tmp_path, capsys):
    docs = list(yaml.safe_load_all(EC2_DEMO.read_text()))
    pool = next(d for d in docs if d["kind"] == "NodePool")
    for requirement in pool["spec"]["template"]["spec"]["requirements"]:
        if requirement["key"] == "karpenter.sh/capacity-type":
            requirement["values"] = ["on-demand"]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(docs))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump(inflate(2, "1")))
    assert main(["simulate", "-f", str(cluster), "-f", str(pods), "-o", "json"]) == 0
    [claim] = json.loads(capsys.readouterr().out)["nodeClaims"]
    assert claim["capacityType"] == "on-demand" and claim["priceEstimated"] is False
    assert claim["pricePerHour"] > 0


def test_an_ec2_nodeclass_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, capsys):
    docs = list(yaml.safe_load_all(EC2_DEMO.read_text()))
    nodeclass = next(d for d in docs if d["kind"] == "EC2NodeClass")
    nodeclass["spec"]["amiSelectorTerms"] = "al2023"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", "-f", str(cluster)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "amiSelectorTerms" in error and str(cluster) in error


def test_a_catalog_offering_s_price_estimated_must_be_a_boolean() -> None:
    catalog = {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {"name": "default"},
        "spec": {
            "instanceTypes": [
                {
                    "name": "m5.large",
                    "capacity": {"cpu": "2", "memory": "8Gi"},
                    "offerings": [{"capacityType": "spot", "price": 0.03, "priceEstimated": "yes"}],
                }
            ]
        },
    }
    with pytest.raises(InputError, match=r"offerings\[0\]\.priceEstimated"):
        parse_object("catalog.yaml", 0, catalog)
