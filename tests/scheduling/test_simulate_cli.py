"""``tenon simulate``: exit codes, messages that name file/document/field, and the ``-o json`` shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tenon.cli.main import main
from tests.scheduling.builders import catalog, itype, node_pool, pod

DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "capi-demo"


def write(tmp_path: Path, name: str, *docs: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_json_output_shape(tmp_path, capsys):
    cluster = write(tmp_path, "cluster.yaml", node_pool(), catalog(itype("t", 2, 4, 0.1, zones=("z1",))))
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]},
            },
        },
    }
    pods = write(tmp_path, "pods.yaml", deploy, pod("huge", "64"))
    assert main(["simulate", "-f", cluster, "-f", pods, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"nodeClaims", "existingNodes", "unschedulable", "totalPricePerHour"}
    (nc,) = out["nodeClaims"]
    assert {
        k: nc[k] for k in ("nodePool", "instanceType", "zone", "capacityType", "pricePerHour", "pods")
    } == {
        "nodePool": "default",
        "instanceType": "t",
        "zone": "z1",
        "capacityType": "on-demand",
        "pricePerHour": 0.1,
        "pods": ["shop/web-0", "shop/web-1"],
    }
    assert {"fallbacks", "requirements", "priceEstimated", "explanation"} <= set(nc)
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["t"]} in nc[
        "requirements"
    ]
    assert (
        out["unschedulable"][0]["pod"] == "default/huge"
        and "no instance type has" in out["unschedulable"][0]["reason"]
    )
    assert out["totalPricePerHour"] == 0.1


def test_table_output_on_the_demo(capsys):
    files = [
        str(DEMO / n)
        for n in ("nodepool.yaml", "machinedeployments.yaml", "daemonset.yaml", "workload-eight-1cpu.yaml")
    ]
    assert main(["simulate", *(x for f in files for x in ("-f", f))]) == 0
    out = capsys.readouterr().out
    assert "c3-16" in out and "c3-4" in out and "Total price: 0.2500/h" in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "kind: Pod\nmetadata: {name: p}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
            "bad.yaml document 0 (Pod default/p): spec.containers[0].resources.requests.cpu",
        ),
        (
            "kind: NodePool\nmetadata: {name: np}\n---\nkind: Pod\nmetadata: {namespace: x}\n",
            "bad.yaml document 1 (Pod): metadata.name: is required",
        ),
        ("kind: Pod\nmetadata: {name: [unclosed\n", "bad.yaml document 0 line"),
    ],
)
def test_invalid_input_exits_2_naming_file_document_and_field(tmp_path, capsys, content, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected.replace("bad.yaml", str(path)) in err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["simulate", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: cannot read" in capsys.readouterr().err
