"""Event sequences for property-based tests of the decision functions, as a careless or hostile log could hold
them: every event type a decider reads, about a small world (claims ``c1``/``c2``, nodes ``n1``/``n2``,
Machines ``m1``/``m2``, the Cluster API demo's NodePool, NodeClass and MachineDeployments) so that events
meet each other, written mostly by their owners and sometimes not, with ids that repeat (a redelivery), and
with hostile values (``1e5000``, ``-1``, ``abc%``, full-width digits, nulls, wrong types) put in place of
leaves of the Kubernetes objects they carry. Every event went through ``encode``/``decode`` as it would
through the broker, so only what a log can hold reaches the decider.

The hypothesis profile is chosen by ``TENON_FUZZ_PROFILE``: ``ci`` (the default, a few seconds in ``make
test``) or ``long`` (``make fuzz``); ``TENON_FUZZ_SHAPES=1`` breaks the objects' shapes too.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from proto import events as ev
from proto import registry
from proto.codec import UndecodableEvent, decode, encode
from tenon.core import wellknown
from tests.support.events import T0
from tests.support.objects import demo_documents, pending_pod

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI fails for a change, never for a draw
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("TENON_FUZZ_PROFILE", "ci")
FUZZ = settings.get_profile(PROFILE)
"""The settings every fuzz test runs with (``@FUZZ``)."""

CLAIMS = ("c1", "c2")
NODES = ("n1", "n2")
MACHINES = ("m1", "m2")
TYPES = ("c3-4", "c3-8", "c3-16")
PODS = ("p1", "p2", "p3")

HOSTILE_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(
        [
            "1e5000",
            "1e999999999",
            "-1",
            "abc%",
            "",
            "１０",  # full-width digits
            "NaN",
            "Infinity",
            "99999999999999999999999",
            "0",
            "1Ki",
            "lots",
            "a\nb",
            "\x00",
            "x" * 300,
            "2026-13-45T99:99:99Z",
            "* * * * * * *",
            "100000h",
        ]
    ),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.booleans(),
)
"""What a scalar of a Kubernetes object may be replaced with: the object keeps its shape (what a permissive
API or a careless user gets through), its values do not make sense."""

HOSTILE_SHAPES: st.SearchStrategy[Any] = st.one_of(HOSTILE_VALUES, st.just([]), st.just({}), st.just([5]))
"""What any part of an object may be replaced with (``make fuzz`` only, ``TENON_FUZZ_SHAPES=1``): no
kube-apiserver serves such objects, but a writer with a valid identity can publish them."""

SHAPES = os.environ.get("TENON_FUZZ_SHAPES", "") == "1"
SNAPSHOTS = PROFILE == "long"
"""The long run also checks that every state survives a snapshot (encode, decode)."""


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every scalar of ``obj`` (with ``shapes``, to every part)."""
    children: list[tuple[Any, Any]] = []
    if isinstance(obj, dict):
        children = list(obj.items())
    elif isinstance(obj, list):
        children = list(enumerate(obj))
    if not children:
        # an empty container is a shape, not a value
        return [path] if path and (SHAPES or not isinstance(obj, dict | list)) else []
    found = [path] if path and SHAPES else []
    for key, value in children:
        found += _leaves(value, (*path, key))
    return found


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step]
    obj[path[-1]] = value


