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

Two disruption demos (``--demo``; their JSON keys are a contract of the checks on issue 12):

* ``consolidation``: 12 pods x 1 vCPU under a PDB (``maxUnavailable: 1``), then 3: the nodes left
  underutilized go or are replaced by cheaper ones. ``priceBefore``, ``priceAfter``, ``nodesBefore``,
  ``nodesAfter``, ``decisions[]`` (``method``, ``candidates``, ``replacements``, ``savingsPerHour``, from the
  log's confirmed decisions), ``pdbViolations`` (observations with fewer pods running than the PDB allows),
  ``podsLost``, ``timeline``.
* ``drift``: 4 pods, then the NodePool's template labels change: ``driftedClaims``, ``replacedClaims``,
  ``replacements``, ``replacementsInitializedBeforeDrain`` (each replacement's Initialized before its
  candidate's DisruptionRequested, in the log), ``podsLost``, ``timeline``.

Each ends once nothing has changed for :data:`QUIET_SECONDS` with every pod running on Initialized nodes.
The fast profile settles proposals in :data:`FAST_SETTLE` (``TENON_DISRUPTION_SETTLE``).

``--provider ec2`` plays on EC2 instead (a local AWS, moto's server; ``launcher-ec2`` and
``interruption-handler`` in place of ``launcher-capi``): ``inflate``, ``spot-interruption`` and
``insufficient-capacity``, described in :mod:`devtools.demos_ec2` (their JSON keys are a contract of the
checks on issue 11).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
DEMOS = ("inflate", "consolidation", "drift")
EC2_DEMOS = ("inflate", "spot-interruption", "insufficient-capacity")
"""The demos of ``--provider ec2`` (:mod:`devtools.demos_ec2`)."""
FAST_CONSOLIDATE_AFTER = "2s"
"""The demo NodePool's consolidateAfter under the fast profile (30s in the field profile, as written)."""
FAST_SETTLE = "2s"
"""How long a proposed consolidation settles under the fast profile (Karpenter's 15s in the field profile)."""
QUIET_SECONDS = 15.0
"""A consolidation or drift demo is over once nothing has changed for this long."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run broker, sandbox and every service locally with a demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--provider",
        default="capi",
        choices=("capi", "ec2"),
        help="Cluster API machines (default) or EC2 instances of a local AWS (moto's server)",
    )
    parser.add_argument(
        "--demo",
        default="inflate",
        choices=sorted({*DEMOS, *EC2_DEMOS}),
        help=f"which demo to play (capi: {', '.join(DEMOS)}; ec2: {', '.join(EC2_DEMOS)})",
    )
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
    tainted: int = 0
    """Nodes carrying karpenter.sh/disrupted (being disrupted)."""

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
    from tenon.core.wellknown import DISRUPTED_TAINT
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
    observation.tainted = sum(
        1
        for n in nodes
        if any(t.get("key") == DISRUPTED_TAINT for t in (n.get("spec") or {}).get("taints") or [])
    )
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


def render(obs: Observation, timeline: Timeline, demo: str = "inflate") -> Table:
    table = Table(title=f"tenon up: {demo} demo, {obs.elapsed:5.1f}s since apply")
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
    table.add_row("nodes being disrupted", str(obs.tainted))
    table.add_row("timeline (s)", ", ".join(f"{k} {v}" for k, v in timeline.at.items()) or "-")
    nexts = {
        "inflate": "all pods running: the Deployment is deleted, the pool should return to zero",
        "consolidation": "all pods running: scaled to 3, the underutilized nodes should go or be replaced",
        "drift": "all pods running: the NodePool's labels change, every node should be replaced",
    }
    table.add_row(
        "next", nexts.get(demo, "") if "allPodsRunning" in timeline.at else "waiting for every pod to run"
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


@dataclass
class Session:
    """One demo being played: the stack, what the user asked, the two clusters, the live display."""

    stack: LocalStack
    args: argparse.Namespace
    console: Console
    workload: Kube
    management: Kube
    started: float = 0.0
    live: Any = None


def connection_hint(stack: LocalStack) -> str:
    """How a person reaches the stack's broker: each service has its own NATS user (it may publish only the
    events it owns); people read as the operator, who writes nothing."""
    operator = " ".join(stack.identities.cli_args())
    anonymous = " (or with no credentials at all)" if stack.anonymous else ""
    return (
        f"each service connects as its own NATS user; read the log as the operator{anonymous}: "
        f"tenon tap --server {stack.nats_url} {operator} --all --no-follow"
    )


async def play(stack: LocalStack, args: argparse.Namespace, console: Console) -> int:
    from devtools.stack import connect

    workload, management = await connect(stack)
    session = Session(stack, args, console, workload, management)
    plays = {"inflate": play_inflate, "consolidation": play_consolidation, "drift": play_drift}
    try:
        if stack.provider == "ec2":
            from devtools.demos_ec2 import play_ec2

            return await play_ec2(session)
        return await plays[args.demo](session)
    finally:
        await workload.close()
        await management.close()


# --- the steps every demo is made of ------------------------------------------------------------------------


async def apply_demo(session: Session, *, replicas: int | None = None, pdb: bool = False) -> int:
    """The CAPI demo's NodePool, MachineDeployments and DaemonSet, then the Deployment ``inflate`` (with
    ``replicas`` and a PDB of ``maxUnavailable: 1`` when asked); how many pods it runs."""
    from devtools.stack import apply_manifests, demo_manifests

    infrastructure, workloads = demo_manifests("inflate")
    if session.stack.profile == "fast":
        for doc in infrastructure:
            if doc["kind"] == "NodePool":
                doc["spec"].setdefault("disruption", {})["consolidateAfter"] = FAST_CONSOLIDATE_AFTER
    if replicas is not None:
        workloads[0]["spec"]["replicas"] = replicas
    if pdb:
        workloads.append(inflate_pdb())
    await apply_manifests(session.workload, session.management, infrastructure)
    await asyncio.sleep(0.5)  # let the catalog and NodePools reach the log before the pods do
    session.started = time.monotonic()
    await apply_manifests(session.workload, session.management, workloads)
    return sum(int(d["spec"].get("replicas", 1)) for d in workloads if d["kind"] == "Deployment")


def inflate_pdb() -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "inflate"}}},
    }


async def follow(
    session: Session,
    timeline: Timeline,
    expected: int,
    done: Any,
    *,
    watch: Any = None,
) -> Observation | None:
    """Observe until ``done(observation)``; ``watch(observation)`` sees every observation. None on
    timeout."""
    while True:
        obs = await observe(session.workload, session.management, "inflate", session.started)
        timeline.update(obs, expected)
        if session.live:
            session.live.update(render(obs, timeline, session.args.demo))
        dead = session.stack.dead_services()
        if dead:
            raise RuntimeError(f"service(s) exited: {dead}; logs in {session.stack.run_dir}")
        if watch is not None:
            watch(obs)
        if done(obs):
            return obs
        if obs.elapsed > session.args.timeout:
            return None
        await asyncio.sleep(0.25)


def running_everywhere(expected: int) -> Any:
    return lambda obs: (
        len(obs.pods) >= expected
        and obs.running == len(obs.pods) > 0
        and all(c["phase"] == "Initialized" for c in obs.claims)
        and bool(obs.claims)
    )


async def timed_out(session: Session, result: dict[str, Any]) -> int:
    if session.args.json:
        metrics = await scraped_metrics(session.stack)
        print(json.dumps({**result, "error": "timed out", **metrics}))
    else:
        session.console.print(
            f"[red]timed out after {session.args.timeout:.0f}s[/]; logs in {session.stack.run_dir}"
        )
    return 1


async def report(session: Session, result: dict[str, Any], obs: Observation, timeline: Timeline) -> int:
    result.update(await scraped_metrics(session.stack))
    if session.args.json:
        print(json.dumps(result, indent=2))
    else:
        session.console.print(render(obs, timeline, session.args.demo))
        session.console.print_json(json.dumps(result))
        session.console.print(f"logs and kubeconfigs in {session.stack.run_dir}")
    if not session.args.exit_when_done:
        session.console.print(
            "the stack keeps running for you to explore (tenon tap, tenon explain, kubectl); "
            "Ctrl-C stops everything"
        )
        await asyncio.Event().wait()
    return 0


class _Displayed:
    """The live display around a demo (none for ``--json`` or when not on a terminal)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __enter__(self) -> None:
        from rich.live import Live

        session = self.session
        if not session.args.json and session.console.is_terminal:
            session.live = Live(console=session.console, refresh_per_second=4)
            session.live.start()

    def __exit__(self, *exc: object) -> None:
        if self.session.live:
            self.session.live.stop()
            self.session.live = None


