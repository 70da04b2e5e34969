"""An EC2NodeClass (``karpenter.k8s.aws/v1``): its spec read strictly, resolved against what EC2 has, and the
status conditions that say whether it can launch (pure).

**Reading** (:func:`read_nodeclass`): every field a launch uses, with a one-line :class:`NodeClassInvalid`
naming the object and the field when it cannot be read: ``subnetSelectorTerms``,
``securityGroupSelectorTerms`` and ``amiSelectorTerms`` (each term an ``id``, or ``tags`` (``"*"`` matches any
value), or for security groups a ``name``, for AMIs an ``alias`` such as ``al2023@latest`` or a ``name`` with
``owner``), ``role`` or ``instanceProfile``, ``tags``, ``blockDeviceMappings``, ``metadataOptions``,
``userData`` and ``kubelet`` (``maxPods``, ``podsPerCore``, ``kubeReserved``, ``systemReserved``,
``evictionHard``, ``clusterDNS``).

**Resolving** (:func:`resolve`): the subnets, security groups and images EC2 described (the executor asks for
them, :mod:`.aws`) matched against the terms, as Karpenter matches them: a term's ``tags`` must all match, and
terms are alternatives. One subnet per zone launches: the one with the most free addresses.

**Conditions** (:func:`conditions`): ``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``,
``InstanceProfileReady``, ``ValidationSucceeded`` and ``Ready``, each ``True`` or ``False`` with a reason and
a message naming what is missing, as Karpenter writes them on ``status.conditions`` (``Ready`` is ``False``
while any other is).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenon.core.quantities import QuantityError, parse_quantity
from tenon.core.wellknown import ARCH
from tenon.services.launcher_ec2 import names

ALIAS = re.compile(
    r"^(al2023|al2|bottlerocket|windows2019|windows2022|windows2025)@(latest|v[0-9A-Za-z.\-]+)$"
)
DEFAULT_ROOT_VOLUME = "20Gi"
"""The root volume Karpenter gives an AL2023 node when the NodeClass says nothing."""
DEFAULT_METADATA = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}
"""Karpenter's default metadataOptions (IMDSv2 only, one hop: pods cannot reach the node's credentials)."""


class NodeClassInvalid(ValueError):
    """An EC2NodeClass that cannot be read; the message names it and the field."""


@dataclass(frozen=True)
class Term:
    """One selector term: an id, a name (security groups, AMIs), an alias (AMIs), or tags."""

    id: str | None = None
    name: str | None = None
    owner: str | None = None
    alias: str | None = None
    tags: tuple[tuple[str, str], ...] = ()

    def matches(self, resource_id: str, resource_name: str | None, tags: Mapping[str, str]) -> bool:
        if self.id is not None:
            return resource_id == self.id
        if self.name is not None and resource_name != self.name:
            return False
        return all(k in tags and (v == "*" or tags[k] == v) for k, v in self.tags)


@dataclass(frozen=True)
class Kubelet:
    max_pods: int | None = None
    pods_per_core: int | None = None
    kube_reserved: dict[str, str] = field(default_factory=dict)
    system_reserved: dict[str, str] = field(default_factory=dict)
    eviction_hard: dict[str, str] = field(default_factory=dict)
    cluster_dns: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeClassSpec:
    name: str
    generation: int
    subnet_terms: tuple[Term, ...]
    security_group_terms: tuple[Term, ...]
    ami_terms: tuple[Term, ...]
    role: str | None
    instance_profile: str | None
    tags: dict[str, str]
    block_device_mappings: tuple[dict[str, Any], ...]
    metadata_options: dict[str, Any]
    user_data: str | None
    kubelet: Kubelet

    @property
    def root_volume_bytes(self) -> int:
        """The root volume's size (the mapping marked ``rootVolume``, else the first, else 20Gi)."""
        mappings = self.block_device_mappings
        root = next((m for m in mappings if m.get("rootVolume")), mappings[0] if mappings else None)
        size = ((root or {}).get("ebs") or {}).get("volumeSize") or DEFAULT_ROOT_VOLUME
        return int(parse_quantity(str(size)))

    @property
    def alias_family(self) -> str | None:
        """The AMI family an alias names (``al2023``), if the AMIs are chosen by alias."""
        for term in self.ami_terms:
            if term.alias:
                return term.alias.split("@", 1)[0]
        return None


