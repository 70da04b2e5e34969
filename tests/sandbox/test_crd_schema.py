"""The pieces of the sandbox's CRD handling, without a server: structural schemas (pruning, defaulting,
validation with the API server's wording), CEL rules, CRD checks and the printer-column JSONPath."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devtools.sandbox.cel_validation import attach_rules, rule_errors
from devtools.sandbox.crds import crd_errors, crd_files, load_crd_documents, resource_types
from devtools.sandbox.jsonpath import JsonPathError, compile_path
from devtools.sandbox.runtime import DEPLOY_CRDS
from devtools.sandbox.structural import Schema

WIDGET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "blue"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5, "minLength": 2},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
                "amount": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "note": {"type": "string", "nullable": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer", "default": 80},
                        },
                    },
                },
                "policy": {
                    "type": "object",
                    "default": {},
                    "properties": {"mode": {"type": "string", "default": "auto"}},
                },
            },
        },
    },
}


_TYPE = '{} in body must be of type {}: "{}"'


def widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3, **spec},
    }


def admitted(obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    schema = Schema(WIDGET)
    pruned, dropped = schema.prune(obj)
    return schema.default(pruned), dropped


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"size": 11}, "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"),
        ({"size": "3"}, 'spec.size: Invalid value: "string": '
         + _TYPE.format("spec.size", "integer", "string")),
        ({"ratio": 0}, "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"),
        ({"color": "green"}, 'spec.color: Unsupported value: "green": supported values: "red", "blue"'),
        ({"name": "Bob"}, "spec.name: Invalid value: \"Bob\": spec.name in body should match '^[a-z]+$'"),
        ({"name": "abcdef"}, "spec.name: Too long: may not be more than 5 bytes"),
        ({"name": "a"}, 'spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long'),
        ({"when": "no"}, 'spec.when: Invalid value: "no": ' + _TYPE.format("spec.when", "date-time", "no")),
        ({"tags": ["a", "b", "c"]}, "spec.tags: Too many: 3: must have at most 2 items"),
        ({"labels": {"a": "1", "b": "2"}}, "spec.labels: Too many: 2: must have at most 1 items"),
        ({"labels": {"a": 1}}, 'spec.labels.a: Invalid value: "integer": '
         + _TYPE.format("spec.labels.a", "string", "integer")),
        ({"amount": 1.5}, 'spec.amount: Invalid value: "number": '
         + _TYPE.format("spec.amount", "integer or string", "number")),
        ({"ports": [{"name": "a"}, {"name": "a"}]}, 'spec.ports[1]: Duplicate value: map[name: "a"]'),
        ({"ports": [{"port": 1}]}, "spec.ports[0].name: Required value"),
    ],
)  # fmt: skip
def test_each_keyword_is_checked_with_the_api_servers_wording(spec: dict[str, Any], error: str) -> None:
    obj, _ = admitted(widget(**spec))
    assert Schema(WIDGET).validate(obj) == [tuple(error.split(": ", 1))]


def test_a_valid_object_has_no_errors_and_a_missing_required_field_is_named() -> None:
    good, _ = admitted(
        widget(ratio=0.5, when="2026-01-02T03:04:05Z", amount="10%", note=None, free={"x": {"y": 1}})
    )
    assert Schema(WIDGET).validate(good) == []
    missing = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    assert Schema(WIDGET).validate(missing) == [("spec.size", "Required value")]


def test_unknown_fields_are_pruned_except_where_preserved_and_the_root_meta_is_kept() -> None:
    obj = widget(extra=1, free={"anything": [1, {"deep": True}]}, ports=[{"name": "http", "bogus": 2}])
    obj["status"] = {"whatever": 1}
    obj["metadata"]["labels"] = {"a": "b"}
    pruned, dropped = admitted(obj)
    assert sorted(dropped) == ["spec.extra", "spec.ports[0].bogus", "status"]
    assert "extra" not in pruned["spec"] and "status" not in pruned
    assert pruned["spec"]["free"] == {"anything": [1, {"deep": True}]}
    assert pruned["metadata"] == {"name": "w", "labels": {"a": "b"}}


def test_defaults_fill_missing_fields_inside_defaults_too_and_drop_non_nullable_nulls() -> None:
    before = widget(ports=[{"name": "http"}], color=None, note=None)
    frozen = copy.deepcopy(before)
    defaulted, _ = admitted(before)
    assert defaulted["spec"]["color"] == "blue"  # a null where the schema is not nullable: defaulted
    assert defaulted["spec"]["note"] is None  # nullable: kept
    assert defaulted["spec"]["ports"] == [{"name": "http", "port": 80}]
    assert defaulted["spec"]["policy"] == {"mode": "auto"}  # the default {} got its own defaults
    assert before == frozen  # copy-on-write: the input is untouched


def test_ratcheting_an_unchanged_invalid_value_passes_a_changed_one_does_not() -> None:
    schema = Schema(WIDGET)
    stored = widget(size=50)  # valid under an older, looser schema
    assert schema.validate(widget(size=50, color="red"), stored) == []
    assert schema.validate(widget(size=60), stored) != []


def _rules_schema(node: dict[str, Any]) -> Schema:
    schema = Schema({"type": "object", "properties": {"spec": node}})
    attach_rules(schema.root)
    return schema


def test_cel_rules_report_message_reason_field_path_and_evaluation_errors() -> None:
    schema = _rules_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "x-kubernetes-validations": [
                {"rule": "self.a < self.b", "message": "a must be below b"},
                {"rule": "self.a != 3", "messageExpression": "'a is ' + string(self.a)", "fieldPath": ".a"},
                {"rule": "self.a != 4", "reason": "FieldValueForbidden", "message": "no fours"},
                {"rule": "self.a != 5"},
            ],
        }
    )
    check = lambda spec: rule_errors(schema.root, {"spec": spec}, "")  # noqa: E731
    assert check({"a": 1, "b": 2}) == []
    assert check({"a": 3, "b": 2}) == [
        ("spec", 'Invalid value: "object": a must be below b'),
        ("spec.a", 'Invalid value: "object": a is 3'),
    ]
    assert check({"a": 4, "b": 9}) == [("spec", "Forbidden: no fours")]
    assert check({"a": 5, "b": 9}) == [("spec", 'Invalid value: "object": failed rule: self.a != 5')]
    assert check({"a": 1}) == [
        ("spec", 'Invalid value: "object": no such key: b evaluating rule: self.a < self.b')
    ]


def test_transition_rules_run_on_updates_only_and_list_map_items_meet_their_stored_selves() -> None:
    schema = _rules_schema(
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                        "x-kubernetes-validations": [
                            {"rule": "self.size >= oldSelf.size", "message": "size may only grow"}
                        ],
                    },
                }
            },
        }
    )
    old = {"spec": {"items": [{"name": "a", "size": 5}, {"name": "b", "size": 1}]}}
    shrunk = {
        "spec": {"items": [{"name": "b", "size": 1}, {"name": "a", "size": 4}, {"name": "c", "size": 0}]}
    }
    assert rule_errors(schema.root, shrunk, "") == []  # a create: nothing to compare with
    assert rule_errors(schema.root, shrunk, "", old) == [
        ("spec.items[1]", 'Invalid value: "object": size may only grow')
    ]


def test_every_rule_of_the_crds_tenon_ships_can_be_evaluated() -> None:
    documents = load_crd_documents(crd_files(DEPLOY_CRDS))
    assert {d["spec"]["names"]["kind"] for d in documents} == {
        "NodePool", "NodeClaim", "EC2NodeClass", "ClusterAPINodeClass", "InstanceCatalog"
    }  # fmt: skip
    rules = [r for d in documents for rt in resource_types(d) if rt.custom for r in rt.custom.rules]
    assert len(rules) > 70
    assert [(r.where, r.source, r.unevaluable) for r in rules if r.unevaluable] == []


def test_a_rule_calling_a_function_the_engine_lacks_is_marked_unevaluable() -> None:
    schema = _rules_schema(
        {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "quantity(self).isGreaterThan(quantity('1'))"}],
        }
    )
    [rule] = schema.root.properties["spec"].rules
    assert "quantity" in rule.unevaluable
    assert rule_errors(schema.root, {"spec": "0"}, "") == []  # accepted, as documented


def _crd(**changes: Any) -> dict[str, Any]:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": WIDGET}}
            ],
        },
    }
    for path, value in changes.items():
        target = crd
        *parents, last = path.split("__")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
    return crd


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"spec__group": "widgets"}, "spec.group", "should be a domain with at least one dot"),
        ({"metadata__name": "gadgets.example.com"}, "metadata.name",
         'must be spec.names.plural+"."+spec.group'),
        ({"spec__scope": "Global"}, "spec.scope", 'Unsupported value: "Global"'),
        ({"spec__group": "x.k8s.io", "metadata__name": "widgets.x.k8s.io"},
         "metadata.annotations[api-approved.kubernetes.io]",
         "protected groups must have approval annotation"),
        ({"spec__versions__0__storage": False}, "spec.versions",
         "must have exactly one version marked as storage"),
        ({"spec__versions__0__schema": {}}, "spec.versions[0].schema.openAPIV3Schema",
         "schemas are required"),
        ({"spec__versions__0__schema": {"openAPIV3Schema": {"type": "object", "properties": {"x": {}}}}},
         "spec.versions[0].schema.openAPIV3Schema.properties[x].type", "must not be empty"),
        ({"spec__versions__0__additionalPrinterColumns": [
            {"name": "X", "type": "string", "jsonPath": "spec"}
        ]},
         "spec.versions[0].additionalPrinterColumns[0].jsonPath", "a path starts with ."),
    ],
)  # fmt: skip
def test_a_crd_the_api_server_would_refuse_is_refused_naming_the_field(
    changes: dict[str, Any], field: str, problem: str
) -> None:
    assert crd_errors(_crd()) == []
    errors = crd_errors(_crd(**changes))
    assert any(f == field and problem in message for f, message in errors), errors


def test_printer_column_paths_read_escaped_names_filters_and_indexes() -> None:
    claim = {
        "metadata": {"labels": {"node.kubernetes.io/instance-type": "c3-4"}},
        "status": {
            "conditions": [{"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}]
        },
        "spec": {"items": [{"n": 1}, {"n": 2}]},
    }
    assert compile_path(".metadata.labels.node\\.kubernetes\\.io/instance-type").find(claim) == ["c3-4"]
    assert compile_path('.status.conditions[?(@.type=="Ready")].status').find(claim) == ["False"]
    assert compile_path(".spec.items[1].n").find(claim) == [2]
    assert compile_path(".spec.items[*].n").find(claim) == [1, 2]
    assert compile_path(".status.nodeName").find(claim) == []
    with pytest.raises(JsonPathError):
        compile_path(".spec.items[?(@.n > 1)]")
