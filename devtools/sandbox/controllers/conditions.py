"""Writing ``status.conditions`` entries the way Kubernetes components do.

A condition's ``lastTransitionTime`` changes only when its ``status`` flips; reason and message are replaced
on every write. Used by the scheduler (``PodScheduled``), the kubelet (pod and node conditions), the PDB
controller (``DisruptionAllowed``) and the Cluster API controller (Machine conditions).
"""

from __future__ import annotations

from typing import Any

from devtools.sandbox.controllers.clock import now_rfc3339


def set_condition(
    obj: dict[str, Any], cond_type: str, status: str, reason: str = "", message: str = "", **extra: Any
) -> bool:
    """Set condition ``cond_type`` on ``obj`` in place; True if anything changed."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    wanted: dict[str, Any] = {"status": status, **extra}
    if reason:
        wanted["reason"] = reason
    if message:
        wanted["message"] = message
    for condition in conditions:
        if condition.get("type") == cond_type:
            before = dict(condition)
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now_rfc3339()
            if not reason:
                condition.pop("reason", None)
            if not message:
                condition.pop("message", None)
            condition.update(wanted)
            return condition != before
    conditions.append({"type": cond_type, **wanted, "lastTransitionTime": now_rfc3339()})
    return True
