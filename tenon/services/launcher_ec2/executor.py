"""launcher-ec2's executor: its eyes on EC2, and its hands.

The runtime rebuilds the state, follows the log and records the decider's decisions; the executor does the I/O
around them (blocking boto3 calls run in threads):

* **observations**: the instances tagged for the cluster are polled every ``poll`` seconds and each change a
  decision reads is published (``Ec2InstanceObserved``: added, state changed, removed);
* **catalogs** (:mod:`.catalog_publisher`): published on change, on a mark's expiry and on resync; the
  EC2NodeClass status written;
* **actions**:

  - ``Ec2FleetRequested``, once recorded: first the instances already tagged with the claim are looked up
    (a retry after a crash finds the instance the first call launched), then the launch template is created
    if missing and CreateFleet called with the request's client token; what EC2 answered is published as
    ``Ec2FleetAnswered`` (``after`` the request). A request recorded but never answered (the process died in
    between) is answered at the start of the next term, and on every tick;
  - ``Ec2InstanceTerminationDecided``, before it is recorded: TerminateInstances (for a leak, after looking
    once more that no NodeClaim object of that name appeared); then the instance is observed again;

* **evidence** (``ticked``): instances tagged with a claim the state does not know, past the leak grace, are
  looked up (a NodeClaim object of that name, the log's reach) and ``Ec2InstanceLeakChecked`` published.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import events as ev
from proto import registry
from tenon.runtime.decider import BaseExecutor, DeciderRuntime
from tenon.runtime.eventlog import EventLog, TransientError
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.kube import NODECLAIMS, Kube, KubeApiError
from tenon.runtime.tasks import cancel_and_wait
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.aws import Aws, AwsError, tag_specifications
from tenon.services.launcher_ec2.catalog_publisher import CatalogPublisher, PublisherSettings
from tenon.services.launcher_ec2.observations import (
    PRODUCER,
    InstanceView,
    fleet_answered,
    instance_observed,
    trim_instance,
)
from tenon.services.launcher_ec2.removal import leak_suspects
from tenon.services.launcher_ec2.state import Ec2State

log = logging.getLogger("tenon.launcher_ec2")


class Ec2Executor(BaseExecutor):
    def __init__(
        self,
        aws: Aws,
        publisher_settings: PublisherSettings,
        *,
        workload: Kube | None,
        cluster_tag: str,
        poll: float = 5.0,
        leak_grace: float = 600.0,
        launch_timeout: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.aws = aws
        self.publisher_settings = publisher_settings
        self.workload = workload
        self.cluster_tag = cluster_tag
        self.poll = poll
        self.leak_grace = leak_grace
        self.launch_timeout = launch_timeout
        self.clock = clock
        self.runtime: DeciderRuntime[Ec2State] | None = None
        self.catalogs: CatalogPublisher | None = None
        self.seen: dict[str, dict[str, Any]] = {}
        """Instance -> the trimmed instance last published."""
        self._answering: set[str] = set()
        self._answered: set[str] = set()
        """Requests answered in this term (their answers may not be folded yet: not asked twice)."""
        self._tasks: list[asyncio.Task[None]] = []
        self.started = asyncio.Event()

    @property
    def state(self) -> Ec2State:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.state

    @property
    def event_log(self) -> EventLog:
        assert self.runtime is not None, "the executor is used before the runtime started it"
        return self.runtime.event_log

    # --- the term -----------------------------------------------------------------------------------------

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        self.runtime = runtime
        self.catalogs = CatalogPublisher(
            runtime.event_log, self.aws, self.workload, lambda: self.state, self.publisher_settings
        )
        self.seen = {}
        await self.poll_instances()
        await self.catalogs.refresh()
        await self.answer_pending()
        self._tasks += [
            asyncio.create_task(self._poll_forever(), name="launcher-ec2:instances"),
            asyncio.create_task(self.catalogs.run(), name="launcher-ec2:catalogs"),
        ]
        self.started.set()
        log.info(
            "launcher running",
            extra={
                "claims": len(self.state.claims),
                "nodeclasses": len(self.state.nodeclasses),
                "instances": len(self.seen),
            },
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    # --- hooks --------------------------------------------------------------------------------------------

    async def observed(self, event: ev.Event) -> None:
        if self.catalogs is None:
            return
        marks = isinstance(event, ev.Ec2FleetAnswered) and event.errors
        spot = isinstance(event, ev.InterruptionNotice) and event.kind == "spot-interruption"
        if isinstance(event, ev.NodeClassesSnapshot) or marks or spot:
            self.catalogs.wanted.set()

    async def prepare(self, decision: ev.Event) -> bool:
        if isinstance(decision, ev.Ec2InstanceTerminationDecided):
            return await self._terminate(decision)
        return True

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        if isinstance(decision, ev.Ec2FleetRequested):
            await self.answer(decision)
        elif isinstance(decision, ev.Ec2InstanceTerminationDecided):
            log.info(
                "instance terminated",
                extra={
                    "instance": decision.instance_id,
                    "nodeclaim": decision.nodeclaim,
                    "why": decision.reason,
                    "evidence": list(decision.evidence),
                },
            )
            await self.observe_one(decision.instance_id, after=decision.id)
        elif isinstance(decision, ev.Ec2InstanceKept):
            log.warning(
                "instance kept",
                extra={
                    "instance": decision.instance_id,
                    "nodeclaim": decision.nodeclaim,
                    "code": decision.code,
                    "why": decision.reason,
                },
            )
        elif isinstance(decision, ev.NodeClaimEvent):
            reason = getattr(decision, "reason", None)
            log.info(
                "claim event appended",
                extra={"nodeclaim": decision.nodeclaim, "type": type(decision).__name__, "why": reason},
            )

    async def ticked(self, now: datetime) -> None:
        await self.answer_pending()
        for instance in list(leak_suspects(self.state, now, timedelta(seconds=self.leak_grace))):
            try:
                check = await self.check_leak(instance, now)
            except Exception as exc:  # the next tick looks again
                log.warning("leak check failed", extra={"instance": instance.id, "error": str(exc)})
                continue
            if check is not None:
                await self.event_log.publish(registry.subject_of(check), check)

    # --- fleets -------------------------------------------------------------------------------------------

    async def answer_pending(self) -> None:
        """Answer every recorded request without an answer (a term that died between the two)."""
        for request in list(self.state.requests.values()):
            claim = self.state.claims.get(request.nodeclaim)
            if claim is None or claim.launched is not None or not claim.live:
                continue
            if request.id in self._answered:
                continue
            if request.attempt == len(claim.launch_failures) and self.state.answer_to(request) is None:
                try:
                    await self.answer(request)
                except TransientError as exc:
                    log.warning(
                        "fleet not answered yet", extra={"nodeclaim": request.nodeclaim, "error": str(exc)}
                    )

    async def answer(self, request: ev.Ec2FleetRequested) -> None:
        if request.id in self._answering:
            return
        self._answering.add(request.id)
        try:
            answer = await asyncio.to_thread(self._fleet, request)
            await self.event_log.publish(registry.subject_of(answer), answer)
            self._answered.add(request.id)
        finally:
            self._answering.discard(request.id)
        log.info(
            "fleet answered",
            extra={
                "nodeclaim": request.nodeclaim,
                "instance": answer.instance_id,
                "instance_type": answer.instance_type,
                "zone": answer.zone,
                "found_by_tag": answer.found_by_tag,
                "refused": [f"{e.instance_type}/{e.zone}: {e.code}" for e in answer.errors],
                "error": answer.error_code,
            },
        )

    def _fleet(self, request: ev.Ec2FleetRequested) -> ev.Ec2FleetAnswered:
        """Blocking: look for the claim's instance, else CreateFleet (see the module docstring)."""
        try:
            existing = self.aws.instances_tagged(names.TAG_NODECLAIM, request.nodeclaim)
            if existing:
                trimmed = trim_instance(existing[0], self.cluster_tag)
                return fleet_answered(request.nodeclaim, request.id, instance=trimmed, found_by_tag=True)
            self._ensure_template(request)
            body = fleet_request(request)
            try:
                answer = self.aws.create_fleet(body)
            except AwsError as exc:
                if "LaunchTemplate" not in exc.code or "NotFound" not in exc.code:
                    raise
                self._ensure_template(request)  # the template went away: once more (as Karpenter)
                answer = self.aws.create_fleet(body)
        except AwsError as exc:
            if exc.transient:  # "ask again later": the decision is retried
                raise TransientError(str(exc)) from None
            return fleet_answered(
                request.nodeclaim, request.id, error_code=exc.code, error_message=exc.message
            )
        return _answer_of(request, answer)

    def _ensure_template(self, request: ev.Ec2FleetRequested) -> None:
        assert self.catalogs is not None
        data = self.catalogs.templates.get(request.launch_template)
        if data is None:
            raise TransientError(
                f"launch template {request.launch_template} is not known yet (catalog pending)"
            )
        self.aws.ensure_launch_template(
            request.launch_template,
            data,
            {names.TAG_NODECLASS: request.node_class, self.cluster_tag: "owned"},
        )

    # --- terminations -------------------------------------------------------------------------------------

    async def _terminate(self, decision: ev.Ec2InstanceTerminationDecided) -> bool:
        if decision.nodeclaim not in self.state.claims and not await self._still_leaked(decision):
            return False
        try:
            result = await asyncio.to_thread(self.aws.terminate, decision.instance_id)
        except AwsError as exc:
            raise TransientError(f"TerminateInstances {decision.instance_id}: {exc}") from None
        log.info(
            "TerminateInstances",
            extra={"instance": decision.instance_id, "state": result or "unknown to EC2"},
        )
        return True

    async def _still_leaked(self, decision: ev.Ec2InstanceTerminationDecided) -> bool:
        found, _ = await self.nodeclaim_object(decision.nodeclaim)
        if found == "absent":
            return True
        log.warning(
            "leaked instance not terminated: the evidence changed",
            extra={"instance": decision.instance_id, "nodeclaim": decision.nodeclaim, "found": found},
        )
        return False

    # --- observations -------------------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            try:
                await self.poll_instances()
            except Exception as exc:  # the next poll looks again
                log.warning("instances not polled", extra={"error": str(exc)})

    async def poll_instances(self) -> None:
        described = await asyncio.to_thread(self.aws.cluster_instances, self.cluster_tag)
        now = {i["InstanceId"]: trim_instance(i, self.cluster_tag) for i in described}
        for instance_id, trimmed in sorted(now.items()):
            if self.seen.get(instance_id) != trimmed and self._differs_from_state(trimmed):
                await self._publish(
                    instance_observed(trimmed, "added" if instance_id not in self.seen else "changed")
                )
            self.seen[instance_id] = trimmed
        for instance_id in sorted(set(self.state.instances) - set(now)):
            gone = {"instanceId": instance_id, "state": "terminated"}
            await self._publish(instance_observed(gone, "removed"))
            self.seen.pop(instance_id, None)

    def _differs_from_state(self, trimmed: dict[str, Any]) -> bool:
        known = self.state.instances.get(str(trimmed.get("instanceId")))
        return known is None or known.state != trimmed.get("state") or known.zone != trimmed.get("zone")

    async def observe_one(self, instance_id: str, *, after: str) -> None:
        try:
            described = await asyncio.to_thread(self.aws.cluster_instances, self.cluster_tag)
        except AwsError as exc:
            log.warning(
                "instance not observed after the action", extra={"instance": instance_id, "error": str(exc)}
            )
            return
        found = next((i for i in described if i["InstanceId"] == instance_id), None)
        if found is None:
            await self._publish(
                instance_observed({"instanceId": instance_id, "state": "terminated"}, "removed", after=after)
            )
            return
        trimmed = trim_instance(found, self.cluster_tag)
        self.seen[instance_id] = trimmed
        await self._publish(instance_observed(trimmed, "changed", after=after))

    async def _publish(self, event: ev.Event) -> None:
        await self.event_log.publish(registry.subject_of(event), event)

    # --- evidence -----------------------------------------------------------------------------------------

    async def nodeclaim_object(self, name: str) -> tuple[str | None, str]:
        if self.workload is None:
            return "unknown", "no workload cluster configured (TENON_KUBECONFIG)"
        try:
            found = await self.workload.get_or_none(NODECLAIMS, name)
        except KubeApiError as exc:
            if exc.status in (401, 403):
                return "unknown", f"reading NodeClaim {name} was refused: {exc}"
            return None, str(exc)
        except (OSError, TimeoutError) as exc:
            return None, str(exc)
        return ("present" if found is not None else "absent"), ""

    async def check_leak(self, instance: InstanceView, now: datetime) -> ev.Ec2InstanceLeakChecked | None:
        assert instance.claim is not None
        found, detail = await self.nodeclaim_object(instance.claim)
        if found is None:
            return None
        bounds = await self.event_log.bounds()
        launched = _parse_time(instance.launch_time)
        needed = launched - timedelta(seconds=self.launch_timeout) if launched is not None else None
        reaches = needed is not None and bounds.reaches_back_to(needed)
        return make_event(
            ev.Ec2InstanceLeakChecked,
            producer=PRODUCER,
            key=(instance.id, instance.claim, found, str(reaches)),
            correlation_id=instance.claim,
            decided_at=now,
            instance_id=instance.id,
            nodeclaim=instance.claim,
            launched_at=launched,
            leak_grace=self.leak_grace,
            nodeclaim_object=found,
            log_first_sequence=bounds.first_sequence,
            log_starts_at=bounds.first_time,
            log_needed_since=needed,
            log_reaches_back=reaches,
            detail=detail if needed is not None else (detail or "the instance has no launch time"),
        )


