"""``tenon up``: the whole system locally, with a demo, and what happens shown live.

Starts nats-server, the sandbox (workload + management clusters) and every service as its own process, applies
a demo and follows it: pending pods, NodeClaims by phase, nodes, price per hour, elapsed time; once every pod
runs it deletes the workload and follows the pool back to zero, prints a summary, and keeps the stack up for
exploring until Ctrl-C, which stops everything cleanly. ``--exit-when-done --json`` runs unattended (fast
timing profile by default) and prints one JSON object: the NodeClaims (``instanceType``, ``pods``), the
timeline in seconds from apply (``claimsCreated``, ``launched``, ``registered``, ``initialized``,
``allPodsRunning``), ``totalPricePerHour``; then, once every pod runs, the Deployment is deleted and it
reports ``allNodesRemoved`` (seconds from the delete, when no node and no NodeClaim is left) and the
MachineDeployments' final replicas (all 0): scale to zero. Its ``metrics`` are the services' own, scraped
from each one's ``/metrics`` just before the stack stops, by metric name, summed over services and labels
(``karpenter_nodeclaims_created_total``, ``karpenter_nodes_created_total``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # imported when run, so `tenon --help` and `tenon tap` start fast
    from devtools.stack import LocalStack
    from tenon.runtime.kube import Kube

MILESTONES = ("claimsCreated", "launched", "registered", "initialized", "allPodsRunning")
FAST_CONSOLIDATE_AFTER = "2s"
"""The demo NodePool's consolidateAfter under the fast profile (30s in the field profile, as written)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run broker, sandbox and every service locally with a demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--demo", default="inflate", choices=["inflate"], help="which demo to apply")
    parser.add_argument(
        "--profile",
        choices=["fast", "field"],
        help="sandbox timing (default: fast with --exit-when-done, else field sped up 4x)",
    )
    parser.add_argument("--time-scale", type=float, help="multiply the profile's durations by this")
    parser.add_argument("--exit-when-done", action="store_true", help="stop once the demo has played out")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--run-dir", type=Path, help="where logs and kubeconfigs go (default: a temp dir)")
    parser.set_defaults(func=run)


@dataclass
class Observation:
    elapsed: float
    pods: dict[str, str] = field(default_factory=dict)  # name -> phase
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes_ready: int = 0
    nodes: int = 0
    replicas: dict[str, int] = field(default_factory=dict)
    price: float = 0.0

    @property
    def running(self) -> int:
        return sum(1 for phase in self.pods.values() if phase == "Running")


def claim_phase(claim: dict[str, Any]) -> str:
    conditions = {c.get("type"): c.get("status") for c in (claim.get("status") or {}).get("conditions") or []}
    for phase in ("Initialized", "Registered", "Launched"):
        if conditions.get(phase) == "True":
            return phase
    return "Planned"


async def observe(workload: Kube, management: Kube, app: str, started: float) -> Observation:
    from tenon.runtime.kube import MACHINEDEPLOYMENTS, NODECLAIMS, NODES, PODS

    pods, _ = await workload.list(PODS, "default", label_selector=f"app={app}")
    all_pods, _ = await workload.list(PODS)
    claims, _ = await workload.list(NODECLAIMS)
    nodes, _ = await workload.list(NODES)
    mds, _ = await management.list(MACHINEDEPLOYMENTS)
    node_of_claim = {c["metadata"]["name"]: (c.get("status") or {}).get("nodeName") for c in claims}
    observation = Observation(elapsed=time.monotonic() - started)
    observation.pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "Pending") for p in pods}
    for claim in claims:
        meta = claim["metadata"]
        node = node_of_claim[meta["name"]]
        bound = sorted(
            f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"
            for p in all_pods
            if node
            and (p.get("spec") or {}).get("nodeName") == node
            and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
        )
        price = float((meta.get("annotations") or {}).get("tenon.sh/price-per-hour") or 0)
        observation.price += price
        observation.claims.append(
            {
                "name": meta["name"],
                "instanceType": (meta.get("labels") or {}).get("node.kubernetes.io/instance-type"),
                "phase": claim_phase(claim),
                "pricePerHour": price,
                "node": node,
                "pods": bound,
            }
        )
    observation.nodes = len(nodes)
    observation.nodes_ready = sum(
        1
        for n in nodes
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions") or []
        )
    )
    observation.replicas = {
        m["metadata"]["name"]: int((m.get("spec") or {}).get("replicas") or 0) for m in mds
    }
    return observation


