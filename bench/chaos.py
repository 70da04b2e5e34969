"""``make chaos``: churn while services, their second replicas and broker nodes are SIGKILLed at random.

Not a bench suite (``make bench`` does not run it, CI neither): a bounded run, ten minutes by default
(``--minutes``), on the local stack as ``tenon up`` runs it, except that the broker is a 3-node
JetStream cluster on loopback (R3 streams, ``TENON_EVENTS_REPLICAS=3``) and every service runs two replicas,
each its own process with its own NATS identity.

1. **Churn.** The Cluster API demo (limits lifted, ``consolidateAfter`` 5 s) and four Deployments of
   250m-1500m pods, each scaled to 0-10 replicas every 10-20 s: tenon buys machines, consolidation removes
   them.
2. **Chaos.** Every ``--kill-every`` seconds on average (20 by default, jittered), one process picked at
   random is SIGKILLed: a service replica (any of the eight) or a broker node (never two nodes down at once:
   the cluster keeps its quorum). A killed service is started again 2-6 s later (a supervisor would), a node
   3-10 s later; a process that exits by itself is restarted too, and counted.
3. **Settling.** The chaos stops; each Deployment keeps its last size and every wanted pod must run (up to
   ``--settle`` seconds); then every Deployment goes to zero and every Machine must go.

The table: pods provisioned (distinct pods that ran), pods lost (wanted after settling and not running),
duplicate machines (claims with two live Machines at any sample), leaked machines (Machines left after the
pool settled at zero), max pending age (the longest a pod waited to run, by 1 s samples), kills by target,
processes that exited on their own. Exit 1 when a loss, duplicate or leak is found.

``python -m bench.chaos reconnects`` measures something smaller: how often a service connection tries (and
warns) while its broker is gone, and how soon it is back once the broker returns.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.e2e import deployment, infrastructure
from devtools.broker import LOCAL_MAX_PAYLOAD, Broker, LocalNatsCluster, LocalNatsServer
from devtools.stack import LocalStack, apply_manifests, connect
from tenon.core.wellknown import NODECLAIM
from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINES, NODES, PODS, Kube
from tenon.runtime.kube.resources import DEPLOYMENTS

SERVICES = ("pod-watcher", "scheduler", "launcher-capi", "disruption")
CHURN = (("churn-a", "250m"), ("churn-b", "500m"), ("churn-c", "1"), ("churn-d", "1500m"))


class ChaosStack(LocalStack):
    """The local stack on a 3-node JetStream cluster (R3 streams)."""

    def start_broker(self) -> Broker:
        self.cluster = LocalNatsCluster(
            3,
            store_root=self.run_dir / "nats",
            max_payload=LOCAL_MAX_PAYLOAD,
            config=self.identities.authorization(anonymous=self.anonymous),
        )
        return self.cluster.start()


# --- what is watched ----------------------------------------------------------------------------------------


@dataclass
class Watch:
    """What 1 s samples of the clusters saw."""

    started: float = field(default_factory=time.monotonic)
    pending_since: dict[str, float] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)
    max_pending_age: float = 0.0
    duplicate_claims: set[str] = field(default_factory=set)
    samples: int = 0

    def pods(self, pods: list[dict[str, Any]], now: float) -> None:
        present = set()
        for pod in pods:
            meta = pod["metadata"]
            if not str(meta.get("name", "")).startswith("churn-"):
                continue
            uid = meta["uid"]
            present.add(uid)
            if (pod.get("status") or {}).get("phase") == "Running":
                since = self.pending_since.pop(uid, None)
                if since is not None:
                    self.max_pending_age = max(self.max_pending_age, now - since)
                self.ran.add(uid)
            elif uid not in self.ran:
                self.pending_since.setdefault(uid, now)
        for uid in [u for u in self.pending_since if u not in present]:  # deleted while pending
            self.max_pending_age = max(self.max_pending_age, now - self.pending_since.pop(uid))

    def machines(self, machines: list[dict[str, Any]]) -> None:
        claims = Counter(
            (m["metadata"].get("annotations") or {}).get(NODECLAIM)
            for m in machines
            if not m["metadata"].get("deletionTimestamp")
        )
        self.duplicate_claims |= {claim for claim, count in claims.items() if claim and count > 1}

    def still_pending(self, now: float) -> float:
        return max([self.max_pending_age, *(now - since for since in self.pending_since.values())])


async def sample(kube: Kube, management: Kube, watch: Watch) -> None:
    pods, _ = await kube.list(PODS, "default")
    machines, _ = await management.list(MACHINES)
    watch.pods(pods, time.monotonic())
    watch.machines(machines)
    watch.samples += 1


async def watching(kube: Kube, management: Kube, watch: Watch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await sample(kube, management, watch)
        except Exception as exc:  # the sandbox is not under chaos, but a slow answer must not end the run
            logging.warning("sample failed: %s", exc)
        await asyncio.sleep(1.0)


# --- chaos --------------------------------------------------------------------------------------------------


@dataclass
class Chaos:
    stack: ChaosStack
    rng: random.Random
    kills: Counter[str] = field(default_factory=Counter)
    exited: Counter[str] = field(default_factory=Counter)
    down: set[str] = field(default_factory=set)
    """Processes killed and not started again yet (keys, or ``nats:<node>``)."""
    log: list[str] = field(default_factory=list)

    def targets(self) -> list[str]:
        services = [k for k in self.stack.processes if k != "sandbox" and k not in self.down]
        node_down = any(t.startswith("nats:") for t in self.down)
        nodes = [] if node_down else [f"nats:{n.server_name}" for n in self.stack.cluster.nodes]
        return services + nodes

    async def strike(self) -> None:
        target = self.rng.choice(self.targets())
        self.down.add(target)
        self.kills[target.split("#")[0].split(":")[0] if target.startswith("nats:") else target] += 1
        self.log.append(f"{time.strftime('%H:%M:%S')} SIGKILL {target}")
        if target.startswith("nats:"):
            await asyncio.to_thread(self.stack.cluster.kill, target.removeprefix("nats:"))
            delay = self.rng.uniform(3, 10)
        else:
            self.stack.kill(target)
            delay = self.rng.uniform(2, 6)
        asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(self.revive(target)))

    async def revive(self, target: str) -> None:
        if target.startswith("nats:"):
            await asyncio.to_thread(self.stack.cluster.restart, target.removeprefix("nats:"))
        else:
            name, _, replica = target.partition("#")
            self.stack.start_service(name, replica=int(replica or 1))
        self.down.discard(target)

    def restart_the_exited(self) -> None:
        """A process that exited by itself is started again (as its supervisor would) and counted."""
        for key, code in self.stack.dead_services().items():
            if key == "sandbox" or key in self.down:
                continue
            self.exited[f"{key} (exit {code})"] += 1
            self.log.append(f"{time.strftime('%H:%M:%S')} {key} exited with {code}: restarted")
            name, _, replica = key.partition("#")
            self.stack.start_service(name, replica=int(replica or 1))

    async def run(self, until: float, every: float) -> None:
        next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5) * every
        while time.monotonic() < until:
            self.restart_the_exited()
            if time.monotonic() >= next_kill:
                await self.strike()
                next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5) * every
            await asyncio.sleep(0.5)

    async def heal(self, timeout: float = 60.0) -> None:
        """Wait for every killed process to be back (restarts already scheduled)."""

        async def all_back() -> bool:
            return not self.down

        await wait_for(all_back, timeout)
        self.restart_the_exited()


# --- churn --------------------------------------------------------------------------------------------------


async def scale(kube: Kube, name: str, replicas: int) -> None:
    await kube.patch(DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, namespace="default")


async def churn(kube: Kube, rng: random.Random, until: float, sizes: dict[str, int]) -> None:
    while time.monotonic() < until:
        name = rng.choice(list(sizes))
        sizes[name] = rng.randint(0, 10)
        await scale(kube, name, sizes[name])
        await asyncio.sleep(rng.uniform(10, 20))


async def running_pods(kube: Kube) -> int:
    pods, _ = await kube.list(PODS, "default")
    return sum(
        1
        for p in pods
        if str(p["metadata"].get("name", "")).startswith("churn-")
        and (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


async def wait_for(probe: Any, timeout: float, interval: float = 1.0) -> bool:
    """Whether ``probe()`` came true within ``timeout`` (the run goes on either way and says what it saw)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await probe():
            return True
        await asyncio.sleep(interval)
    return bool(await probe())


