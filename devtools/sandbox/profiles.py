"""Timing profiles: how long the sandbox's simulated machines, nodes and pods take to do things.

The sandbox's controllers (``services/sandbox/controllers/``) never hard-code a delay; every wait they model
comes from one frozen :class:`TimingProfile`. Two profiles exist:

``fast``
    Everything sub-second, for tests: a Machine gets its providerID after 0.15 s, its Node joins 0.05 s later
    and turns Ready 0.1 s after that; bound pods run 0.05 s after binding. Tests that wait for "Running"
    finish in well under a second.

``field``
    Modelled on the timeline measured in the field for Karpenter on Cluster API (OVH, see
    ``../shared/data/README.md``, workload 4): NodeClaim at T+2 s, machine at T+66 s, registered at T+74 s,
    initialized at T+141 s, pods Running at T+153 s. Taken from the moment the Machine is created (the
    "apply" of the MachineDeployment scale-up), that is: providerID at +64 s (``machine_provision``), Node
    registered at +72 s (``node_join`` = 8 s later), Node Ready at +139 s (``node_ready`` = 67 s after it
    joined) and pods Running about 12 s after the node is ready (``pod_start``). Most other field values are
    the real components' defaults (kube-scheduler backoff 1 s doubling to 10 s; pod GC of orphans after 40 s;
    a 30 s termination grace cap, the default ``terminationGracePeriodSeconds``); ``machine_bootstrap`` (2 s)
    and ``machine_delete`` (20 s, drain plus instance deletion) are estimates, not measurements.

Every duration is multiplied by ``scale`` in :func:`get_profile`, so ``get_profile("field", 0.1)`` replays
the field timeline ten times faster with the same proportions. ``scale`` must be positive and finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class TimingProfile:
    """Durations in seconds. Each field says which simulated component waits for it."""

    name: str
    # Cluster API: Machine created -> Provisioning (bootstrap data ready).
    machine_bootstrap: float
    # Cluster API: Machine created -> spec.providerID set, phase Provisioned (the cloud instance exists).
    machine_provision: float
    # Cluster API: providerID set -> the Node object appears in the workload cluster (NotReady, tainted).
    node_join: float
    # Kubelet: Node created -> condition Ready=True and the not-ready taint removed.
    node_ready: float
    # Cluster API: Machine deletion requested -> instance gone and the Machine's finalizer removed.
    machine_delete: float
    # Kubelet: pod bound to a Ready node -> phase Running, Ready=True.
    pod_start: float
    # Kubelet: upper bound on the termination grace honoured for a deleting pod.
    pod_termination_cap: float
    # Scheduler: first retry delay of an unschedulable pod, doubled on each failure up to the max.
    scheduler_backoff_initial: float
    scheduler_backoff_max: float
    # Pod GC: a pod bound to a Node that no longer exists is deleted after this long.
    orphan_pod_gc: float
    # Every controller re-lists and re-reconciles everything this often, as a safety net behind the watches.
    resync_period: float

    def scaled(self, scale: float) -> TimingProfile:
        """The same profile with every duration multiplied by ``scale`` (> 0)."""
        if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
            raise ValueError(
                f"timing profile {self.name!r}: scale must be a positive finite number, got {scale!r}"
            )
        changes = {f.name: getattr(self, f.name) * scale for f in fields(self) if f.name != "name"}
        return replace(self, **changes)


FAST = TimingProfile(
    name="fast",
    machine_bootstrap=0.02,
    machine_provision=0.15,
    node_join=0.05,
    node_ready=0.1,
    machine_delete=0.05,
    pod_start=0.05,
    pod_termination_cap=0.1,
    scheduler_backoff_initial=0.05,
    scheduler_backoff_max=0.5,
    orphan_pod_gc=0.1,
    resync_period=5.0,
)

FIELD = TimingProfile(
    name="field",
    machine_bootstrap=2.0,
    machine_provision=64.0,
    node_join=8.0,
    node_ready=67.0,
    machine_delete=20.0,
    pod_start=12.0,
    pod_termination_cap=30.0,
    scheduler_backoff_initial=1.0,
    scheduler_backoff_max=10.0,
    orphan_pod_gc=40.0,
    resync_period=60.0,
)

PROFILES: dict[str, TimingProfile] = {FAST.name: FAST, FIELD.name: FIELD}


def get_profile(name: str, scale: float = 1.0) -> TimingProfile:
    """The named profile (``"fast"`` or ``"field"``) with every duration multiplied by ``scale``."""
    try:
        base = PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown timing profile {name!r}; expected one of {sorted(PROFILES)}") from None
    return base.scaled(scale)
