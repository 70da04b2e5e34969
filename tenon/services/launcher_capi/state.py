"""What the Cluster API launcher knows, as a fold of its inputs (pure): the state its decider decides on.

Every field comes from an event in the log, so the live service (:mod:`tenon.runtime.decider`) and ``tenon
replay launcher-capi`` build the same state from the same records:

* ``claims``: every NodeClaim's aggregate (:class:`tenon.domain.nodeclaim.ClaimBook`; a step written by a
  service that does not own it, a forged ``NodeClaimDrained`` say, raises ``ImpossibleStory`` and is never
  folded);
* ``nodeclasses``: the ClusterAPINodeClasses of the latest ``NodeClassesSnapshot`` (the catalogs are built
  from them);
* ``catalogs``: per NodeClass, the launcher's own latest ``CatalogSnapshot``: which MachineDeployment launches
  which (instance type, zone), and what was published when (so a new leader knows what not to repeat);
* ``deployments`` and ``machines``: the Cluster API objects as observed (``MachineDeploymentObserved``,
  ``MachineObserved``) and as the launcher's own decisions changed them (``MachineDeploymentScaled``,
  ``MachineBound``, ``MachineRemovalDecided`` are folded at once, before the watch shows their effect);
* ``removals``, ``kept`` and ``checks``: the launcher's removal decisions, its ``MachineKept`` decisions (so
  each is made once per Machine and reason) and the latest ``MachineLeakChecked`` evidence per Machine.

**An observation older than the launcher's own action does not undo it.** An action
(``MachineDeploymentScaled``, ``MachineBound``, ``MachineRemovalDecided``) is folded the moment it is
recorded, while observations reach the decider through the log, and some were stored before the action (a
watch event queued behind it, a restart's re-list): folding one would undo the action in the state, and the
launcher would decide it again (scale up twice for one claim). So an observation of an object stored before
the launcher's last action on it (a lower log sequence) is set aside; the executor makes sure that whatever it
knows of the object and the decider does not is published after the action (``after`` names the action). A
``removed`` observation is always taken.

``apply`` mutates the state in place and returns it (a replay folds a whole range into one state).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from proto import events as ev
from tenon.domain.nodeclaim import ClaimBook, NodeClaim
from tenon.services.launcher_capi.catalog import (
    PROVIDER,
    Offer,
    offers_of,
    served_node_classes,
    snapshot_content_hash,
)
from tenon.services.launcher_capi.observations import (
    PRODUCER,
    MachineDeploymentView,
    MachineView,
    machine_deployment_view,
    machine_view,
    ref_of,
)


class CatalogRecord(msgspec.Struct, frozen=True):
    """The launcher's latest ``CatalogSnapshot`` of one NodeClass."""

    event_id: str
    content_hash: str
    published_at: datetime
    offers: tuple[Offer, ...] = ()