# --- the run ------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    minutes: float
    pods_provisioned: int
    pods_lost: int
    duplicate_machines: int
    leaked_machines: int
    max_pending_age_s: float
    kills: dict[str, int]
    exited_by_themselves: dict[str, int]
    nodes_left: int
    wanted_at_end: int
    seed: int
    run_dir: str

    @property
    def clean(self) -> bool:
        return self.pods_lost == 0 and self.duplicate_machines == 0 and self.leaked_machines == 0


async def set_up(stack: ChaosStack, kube: Kube, management: Kube, sizes: dict[str, int]) -> None:
    await apply_manifests(kube, management, infrastructure(max_size=50, consolidate_after="5s"))
    await asyncio.sleep(2.0)  # the catalog and NodePools reach the log before the pods do
    await apply_manifests(
        kube, management, [deployment(name, sizes[name], cpu, "256Mi") for name, cpu in CHURN]
    )


async def settle(kube: Kube, management: Kube, sizes: dict[str, int], timeout: float) -> tuple[int, int, int]:
    """(pods lost, leaked Machines, Nodes left): every wanted pod runs, then the pool goes back to zero."""
    wanted = sum(sizes.values())

    async def all_running() -> bool:
        return await running_pods(kube) >= wanted

    await wait_for(all_running, timeout)
    lost = max(0, wanted - await running_pods(kube))
    for name in sizes:
        await scale(kube, name, 0)

    async def machines_gone() -> bool:
        machines, _ = await management.list(MACHINES)
        return not machines

    await wait_for(machines_gone, timeout)
    machines, _ = await management.list(MACHINES)
    nodes, _ = await kube.list(NODES)
    return lost, len(machines), len(nodes)


