"""The instance types a NodePool may launch, as the scheduling core chooses them (pure).

The core's own ``instance_types_for_node_pool`` is internal to it (``make lint`` keeps it so); this is the
same selection on its public model: a Cluster API NodeClass's MachineDeployments (by its selector), else the
InstanceCatalog named like the pool's NodeClass, else the only catalog there is. When the core exports that
function, this module goes.
"""

from __future__ import annotations

from tenon.core import ClusterInput, InstanceType, NodePool


def pool_instance_types(inputs: ClusterInput, pool: NodePool) -> tuple[InstanceType, ...]:
    ref = pool.node_class_ref
    if (ref is None and inputs.machine_deployments and not inputs.catalogs) or (
        ref is not None and ref.kind == "ClusterAPINodeClass"
    ):
        selector = None
        for node_class in inputs.node_classes:
            if ref is not None and node_class.kind == ref.kind and node_class.name == ref.name:
                selector = node_class.selector
        return tuple(
            mdt.instance_type
            for mdt in inputs.machine_deployments
            if selector is None or selector.matches(mdt.md_labels)
        )
    if ref is not None and ref.name in inputs.catalogs:
        return inputs.catalogs[ref.name]
    if len(inputs.catalogs) == 1:
        return next(iter(inputs.catalogs.values()))
    return ()
