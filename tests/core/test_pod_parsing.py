"""Pods of one workload are parsed once: replicas bound to different nodes each keep their own node.

A scheduler rebuilt from a snapshot parses every bound pod of the cluster; the replicas of a Deployment differ
only in name and ``spec.nodeName``, so they share one parse. Sharing must never mix their nodes up, and a
``nodeName`` that is not a string is still refused with its field named.
"""

from __future__ import annotations

from typing import Any

import pytest

from tenon.core import InputError, parse_object, parse_pod
from tenon.core.fields import Ctx
from tenon.core.podspec import parse_pod_spec


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


def real_replica(suffix: str, node: str, **spec: Any) -> dict[str, Any]:
    """A replica as the API server gives it: fields scheduling never reads, some of them unique per pod (the
    service account token volume is named at random)."""
    token = f"kube-api-access-{suffix}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-5f7c-{suffix}", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example/web:1.2",
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 8080, "hostPort": 8080}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets"}],
                }
            ],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "migrate", "image": "m", "resources": {"requests": {"cpu": "1"}}},
            ],
            "volumes": [
                {"name": token, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {
                    "name": "scratch",
                    "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}},
                },
            ],
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}],
                                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}],
                            }
                        ]
                    }
                }
            },
            "serviceAccountName": "web",
            "dnsPolicy": "ClusterFirst",
            **spec,
        },
        "status": {"phase": "Running", "podIP": f"10.0.0.{len(suffix)}"},
    }


def test_replicas_differing_in_what_scheduling_does_not_read_read_as_their_whole_spec() -> None:
    replicas = [real_replica(s, f"node-{s}") for s in ("a1b2c", "x9y8z", "q7r6s")]
    parsed = [parse_pod("event", i, obj) for i, obj in enumerate(replicas)]
    for obj, pod in zip(replicas, parsed, strict=True):
        meta = obj["metadata"]
        ctx = Ctx("event", 0, "Pod", f"shop/{meta['name']}")
        assert pod == parse_pod_spec(ctx, "shop", meta["name"], meta["labels"], obj["spec"], "spec")
    assert [p.node_name for p in parsed] == ["node-a1b2c", "node-x9y8z", "node-q7r6s"]
    assert parsed[0].requests == {"cpu": 1100, "memory": 268435456, "pods": 1}
    assert [v.claim for v in parsed[0].volumes] == ["data", "scratch"]
    assert [h.port for h in parsed[0].host_ports] == [8080]


def test_a_replica_wrong_in_a_field_scheduling_reads_is_refused_naming_it() -> None:
    parse_pod("event", 0, real_replica("a1b2c", "node-a"))
    wrong = real_replica("x9y8z", "node-x")
    wrong["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(InputError, match=r"spec\.containers\[0\]\.resources\.requests\.cpu"):
        parse_pod("event", 1, wrong)
    with pytest.raises(InputError, match=r"spec\.volumes\[2\]\.ephemeral"):
        parse_pod("event", 2, real_replica("q7r6s", "node-q", volumes=[{}, {}, {"ephemeral": "yes"}]))
    with pytest.raises(InputError, match=r"spec\.initContainers"):
        parse_pod("event", 3, real_replica("m5n4o", "node-m", initContainers={"name": "x"}))