@st.composite
def corrupted(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with up to three of its scalars (with ``TENON_FUZZ_SHAPES=1``, any of its parts) replaced by
    hostile values."""
    result = copy.deepcopy(obj)
    for _ in range(draw(st.integers(0, 3))):
        paths = _leaves(result)
        if not paths:
            break
        _replace(result, draw(st.sampled_from(paths)), draw(HOSTILE_SHAPES if SHAPES else HOSTILE_VALUES))
    return result


def _owner_or_not(event_type: type[ev.Event]) -> st.SearchStrategy[str]:
    owner = registry.first_writer(event_type)
    others = [s for s in registry.SERVICES if s != owner]
    return st.one_of(st.just(owner), st.just(owner), st.just(owner), st.sampled_from(others))


def _node(name: str, instance_type: str, machine: str, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": T0.isoformat(),
            "labels": {
                wellknown.NODEPOOL: "default",
                wellknown.INSTANCE_TYPE: instance_type,
                wellknown.CAPACITY_TYPE: "on-demand",
                wellknown.HOSTNAME: name,
            },
        },
        "spec": {"providerID": f"capi://{machine}", "taints": []},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _bound_pod(name: str, node: str, cpu: str) -> dict[str, Any]:
    pod = pending_pod(name, cpu)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running", "startTime": T0.isoformat()}
    return pod


def _machine(name: str, md: str, claim: str | None, with_provider_id: bool) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": T0.isoformat(),
            "labels": {wellknown.DEPLOYMENT_NAME: md},
            "annotations": {wellknown.NODECLAIM: claim} if claim else {},
        },
        "spec": {"providerID": f"capi://{name}"} if with_provider_id else {},
    }


def _choice(instance_type: str) -> ev.InstanceChoice:
    return ev.InstanceChoice(
        instance_type, None, "on-demand", {"c3-4": 0.05, "c3-8": 0.1}.get(instance_type, 0.2)
    )


@st.composite
def envelope(draw: st.DrawFn, event_type: type[ev.Event]) -> dict[str, Any]:
    """``id`` (from a few per type, so some repeat), ``decided_at`` (within a day of T0), ``producer``."""
    return {
        "id": f"{event_type.__name__}-{draw(st.integers(0, 3))}",
        "decided_at": T0 + timedelta(seconds=draw(st.integers(0, 86_400))),
        "producer": draw(_owner_or_not(event_type)),
    }


@st.composite
def cluster_fact(draw: st.DrawFn) -> ev.Event:
    """What the pod-watcher and the launcher observe of the cluster (objects possibly corrupted)."""
    pools = demo_documents("nodepool.yaml")
    kind = draw(st.sampled_from(["pools", "classes", "daemonsets", "pdbs", "catalog", "node", "pod"]))
    if kind == "pools":
        objects = tuple(draw(corrupted(o)) for o in pools if o["kind"] == "NodePool")
        return ev.NodePoolsSnapshot(**draw(envelope(ev.NodePoolsSnapshot)), nodepools=objects)
    if kind == "classes":
        objects = tuple(draw(corrupted(o)) for o in pools if o["kind"] == "ClusterAPINodeClass")
        return ev.NodeClassesSnapshot(**draw(envelope(ev.NodeClassesSnapshot)), nodeclasses=objects)
    if kind == "daemonsets":
        objects = tuple(draw(corrupted(o)) for o in demo_documents("daemonset.yaml"))
        return ev.DaemonSetsSnapshot(**draw(envelope(ev.DaemonSetsSnapshot)), daemonsets=objects)
    if kind == "pdbs":
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": 1},
        }
        return ev.PodDisruptionBudgetsSnapshot(
            **draw(envelope(ev.PodDisruptionBudgetsSnapshot)), pdbs=(draw(corrupted(pdb)),)
        )
    if kind == "catalog":
        sources = tuple(draw(corrupted(md)) for md in demo_documents("machinedeployments.yaml"))
        return ev.CatalogSnapshot(
            **draw(envelope(ev.CatalogSnapshot)),
            provider="cluster-api",
            node_class="default",
            instance_types=(),
            sources=sources,
        )
    index = draw(st.integers(0, 1))
    change = draw(st.sampled_from(["added", "changed", "removed"]))
    if kind == "node":
        node = _node(NODES[index], draw(st.sampled_from(TYPES)), MACHINES[index], draw(st.booleans()))
        return ev.NodeObserved(**draw(envelope(ev.NodeObserved)), change=change, node=draw(corrupted(node)))
    pod = _bound_pod(draw(st.sampled_from(PODS)), NODES[index], draw(st.sampled_from(["100m", "1", "3"])))
    return ev.BoundPodObserved(**draw(envelope(ev.BoundPodObserved)), change=change, pod=draw(corrupted(pod)))


@st.composite
def pending(draw: st.DrawFn) -> ev.PendingBatch:
    cpus = st.sampled_from(["100m", "1", "3", "1e5000", "-1", "lots", "１"])
    pods = tuple(
        draw(corrupted(pending_pod(name, draw(cpus))))
        for name in draw(st.lists(st.sampled_from(PODS), min_size=1, max_size=3, unique=True))
    )
    return ev.PendingBatch(
        **draw(envelope(ev.PendingBatch)),
        batch_id=f"b{draw(st.integers(0, 3))}",
        pods=pods,
        window_opened_at=T0,
        window_closed_by="idle",
    )


def _claim_steps(claim: str, index: int, instance_type: str) -> dict[type[ev.NodeClaimEvent], dict[str, Any]]:
    node, machine = NODES[index], MACHINES[index]
    return {
        ev.NodeClaimPlanned: {
            "nodepool": "default",
            "node_class": "default",
            "choice": _choice(instance_type),
            "fallbacks": tuple(_choice(t) for t in TYPES if t != instance_type),
            "pods": (f"default/{PODS[index]}",),
            "requirements": (),
            "labels": {},
        },
        ev.NodeClaimLaunched: {
            "provider_id": f"capi://{machine}",
            "instance_type": instance_type,
            "machine": machine,
        },
        ev.NodeClaimLaunchFailed: {"instance_type": instance_type, "reason": "full", "retryable": True},
        ev.NodeClaimRegistered: {"node": node, "provider_id": f"capi://{machine}"},
        ev.NodeClaimInitialized: {"node": node},
        ev.NodeClaimAbandoned: {"reason": "timeout"},
        ev.DisruptionRequested: {"method": "emptiness", "reason": "empty", "node": node},
        ev.NodeClaimDrained: {"node": node},
        ev.NodeClaimTerminated: {"reason": "drained", "machine": machine},
    }


@st.composite
def claim_step(draw: st.DrawFn) -> ev.NodeClaimEvent:
    index = draw(st.integers(0, 1))
    steps = _claim_steps(CLAIMS[index], index, draw(st.sampled_from(TYPES)))
    event_type = draw(st.sampled_from(list(steps)))
    return event_type(**draw(envelope(event_type)), nodeclaim=CLAIMS[index], **steps[event_type])


@st.composite
def capi_fact(draw: st.DrawFn) -> ev.Event:
    change = draw(st.sampled_from(["added", "changed", "removed"]))
    if draw(st.booleans()):
        md = copy.deepcopy(draw(st.sampled_from(demo_documents("machinedeployments.yaml"))))
        md["metadata"]["uid"] = f"uid-{md['metadata']['name']}"
        md["metadata"]["resourceVersion"] = str(draw(st.integers(1, 5)))
        md["spec"]["replicas"] = draw(st.integers(0, 3))
        return ev.MachineDeploymentObserved(
            **draw(envelope(ev.MachineDeploymentObserved)),
            change=change,
            machine_deployment=draw(corrupted(md)),
        )
    index = draw(st.integers(0, 1))
    claim = draw(st.sampled_from([CLAIMS[index], None, "unknown-claim"]))
    machine = _machine(MACHINES[index], draw(st.sampled_from(TYPES)), claim, draw(st.booleans()))
    return ev.MachineObserved(
        **draw(envelope(ev.MachineObserved)), change=change, machine=draw(corrupted(machine))
    )


@st.composite
def disruption_fact(draw: st.DrawFn) -> ev.Event:
    index = draw(st.integers(0, 1))
    choice = draw(st.sampled_from(["decision", "replacements", "interruption"]))
    if choice == "interruption":
        return ev.InterruptionNotice(
            **draw(envelope(ev.InterruptionNotice)),
            provider_id=draw(st.sampled_from([f"capi://{MACHINES[index]}", "aws:///z/i-1", ""])),
            kind=draw(st.sampled_from(["spot-interruption", "rebalance-recommendation", "scheduled-change"])),
            deadline=T0 + timedelta(minutes=draw(st.integers(-5, 5))),
        )
    replacement = ev.ReplacementClaim(f"r{index}", "default", "default", _choice("c3-4"))
    if choice == "replacements":
        return ev.ReplacementsRequested(
            **draw(envelope(ev.ReplacementsRequested)),
            command=f"cmd-{index}",
            candidates=(CLAIMS[index],),
            replacements=(replacement,),
            reason="cheaper",
        )
    candidate = ev.DisruptionCandidate(CLAIMS[index], NODES[index], "default", "fuzz")
    return ev.DisruptionDecision(
        **draw(envelope(ev.DisruptionDecision)),
        method=draw(st.sampled_from(["emptiness", "consolidation", "drift"])),
        candidates=(candidate,),
        reason="fuzz",
        budget="10%",
        stage=draw(st.sampled_from(["proposed", "confirmed", "abandoned"])),
        command=f"cmd-{index}",
        replacement_claims=draw(st.sampled_from([(), (replacement,)])),
    )


def through_the_log(event: ev.Event) -> ev.Event | None:
    """``event`` as a reader gets it back from the broker (None: the runner would dead-letter it)."""
    try:
        return decode(encode(event))
    except UndecodableEvent:
        return None


EVENTS: dict[str, Callable[[], st.SearchStrategy[ev.Event]]] = {
    "cluster": cluster_fact,
    "pending": pending,
    "claims": claim_step,
    "capi": capi_fact,
    "disruption": disruption_fact,
}


@st.composite
def script(draw: st.DrawFn, kinds: tuple[str, ...], length: int = 30) -> list[ev.Event | timedelta]:
    """A sequence of input events (of ``kinds``) and clock ticks (a ``timedelta`` after T0)."""
    steps: list[ev.Event | timedelta] = []
    for _ in range(draw(st.integers(1, length))):
        if draw(st.integers(0, 5)) == 0:
            steps.append(timedelta(seconds=draw(st.integers(0, 7 * 86_400))))
            continue
        event = through_the_log(draw(EVENTS[draw(st.sampled_from(kinds))]()))
        if event is not None:
            steps.append(event)
    return steps


def valid_output(producer: str, decision: Any) -> str | None:
    """Why ``decision`` is not an event ``producer`` may record (None when it is)."""
    if not isinstance(decision, ev.Event):
        return f"not an event: {decision!r}"
    if decision.producer != producer:
        return f"{type(decision).__name__} with producer {decision.producer!r}"
    try:
        subject = registry.subject_of(decision)
    except KeyError as exc:
        return str(exc)
    refusal = registry.refusal(subject, decision)
    if refusal is not None:
        return refusal
    try:
        again = decode(encode(decision))
    except (UndecodableEvent, msgspec.EncodeError, TypeError, ValueError) as exc:
        return f"{type(decision).__name__} does not survive the log: {exc}"
    if again != decision:
        return f"{type(decision).__name__} changes through the log: {decision!r} -> {again!r}"
    return None