async def play(stack: ChaosStack, args: argparse.Namespace, console: Console) -> Outcome:
    rng = random.Random(args.seed)
    kube, management = await connect(stack)
    watch, chaos, stop = Watch(), Chaos(stack, rng), asyncio.Event()
    sizes = {name: rng.randint(1, 6) for name, _ in CHURN}
    try:
        await set_up(stack, kube, management, sizes)
        watcher = asyncio.create_task(watching(kube, management, watch, stop))
        until = time.monotonic() + args.minutes * 60
        await asyncio.gather(churn(kube, rng, until, sizes), chaos.run(until, args.kill_every))
        await chaos.heal()
        lost, leaked, nodes_left = await settle(kube, management, sizes, args.settle)
        stop.set()
        await watcher
        for line in chaos.log:
            console.print(line, highlight=False)
        return Outcome(
            minutes=args.minutes,
            pods_provisioned=len(watch.ran),
            pods_lost=lost,
            duplicate_machines=len(watch.duplicate_claims),
            leaked_machines=leaked,
            max_pending_age_s=round(watch.still_pending(time.monotonic()), 1),
            kills=dict(chaos.kills),
            exited_by_themselves=dict(chaos.exited),
            nodes_left=nodes_left,
            wanted_at_end=sum(sizes.values()),
            seed=args.seed,
            run_dir=str(stack.run_dir),
        )
    finally:
        await kube.close()
        await management.close()