@dataclass
class LauncherState:
    claims: ClaimBook = field(default_factory=ClaimBook)
    nodeclasses: dict[str, ev.KubeObject] = field(default_factory=dict)
    catalogs: dict[str, CatalogRecord] = field(default_factory=dict)
    deployments: dict[str, MachineDeploymentView] = field(default_factory=dict)
    """``namespace/name`` -> the member MachineDeployment."""
    machines: dict[str, MachineView] = field(default_factory=dict)
    """``namespace/name`` -> the Machine."""
    removals: dict[str, str] = field(default_factory=dict)
    """Machine -> the claim a recorded ``MachineRemovalDecided`` named: its replica is owed until it is
    gone."""
    kept: dict[str, list[str]] = field(default_factory=dict)
    """Machine -> ``claim|code`` of each ``MachineKept`` decision made for it."""
    checks: dict[str, ev.MachineLeakChecked] = field(default_factory=dict)
    """Machine -> the latest leak check of it."""
    deployments_written: dict[str, int] = field(default_factory=dict)
    machines_written: dict[str, int] = field(default_factory=dict)
    """Object -> the log sequence of the launcher's last action on it: observations stored before it are older
    than the action and set aside (see above)."""

    def offers(self, node_class: str) -> tuple[Offer, ...]:
        record = self.catalogs.get(node_class)
        return record.offers if record is not None else ()

    def ours(self, claim: NodeClaim) -> bool:
        """Whether ``claim`` is this launcher's: planned on a NodeClass it published a catalog for."""
        return claim.planned is not None and claim.planned.node_class in self.catalogs

    def was_kept(self, machine: MachineView, claim: str, code: str) -> bool:
        return f"{claim}|{code}" in self.kept.get(machine.ref, ())

    # --- folding
    # ----------------------------------------------------------------------------------------------

    def apply(self, event: ev.Event, sequence: int = 0) -> LauncherState:
        """Fold ``event``; a NodeClaim step that cannot belong to its claim's story raises
        ``ImpossibleStory``."""
        if isinstance(event, ev.NodeClaimEvent):
            self.claims.fold(event, sequence)
            return self
        fold = _FOLDS.get(type(event))
        if fold is not None:
            fold(self, event, sequence)
        return self

    def _nodeclasses(self, event: ev.NodeClassesSnapshot, sequence: int = 0) -> None:
        self.nodeclasses = served_node_classes(event.nodeclasses)

    def _catalog(self, event: ev.CatalogSnapshot, sequence: int = 0) -> None:
        if event.producer != PRODUCER or event.provider != PROVIDER:
            return  # another launcher's NodeClass
        self.catalogs[event.node_class] = CatalogRecord(
            event.id, snapshot_content_hash(event), event.decided_at, offers_of(event)
        )

    def _deployment_observed(self, event: ev.MachineDeploymentObserved, sequence: int = 0) -> None:
        ref = ref_of(event.machine_deployment)
        if event.change == "removed":
            self.deployments.pop(ref, None)
            self.deployments_written.pop(ref, None)
        elif _after_our_last_action(self.deployments_written, ref, sequence):
            self.deployments[ref] = machine_deployment_view(event.machine_deployment)

    def _machine_observed(self, event: ev.MachineObserved, sequence: int = 0) -> None:
        ref = ref_of(event.machine)
        previous = self.machines.get(ref)
        if event.change == "removed":
            self._forget_machine(ref)
            return
        if not _after_our_last_action(self.machines_written, ref, sequence):
            return
        view = machine_view(event.machine, bound_since=event.decided_at)
        if previous is not None and previous.uid != view.uid:
            self._forget_machine(ref)  # the same name, another Machine
            previous = None
        if previous is not None and previous.claim == view.claim and previous.bound_since is not None:
            view = msgspec.structs.replace(view, bound_since=previous.bound_since)
        self.machines[ref] = view

    def _forget_machine(self, ref: str) -> None:
        for table in (self.machines, self.removals, self.kept, self.checks, self.machines_written):
            table.pop(ref, None)

    def _scaled(self, event: ev.MachineDeploymentScaled, sequence: int = 0) -> None:
        ref = f"{event.namespace}/{event.machine_deployment}"
        view = self.deployments.get(ref)
        self.deployments_written[ref] = max(sequence, self.deployments_written.get(ref, 0))
        if view is not None:
            self.deployments[ref] = msgspec.structs.replace(
                view,
                replicas=event.replicas_to,
                scaled_up_for=event.scaled_up_for,
                scaled_down_for=event.scaled_down_for,
            )

    def _bound(self, event: ev.MachineBound, sequence: int = 0) -> None:
        ref = f"{event.namespace}/{event.machine}"
        view = self.machines.get(ref)
        self.machines_written[ref] = max(sequence, self.machines_written.get(ref, 0))
        if view is not None:
            self.machines[ref] = msgspec.structs.replace(
                view, claim=event.nodeclaim, nodepool=event.nodepool or None, bound_since=event.decided_at
            )

    def _removal(self, event: ev.MachineRemovalDecided, sequence: int = 0) -> None:
        ref = f"{event.namespace}/{event.machine}"
        view = self.machines.get(ref)
        self.machines_written[ref] = max(sequence, self.machines_written.get(ref, 0))
        if view is not None:
            self.machines[ref] = msgspec.structs.replace(view, marked=True)
        self.removals[ref] = event.nodeclaim

    def _kept(self, event: ev.MachineKept, sequence: int = 0) -> None:
        entries = self.kept.setdefault(f"{event.namespace}/{event.machine}", [])
        entry = f"{event.nodeclaim}|{event.code}"
        if entry not in entries:
            entries.append(entry)

    def _checked(self, event: ev.MachineLeakChecked, sequence: int = 0) -> None:
        self.checks[f"{event.namespace}/{event.machine}"] = event


def _after_our_last_action(written: dict[str, int], ref: str, sequence: int) -> bool:
    """Whether an observation of ``ref`` stored at ``sequence`` may be folded: not stored before the
    launcher's last action on the object (0: not known to be in the log, as in a test; folded)."""
    return not sequence or sequence > written.get(ref, 0)


_FOLDS: dict[type[ev.Event], Any] = {
    ev.NodeClassesSnapshot: LauncherState._nodeclasses,
    ev.CatalogSnapshot: LauncherState._catalog,
    ev.MachineDeploymentObserved: LauncherState._deployment_observed,
    ev.MachineObserved: LauncherState._machine_observed,
    ev.MachineDeploymentScaled: LauncherState._scaled,
    ev.MachineBound: LauncherState._bound,
    ev.MachineRemovalDecided: LauncherState._removal,
    ev.MachineKept: LauncherState._kept,
    ev.MachineLeakChecked: LauncherState._checked,
}
"""Event type -> how it changes the state (NodeClaim events go to the claim's aggregate)."""


def _decode_hook(kind: type, obj: Any) -> Any:
    if kind is ClaimBook:
        return ClaimBook.from_plain(obj)
    raise NotImplementedError(f"cannot decode {kind}")


def encode_state(state: LauncherState) -> bytes:
    """The state as bytes (for snapshots); :func:`decode_state` reads it back."""
    return msgspec.msgpack.encode(state)


def decode_state(data: bytes) -> LauncherState:
    return msgspec.msgpack.decode(data, type=LauncherState, dec_hook=_decode_hook)
