"""The machine's kubectl (v1.32) driving the sandbox: get, apply, scale, delete, cordon, drain."""

from __future__ import annotations

import json

from devtools.sandbox.testing import SandboxHandle
from tests.sandbox.conftest import KubectlRunner, node_manifest, pod_manifest

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {team: blue}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: registry.example/web:1
"""

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  limits: {cpu: "100"}
"""


async def test_get_apply_scale_delete(api_sandbox: SandboxHandle, kubectl: KubectlRunner) -> None:
    store = api_sandbox.workload_store
    store.create(store.resource("v1", "Node"), node_manifest("node-a"))
    nodes = await kubectl("get", "nodes")
    assert nodes.code == 0, nodes.stderr
    assert nodes.stdout.split()[:3] == ["NAME", "AGE", "node-a"] or "node-a" in nodes.stdout

    created = await kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
    assert created.code == 0 and "deployment.apps/web created" in created.stdout, created.stderr
    again = await kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
    assert "unchanged" in again.stdout, again.stderr
    changed = await kubectl("apply", "-f", "-", stdin=DEPLOYMENT.replace("web:1", "web:2"))
    assert "configured" in changed.stdout, changed.stderr
    deployment = store.get(store.resource("apps/v1", "Deployment"), "web", "default")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/web:2"
    assert deployment["metadata"]["generation"] == 2

    pool = await kubectl("apply", "-f", "-", stdin=NODEPOOL)
    assert pool.code == 0 and "nodepool.karpenter.sh/general created" in pool.stdout, pool.stderr
    pool_again = await kubectl("apply", "-f", "-", stdin=NODEPOOL.replace('"100"', '"200"'))
    assert "configured" in pool_again.stdout, pool_again.stderr
    assert (
        store.get(store.resource("karpenter.sh/v1", "NodePool"), "general")["spec"]["limits"]["cpu"] == "200"
    )

    scaled = await kubectl("scale", "deployment/web", "--replicas=8")
    assert scaled.code == 0, scaled.stderr
    as_json = await kubectl("get", "deploy", "web", "-o", "json")
    assert json.loads(as_json.stdout)["spec"]["replicas"] == 8

    listing = await kubectl("get", "deployments,nodepools", "-A")
    assert "web" in listing.stdout and "general" in listing.stdout, listing.stderr

    deleted = await kubectl("delete", "deployment", "web")
    assert deleted.code == 0 and 'deployment.apps "web" deleted' in deleted.stdout, deleted.stderr
    missing = await kubectl("get", "deployment", "web")
    assert missing.code != 0 and 'deployments.apps "web" not found' in missing.stderr


async def test_cordon_and_drain_respect_budgets(api_sandbox: SandboxHandle, kubectl: KubectlRunner) -> None:
    store = api_sandbox.workload_store
    pods, pdbs = store.resource("v1", "Pod"), store.resource("policy/v1", "PodDisruptionBudget")
    store.create(store.resource("v1", "Node"), node_manifest("node-a"))
    rs = store.create(
        store.resource("apps/v1", "ReplicaSet"),
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        },
    )
    ds = store.create(
        store.resource("apps/v1", "DaemonSet"),
        {
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}},
        },
    )
    for name, owner in (("web-1", rs), ("web-2", rs), ("agent-1", ds)):
        pod = pod_manifest(name, labels={"app": owner["metadata"]["name"]})
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner["kind"],
                "controller": True,
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
        store.create(pods, pod)
        store.bind(name, "default", "node-a")
        pod = store.get(pods, name, "default")
        store.update(pods, {**pod, "status": {**pod["status"], "phase": "Running"}}, subresource="status")
    pdb = store.create(
        pdbs,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    pdb = store.update(
        pdbs,
        {
            **pdb,
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 0,
                "currentHealthy": 2,
                "desiredHealthy": 2,
                "expectedPods": 2,
            },
        },
        subresource="status",
    )

    cordoned = await kubectl("cordon", "node-a")
    assert cordoned.code == 0 and "cordoned" in cordoned.stdout, cordoned.stderr
    assert store.get(store.resource("v1", "Node"), "node-a")["spec"]["unschedulable"] is True

    blocked = await kubectl("drain", "node-a", "--ignore-daemonsets", "--timeout=2s", "--grace-period=0")
    assert blocked.code != 0
    assert "disruption budget" in blocked.stderr, blocked.stderr
    assert len(store.list(pods)[0]) == 3  # nothing evicted

    # What the PDB controller reports once the budget is relaxed; the next drain evicts both web pods.
    current = store.get(pdbs, "web", "default")
    store.update(
        pdbs, {**current, "status": {**current["status"], "disruptionsAllowed": 2}}, subresource="status"
    )
    drained = await kubectl("drain", "node-a", "--ignore-daemonsets", "--timeout=20s", "--grace-period=0")
    assert drained.code == 0, drained.stderr
    assert "drained" in drained.stdout
    assert [p["metadata"]["name"] for p in store.list(pods)[0]] == ["agent-1"]  # DaemonSet pods stay
    uncordoned = await kubectl("uncordon", "node-a")
    assert uncordoned.code == 0
    assert not store.get(store.resource("v1", "Node"), "node-a")["spec"].get("unschedulable")


