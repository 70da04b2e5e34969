"""The EC2 demos of ``tenon up --provider ec2``, on the local AWS (moto's server behind its fault seam).

The stack is the same as the Cluster API one with ``launcher-ec2`` and ``interruption-handler`` in place of
``launcher-capi``; the sandbox turns the local AWS's instances into Nodes. Every demo applies
``deploy/examples/ec2-demo`` (a NodePool of spot and on-demand c/m/r instances, generation 5 and later, on an
EC2NodeClass that finds its subnets and security group by their discovery tag) and the 100m node agent, then
a Deployment ``inflate`` of pods of 1 vCPU. Each prints one JSON object (keys are a contract of the checks on
issue 11):

* ``inflate`` (8 pods): the Cluster API demo's keys, ``nodeClaims[]`` with ``instanceType``,
  ``capacityType``, ``zone`` and ``pods``; ``timeline``; ``totalPricePerHour``; ``allNodesRemoved`` (seconds
  from the Deployment's delete to no Node and no NodeClaim left), and ``instances`` (the local AWS's live
  instances ``before`` the demo, while ``running``, and ``after``: back to 0).
* ``spot-interruption`` (4 pods, a PDB of ``maxUnavailable: 1``): once every pod runs on a spot node, an
  EventBridge ``EC2 Spot Instance Interruption Warning`` for its instance is sent to the interruption queue.
  ``timeline`` in seconds from the send: ``noticeReceived`` (the ``InterruptionNotice`` in the log),
  ``replacementLaunched``, ``replacementInitialized``, ``drainStarted`` (``DisruptionRequested`` of the
  interrupted claim), ``allPodsRunningAgain`` (every pod Running off the interrupted node) and
  ``oldNodeRemoved``; ``interruptedInstanceType``, ``replacementInstanceType``, ``offeringMarkedUnavailable``
  (the catalog published the reclaimed spot offering ``available: false``), ``podsLost``.
* ``insufficient-capacity`` (1 pod): before the pod is applied, the seam is told to refuse the offering the
  scheduler will choose first (the core's own plan on the published catalog: that instance type, that
  capacity type, every zone); ``refused`` says which; ``nodeClaims[].launchFailures`` lists the choices EC2
  refused (``instanceType``, ``reason``), and the claim runs on its next choice.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.cli.up import (
    FAST_CONSOLIDATE_AFTER,
    Observation,
    Session,
    Settled,
    Timeline,
    _Displayed,
    follow,
    inflate_pdb,
    report,
    running_everywhere,
    summary,
    timed_out,
)

if TYPE_CHECKING:
    from devtools.stack import LocalStack
    from proto import events as ev

DEMO_DIR = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "ec2-demo"
AGENT = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "capi-demo" / "daemonset.yaml"
QUIET_SECONDS = 5.0
"""The spot-interruption demo is over once nothing has changed for this long after the old node went."""


def ec2_manifests(replicas: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(infrastructure, workload): the EC2 demo's NodePool, EC2NodeClass and node agent, then ``inflate``."""
    from devtools.stack import load_manifests

    infrastructure = load_manifests([DEMO_DIR / "nodepool.yaml", AGENT])
    labels = {"app": "inflate"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inflate", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
                        }
                    ]
                },
            },
        },
    }
    return infrastructure, [deployment]


# --- the log, read as the operator ------------------------------------------------------------------------


async def read_log(stack: LocalStack, subject: str = "tenon.>") -> list[tuple[int, ev.Event]]:
    """Every event stored under ``subject`` so far, with its sequence."""
    from tenon.runtime.eventlog.connection import ConnectionSettings
    from tenon.runtime.eventlog.jetstream import JetStreamEventLog

    settings = ConnectionSettings.from_env(
        servers=(stack.nats_url,), name="tenon-up", max_reconnect_attempts=0
    )
    event_log = await JetStreamEventLog.connect(settings, provision=False)
    try:
        return [(r.sequence, r.event) async for r in event_log.read(subject) if r.event is not None]
    finally:
        await event_log.close()


def stories(events: list[tuple[int, ev.Event]]) -> dict[str, list[ev.Event]]:
    """NodeClaim name -> its steps, in log order."""
    from proto import events as ev

    found: dict[str, list[ev.Event]] = {}
    for _, event in events:
        if isinstance(event, ev.NodeClaimEvent):
            found.setdefault(event.nodeclaim, []).append(event)
    return found


def first(story: list[ev.Event], kind: type[Any]) -> Any:
    return next((e for e in story if isinstance(e, kind)), None)


