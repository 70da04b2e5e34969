"""``tenon simulate --disruption``: the JSON contract's keys; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tenon.cli.main import main
from tests.disruption.clusters import SIZES, catalog, node, nodepool, pdb, pod


def write(tmp_path: Path, objects: list[dict[str, object]]) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_rounds_then_final_nodes_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects: list[dict[str, object]] = [nodepool(budgets=[{"nodes": "100%"}]), catalog(SIZES)]
    for i in range(3):
        objects += [node(f"n{i}", "c-8", 8, 16), pod(f"web-{i}", f"n{i}", "1", "1Gi")]
    objects.append(
        pod(
            "db-0",
            "n0",
            "1",
            "1Gi",
            labels={"app": "db"},
            annotations={"karpenter.sh/do-not-disrupt": "true"},
        )
    )
    objects.append(pdb("web", {"app": "web"}, 1))
    path = write(tmp_path, objects)
    assert main(["simulate", "--disruption", "-f", path, "--now", "2026-11-30T12:00:00Z", "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"rounds", "finalNodes", "finalPricePerHour"}
    for played in result["rounds"]:
        assert set(played) >= {
            "method",
            "reason",
            "candidates",
            "replacements",
            "podsMoved",
            "savingsPerHour",
            "blocked",
        }
        assert "n0" not in played["candidates"]  # the do-not-disrupt pod keeps its node
        assert sum(1 for p in played["podsMoved"] if p.startswith("default/web")) <= 1  # the PDB allows one
    final = {n["name"]: n for n in result["finalNodes"]}
    assert "default/db-0" in final["n0"]["pods"]
    assert sorted(p for n in final.values() for p in n["pods"]) == [
        "default/db-0",
        "default/web-0",
        "default/web-1",
        "default/web-2",
    ]
    assert result["finalPricePerHour"] < 1.2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--now", "yesterday"], "--now 'yesterday' is not an RFC 3339 time"),
        (["--rounds", "0"], "--rounds '0' is neither a positive number nor until-stable"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = write(tmp_path, [nodepool(), catalog(SIZES)])
    assert main(["simulate", "--disruption", "-f", path, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_file_that_is_not_objects_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- just\n- a list\n")
    assert main(["simulate", "--disruption", "-f", str(path)]) == 2
    assert "not a Kubernetes object" in capsys.readouterr().err
