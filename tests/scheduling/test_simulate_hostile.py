"""``tenon simulate`` against hostile or careless input (issue 14): every bad input is exit 2 and one line
naming the file, the document, the object and the field; nothing hangs, nothing escapes as a traceback, and
the JSON printed is strict JSON.

The property tests at the end throw generated input at the command: a bounded number of examples here
(``TENON_FUZZ_EXAMPLES``, default 60 each), many more in ``make fuzz``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenon.cli.main import main
from tenon.core.wellknown import PLANNED_NODE
from tests.scheduling.builders import catalog, itype, machine_deployment, node_pool, pod

EXAMPLES = int(os.environ.get("TENON_FUZZ_EXAMPLES", "60"))


def simulate(
    tmp_path: Path, content: bytes | str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    path = tmp_path / "input.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    code = main(["simulate", "-f", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err.replace(str(path), "input.yaml")


def refused(tmp_path: Path, content: bytes | str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused input prints (asserting exit 2, one line, nothing on stdout)."""
    code, out, err = simulate(tmp_path, content, capsys)
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tenon simulate: input.yaml"), err
    return lines[0]


def strict_json(text: str) -> Any:
    """``json.loads`` refusing NaN and Infinity, which are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def docs(*objects: dict[str, Any]) -> str:
    return yaml.safe_dump_all(objects)


GOOD = [node_pool(), catalog(itype("t", 2, 4, 0.1)), pod("p")]


# -- bytes ---------------------------------------------------------------------------------------------------


def test_invalid_utf8_is_named_with_its_offset(tmp_path, capsys):
    line = refused(tmp_path, b"kind: Pod\nmetadata: {name: \xff}\n", capsys)
    assert "not UTF-8 text (byte 0xff at offset 27)" in line


def test_a_binary_file_is_refused_in_one_line(tmp_path, capsys):
    line = refused(tmp_path, bytes(range(256)) * 64, capsys)
    assert "not UTF-8" in line


def test_control_characters_are_refused_by_the_yaml_reader(tmp_path, capsys):
    line = refused(tmp_path, "kind: Pod\x00\nmetadata: {name: p}\n", capsys)
    assert "not valid YAML/JSON" in line


# -- structure -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "[" * 10_000 + "]" * 10_000,
        '{"a":' * 10_000 + "1" + "}" * 10_000,
        "".join(" " * i + "a:\n" for i in range(2000)),
        "x: " + "[" * 150 + "]" * 150,
        '{"kind": "Pod", "x": ' + "[" * 900 + "]" * 900 + "}",
    ],
    ids=["yaml-flow-10k", "json-10k", "yaml-block-2k", "yaml-150", "json-900"],
)
def test_deep_nesting_is_refused_not_a_traceback(tmp_path, capsys, content):
    line = refused(tmp_path, content, capsys)
    assert "nested" in line or "not valid YAML" in line


def test_aliases_that_expand_beyond_bounds_are_refused():
    """The "billion laughs": nine levels of ten aliases each would be a billion values."""
    from tenon.cli.simulate import ReadError, documents

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    bomb = Path(os.environ.get("TMPDIR", "/tmp")) / f"laughs-{os.getpid()}.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    try:
        with pytest.raises(ReadError, match="aliases expand to more than"):
            documents(str(bomb))
    finally:
        bomb.unlink()


@pytest.mark.parametrize(
    "content",
    [
        "kind: Pod\nmetadata: {name: p}\nmetadata: {name: q}\n",
        '{"kind": "Pod", "metadata": {"name": "p", "name": "q"}}',
        "kind: Pod\nmetadata: {name: p}\n"
        "spec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 1, cpu: 2}}\n",
    ],
    ids=["yaml-top", "json-nested", "yaml-requests"],
)
def test_a_key_given_twice_is_refused(tmp_path, capsys, content):
    line = refused(tmp_path, content, capsys)
    assert "appears twice" in line


def test_a_colon_inside_a_json_string_is_no_duplicate(tmp_path, capsys):
    payload = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [node_pool(), catalog(itype("t", 2, 4, 0.1)), pod("p", labels={"a": 'x":y'})],
    }
    code, out, err = simulate(tmp_path, json.dumps(payload, separators=(",", ":")), capsys, "-o", "json")
    assert code == 0, err
    assert strict_json(out)["nodeClaims"]


def test_a_key_that_holds_a_line_break_still_gives_one_line(tmp_path, capsys):
    """Field paths name the input's own keys (found by the property tests: a label key "\\n")."""
    bad = pod("p")
    bad["metadata"]["labels"] = {"a\nb\u2028c": ["not", "a", "string"]}
    line = refused(tmp_path, docs(node_pool(), bad), capsys)
    assert "metadata.labels.a\\nb\\u2028c: must be a string, got a list" in line


