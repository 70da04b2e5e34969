"""The kustomize tree renders into what a platform engineer can install: one Deployment per service (the
disruption service included), each with probes on the health port, resources, a locked-down securityContext, a
PodDisruptionBudget, system-cluster-critical, scheduling that keeps it off nodes tenon disrupts, its own
ServiceAccount and a role with no wildcard and nothing the code does not use; a NATS cluster of three with TLS
and a user per service allowed to publish only what that service writes."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from proto import registry, subjects
from tenon.services import SERVICES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
OVERLAYS = {
    "capi": {"pod-watcher", "scheduler", "disruption", "launcher-capi"},
    "aws": {"pod-watcher", "scheduler", "disruption", "launcher-ec2", "interruption-handler"},
}

# What each service does on the workload cluster, read from its code (module docstrings of deploy/services/*):
# (apiGroup, resource, verb). A role granting more, or less, fails.
NEEDS: dict[str, set[tuple[str, str, str]]] = {
    "pod-watcher": {
        *{("", r, v) for r in ("pods", "nodes") for v in ("list", "watch")},
        *{("apps", "daemonsets", v) for v in ("list", "watch")},
        *{("policy", "poddisruptionbudgets", v) for v in ("list", "watch")},
        *{("karpenter.sh", "nodepools", v) for v in ("list", "watch")},
        *{("karpenter.cluster.x-k8s.io", "clusterapinodeclasses", v) for v in ("list", "watch")},
        *{("karpenter.k8s.aws", "ec2nodeclasses", v) for v in ("list", "watch")},
    },
    "scheduler": {
        *{("karpenter.sh", "nodeclaims", v) for v in ("get", "create", "patch", "delete")},
        ("karpenter.sh", "nodeclaims/status", "patch"),
        ("karpenter.sh", "nodepools/status", "patch"),
        ("", "nodes", "patch"),
        ("", "pods/status", "patch"),  # nominatedNodeName (tenon/services/scheduler/nominations.py)
        ("", "events", "create"),
    },
    "disruption": {
        *{("karpenter.sh", "nodeclaims", v) for v in ("get", "list", "watch")},
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("", "pods/eviction", "create"),
        *{("", "nodes", v) for v in ("get", "patch", "delete")},
        ("", "events", "create"),
    },
    # works on the management cluster (deploy/management-cluster); here it reads NodeClaims (leak evidence)
    "launcher-capi": {("karpenter.sh", "nodeclaims", "get")},
    # EC2NodeClasses come from the log; it writes their status, reads Nodes (memory) and NodeClaims (leaks)
    "launcher-ec2": {
        ("karpenter.k8s.aws", "ec2nodeclasses/status", "patch"),
        ("", "nodes", "list"),
        ("karpenter.sh", "nodeclaims", "get"),
    },
    "interruption-handler": set(),  # SQS and NATS only
}
# Subjects each service writes: proto/registry.py, the one table; every service may also dead-letter.
WRITES: dict[str, set[str]] = {service: set(registry.writes_of(service)) for service in registry.SERVICES}


@functools.cache
def render(path: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize deploy/{path}: {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def deployments(overlay: str) -> dict[str, dict[str, Any]]:
    """By service (app.kubernetes.io/component)."""
    found = of_kind(render(f"overlays/{overlay}"), "Deployment")
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in found.values()}


@pytest.mark.parametrize("path", ["base", "overlays/capi", "overlays/aws", "management-cluster"])
def test_renders(path: str) -> None:
    assert render(path)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_one_deployment_per_service_running_that_service(overlay: str) -> None:
    found = deployments(overlay)
    assert set(found) == OVERLAYS[overlay]
    assert "disruption" in found  # nothing scales down, and deleted nodes hang on the finalizer, without it
    for service, deployment in found.items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["run", service]
        assert container["image"].startswith("ghcr.io/tenon/tenon:")
        assert deployment["spec"]["replicas"] == 2  # a standby takes over the lease


def test_the_capi_services_are_ones_tenon_run_knows() -> None:
    assert OVERLAYS["capi"] <= set(SERVICES)


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_deployment_has_probes_on_the_health_port_and_resources(overlay: str) -> None:
    for service, deployment in deployments(overlay).items():
        [container] = _pod(deployment)["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http-metrics": 8081}, service
        for probe, path in (
            ("livenessProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
            ("startupProbe", "/healthz"),
        ):
            assert container[probe]["httpGet"] == {"path": path, "port": "http-metrics"}, (service, probe)
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert {"cpu", "memory"} <= set(requests) and "memory" in limits, service
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == "8081"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_deployment_is_locked_down(overlay: str) -> None:
    for service, deployment in deployments(overlay).items():
        pod = _pod(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        [container] = pod["containers"]
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, service
        assert context["readOnlyRootFilesystem"] is True, service
        assert context["allowPrivilegeEscalation"] is False, service
        assert context["capabilities"] == {"drop": ["ALL"]}, service
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/tmp"] == "tmp"  # the one writable place


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_critical_priority_a_pdb_and_never_on_a_node_tenon_disrupts(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    pdbs = of_kind(docs, "PodDisruptionBudget")
    workloads = list(deployments(overlay).values()) + list(of_kind(docs, "StatefulSet").values())
    for workload in workloads:
        pod = _pod(workload)
        name = workload["metadata"]["name"]
        assert pod["priorityClassName"] == "system-cluster-critical", name
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}
        ], name
        labels = workload["spec"]["template"]["metadata"]["labels"]
        covering = [
            p
            for p in pdbs.values()
            if p["spec"]["selector"]["matchLabels"].items() <= labels.items()
            and p["spec"]["maxUnavailable"] == 1
        ]
        assert len(covering) == 1, name


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


@pytest.mark.parametrize("path", ["overlays/capi", "overlays/aws", "management-cluster"])
def test_no_role_uses_a_wildcard(path: str) -> None:
    docs = render(path)
    roles = [*of_kind(docs, "Role").values(), *of_kind(docs, "ClusterRole").values()]
    assert roles
    for role in roles:
        for group, resource, verb in _rules(role):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_each_service_has_its_own_account_and_exactly_the_permissions_its_code_uses(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    accounts = of_kind(docs, "ServiceAccount")
    bindings = [*of_kind(docs, "ClusterRoleBinding").values(), *of_kind(docs, "RoleBinding").values()]
    roles = {**of_kind(docs, "ClusterRole"), **of_kind(docs, "Role")}
    used = set()
    for service, deployment in deployments(overlay).items():
        account = _pod(deployment)["serviceAccountName"]
        assert account == f"tenon-{service}" and account in accounts and account not in used
        used.add(account)
        granted: set[tuple[str, str, str]] = set()
        for binding in bindings:
            if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
                assert binding["subjects"] == [
                    {"kind": "ServiceAccount", "name": account, "namespace": "tenon"}
                ]
                granted |= _rules(roles[binding["roleRef"]["name"]])
        assert granted == NEEDS[service], service
        if not NEEDS[service]:  # no API access at all: no token in the pod
            assert accounts[account]["automountServiceAccountToken"] is False
            assert _pod(deployment)["automountServiceAccountToken"] is False


def test_only_the_cluster_api_launcher_mounts_the_management_kubeconfig() -> None:
    for overlay in OVERLAYS:
        for service, deployment in deployments(overlay).items():
            secrets = {v["secret"]["secretName"] for v in _pod(deployment)["volumes"] if "secret" in v}
            assert ("tenon-management-kubeconfig" in secrets) == (service == "launcher-capi"), service
    [container] = _pod(deployments("capi")["launcher-capi"])["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["TENON_MANAGEMENT_KUBECONFIG"] == mounts["management-kubeconfig"] + "/kubeconfig"


def test_the_management_cluster_role_covers_what_the_launcher_does_there() -> None:
    docs = render("management-cluster")
    granted = set().union(
        *(_rules(r) for r in [*of_kind(docs, "ClusterRole").values(), *of_kind(docs, "Role").values()])
    )
    assert granted == {
        *{("cluster.x-k8s.io", "machinedeployments", v) for v in ("get", "list", "watch", "patch")},
        *{("cluster.x-k8s.io", "machines", v) for v in ("get", "list", "watch", "patch")},
        ("", "events", "create"),
        ("", "secrets", "get"),
    }
    [secrets_role] = of_kind(docs, "Role").values()
    assert secrets_role["metadata"]["namespace"] == "capo-system"  # secrets in one namespace, not the cluster


def _config(overlay: str) -> dict[str, str]:
    [config] = [
        d
        for d in render(f"overlays/{overlay}")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("tenon-config")
    ]
    data: dict[str, str] = config["data"]
    return data


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_services_are_configured_through_the_environment(overlay: str) -> None:
    config = _config(overlay)
    assert config["TENON_NATS_URL"] == "tls://nats:4222"
    assert config["TENON_NATS_TLS_CA"] == "/etc/tenon/nats-ca/ca.crt"
    assert config["TENON_HEALTH_PORT"] == "8081"
    for service, deployment in deployments(overlay).items():
        [container] = _pod(deployment)["containers"]
        assert container["envFrom"][0]["configMapRef"]["name"].startswith("tenon-config-")
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/etc/tenon/nats-ca" in mounts, service
    code = "\n".join(p.read_text() for p in (ROOT / "tenon").rglob("*.py"))
    assert {k for k in config if k.startswith("TENON_") and k not in code} == set()  # no setting misspelled
    assert config["TENON_EVENTS_REPLICAS"] == "3"  # R3 streams on the three servers


def _nats_users(overlay: str) -> dict[str, dict[str, list[str]]]:
    [config] = [
        d
        for d in render(f"overlays/{overlay}")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "nats-config"
    ]
    text = config["data"]["nats.conf"]
    users = {}
    for block in re.finditer(
        r"user: ([\w-]+), password: \$(\w+)\s+permissions: \{(.*?)\n\s+\}\n", text, re.S
    ):
        publish = re.search(r"publish: \[(.*?)\]", block[3], re.S)
        subscribe = re.search(r"subscribe: \[(.*?)\]", block[3], re.S)
        assert publish and subscribe
        users[block[1]] = {
            "password": [block[2]],
            "publish": re.findall(r'"([^"]+)"', publish[1]),
            "subscribe": re.findall(r'"([^"]+)"', subscribe[1]),
        }
    return users


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_nats_is_a_tls_cluster_of_three_with_a_user_per_service(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    [nats] = of_kind(docs, "StatefulSet").values()
    assert nats["spec"]["replicas"] == 3
    [config] = [d for d in docs if d["metadata"]["name"] == "nats-config"]
    text = config["data"]["nats.conf"]
    assert text.count("tls {") == 2 and "verify: true" in text  # clients and routes
    assert len(re.findall(r"nats://nats-\d\.nats-headless:6222", text)) == 3
    certificate = of_kind(docs, "Certificate")["nats-server"]
    assert {"nats", "*.nats-headless"} <= set(certificate["spec"]["dnsNames"])
    users = _nats_users(overlay)
    [server] = _pod(nats)["containers"]
    server_env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}).get("key") for e in server["env"]}
    for service, deployment in deployments(overlay).items():
        user = users[service]
        own = {p for p in user["publish"] if p.startswith("tenon.")}
        assert own == WRITES[service] | {subjects.DEADLETTERS, f"tenon.snapshot.{service}.>"}, service
        jetstream = set(user["publish"]) - own
        assert not {"$JS.API.>", "$JS.API.STREAM.DELETE.*", "$JS.>"} & jetstream  # the log cannot be deleted
        assert user["subscribe"] == [f"_INBOX_{service}.>"]  # its own replies, no other service's
        assert server_env[user["password"][0]] == service  # the server reads the password the service gets
        [container] = _pod(deployment)["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["TENON_NATS_USER"]["value"] == service
        assert env["TENON_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "tenon-nats-credentials",
            "key": service,
        }
    assert not any(s.startswith("tenon.") for s in users["operator"]["publish"])  # people read, never write