# --- inflate: scale out, then back to zero ------------------------------------------------------------------


async def play_inflate(session: Session) -> int:
    from tenon.runtime.kube.resources import DEPLOYMENTS

    expected = await apply_demo(session)
    timeline = Timeline()
    with _Displayed(session):
        obs = await follow(session, timeline, expected, running_everywhere(expected))
        if obs is None:
            return await timed_out(session, summary(Observation(0.0), timeline))
        running_summary = summary(obs, timeline)
        await session.workload.delete(DEPLOYMENTS, "inflate", "default")
        deleted_at = time.monotonic()
        gone = await follow(
            session,
            timeline,
            expected,
            lambda o: not o.claims and o.nodes == 0 and not any(o.replicas.values()),
        )
    if gone is None:
        return await timed_out(session, summary(obs, timeline))
    timeline.at["allNodesRemoved"] = round(time.monotonic() - deleted_at, 3)
    running_summary["timeline"]["allNodesRemoved"] = timeline.at["allNodesRemoved"]
    running_summary["finalMachineDeployments"] = gone.replicas
    return await report(session, running_summary, gone, timeline)


# --- consolidation and drift --------------------------------------------------------------------------------


async def disruption_story(stack: LocalStack) -> tuple[list[Any], dict[str, int]]:
    """(the confirmed DisruptionDecisions, event id -> log sequence of every claim step) from the log."""
    from proto import events as ev
    from tenon.runtime.eventlog.connection import ConnectionSettings
    from tenon.runtime.eventlog.jetstream import JetStreamEventLog

    settings = ConnectionSettings.from_env(
        servers=(stack.nats_url,), name="tenon-up", max_reconnect_attempts=0
    )
    event_log = await JetStreamEventLog.connect(settings, provision=False)
    decisions: list[Any] = []
    sequences: dict[str, int] = {}
    try:
        async for record in event_log.read("tenon.>"):
            event = record.event
            if isinstance(event, ev.DisruptionDecision) and event.stage == "confirmed":
                decisions.append(event)
            elif isinstance(event, ev.NodeClaimEvent):
                sequences[f"{type(event).__name__}:{event.nodeclaim}"] = record.sequence
    finally:
        await event_log.close()
    return decisions, sequences


