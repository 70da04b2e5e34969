"""Owner references: who controls an object, and the reference a controller stamps on what it creates.

The store garbage-collects dependents when their owner goes (background propagation); controllers only
need to stamp ``ownerReferences`` with ``controller: true`` and to find their objects by the controller's
uid, which is what :func:`controller_uid` answers.
"""

from __future__ import annotations

from typing import Any


def controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def controller_uid(obj: dict[str, Any], kind: str | None = None) -> str | None:
    ref = controller_ref(obj)
    if ref is None or (kind is not None and ref.get("kind") != kind):
        return None
    return ref.get("uid")


def owner_reference(owner: dict[str, Any], *, block_owner_deletion: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


class OwnerIndex:
    """Dependents by their controller's uid, kept current from an informer's events (``handle``)."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind = kind
        self.by_owner: dict[str, set[str]] = {}
        self._owner_of: dict[str, str] = {}

    def handle(self, key: str, obj: dict[str, Any], deleted: bool) -> str | None:
        """Re-index ``obj``; returns its controller's uid (before or after the change), if any."""
        previous = self._owner_of.pop(key, None)
        if previous is not None:
            keys = self.by_owner.get(previous)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_owner[previous]
        if deleted:
            return previous
        owner = controller_uid(obj, self.kind)
        if owner is not None:
            self._owner_of[key] = owner
            self.by_owner.setdefault(owner, set()).add(key)
        return owner or previous

    def dependents(self, owner_uid: str) -> set[str]:
        return set(self.by_owner.get(owner_uid, ()))