def launched_price(story: list[ev.Event]) -> float:
    """The price per hour of the choice the claim launched as (its plan's, or a fallback after a refusal)."""
    from proto import events as ev

    planned, launched = first(story, ev.NodeClaimPlanned), first(story, ev.NodeClaimLaunched)
    if planned is None or launched is None:
        return 0.0
    for choice in (planned.choice, *planned.fallbacks):
        same_zone = choice.zone in (None, launched.zone)
        if choice.instance_type == launched.instance_type and same_zone:
            if choice.capacity_type == (launched.capacity_type or choice.capacity_type):
                return float(choice.price_per_hour)
    return 0.0


def claims_json(obs: Observation, events: list[tuple[int, ev.Event]]) -> list[dict[str, Any]]:
    """The observed claims with what EC2 launched them as (the log's ``NodeClaimLaunched``) and what it
    refused first (``NodeClaimLaunchFailed``)."""
    from proto import events as ev

    by_claim = stories(events)
    out = []
    for claim in obs.claims:
        story = by_claim.get(claim["name"], [])
        launched = first(story, ev.NodeClaimLaunched)
        out.append(
            {
                "name": claim["name"],
                "instanceType": launched.instance_type if launched else claim["instanceType"],
                "capacityType": launched.capacity_type if launched else None,
                "zone": launched.zone if launched else None,
                "instanceId": launched.machine if launched else None,
                "pricePerHour": launched_price(story),
                "pods": claim["pods"],
                "launchFailures": [
                    {"instanceType": e.instance_type, "reason": e.reason}
                    for e in story
                    if isinstance(e, ev.NodeClaimLaunchFailed)
                ],
            }
        )
    return out


def live_instances(stack: LocalStack) -> int:
    from devtools.aws import live_instances as count

    assert stack.aws is not None
    return count(stack.aws.url)


# --- the steps --------------------------------------------------------------------------------------------


async def apply_ec2_demo(session: Session, replicas: int, *, pdb: bool = False, before: Any = None) -> int:
    """The NodePool, EC2NodeClass and node agent; once the EC2 catalog is in the log, ``before()`` (if any),
    then ``inflate`` (and its PDB); how many pods it runs."""
    from devtools.stack import apply_manifests

    infrastructure, workloads = ec2_manifests(replicas)
    if session.stack.profile == "fast":
        for doc in infrastructure:
            if doc["kind"] == "NodePool":
                doc["spec"].setdefault("disruption", {})["consolidateAfter"] = FAST_CONSOLIDATE_AFTER
    if pdb:
        workloads.append(inflate_pdb())
    await apply_manifests(session.workload, session.management, infrastructure)
    catalog = await published_catalog(session.stack, session.args.timeout)
    if before is not None:
        await before(catalog)
    session.started = time.monotonic()
    await apply_manifests(session.workload, session.management, workloads)
    return replicas


async def published_catalog(stack: LocalStack, timeout: float) -> ev.CatalogSnapshot:
    """The EC2NodeClass's catalog, once launcher-ec2 has published it (resolving its NodeClass takes a few
    seconds: subnets, security groups, the AMI alias through SSM, the instance profile)."""
    from proto import events as ev

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events = await read_log(stack, "tenon.catalog.default")
        except Exception:  # the services have not provisioned the streams yet
            events = []
        found = [e for _, e in events if isinstance(e, ev.CatalogSnapshot) and e.provider == "aws"]
        found = [e for e in found if e.instance_types]
        if found:
            return found[-1]
        dead = stack.dead_services()
        if dead:
            raise RuntimeError(f"service(s) exited: {dead}; logs in {stack.run_dir}")
        await asyncio.sleep(0.5)
    raise RuntimeError(f"no EC2 catalog published within {timeout:g}s; logs in {stack.run_dir}")


async def play_ec2(session: Session) -> int:
    plays: dict[str, Callable[[Session], Any]] = {
        "inflate": play_ec2_inflate,
        "spot-interruption": play_spot_interruption,
        "insufficient-capacity": play_insufficient_capacity,
    }
    result: int = await plays[session.args.demo](session)
    return result


# --- inflate ----------------------------------------------------------------------------------------------


async def play_ec2_inflate(session: Session) -> int:
    """8 pods x 1 vCPU on an empty pool, then the Deployment deleted: every instance terminated."""
    from tenon.runtime.kube.resources import DEPLOYMENTS

    before = await asyncio.to_thread(live_instances, session.stack)
    expected = await apply_ec2_demo(session, 8)
    timeline = Timeline()
    with _Displayed(session):
        obs = await follow(session, timeline, expected, running_everywhere(expected))
        if obs is None:
            return await timed_out(session, summary(Observation(0.0), timeline))
        running = await asyncio.to_thread(live_instances, session.stack)
        result = ec2_summary(obs, timeline, await read_log(session.stack))
        await session.workload.delete(DEPLOYMENTS, "inflate", "default")
        deleted_at = time.monotonic()
        gone = await follow(session, timeline, expected, lambda o: not o.claims and o.nodes == 0)
    if gone is None:
        return await timed_out(session, result)
    timeline.at["allNodesRemoved"] = round(time.monotonic() - deleted_at, 3)
    result["timeline"]["allNodesRemoved"] = timeline.at["allNodesRemoved"]
    after = await until_no_instances(session)
    result["instances"] = {"before": before, "running": running, "after": after}
    return await report(session, result, gone, timeline)