@dataclass
class Timeline:
    at: dict[str, float] = field(default_factory=dict)

    def update(self, obs: Observation, expected_pods: int) -> None:
        claims = obs.claims
        reached = {
            "claimsCreated": bool(claims),
            "launched": bool(claims)
            and all(c["phase"] in ("Launched", "Registered", "Initialized") for c in claims),
            "registered": bool(claims) and all(c["phase"] in ("Registered", "Initialized") for c in claims),
            "initialized": bool(claims) and all(c["phase"] == "Initialized" for c in claims),
            "allPodsRunning": len(obs.pods) >= expected_pods and obs.running == len(obs.pods) > 0,
        }
        for milestone, done in reached.items():
            if done and milestone not in self.at:
                self.at[milestone] = round(obs.elapsed, 3)


def render(obs: Observation, timeline: Timeline) -> Table:
    table = Table(title=f"tenon up: inflate demo, {obs.elapsed:5.1f}s since apply")
    table.add_column("what")
    table.add_column("now")
    pending = sum(1 for phase in obs.pods.values() if phase != "Running")
    table.add_row("pods pending / running", f"{pending} / {obs.running}")
    phases: dict[str, int] = {}
    for claim in obs.claims:
        phases[claim["phase"]] = phases.get(claim["phase"], 0) + 1
    table.add_row("NodeClaims by phase", ", ".join(f"{k} {v}" for k, v in sorted(phases.items())) or "none")
    table.add_row("claims", ", ".join(f"{c['name']} ({c['instanceType']})" for c in obs.claims) or "-")
    table.add_row("nodes ready / total", f"{obs.nodes_ready} / {obs.nodes}")
    table.add_row(
        "MachineDeployment replicas", ", ".join(f"{k}={v}" for k, v in sorted(obs.replicas.items()))
    )
    table.add_row("price per hour", f"{obs.price:.4f}")
    table.add_row("timeline (s)", ", ".join(f"{k} {v}" for k, v in timeline.at.items()) or "-")
    table.add_row(
        "next",
        "all pods running: the Deployment is deleted, the pool should return to zero"
        if "allPodsRunning" in timeline.at
        else "waiting for every pod to run",
    )
    return table


def summary(obs: Observation, timeline: Timeline) -> dict[str, Any]:
    return {
        "nodeClaims": [
            {"name": c["name"], "instanceType": c["instanceType"], "pods": c["pods"]} for c in obs.claims
        ],
        "timeline": {k: timeline.at.get(k) for k in MILESTONES},
        "totalPricePerHour": round(obs.price, 6),
        "machineDeployments": obs.replicas,
    }


async def scraped_metrics(stack: LocalStack) -> dict[str, Any]:
    """``metrics`` (by name, see :func:`devtools.stack.metric_values`) from the services while they still run;
    ``metricsUnavailable`` names each service that served none, and why."""
    from devtools.stack import metric_values

    texts, unavailable = await asyncio.to_thread(stack.scrape_metrics)
    found: dict[str, Any] = {"metrics": metric_values(texts.values())}
    if unavailable:
        found["metricsUnavailable"] = unavailable
    return found