def test_a_planned_node_annotation_that_is_not_a_name_is_refused_naming_it(tmp_path, capsys):
    bad = pod("p")
    bad["metadata"]["annotations"] = {PLANNED_NODE: ["n1", "n2"]}
    line = refused(tmp_path, docs(node_pool(), catalog(itype("t", 2, 4, 0.1)), bad), capsys)
    assert f"metadata.annotations.{PLANNED_NODE}: must be a string, got a list" in line


# -- sizes ---------------------------------------------------------------------------------------------------


def test_a_billion_replicas_is_refused_at_once_naming_the_field(tmp_path, capsys):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 1_000_000_000, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    line = refused(tmp_path, docs(node_pool(), deployment), capsys)
    assert "document 1 (Deployment shop/web): spec.replicas: 1000000000 is more pods" in line


def test_many_workloads_each_below_the_bound_are_refused_in_all(tmp_path, capsys):
    def deployment(i: int) -> dict[str, Any]:
        return {
            "kind": "Deployment",
            "metadata": {"name": f"d{i}"},
            "spec": {"replicas": 90_000, "template": {"spec": {"containers": [{"name": "c"}]}}},
        }

    line = refused(tmp_path, docs(*(deployment(i) for i in range(3))), capsys)
    assert "document 2: more than 200,000 pods in all" in line


# -- numbers -------------------------------------------------------------------------------------------------


def priced(price: Any) -> str:
    types = [
        {**itype("t", 2, 4, 0.1), "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": price}]}
    ]
    return docs(node_pool(), catalog(*types), pod("p"))


@pytest.mark.parametrize(
    ("price", "words"),
    [
        (float("inf"), "is not finite"),
        ("1e999", "is not finite"),
        (float("nan"), "is not a number (NaN)"),
        ("NaN", "is not a number (NaN)"),
        ("１.５", "is not a number"),
        (-1, "is negative"),
    ],
)
def test_a_price_that_is_not_a_finite_number_is_refused_as_what_it_is(tmp_path, capsys, price, words):
    line = refused(tmp_path, priced(price), capsys)
    assert "(InstanceCatalog cat): spec.instanceTypes[0].offerings[0].price" in line and words in line


def test_a_full_width_digit_is_not_a_number(tmp_path, capsys):
    line = refused(tmp_path, docs(node_pool(), pod("p", "１")), capsys)
    assert "spec.containers[0].resources.requests.cpu" in line
    deployment = {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "３"}}
    line = refused(tmp_path, docs(deployment), capsys)
    assert "spec.replicas: must be an integer" in line


@pytest.mark.parametrize("cpu", ["1e999999999", "1e1000000", "1e5000", "9" * 99])
def test_huge_quantities_are_refused_at_once(tmp_path, capsys, cpu):
    line = refused(tmp_path, docs(node_pool(), pod("p", cpu)), capsys)
    assert "spec.containers[0].resources.requests.cpu" in line and "too large" in line
    md = machine_deployment("c3-8", cpu, "8Gi", "0.1")
    line = refused(tmp_path, docs(node_pool(), md, pod("q")), capsys)
    assert "annotation capacity.cluster-autoscaler.kubernetes.io/cpu" in line


def test_a_machine_deployment_without_cpu_is_never_bought(tmp_path, capsys):
    line = refused(
        tmp_path, docs(node_pool(), machine_deployment("zero", "0", "8Gi", "0.01"), pod("p", "0")), capsys
    )
    assert (
        "(MachineDeployment default/zero): annotation capacity.cluster-autoscaler.kubernetes.io/cpu" in line
    )
    assert "more than 0" in line