def decision_json(decision: Any) -> dict[str, Any]:
    return {
        "method": decision.method,
        "candidates": [c.node or c.nodeclaim for c in decision.candidates],
        "replacements": [
            {
                "name": r.nodeclaim,
                "instanceType": r.choice.instance_type,
                "pricePerHour": r.choice.price_per_hour,
            }
            for r in decision.replacement_claims
        ],
        "savingsPerHour": decision.savings_per_hour,
    }


class Settled:
    """Done once the cluster has not changed for ``quiet`` seconds with every pod running on Initialized,
    untainted nodes (and ``also(observation)`` holds)."""

    def __init__(self, expected: int, quiet: float, also: Any = None) -> None:
        self.expected, self.quiet, self.also = expected, quiet, also
        self.since: float | None = None
        self.last: tuple[Any, ...] | None = None

    def __call__(self, obs: Observation) -> bool:
        state = (tuple(sorted(c["name"] for c in obs.claims)), round(obs.price, 6), obs.tainted)
        calm = (
            running_everywhere(self.expected)(obs)
            and obs.tainted == 0
            and (self.also is None or self.also(obs))
        )
        if not calm or state != self.last:
            self.last, self.since = state, obs.elapsed if calm else None
            return False
        return self.since is not None and obs.elapsed - self.since >= self.quiet