class _Reader:
    def __init__(self, name: str) -> None:
        self.name = name

    def error(self, path: str, problem: str) -> NodeClassInvalid:
        return NodeClassInvalid(f"{names.NODECLASS_KIND} {self.name}: {path}: {problem}")

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(path, f"must be a map, got {type(value).__name__}")
        return value

    def strings(self, value: Any, path: str) -> dict[str, str]:
        out = {}
        for key, item in self.mapping(value, path).items():
            if not isinstance(item, str | int | float) or isinstance(item, bool):
                raise self.error(f"{path}.{key}", "must be a string")
            out[str(key)] = str(item)
        return out

    def listing(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(path, f"must be a list, got {type(value).__name__}")
        return value

    def text(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(path, "must be a non-empty string")
        return value

    def count(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(path, f"must be a whole number, got {value!r}")
        return value

    def quantities(self, value: Any, path: str) -> dict[str, str]:
        out = self.strings(value, path)
        for key, text in out.items():
            try:
                parse_quantity(text.rstrip("%")) if text.endswith("%") else parse_quantity(text)
            except QuantityError as err:
                raise self.error(f"{path}.{key}", str(err)) from None
        return out

    def terms(self, value: Any, path: str, *, allow: tuple[str, ...], required: bool) -> tuple[Term, ...]:
        items = self.listing(value, path)
        if required and not items:
            raise self.error(path, "needs at least one term")
        terms = []
        for index, raw in enumerate(items):
            where = f"{path}[{index}]"
            item = self.mapping(raw, where)
            unknown = sorted(set(item) - set(allow))
            if unknown:
                raise self.error(f"{where}.{unknown[0]}", f"is not a selector field (use {', '.join(allow)})")
            term = Term(
                id=self.text(item.get("id"), f"{where}.id"),
                name=self.text(item.get("name"), f"{where}.name"),
                owner=self.text(item.get("owner"), f"{where}.owner"),
                alias=self.text(item.get("alias"), f"{where}.alias"),
                tags=tuple(sorted(self.strings(item.get("tags"), f"{where}.tags").items())),
            )
            self._check_term(term, where)
            terms.append(term)
        return tuple(terms)

    def _check_term(self, term: Term, where: str) -> None:
        if term.alias is not None and not ALIAS.match(term.alias):
            raise self.error(
                f"{where}.alias", f"{term.alias!r} is not like al2023@latest or al2023@v20240807"
            )
        if term.id is None and term.name is None and term.alias is None and not term.tags:
            raise self.error(where, "needs an id, a name, an alias or tags")
        if term.id is not None and (term.tags or term.name):
            raise self.error(where, "an id selects alone: drop the other fields")


def _generation(obj: Mapping[str, Any]) -> int:
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def read_nodeclass(obj: Mapping[str, Any]) -> NodeClassSpec:
    """The EC2NodeClass's spec; raises :class:`NodeClassInvalid` naming the field."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    if not name:
        raise NodeClassInvalid(f"{names.NODECLASS_KIND}: metadata.name is required")
    read = _Reader(name)
    spec = read.mapping(obj.get("spec"), "spec")
    role = read.text(spec.get("role"), "spec.role")
    profile = read.text(spec.get("instanceProfile"), "spec.instanceProfile")
    if role and profile:
        raise read.error("spec.instanceProfile", "set either role or instanceProfile, not both")
    if not role and not profile:
        raise read.error("spec.role", "set role or instanceProfile: the nodes need credentials to join")
    kubelet = read.mapping(spec.get("kubelet"), "spec.kubelet")
    mappings = tuple(
        dict(read.mapping(m, f"spec.blockDeviceMappings[{i}]"))
        for i, m in enumerate(read.listing(spec.get("blockDeviceMappings"), "spec.blockDeviceMappings"))
    )
    parsed = NodeClassSpec(
        name=name,
        generation=_generation(obj),
        subnet_terms=read.terms(
            spec.get("subnetSelectorTerms"), "spec.subnetSelectorTerms", allow=("id", "tags"), required=True
        ),
        security_group_terms=read.terms(
            spec.get("securityGroupSelectorTerms"),
            "spec.securityGroupSelectorTerms",
            allow=("id", "name", "tags"),
            required=True,
        ),
        ami_terms=read.terms(
            spec.get("amiSelectorTerms"),
            "spec.amiSelectorTerms",
            allow=("id", "name", "owner", "alias", "tags"),
            required=True,
        ),
        role=role,
        instance_profile=profile,
        tags=read.strings(spec.get("tags"), "spec.tags"),
        block_device_mappings=mappings,
        metadata_options={
            **DEFAULT_METADATA,
            **read.mapping(spec.get("metadataOptions"), "spec.metadataOptions"),
        },
        user_data=read.text(spec.get("userData"), "spec.userData"),
        kubelet=Kubelet(
            max_pods=read.count(kubelet.get("maxPods"), "spec.kubelet.maxPods"),
            pods_per_core=read.count(kubelet.get("podsPerCore"), "spec.kubelet.podsPerCore"),
            kube_reserved=read.quantities(kubelet.get("kubeReserved"), "spec.kubelet.kubeReserved"),
            system_reserved=read.quantities(kubelet.get("systemReserved"), "spec.kubelet.systemReserved"),
            eviction_hard=read.quantities(kubelet.get("evictionHard"), "spec.kubelet.evictionHard"),
            cluster_dns=tuple(
                str(x) for x in read.listing(kubelet.get("clusterDNS"), "spec.kubelet.clusterDNS")
            ),
        ),
    )
    for index, mapping in enumerate(parsed.block_device_mappings):
        size = (mapping.get("ebs") or {}).get("volumeSize")
        if size is not None:
            try:
                parse_quantity(str(size))
            except QuantityError as err:
                raise read.error(f"spec.blockDeviceMappings[{index}].ebs.volumeSize", str(err)) from None
    return parsed


def served_node_classes(nodeclasses: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The EC2NodeClasses (by name) among a ``NodeClassesSnapshot``'s objects."""
    return {
        str(obj["metadata"]["name"]): dict(obj)
        for obj in nodeclasses
        if obj.get("kind") == names.NODECLASS_KIND and (obj.get("metadata") or {}).get("name")
    }


# --- resolution -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str = ""
    available_ips: int = 0


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    architecture: str
    """``x86_64`` or ``arm64``, as EC2 names them."""
    source: str = ""
    """Where it was found: the SSM parameter of an alias, or the term that selected it."""


@dataclass(frozen=True)
class Resolution:
    """What a NodeClass resolves to; a problem per condition that is not met (empty: met)."""

    subnets: tuple[Subnet, ...] = ()
    security_groups: tuple[SecurityGroup, ...] = ()
    images: tuple[Image, ...] = ()
    instance_profile: str | None = None
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Condition type -> (reason, message), for each condition not met."""

    @property
    def ready(self) -> bool:
        return not self.problems

    def subnet_of_zone(self) -> dict[str, Subnet]:
        """One subnet per zone: the one with the most free addresses (ties by id), as Karpenter launches."""
        best: dict[str, Subnet] = {}
        for subnet in sorted(self.subnets, key=lambda s: (-s.available_ips, s.id)):
            best.setdefault(subnet.zone, subnet)
        return best

    def image_for(self, architecture: str) -> Image | None:
        """The newest-named image of ``architecture`` (x86_64/arm64), if any."""
        matching = [i for i in self.images if i.architecture == architecture]
        return max(matching, key=lambda i: (i.name, i.id)) if matching else None

    def to_status(self) -> dict[str, Any]:
        return {
            "subnets": [{"id": s.id, "zone": s.zone, "zoneID": s.zone_id} for s in self.subnets],
            "securityGroups": [{"id": g.id, "name": g.name} for g in self.security_groups],
            "amis": [
                {"id": i.id, "name": i.name, "requirements": [_arch_requirement(i.architecture)]}
                for i in self.images
            ],
            **({"instanceProfile": self.instance_profile} if self.instance_profile else {}),
        }


def _arch_requirement(architecture: str) -> dict[str, Any]:
    return {"key": ARCH, "operator": "In", "values": [kube_arch(architecture)]}


def kube_arch(architecture: str) -> str:
    return {"x86_64": "amd64", "arm64": "arm64"}.get(architecture, architecture)


def _tags(described: Mapping[str, Any]) -> dict[str, str]:
    return {str(t.get("Key")): str(t.get("Value") or "") for t in described.get("Tags") or []}


def match_subnets(terms: Sequence[Term], described: Sequence[Mapping[str, Any]]) -> tuple[Subnet, ...]:
    found = [
        Subnet(
            str(s["SubnetId"]),
            str(s.get("AvailabilityZone") or ""),
            str(s.get("AvailabilityZoneId") or ""),
            int(s.get("AvailableIpAddressCount") or 0),
        )
        for s in described
        if any(term.matches(str(s.get("SubnetId")), None, _tags(s)) for term in terms)
    ]
    return tuple(sorted(found, key=lambda s: (s.zone, s.id)))


def match_security_groups(
    terms: Sequence[Term], described: Sequence[Mapping[str, Any]]
) -> tuple[SecurityGroup, ...]:
    found = [
        SecurityGroup(str(g["GroupId"]), str(g.get("GroupName") or ""))
        for g in described
        if any(term.matches(str(g.get("GroupId")), str(g.get("GroupName") or ""), _tags(g)) for term in terms)
    ]
    return tuple(sorted(found, key=lambda g: g.id))


def resolve(
    spec: NodeClassSpec,
    *,
    subnets: Sequence[Mapping[str, Any]],
    security_groups: Sequence[Mapping[str, Any]],
    images: Sequence[Image],
    image_problems: Sequence[str] = (),
    instance_profile: str | None = None,
    instance_profile_problem: str | None = None,
) -> Resolution:
    """The NodeClass against what EC2 described (the images already selected by the executor, per term)."""
    problems: dict[str, tuple[str, str]] = {}
    matched_subnets = match_subnets(spec.subnet_terms, subnets)
    if not matched_subnets:
        problems[names.SUBNETS_READY] = ("SubnetsNotFound", "no subnet matches spec.subnetSelectorTerms")
    groups = match_security_groups(spec.security_group_terms, security_groups)
    if not groups:
        problems[names.SECURITY_GROUPS_READY] = (
            "SecurityGroupsNotFound",
            "no security group matches spec.securityGroupSelectorTerms",
        )
    if not images:
        why = "; ".join(image_problems) or "no image matches spec.amiSelectorTerms"
        problems[names.AMIS_READY] = ("AMINotFound", why)
    if instance_profile_problem:
        problems[names.INSTANCE_PROFILE_READY] = ("InstanceProfileNotReady", instance_profile_problem)
    unique = {i.id: i for i in images}
    return Resolution(
        subnets=matched_subnets,
        security_groups=groups,
        images=tuple(sorted(unique.values(), key=lambda i: i.id)),
        instance_profile=instance_profile,
        problems=problems,
    )


def unusable(spec_problem: str) -> Resolution:
    """The resolution of a NodeClass whose spec cannot be read."""
    return Resolution(problems={names.VALIDATION_SUCCEEDED: ("InvalidSpec", spec_problem)})


CONDITION_TYPES = (
    names.SUBNETS_READY,
    names.SECURITY_GROUPS_READY,
    names.AMIS_READY,
    names.INSTANCE_PROFILE_READY,
    names.VALIDATION_SUCCEEDED,
)


def conditions(
    resolution: Resolution, generation: int, now: str, previous: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """``status.conditions`` as Karpenter writes them; ``lastTransitionTime`` kept while the status holds."""
    before = {str(c.get("type")): c for c in previous if isinstance(c, Mapping)}
    out = []
    for kind in (*CONDITION_TYPES, names.READY):
        if kind == names.READY:
            problem = next(((r, f"{t}: {m}") for t, (r, m) in sorted(resolution.problems.items())), None)
        else:
            problem = resolution.problems.get(kind)
        status = "False" if problem else "True"
        reason, message = problem if problem else (kind, "")
        old = before.get(kind)
        moved = old is None or old.get("status") != status
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": now if moved or old is None else old.get("lastTransitionTime", now),
            }
        )
    return out


def options_hash(payload: Mapping[str, Any]) -> str:
    """A short stable hash of launch-template options (its name derives from it, as Karpenter's does)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]