def test_a_negative_max_size_names_the_annotation(tmp_path, capsys):
    md = machine_deployment("c3-8", "4", "8Gi", "0.1", max_size="-1")
    line = refused(tmp_path, docs(node_pool(), md, pod("p")), capsys)
    assert (
        "annotation cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: must be at least 0" in line
    )


@pytest.mark.parametrize(
    ("annotation", "value"), [("tenon.sh/price-per-hour", "inf"), ("tenon.sh/price-per-hour", "NaN")]
)
def test_a_machine_deployment_price_must_be_finite(tmp_path, capsys, annotation, value):
    md = machine_deployment("c3-8", "4", "8Gi", "0.1")
    md["metadata"]["annotations"][annotation] = value
    line = refused(tmp_path, docs(node_pool(), md, pod("p")), capsys)
    assert f"annotation {annotation}" in line


def test_the_json_printed_is_strict_json(tmp_path, capsys):
    code, out, err = simulate(tmp_path, docs(*GOOD), capsys, "-o", "json")
    assert code == 0, err
    plan = strict_json(out)
    assert plan["totalPricePerHour"] == 0.1 and plan["nodeClaims"][0]["pods"] == ["default/p"]


# -- property tests ------------------------------------------------------------------------------------------

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def outcome_is_clean(code: int, out: str, err: str, json_output: bool) -> None:
    """Exit 0 with a plan (strict JSON when asked) or exit 2 with one line; nothing else."""
    assert code in (0, 2), (code, err)
    if code == 2:
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("tenon simulate: "), err
    elif json_output:
        strict_json(out)


@FUZZ
@given(st.binary(max_size=2000))
def test_any_bytes_end_in_a_plan_or_one_line(tmp_path, capsys, data):
    outcome_is_clean(*simulate(tmp_path, data, capsys, "-o", "json"), json_output=True)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["１", "NaN", "inf", "-1", "1e999999999", "lots", "", "0", "500m", "4Gi", "In", "z1"]),
    st.text(max_size=12),
)


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


values = st.recursive(scalars, _nested, max_leaves=20)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replace(doc[head], rest, value)}
    return [(_replace(v, rest, value) if i == head else v) for i, v in enumerate(doc)]


def _scenario() -> list[dict[str, Any]]:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
                    ],
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "labelSelector": {"matchLabels": {"app": "web"}},
                        }
                    ],
                },
            },
        },
    }
    return [
        node_pool(
            requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            limits={"cpu": "64"},
        ),
        catalog(itype("t", 2, 4, 0.1, zones=("z1", "z2")), itype("u", 8, 16, 0.35, zones=("z1", "z2"))),
        machine_deployment("c3-8", "4", "8Gi", "0.1", max_size="5"),
        deployment,
        pod("single", "1", nodeSelector={"kubernetes.io/arch": "amd64"}),
    ]


@st.composite
def mutated(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid scenario with one to three values anywhere in it replaced by anything."""
    scenario = _scenario()
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(scenario) - 1))
        path = draw(st.sampled_from(_paths(scenario[index])))
        scenario[index] = _replace(scenario[index], path, draw(values))
    return scenario


@FUZZ
@given(mutated(), st.booleans())
def test_any_mutation_of_a_valid_input_ends_in_a_plan_or_one_line(tmp_path, capsys, scenario, as_json):
    if as_json:
        content = json.dumps({"kind": "List", "apiVersion": "v1", "items": scenario}, allow_nan=True)
    else:
        content = yaml.safe_dump_all(scenario, allow_unicode=True)
    outcome_is_clean(*simulate(tmp_path, content, capsys, "-o", "json"), json_output=True)


@FUZZ
@given(st.lists(values, min_size=1, max_size=4))
def test_any_documents_end_in_a_plan_or_one_line(tmp_path, capsys, documents):
    content = yaml.safe_dump_all(documents, allow_unicode=True)
    outcome_is_clean(*simulate(tmp_path, content, capsys), json_output=False)
