"""Pods of one workload are parsed once: replicas bound to different nodes each keep their own node.

A scheduler rebuilt from a snapshot parses every bound pod of the cluster; the replicas of a Deployment differ
only in name and ``spec.nodeName``, so they share one parse. Sharing must never mix their nodes up, and a
``nodeName`` that is not a string is still refused with its field named.
"""

from __future__ import annotations

from typing import Any

import pytest

from tenon.core import InputError, parse_object, parse_pod


def replica(name: str, node: Any, cpu: str = "250m") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def test_replicas_on_different_nodes_keep_their_own_names_and_nodes() -> None:
    parsed = [parse_object("event", i, replica(f"web-{i}", f"node-{i % 3}")).pods[0] for i in range(9)]
    assert [(p.name, p.node_name) for p in parsed] == [(f"web-{i}", f"node-{i % 3}") for i in range(9)]
    assert {p.requests["cpu"] for p in parsed} == {250}
    pending = parse_object("event", 9, replica("web-9", None)).pods[0]
    assert pending.node_name == ""  # the same spec, not bound: pending


def test_a_replica_with_other_requests_is_not_given_the_cached_parse() -> None:
    parse_object("event", 0, replica("web-0", "node-0"))
    bigger = parse_object("event", 1, replica("web-1", "node-0", cpu="2")).pods[0]
    assert bigger.requests["cpu"] == 2000


def test_a_node_name_that_is_not_a_string_is_refused_naming_the_field() -> None:
    parse_object("event", 0, replica("web-0", "node-0"))
    with pytest.raises(InputError, match=r"spec\.nodeName"):
        parse_object("event", 1, replica("web-1", ["node-0"]))


def test_parse_pod_reads_a_pod_as_parse_object_does_and_refuses_other_kinds() -> None:
    for i in range(3):
        obj = replica(f"web-{i}", f"node-{i}")
        assert parse_pod("event", i, obj) == parse_object("event", i, obj).pods[0]
    with pytest.raises(InputError, match=r"spec\.nodeName"):
        parse_pod("event", 3, replica("web-3", ["node-3"]))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}
    with pytest.raises(InputError, match=r"Deployment default/web.*expected a Pod"):
        parse_pod("event", 4, deployment)