def ec2_summary(obs: Observation, timeline: Timeline, events: list[tuple[int, ev.Event]]) -> dict[str, Any]:
    result = summary(obs, timeline)
    result.pop("machineDeployments", None)
    result["nodeClaims"] = claims_json(obs, events)
    result["totalPricePerHour"] = round(sum(c["pricePerHour"] for c in result["nodeClaims"]), 6)
    return result


async def until_no_instances(session: Session, timeout: float = 30.0) -> int:
    """The local AWS's live instances once none is left, or when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        count = await asyncio.to_thread(live_instances, session.stack)
        if count == 0 or time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.25)


# --- spot interruption ------------------------------------------------------------------------------------


def spot_warning(instance_id: str, zone: str, at: datetime) -> dict[str, Any]:
    """The EventBridge event EC2 sends two minutes before it reclaims a spot instance."""
    return {
        "version": "0",
        "id": f"tenon-demo-{instance_id}",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:ec2:{zone}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


def send_to_queue(stack: LocalStack, body: dict[str, Any]) -> None:
    from devtools.aws import client

    assert stack.aws is not None
    sqs = client("sqs", stack.aws.url)
    url = sqs.get_queue_url(QueueName=stack.aws.queue)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))


def spot_claim(claims: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The spot claim with the most pods (the one whose interruption moves the most)."""
    spot = [c for c in claims if c["capacityType"] == "spot" and c["instanceId"]]
    return max(spot, key=lambda c: (len(c["pods"]), c["name"]), default=None)


class Interruption:
    """What the spot-interruption demo watches after the warning: the old node leaving, pods running again,
    the catalog marking the reclaimed offering."""

    def __init__(self, victim: dict[str, Any], node: str | None, expected: int) -> None:
        self.victim, self.node, self.expected = victim, node, expected
        self.sent = 0.0
        self.seen: dict[str, float] = {}
        self.pods_running_min = expected

    def watch(self, obs: Observation) -> None:
        now = time.monotonic() - self.sent
        self.pods_running_min = min(self.pods_running_min, obs.running)
        names = {c["name"] for c in obs.claims}
        nodes = {c["node"] for c in obs.claims}
        moved = self.victim["name"] not in names or not self.victim["pods"]
        if obs.running >= self.expected and all(c["node"] != self.node for c in obs.claims if c["pods"]):
            moved = True
        if moved and obs.running >= self.expected and "allPodsRunningAgain" not in self.seen:
            self.seen["allPodsRunningAgain"] = round(now, 3)
        if self.node not in nodes and self.victim["name"] not in names and "oldNodeRemoved" not in self.seen:
            self.seen["oldNodeRemoved"] = round(now, 3)


def _since(sent_at: datetime, event: Any) -> float | None:
    return round((event.decided_at - sent_at).total_seconds(), 3) if event is not None else None


def interruption_story(
    events: list[tuple[int, ev.Event]], victim: dict[str, Any], sent_at: datetime
) -> dict[str, Any]:
    """The log's side of the timeline: the notice, the replacement's launch and initialization, the drain."""
    from proto import events as ev

    by_claim = stories(events)
    notice = next(
        (
            e
            for _, e in events
            if isinstance(e, ev.InterruptionNotice) and e.provider_id.endswith(f"/{victim['instanceId']}")
        ),
        None,
    )
    decision = next(
        (
            e
            for _, e in events
            if isinstance(e, ev.DisruptionDecision)
            and e.method == "interruption"
            and any(c.nodeclaim == victim["name"] for c in e.candidates)
            and e.replacement_claims
        ),
        None,
    )
    replacement = decision.replacement_claims[0].nodeclaim if decision is not None else None
    story = by_claim.get(replacement or "", [])
    launched = first(story, ev.NodeClaimLaunched)
    return {
        "replacement": replacement,
        "replacementInstanceType": launched.instance_type if launched else None,
        "timeline": {
            "noticeReceived": _since(sent_at, notice),
            "replacementLaunched": _since(sent_at, launched),
            "replacementInitialized": _since(sent_at, first(story, ev.NodeClaimInitialized)),
            "drainStarted": _since(sent_at, first(by_claim.get(victim["name"], []), ev.DisruptionRequested)),
        },
    }


