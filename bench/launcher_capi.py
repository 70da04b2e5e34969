"""The Cluster API launcher: how fast it decides, and its hops of the event chain on the sandbox.

* **decide**: :func:`tenon.services.launcher_capi.launching.plan` on N claims (half bound to Machines, half
  waiting on the MD's scaled-up list), the whole-state decision the launcher makes on every input.
* **Planned -> scale-up**: one ``NodeClaimPlanned`` appended at a time; time until the MachineDeployment's
  ``spec.replicas`` is patched (seen in the sandbox's store). The launcher's share of the chain's latency.
* **providerID -> Launched**: time from the sandbox's Cluster API controller setting a Machine's providerID to
  the launcher's ``NodeClaimLaunched`` being folded into its state (recorded on the log).
* **burst**: N Planned claims appended back to back; time until all are scaled and until all are Launched
  (the latter includes the fast profile's 0.15 s machine boot).

The launcher runs as in production: its decider on :class:`tenon.runtime.decider.DeciderRuntime` with its
executor, every observation of Cluster API going through the log before it is decided on.

Targets: decide on 1,000 claims under 20 ms; p99 of each hop under 100 ms (cluster-autoscaler's whole loop is
about 5 s on average for small clusters, see the reference notes).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from bench.suite import Suite, Target
from devtools.broker import LocalNatsServer
from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import InstanceChoice, NodeClaimPlanned, NodeClassesSnapshot
from proto.ids import derive_id
from tenon.runtime.claims import append_claim_event
from tenon.runtime.decider import DeciderRuntime, RuntimeSettings
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import load_kube
from tenon.services.launcher_capi.catalog import MachineDeploymentKey, Offer
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.launcher_capi.executor import LauncherExecutor
from tenon.services.launcher_capi.launching import plan
from tenon.services.launcher_capi.observations import MachineDeploymentView, MachineView
from tenon.services.launcher_capi.state import CatalogRecord, LauncherState

KEY = MachineDeploymentKey("default", "c3-8")
NODECLASS: dict[str, Any] = {
    "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
    "kind": "ClusterAPINodeClass",
    "metadata": {"name": "default"},
    "spec": {},
}
MD: dict[str, Any] = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "MachineDeployment",
    "metadata": {
        "name": "c3-8",
        "namespace": "default",
        "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
        "annotations": {
            "capacity.cluster-autoscaler.kubernetes.io/cpu": "4",
            "capacity.cluster-autoscaler.kubernetes.io/memory": "8Gi",
            "capacity.cluster-autoscaler.kubernetes.io/labels": "node.kubernetes.io/instance-type=c3-8",
            "tenon.sh/price-per-hour": "0.096",
        },
    },
    "spec": {
        "clusterName": "bench",
        "replicas": 0,
        "selector": {"matchLabels": {}},
        "template": {
            "metadata": {"labels": {}},
            "spec": {
                "clusterName": "bench",
                "failureDomain": "zone-a",
                "bootstrap": {},
                "infrastructureRef": {},
            },
        },
    },
}


def _planned(name: str) -> NodeClaimPlanned:
    return NodeClaimPlanned(
        id=derive_id("scheduler", "NodeClaimPlanned", name),
        decided_at=datetime.now(UTC),
        producer="scheduler",
        nodeclaim=name,
        nodepool="default",
        node_class="default",
        choice=InstanceChoice("c3-8", "zone-a", "on-demand", 0.096),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={},
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _decide_ms(count: int, repeats: int) -> float:
    state = LauncherState()
    state.catalogs["default"] = CatalogRecord(
        "bench", "", datetime.now(UTC), (Offer("c3-8", "zone-a", KEY.namespace, KEY.name),)
    )
    names = [f"c{i}" for i in range(count)]
    for index, name in enumerate(names):
        state.apply(_planned(name), index + 1)
    for i in range(count // 2):
        machine = MachineView("default", f"m{i}", "c3-8", names[i], uid=f"u{i}")
        state.machines[machine.ref] = machine
    view = MachineDeploymentView("default", "c3-8", count, "1", scaled_up_for=tuple(names[count // 2 :]))
    state.deployments[view.ref] = view
    cause = _planned("input")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan(state, cause, cause.decided_at)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def _append(event_log: JetStreamEventLog, event: NodeClaimPlanned) -> None:
    await append_claim_event(event_log, event, expected=0)


async def _hops(sequential: int, burst: int) -> dict[str, Any]:
    with LocalNatsServer() as server:
        event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(server.url,)))
        async with running_sandbox() as sb:
            store = sb.management_store
            md_rt = store.resource("cluster.x-k8s.io/v1beta1", "MachineDeployment")
            machine_rt = store.resource("cluster.x-k8s.io/v1beta1", "Machine")
            store.create(md_rt, MD)
            await event_log.publish(
                subjects.NODECLASSES,
                NodeClassesSnapshot(
                    id="bench-nodeclasses",
                    decided_at=datetime.now(UTC),
                    producer="pod-watcher",
                    nodeclasses=(NODECLASS,),
                ),
            )
            management = await load_kube(str(sb.management_kubeconfig))
            executor = LauncherExecutor(management)
            runtime = DeciderRuntime(
                CapiLauncherDecider(), executor, event_log, RuntimeSettings(tick_seconds=2.0)
            )
            stopping = asyncio.Event()
            task = asyncio.create_task(runtime.run(stopping))

            def replicas() -> int:
                return int(store.get(md_rt, "c3-8", "default")["spec"].get("replicas") or 0)

            def has_provider_id(claim: str) -> bool:
                return any(
                    m["metadata"].get("annotations", {}).get("tenon.sh/nodeclaim") == claim
                    and m["spec"].get("providerID")
                    for m in store.list(machine_rt, "default")[0]
                )

            def launched(claim: str) -> bool:
                state = runtime.state.claims.get(claim)
                return state is not None and state.launched is not None

            async def until(check: Any) -> None:
                # the sandbox's store is in this process and has no event to wait on: poll it finely
                while not check():  # noqa: ASYNC110
                    await asyncio.sleep(0.001)

            try:
                await until(lambda: bool(executor.started.is_set() and runtime.state.catalogs))
                scale, launch = [], []
                for i in range(sequential):
                    name = f"seq-{i}"
                    start = time.perf_counter()
                    await _append(event_log, _planned(name))
                    await until(lambda n=i + 1: replicas() >= n)
                    scale.append(time.perf_counter() - start)
                    await until(lambda c=name: has_provider_id(c))
                    start = time.perf_counter()
                    await until(lambda c=name: launched(c))
                    launch.append(time.perf_counter() - start)
                start = time.perf_counter()
                for i in range(burst):
                    await _append(event_log, _planned(f"burst-{i}"))
                await until(lambda: replicas() >= sequential + burst)
                burst_scaled = time.perf_counter() - start
                await until(lambda: all(launched(f"burst-{i}") for i in range(burst)))
                burst_launched = time.perf_counter() - start
            finally:
                stopping.set()
                await asyncio.wait_for(task, 60)
                await management.close()
        await event_log.close()
    return {"scale": scale, "launch": launch, "burst_scaled": burst_scaled, "burst_launched": burst_launched}


def run(quick: bool) -> Suite:
    suite = Suite("Cluster API launcher", ["measure", "size", "p50 / median", "p99 / total"])
    sizes = (100, 1000) if quick else (100, 1000, 5000)
    decide_ms = {n: _decide_ms(n, 5 if quick else 20) for n in sizes}
    for n, ms in decide_ms.items():
        suite.rows.append(["decide (whole state)", f"{n} claims", f"{ms:.2f} ms", ""])
    sequential, burst = (10, 30) if quick else (40, 100)
    hops = asyncio.run(_hops(sequential, burst))
    rows = {"Planned -> MD replicas patched": hops["scale"], "providerID -> Launched": hops["launch"]}
    for label, values in rows.items():
        suite.rows.append(
            [
                label,
                f"{len(values)} claims, one at a time",
                f"{_percentile(values, 0.5) * 1000:.1f} ms",
                f"{_percentile(values, 0.99) * 1000:.1f} ms",
            ]
        )
    suite.rows.append(
        ["burst: Planned -> all scaled", f"{burst} claims", "", f"{hops['burst_scaled'] * 1000:.0f} ms"]
    )
    suite.rows.append(
        [
            "burst: Planned -> all Launched",
            f"{burst} claims",
            "",
            f"{hops['burst_launched'] * 1000:.0f} ms (incl. 0.15 s boot)",
        ]
    )
    suite.data = {
        "decide_ms": {str(n): round(ms, 3) for n, ms in decide_ms.items()},
        "planned_to_scaled_ms": {
            "p50": round(_percentile(hops["scale"], 0.5) * 1000, 2),
            "p99": round(_percentile(hops["scale"], 0.99) * 1000, 2),
        },
        "provider_id_to_launched_ms": {
            "p50": round(_percentile(hops["launch"], 0.5) * 1000, 2),
            "p99": round(_percentile(hops["launch"], 0.99) * 1000, 2),
        },
        "burst": {
            "claims": burst,
            "all_scaled_ms": round(hops["burst_scaled"] * 1000, 1),
            "all_launched_ms": round(hops["burst_launched"] * 1000, 1),
        },
    }
    suite.targets.append(
        Target("decide on 1,000 claims", "< 20 ms", f"{decide_ms[1000]:.2f} ms", decide_ms[1000] < 20)
    )
    for label, values in rows.items():
        p99 = _percentile(values, 0.99) * 1000
        suite.targets.append(Target(f"{label} p99", "< 100 ms", f"{p99:.1f} ms", p99 < 100))
    return suite
