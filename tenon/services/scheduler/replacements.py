"""The scheduler's answer to disruption's ``ReplacementsRequested`` (pure): one ``NodeClaimPlanned`` per
replacement claim not planned yet, exactly as disruption decided it (name, NodePool, instance type choice and
cheaper-first fallbacks, requirements, labels, taints), so the claim is launched, registered and initialized
like any other; disruption drains its candidates once every replacement is Initialized.

The scheduler stays the single writer of ``Planned``. It does not second-guess the choice (disruption planned
it with the same core, on the same projection); a request naming a NodePool that no longer exists plans
nothing for that claim, and disruption abandons the command when its replacement never comes.
"""

from __future__ import annotations

from proto import events as ev
from proto import registry
from proto.ids import derive_id
from tenon.core.wellknown import CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE
from tenon.domain.projection import ClusterProjection


def plan_replacements(projection: ClusterProjection, request: ev.ReplacementsRequested) -> list[ev.Event]:
    planned: list[ev.Event] = []
    for index, replacement in enumerate(request.replacements):
        if replacement.nodeclaim in projection.claims or replacement.nodepool not in projection.nodepools:
            continue
        choice = replacement.choice
        labels = {
            **replacement.labels,
            NODEPOOL: replacement.nodepool,
            INSTANCE_TYPE: choice.instance_type,
            CAPACITY_TYPE: choice.capacity_type,
        }
        if choice.zone:
            labels[ZONE] = choice.zone
        planned.append(
            ev.NodeClaimPlanned(
                id=derive_id(registry.SCHEDULER, "NodeClaimPlanned", request.id, index),
                decided_at=request.decided_at,
                producer=registry.SCHEDULER,
                causation_id=request.id,
                correlation_id=replacement.nodeclaim,
                nodeclaim=replacement.nodeclaim,
                nodepool=replacement.nodepool,
                node_class=replacement.node_class,
                choice=choice,
                fallbacks=replacement.fallbacks,
                pods=replacement.pods,
                requirements=replacement.requirements,
                labels=labels,
                taints=replacement.taints,
                startup_taints=replacement.startup_taints,
                batch_id=f"replace-{request.command}",
                explanation={
                    "chosen": f"replacement for {', '.join(request.candidates)}: {request.reason}",
                    "requests": dict(replacement.requests),
                },
            )
        )
    return planned
