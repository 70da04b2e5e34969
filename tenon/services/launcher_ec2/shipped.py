"""What launcher-ec2 ships in ``data/`` (sources in ``data/README.md``), and the catalog of an EC2NodeClass
built from it alone, with no AWS at hand: what ``tenon simulate`` plans an EC2NodeClass with.

* :func:`on_demand_prices`: AWS's us-east-1 on-demand Linux list prices (the launcher prices every on-demand
  offering with them: the Pricing API is not reachable locally);
* :func:`described_instance_types`: EC2's us-east-1 instance types as DescribeInstanceTypes describes them,
  each with the zones DescribeInstanceTypeOfferings offers it in (written by ``python -m devtools.aws
  --write-instance-types``);
* :func:`offline_catalog`: an EC2NodeClass's ``InstanceCatalog``, built by the launcher's own
  :func:`.catalog.build_catalog` (the same formulas, the same prices) as if the NodeClass had resolved to a
  subnet in each of the region's zones and an image of each architecture; spot offerings are estimated
  (``priceEstimated: true``, 0.35 x on-demand), as they are wherever EC2 gives no usable spot price. A
  NodeClass that cannot be read raises :class:`.nodeclass.NodeClassInvalid` naming it and the field.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from tenon.core.wellknown import CATALOG_NOTES
from tenon.services.launcher_ec2.catalog import Inputs, build_catalog
from tenon.services.launcher_ec2.nodeclass import Image, Resolution, Subnet, read_nodeclass

PRICE_TABLE = "aws-on-demand-prices-us-east-1.json"
INSTANCE_TYPES = "ec2-instance-types-us-east-1.json"
OFFLINE_NOTE = (
    "built offline from the instance types and prices tenon ships (us-east-1, every zone, both "
    "architectures); spot prices estimated"
)


def _data(name: str) -> Any:
    text = resources.files("tenon.services.launcher_ec2").joinpath("data", name).read_text()
    return json.loads(text)


@functools.cache
def on_demand_prices() -> dict[str, float]:
    """The shipped us-east-1 on-demand price table: instance type -> USD per hour."""
    return {str(k): float(v) for k, v in _data(PRICE_TABLE)["onDemand"].items()}


@functools.cache
def described_instance_types() -> tuple[tuple[dict[str, Any], ...], dict[str, frozenset[str]]]:
    """(the instance types as DescribeInstanceTypes answers, type -> the zones that offer it)."""
    described = _data(INSTANCE_TYPES)["instanceTypes"]
    zones = {str(d["InstanceType"]): frozenset(d.get("Zones") or ()) for d in described}
    return tuple(described), zones


def offline_resolution(zones: frozenset[str]) -> Resolution:
    """A NodeClass resolved to one subnet per zone and an image of each architecture (nothing missing)."""
    return Resolution(
        subnets=tuple(Subnet(f"subnet-{zone}", zone) for zone in sorted(zones)),
        images=(
            Image("ami-offline-x86-64", "offline", "x86_64", "shipped catalog"),
            Image("ami-offline-arm64", "offline", "arm64", "shipped catalog"),
        ),
        instance_profile="offline",
    )


def offline_catalog(nodeclass: Mapping[str, Any], patterns: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``InstanceCatalog`` (``tenon.sh/v1alpha1``) named like ``nodeclass``, built offline (see above)."""
    spec = read_nodeclass(dict(nodeclass))
    described, zones = described_instance_types()
    every_zone = frozenset().union(*zones.values())
    inputs = Inputs(described, zones, on_demand_prices(), patterns=patterns)
    content = build_catalog(spec, offline_resolution(every_zone), inputs)
    return {
        "apiVersion": "tenon.sh/v1alpha1",
        "kind": "InstanceCatalog",
        "metadata": {
            "name": spec.name,
            "annotations": {CATALOG_NOTES: "; ".join((OFFLINE_NOTE, *content.notes))},
        },
        "spec": {"instanceTypes": list(content.instance_types)},
    }