async def offering_marked(stack: LocalStack, victim: dict[str, Any], sent_at: datetime) -> bool:
    """Whether a catalog published after the warning offers the reclaimed spot offering as unavailable."""
    from proto import events as ev

    for _, event in await read_log(stack, "tenon.catalog.default"):
        if not isinstance(event, ev.CatalogSnapshot) or event.decided_at < sent_at:
            continue
        entry = next((t for t in event.instance_types if t.get("name") == victim["instanceType"]), {})
        for offering in entry.get("offerings") or []:
            if (offering.get("capacityType"), offering.get("zone")) == ("spot", victim["zone"]):
                if offering.get("available") is False:
                    return True
    return False


async def play_spot_interruption(session: Session) -> int:
    """4 pods on spot capacity; a Spot Interruption Warning for the node holding most of them: the
    replacement first, then the drain, within the two minutes."""
    expected = await apply_ec2_demo(session, 4, pdb=True)
    timeline = Timeline()
    with _Displayed(session):
        grown = await follow(session, timeline, expected, running_everywhere(expected))
        if grown is None:
            return await timed_out(session, summary(Observation(0.0), timeline))
        claims = claims_json(grown, await read_log(session.stack))
        victim = spot_claim(claims)
        if victim is None:
            return await timed_out(session, {**ec2_summary(grown, timeline, []), "error": "no spot node"})
        node = next(c["node"] for c in grown.claims if c["name"] == victim["name"])
        watching = Interruption(victim, node, expected)
        sent_at = datetime.now(UTC)
        watching.sent = time.monotonic()
        await asyncio.to_thread(
            send_to_queue, session.stack, spot_warning(victim["instanceId"], victim["zone"], sent_at)
        )
        done = Settled(expected, QUIET_SECONDS, lambda o: "oldNodeRemoved" in watching.seen)
        settled = await follow(session, timeline, expected, done, watch=watching.watch)
    if settled is None:
        return await timed_out(session, {"interrupted": victim, "timeline": watching.seen})
    story = interruption_story(await read_log(session.stack), victim, sent_at)
    result = {
        "interruptedClaim": victim["name"],
        "interruptedInstanceType": victim["instanceType"],
        "interruptedZone": victim["zone"],
        "replacementClaim": story["replacement"],
        "replacementInstanceType": story["replacementInstanceType"],
        "offeringMarkedUnavailable": await offering_marked(session.stack, victim, sent_at),
        "podsLost": max(0, expected - settled.running),
        "podsRunningAtLeast": watching.pods_running_min,
        "timeline": {**story["timeline"], **watching.seen},
    }
    return await report(session, result, settled, timeline)


# --- insufficient capacity --------------------------------------------------------------------------------


def first_choice(catalog: ev.CatalogSnapshot, infrastructure: list[dict[str, Any]], pods: int) -> Any:
    """The core's plan for the demo's pods on the published catalog: what the scheduler will choose first."""
    from tenon.core import parse_objects, solve

    _, workloads = ec2_manifests(pods)
    documents = [
        *infrastructure,
        {
            "apiVersion": "tenon.sh/v1alpha1",
            "kind": "InstanceCatalog",
            "metadata": {"name": catalog.node_class},
            "spec": {"instanceTypes": list(catalog.instance_types)},
        },
        *workloads,
    ]
    plan = solve(parse_objects(("demo", i, doc) for i, doc in enumerate(documents)))
    return plan.node_claims[0]


async def play_insufficient_capacity(session: Session) -> int:
    """One pod; the seam refuses the offering the scheduler chooses first: the claim runs on its next."""
    from devtools.aws import refuse_capacity

    refused: dict[str, Any] = {}
    infrastructure, _ = ec2_manifests(1)

    async def refuse(catalog: ev.CatalogSnapshot) -> None:
        choice = first_choice(catalog, infrastructure, 1)
        refused.update(instanceType=choice.instance_type, capacityType=choice.capacity_type)
        assert session.stack.aws is not None
        await asyncio.to_thread(refuse_capacity, session.stack.aws.url, [dict(refused)])

    expected = await apply_ec2_demo(session, 1, before=refuse)
    timeline = Timeline()
    with _Displayed(session):
        obs = await follow(session, timeline, expected, running_everywhere(expected))
    if obs is None:
        return await timed_out(session, {"refused": refused, **summary(Observation(0.0), timeline)})
    result = ec2_summary(obs, timeline, await read_log(session.stack))
    result["refused"] = {**refused, "zones": "every zone", "code": "InsufficientInstanceCapacity"}
    return await report(session, result, obs, timeline)