def table(outcome: Outcome) -> Table:
    result = Table(title=f"tenon chaos: {outcome.minutes:g} min of churn under SIGKILL (seed {outcome.seed})")
    result.add_column("what")
    result.add_column("measured", justify="right")
    result.add_column("target", justify="right")
    result.add_row("pods provisioned", str(outcome.pods_provisioned), "")
    result.add_row("pods lost", str(outcome.pods_lost), "0")
    result.add_row("duplicate machines", str(outcome.duplicate_machines), "0")
    result.add_row("leaked machines after settling", str(outcome.leaked_machines), "0")
    result.add_row("max pending age (s)", f"{outcome.max_pending_age_s:.1f}", "")
    result.add_row("kills", ", ".join(f"{k} {v}" for k, v in sorted(outcome.kills.items())), "")
    result.add_row(
        "exited by themselves",
        ", ".join(f"{k} {v}" for k, v in outcome.exited_by_themselves.items()) or "none",
        "",
    )
    result.add_row("nodes left after settling", str(outcome.nodes_left), "0")
    return result


def run_chaos(args: argparse.Namespace) -> int:
    console = Console()
    extra = {"TENON_EVENTS_REPLICAS": "3", "TENON_LOG_LEVEL": "INFO"}
    stack = ChaosStack(profile="fast", extra_env=extra, **({"run_dir": args.run_dir} if args.run_dir else {}))
    try:
        stack.start()
        for name in SERVICES:
            stack.start_service(name, replica=2)
        console.print(f"chaos for {args.minutes:g} min; logs in {stack.run_dir}", highlight=False)
        outcome = asyncio.run(play(stack, args, console))
    finally:
        stack.stop()
    console.print(table(outcome))
    if args.json:
        print(json.dumps(outcome.__dict__, indent=2))
    return 0 if outcome.clean else 1


# --- reconnects ---------------------------------------------------------------------------------------------


class _Counting(logging.Handler):
    """Connection warnings (one per attempt) by time, and every other warning of tenon's by its words."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.times: list[float] = []
        self.others: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if "nats connection error" in record.getMessage():
            self.times.append(time.monotonic())
        else:
            self.others[record.getMessage()] += 1


async def measure_reconnects(outage: float) -> dict[str, Any]:
    """One service connection; its broker stopped for ``outage`` seconds: attempts (warnings) per second while
    it is gone, the longest wait between two, and how soon the connection is back once the broker is."""
    counting = _Counting()
    logging.getLogger("tenon").addHandler(counting)

    async def nothing(record: LogRecord) -> None:
        return None

    with LocalNatsServer() as server:
        event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(server.url,)))
        consumer = event_log.consumer(ConsumerSettings("reconnects", ("tenon.pending",)), nothing)
        await consumer.start()  # a service's consumer fetching while the broker is gone
        server.kill()
        gone = time.monotonic()
        await asyncio.sleep(outage)
        await asyncio.to_thread(server.start)
        back = time.monotonic()

        async def connected() -> bool:
            return event_log.connected

        await wait_for(connected, 30.0, interval=0.01)
        reconnected = time.monotonic() - back
        await consumer.stop()
        await event_log.close()
    attempts = [t for t in counting.times if gone <= t <= back]
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    return {
        "outage_s": outage,
        "warnings": len(attempts),
        "warnings_per_s": round(len(attempts) / outage, 2),
        "warnings_per_s_last_half": round(
            len([t for t in attempts if t >= gone + outage / 2]) / (outage / 2), 2
        ),
        "longest_gap_s": round(max(gaps, default=0.0), 2),
        "back_after_broker_s": round(reconnected, 2),
        "other_warnings": dict(counting.others),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["run", "reconnects"], default="run")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the churn and the kills last")
    parser.add_argument("--kill-every", type=float, default=20.0, help="seconds between kills, on average")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds allowed for each settling step")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="the random choices' seed")
    parser.add_argument("--outage", type=float, default=30.0, help="reconnects: seconds the broker is gone")
    parser.add_argument("--run-dir", type=Path, help="where logs go (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    if args.what == "reconnects":
        print(json.dumps(asyncio.run(measure_reconnects(args.outage)), indent=2))
        return 0
    return run_chaos(args)


if __name__ == "__main__":
    sys.exit(main())