def _parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def fleet_request(request: ev.Ec2FleetRequested) -> dict[str, Any]:
    """The CreateFleet call a request stands for."""
    strategy_field = "SpotOptions" if request.capacity_type == "spot" else "OnDemandOptions"
    return {
        "Type": "instant",
        "ClientToken": request.client_token,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": request.capacity_type,
        },
        strategy_field: {"AllocationStrategy": request.allocation_strategy},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": request.launch_template,
                    "Version": "$Latest",
                },
                "Overrides": [
                    {
                        "InstanceType": o.instance_type,
                        "AvailabilityZone": o.zone,
                        "SubnetId": o.subnet_id,
                        "ImageId": o.image_id,
                        "Priority": float(o.choice),
                    }
                    for o in request.overrides
                ],
            }
        ],
        "TagSpecifications": tag_specifications(request.tags, ("instance", "volume", "fleet")),
    }


def _answer_of(request: ev.Ec2FleetRequested, answer: dict[str, Any]) -> ev.Ec2FleetAnswered:
    errors = tuple(
        ev.Ec2FleetError(
            instance_type=str(
                ((e.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get("InstanceType") or ""
            ),
            zone=((e.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get("AvailabilityZone"),
            code=str(e.get("ErrorCode") or ""),
            message=str(e.get("ErrorMessage") or ""),
        )
        for e in answer.get("Errors") or []
    )
    for launched in answer.get("Instances") or []:
        ids = launched.get("InstanceIds") or []
        if not ids:
            continue
        overrides = (launched.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        instance = {
            "instanceId": ids[0],
            "instanceType": str(launched.get("InstanceType") or overrides.get("InstanceType") or ""),
            "zone": str(overrides.get("AvailabilityZone") or ""),
            "lifecycle": "spot" if launched.get("Lifecycle") == "spot" else "on-demand",
        }
        return fleet_answered(request.nodeclaim, request.id, instance=instance, errors=errors)
    return fleet_answered(request.nodeclaim, request.id, errors=errors)