async def play_consolidation(session: Session) -> int:
    """12 pods x 1 vCPU, then 3: the nodes left underutilized are removed or replaced by cheaper ones."""
    from tenon.runtime.kube.resources import DEPLOYMENTS

    expected = await apply_demo(session, replicas=12, pdb=True)
    timeline = Timeline()
    with _Displayed(session):
        grown = await follow(session, timeline, expected, running_everywhere(expected))
        if grown is None:
            return await timed_out(session, summary(Observation(0.0), timeline))
        before = grown
        await session.workload.patch(DEPLOYMENTS, "inflate", {"spec": {"replicas": 3}}, namespace="default")
        violations = [0]

        def count_violations(obs: Observation) -> None:
            if len(obs.pods) <= 3 and obs.running < 3 - 1:  # the PDB's maxUnavailable: 1
                violations[0] += 1

        settled = await follow(
            session,
            timeline,
            3,
            Settled(3, QUIET_SECONDS, lambda o: o.price < before.price),
            watch=count_violations,
        )
    if settled is None:
        return await timed_out(session, summary(before, timeline))
    decisions, _ = await disruption_story(session.stack)
    result = {
        "priceBefore": round(before.price, 6),
        "priceAfter": round(settled.price, 6),
        "nodesBefore": len(before.claims),
        "nodesAfter": len(settled.claims),
        "decisions": [decision_json(d) for d in decisions if d.method in ("emptiness", "consolidation")],
        "pdbViolations": violations[0],
        "podsLost": max(0, 3 - settled.running),
        "timeline": {**timeline.at, "settled": round(settled.elapsed, 3)},
    }
    return await report(session, result, settled, timeline)


async def play_drift(session: Session) -> int:
    """4 pods; then the NodePool's template labels change: every node is replaced, each replacement
    Initialized before its node is drained."""
    from tenon.runtime.kube.resources import NODEPOOLS

    expected = await apply_demo(session, replicas=4)
    timeline = Timeline()
    with _Displayed(session):
        grown = await follow(session, timeline, expected, running_everywhere(expected))
        if grown is None:
            return await timed_out(session, summary(Observation(0.0), timeline))
        old = {c["name"] for c in grown.claims}
        labels = {"tenon.sh/demo": "drifted"}
        await session.workload.patch(
            NODEPOOLS, "default", {"spec": {"template": {"metadata": {"labels": labels}}}}
        )
        replaced = await follow(
            session,
            timeline,
            expected,
            Settled(expected, QUIET_SECONDS, lambda o: not old & {c["name"] for c in o.claims}),
        )
    if replaced is None:
        return await timed_out(session, summary(grown, timeline))
    decisions, sequences = await disruption_story(session.stack)
    drifts = [d for d in decisions if d.method == "drift"]
    before_drain = [
        sequences.get(f"NodeClaimInitialized:{r.nodeclaim}", 0)
        < sequences.get(f"DisruptionRequested:{c.nodeclaim}", 0)
        for d in drifts
        for r in d.replacement_claims
        for c in d.candidates
    ]
    result = {
        "driftedClaims": sorted({c.nodeclaim for d in drifts for c in d.candidates}),
        "replacedClaims": sorted(old - {c["name"] for c in replaced.claims}),
        "replacements": sorted({r.nodeclaim for d in drifts for r in d.replacement_claims}),
        "replacementsInitializedBeforeDrain": all(before_drain),
        "podsLost": max(0, expected - replaced.running),
        "timeline": {**timeline.at, "settled": round(replaced.elapsed, 3)},
    }
    return await report(session, result, replaced, timeline)


def run(args: argparse.Namespace) -> int:
    from devtools.stack import LocalStack

    console = Console(stderr=args.json)
    known = EC2_DEMOS if args.provider == "ec2" else DEMOS
    if args.demo not in known:
        print(
            f"tenon up: --demo {args.demo}: not an {args.provider} demo (known: {', '.join(known)})",
            file=sys.stderr,
        )
        return 2

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a closed terminal or a `kill` stops the stack as cleanly as Ctrl-C

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    profile = args.profile or ("fast" if args.exit_when_done else "field")
    time_scale = args.time_scale or (1.0 if profile == "fast" else 0.25)
    if profile == "fast":
        os.environ.setdefault("TENON_DISRUPTION_SETTLE", FAST_SETTLE)
    stack = LocalStack(
        profile=profile,
        time_scale=time_scale,
        provider=args.provider,
        **({"run_dir": args.run_dir} if args.run_dir else {}),
    )
    try:
        stack.start()
        if not args.json:
            console.print(
                f"broker {stack.nats_url}; kubectl --kubeconfig {stack.workload_kubeconfig} get nodeclaims"
            )
            console.print(connection_hint(stack), highlight=False)
        return asyncio.run(play(stack, args, console))
    except KeyboardInterrupt:
        console.print("stopping")
        return 130
    except Exception as exc:
        print(f"tenon up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