async def test_get_prints_the_usual_columns(api_sandbox: SandboxHandle, kubectl: KubectlRunner) -> None:
    store = api_sandbox.workload_store
    store.create(store.resource("v1", "Node"), node_manifest("node-a"))
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("bound"))
    store.bind("bound", "default", "node-a")
    store.create(pods, pod_manifest("waiting"))
    store.create(
        store.resource("karpenter.sh/v1", "NodeClaim"),
        {
            "metadata": {"name": "general-x1", "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            },
        },
    )
    wide = await kubectl("get", "pods", "-o", "wide")
    assert wide.code == 0, wide.stderr
    header, *rows = [line.split() for line in wide.stdout.strip().splitlines()]
    assert header[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"] and "NODE" in header
    by_name = {row[0]: row for row in rows}
    assert by_name["bound"][2] == "Pending" and by_name["bound"][header.index("NODE")] == "node-a"
    assert by_name["waiting"][header.index("NODE")] == "<none>"
    nodes = await kubectl("get", "nodes")
    assert nodes.stdout.split()[:7] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "node-a", "Ready"]
    claims = await kubectl("get", "nodeclaims")
    assert claims.stdout.split()[:2] == ["NAME", "TYPE"] and "m5.large" in claims.stdout


async def test_create_generators_send_protobuf(api_sandbox: SandboxHandle, kubectl: KubectlRunner) -> None:
    # kubectl create namespace|deployment|pdb POST application/vnd.kubernetes.protobuf, not JSON
    for args in (
        ("create", "namespace", "team"),
        ("-n", "team", "create", "deployment", "web", "--image=nginx:1.27", "--replicas=8", "--port=80"),
        ("-n", "team", "create", "pdb", "web", "--selector=app=web", "--min-available=50%"),
        ("-n", "team", "create", "deployment", "idle", "--image=x", "--replicas=0"),
    ):
        result = await kubectl(*args)
        assert result.code == 0, result.stderr
    store = api_sandbox.workload_store
    deployment = store.get(store.resource("apps/v1", "Deployment"), "web", "team")
    assert deployment["spec"]["replicas"] == 8
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (container["name"], container["image"], container["ports"]) == (
        "nginx",
        "nginx:1.27",
        [{"containerPort": 80}],
    )
    assert store.get(store.resource("apps/v1", "Deployment"), "idle", "team")["spec"]["replicas"] == 0
    pdb = store.get(store.resource("policy/v1", "PodDisruptionBudget"), "web", "team")
    assert pdb["spec"] == {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}
    unsupported = await kubectl("create", "configmap", "settings")  # not a kind the sandbox serves
    assert unsupported.code != 0 and '"configmaps" is not served in v1' in unsupported.stderr, (
        unsupported.stderr
    )


async def test_server_side_dry_run_and_diff(api_sandbox: SandboxHandle, kubectl: KubectlRunner) -> None:
    store = api_sandbox.workload_store
    deployments = store.resource("apps/v1", "Deployment")
    dry_create = await kubectl("apply", "--dry-run=server", "-f", "-", stdin=DEPLOYMENT)
    assert dry_create.code == 0 and "(server dry run)" in dry_create.stdout, dry_create.stderr
    assert store.list(deployments)[0] == []
    await kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
    rv = store.resource_version
    diff = await kubectl("diff", "-f", "-", stdin=DEPLOYMENT.replace("replicas: 2", "replicas: 5"))
    assert diff.code == 1, diff.stderr  # kubectl diff exits 1 when there are differences
    assert "-  replicas: 2" in diff.stdout and "+  replicas: 5" in diff.stdout
    assert store.resource_version == rv  # nothing was written
    store.create(store.resource("v1", "Node"), node_manifest("node-a"))
    dry_cordon = await kubectl("cordon", "node-a", "--dry-run=server")
    assert dry_cordon.code == 0, dry_cordon.stderr
    assert not store.get(store.resource("v1", "Node"), "node-a")["spec"].get("unschedulable")
