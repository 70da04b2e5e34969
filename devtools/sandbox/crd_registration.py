"""What a store does when a CustomResourceDefinition is created, changed or deleted.

The API server's ``apiextensions`` controllers, run synchronously inside the store's commit:

* **established**: a committed CRD's served versions become kinds of the store's registry (discovery,
  OpenAPI, paths, tables follow it), replacing the store's stand-in for the same kind if it had one. Objects
  already stored for the kind are pruned and defaulted under the new schema, in place and without a new
  resourceVersion: the API server prunes and defaults what it reads from etcd, so a default added by a CRD
  update shows on every object at once.
* **deleted**: deleting a CRD sets its ``deletionTimestamp`` (the ``customresourcecleanup`` finalizer holds
  it), marks it ``Terminating`` and deletes every instance (instances with finalizers wait for them, and
  the CRD waits for them); when the last instance is gone the finalizer goes, the CRD goes, the kinds stop
  being served and open watches on them end.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from devtools.sandbox import crds
from devtools.sandbox.errors import NotFound
from devtools.sandbox.resources import CRD_STORAGE_KEY, ResourceType

if TYPE_CHECKING:
    from devtools.sandbox.store import Store

log = logging.getLogger(__name__)


class CustomResources:
    """The CRD controllers of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cleaning: set[str] = set()  # CRDs whose instances are being deleted
        self._specs: dict[str, Any] = {}  # the spec each served CRD was registered from

    def committed(self, type_: str, crd: dict[str, Any]) -> None:
        """A CRD was stored (ADDED/MODIFIED) or removed (DELETED)."""
        name = crd["metadata"]["name"]
        if type_ == "DELETED":
            self._forget(name)
        elif crd["metadata"].get("deletionTimestamp"):
            self._clean_up(name)
        else:
            self._establish(name, crd)

    def instance_removed(self, storage_key: tuple[str, str]) -> None:
        """An object went: if its CRD is being deleted and it was the last one, let the CRD go."""
        if not self._cleaning:
            return
        name = self.store.registry.crd_of(storage_key)
        if name in self._cleaning:
            self._maybe_finish(name)

    # -- established -------------------------------------------------------------------------------------

    def _establish(self, name: str, crd: dict[str, Any]) -> None:
        if self._specs.get(name) == crd["spec"]:
            return  # a status or metadata write: the kinds are as they were
        types = crds.resource_types(crd)
        self._specs[name] = crd["spec"]
        self.store.registry.define(name, types)
        stored_as = next((rt for rt in types if rt.custom and rt.version == rt.custom.storage_version), None)
        self._readmit_stored(stored_as or (types[0] if types else None))
        for rule in (r for rt in types if rt.custom for r in rt.custom.rules if r.unevaluable):
            rule.say_unevaluable()

    def _readmit_stored(self, rt: ResourceType | None) -> None:
        """Prune and default what is stored for the kind (by the storage version's schema; no conversion),
        as reading it back from etcd would."""
        custom = rt.custom if rt is not None else None
        if rt is None or custom is None or custom.schema is None:
            return
        bucket = self.store._bucket(rt)
        for key, obj in list(bucket.objects.items()):
            pruned, _dropped = custom.schema.prune(obj)
            defaulted = custom.schema.default(pruned)
            if defaulted is not obj:
                bucket.objects[key] = defaulted

    # -- deleted -----------------------------------------------------------------------------------------

    def _clean_up(self, name: str) -> None:
        if name in self._cleaning:
            return
        self._cleaning.add(name)
        crd_rt = self.store.registry.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        crd = self.store._bucket(crd_rt).objects.get(("", name))
        if crd is not None and not any(
            c.get("type") == "Terminating" for c in (crd.get("status") or {}).get("conditions") or ()
        ):
            new = {**crd, "metadata": dict(crd["metadata"]), "status": crds.terminating(crd)}
            self.store._commit_update(crd_rt, ("", name), new, crd)
        for rt in self.store.registry.defined(name)[:1]:
            for namespace, obj_name in list(self.store._bucket(rt).objects):
                with contextlib.suppress(NotFound):
                    self.store.delete_with_result(rt, obj_name, namespace or None)
        self._maybe_finish(name)

    def _maybe_finish(self, name: str) -> None:
        types = self.store.registry.defined(name)
        if types and self.store._bucket(types[0]).objects:
            return  # instances still terminating (their finalizers)
        crd_rt = self.store.registry.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        crd = self.store._bucket(crd_rt).objects.get(("", name))
        if crd is None:
            return
        finalizers = [f for f in crd["metadata"].get("finalizers") or () if f != crds.CLEANUP_FINALIZER]
        metadata = {**crd["metadata"], "finalizers": finalizers}
        if not finalizers:
            del metadata["finalizers"]
        self.store._commit_update(crd_rt, ("", name), {**crd, "metadata": metadata}, crd)

    def _forget(self, name: str) -> None:
        self._cleaning.discard(name)
        self._specs.pop(name, None)
        removed = self.store.registry.undefine(name)
        if removed:
            self.store._drop_bucket(removed[0])
            log.info(
                "sandbox %s: %s no longer served (CRD %s deleted)", self.store.name, removed[0].kind, name
            )


def is_crd(rt: ResourceType) -> bool:
    return rt.storage_key == CRD_STORAGE_KEY