async def play(stack: LocalStack, args: argparse.Namespace, console: Console) -> int:
    from rich.live import Live

    from devtools.stack import apply_manifests, connect, demo_manifests

    workload, management = await connect(stack)
    try:
        infrastructure, workloads = demo_manifests(args.demo)
        if stack.profile == "fast":
            for doc in infrastructure:
                if doc["kind"] == "NodePool":
                    doc["spec"].setdefault("disruption", {})["consolidateAfter"] = FAST_CONSOLIDATE_AFTER
        await apply_manifests(workload, management, infrastructure)
        await asyncio.sleep(0.5)  # let the catalog and NodePools reach the log before the pods do
        expected = sum(int(d["spec"].get("replicas", 1)) for d in workloads)
        started = time.monotonic()
        await apply_manifests(workload, management, workloads)
        timeline = Timeline()
        deleted_at: float | None = None
        running_summary: dict[str, Any] | None = None
        live = Live(console=console, refresh_per_second=4) if not args.json and console.is_terminal else None
        obs = Observation(0.0)
        if live:
            live.start()
        try:
            while True:
                obs = await observe(workload, management, "inflate", started)
                timeline.update(obs, expected)
                if live:
                    live.update(render(obs, timeline))
                dead = stack.dead_services()
                if dead:
                    raise RuntimeError(f"service(s) exited: {dead}; logs in {stack.run_dir}")
                if "allPodsRunning" in timeline.at and "initialized" in timeline.at and deleted_at is None:
                    from tenon.runtime.kube.resources import DEPLOYMENTS

                    running_summary = summary(obs, timeline)
                    for doc in workloads:
                        await workload.delete(
                            DEPLOYMENTS, doc["metadata"]["name"], doc["metadata"].get("namespace")
                        )
                    deleted_at = time.monotonic()
                if (
                    deleted_at is not None
                    and not obs.claims
                    and obs.nodes == 0
                    and not any(obs.replicas.values())
                ):
                    timeline.at["allNodesRemoved"] = round(time.monotonic() - deleted_at, 3)
                    break
                if obs.elapsed > args.timeout:
                    if args.json:
                        metrics = await scraped_metrics(stack)
                        print(json.dumps({**summary(obs, timeline), "error": "timed out", **metrics}))
                    else:
                        console.print(f"[red]timed out after {args.timeout:.0f}s[/]; logs in {stack.run_dir}")
                    return 1
                await asyncio.sleep(0.25)
        finally:
            if live:
                live.stop()
        result = running_summary or summary(obs, timeline)
        if "allNodesRemoved" in timeline.at:
            result["timeline"]["allNodesRemoved"] = timeline.at["allNodesRemoved"]
            result["finalMachineDeployments"] = obs.replicas
        result.update(await scraped_metrics(stack))
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            console.print(render(obs, timeline))
            console.print_json(json.dumps(result))
            console.print(f"logs and kubeconfigs in {stack.run_dir}")
        if not args.exit_when_done:
            console.print(
                "the stack keeps running for you to explore (tenon tap, tenon explain, kubectl); "
                "Ctrl-C stops everything"
            )
            await asyncio.Event().wait()
        return 0
    finally:
        await workload.close()
        await management.close()


def run(args: argparse.Namespace) -> int:
    from devtools.stack import LocalStack

    console = Console(stderr=args.json)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a closed terminal or a `kill` stops the stack as cleanly as Ctrl-C

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    profile = args.profile or ("fast" if args.exit_when_done else "field")
    time_scale = args.time_scale or (1.0 if profile == "fast" else 0.25)
    stack = LocalStack(
        profile=profile, time_scale=time_scale, **({"run_dir": args.run_dir} if args.run_dir else {})
    )
    try:
        stack.start()
        if not args.json:
            console.print(
                f"broker {stack.nats_url}; kubectl --kubeconfig {stack.workload_kubeconfig} get nodeclaims"
            )
        return asyncio.run(play(stack, args, console))
    except KeyboardInterrupt:
        console.print("stopping")
        return 130
    except Exception as exc:
        print(f"tenon up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
