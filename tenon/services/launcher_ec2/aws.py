"""launcher-ec2's calls to AWS (boto3; blocking, so the executor runs them in threads).

Clients come from :mod:`tenon.runtime.aws` (the region, the endpoint when one is set, boto3's credential
chain, few SDK retries). Nothing here decides: each function asks one question of EC2, SSM or IAM and returns
the answer as plain data, or raises :class:`AwsError` with the call and the error code. (EKS too, for the
cluster's endpoint and CA when they are not configured.)
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tenon.runtime import aws
from tenon.runtime.aws import AwsError, tag_list
from tenon.services.launcher_ec2.nodeclass import Image, NodeClassSpec, Term

ALIAS_PARAMETERS = {
    "al2023": (
        "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/standard/recommended/image_id",
        "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-{arch}",
    ),
    "al2": (
        "/aws/service/eks/optimized-ami/{version}/amazon-linux-2{suffix}/recommended/image_id",
        "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-{arch}-gp2",
    ),
    "bottlerocket": ("/aws/service/bottlerocket/aws-k8s-{version}/{arch}/latest/image_id",),
}
"""SSM public parameters an AMI alias resolves through, in order: the EKS-optimized image first (what
Karpenter reads), then the plain Amazon Linux image where the local AWS has no EKS parameters."""


@dataclass(frozen=True)
class AwsSettings:
    region: str
    endpoint_url: str | None = None
    kubernetes_version: str = "1.31"


@dataclass(frozen=True)
class EksCluster:
    endpoint: str
    certificate_authority: str
    """Base64, as EKS gives it and the nodes' user data takes it."""
    service_cidr: str


class Aws:
    """The EC2, SSM, IAM and EKS clients of one launcher."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.ec2 = aws.client("ec2", settings.region, settings.endpoint_url)
        self.ssm = aws.client("ssm", settings.region, settings.endpoint_url)
        self.iam = aws.client("iam", settings.region, settings.endpoint_url)
        self.eks = aws.client("eks", settings.region, settings.endpoint_url)

    def call(self, client: Any, operation: str, **kwargs: Any) -> Any:
        return aws.call(client, operation, **kwargs)

    def pages(self, client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
        return aws.pages(client, operation, key, **kwargs)

    def cluster(self, name: str) -> EksCluster:
        """What EKS says of the cluster ``name`` (``DescribeCluster``)."""
        described = self.call(self.eks, "describe_cluster", name=name)["cluster"]
        network = described.get("kubernetesNetworkConfig") or {}
        return EksCluster(
            endpoint=described.get("endpoint") or "",
            certificate_authority=(described.get("certificateAuthority") or {}).get("data") or "",
            service_cidr=network.get("serviceIpv4Cidr") or "",
        )

    # --- what EC2 offers ----------------------------------------------------------------------------------

    def instance_types(self, patterns: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Hardware-virtualized x86_64 and arm64 types; only those matching ``patterns`` (EC2's own
        wildcards, ``m5.*``) when given, so a narrowed catalog does not describe every type there is."""
        filters = [
            {"Name": "supported-virtualization-type", "Values": ["hvm"]},
            {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
        ]
        if patterns:
            filters.append({"Name": "instance-type", "Values": list(patterns)})
        return self.pages(self.ec2, "describe_instance_types", "InstanceTypes", Filters=filters)

    def zones_of_types(self) -> dict[str, set[str]]:
        offerings = self.pages(
            self.ec2,
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
        )
        zones: dict[str, set[str]] = {}
        for offering in offerings:
            zones.setdefault(str(offering["InstanceType"]), set()).add(str(offering["Location"]))
        return zones

    def spot_price_history(self, instance_types: Sequence[str]) -> list[dict[str, Any]]:
        from datetime import UTC, datetime

        return self.pages(
            self.ec2,
            "describe_spot_price_history",
            "SpotPriceHistory",
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            StartTime=datetime.now(UTC),
            InstanceTypes=list(instance_types),
        )

    # --- a NodeClass's resources -----------------------------------------------------------------------

    def subnets(self) -> list[dict[str, Any]]:
        return self.pages(self.ec2, "describe_subnets", "Subnets")

    def security_groups(self) -> list[dict[str, Any]]:
        return self.pages(self.ec2, "describe_security_groups", "SecurityGroups")

    def images(self, spec: NodeClassSpec) -> tuple[list[Image], list[str]]:
        """The images the NodeClass's AMI terms select, and why a term found none."""
        found: list[Image] = []
        problems: list[str] = []
        for index, term in enumerate(spec.ami_terms):
            try:
                images = self._images_of(term)
            except AwsError as exc:
                problems.append(f"spec.amiSelectorTerms[{index}]: {exc}")
                continue
            if not images:
                problems.append(f"spec.amiSelectorTerms[{index}]: no image found")
            found.extend(images)
        return found, problems

    def _images_of(self, term: Term) -> list[Image]:
        if term.alias:
            return self._alias_images(term.alias)
        if term.id:
            described = self.call(self.ec2, "describe_images", ImageIds=[term.id])["Images"]
            return [_image(i, f"id {term.id}") for i in described]
        filters = [
            {"Name": f"tag:{k}", "Values": [v]} if v != "*" else {"Name": "tag-key", "Values": [k]}
            for k, v in term.tags
        ]
        if term.name:
            filters.append({"Name": "name", "Values": [term.name]})
        owners = [term.owner] if term.owner else ["self", "amazon"]
        described = self.call(self.ec2, "describe_images", Filters=filters, Owners=owners)["Images"]
        return [_image(i, "selector term") for i in described]

    def _alias_images(self, alias: str) -> list[Image]:
        family, _, _version = alias.partition("@")
        images = []
        for arch, short in (("x86_64", "x86_64"), ("arm64", "arm64")):
            for template in ALIAS_PARAMETERS.get(family, ()):
                name = template.format(
                    version=self.settings.kubernetes_version,
                    arch=short,
                    suffix="-arm64" if arch == "arm64" else "",
                )
                try:
                    value = self.call(self.ssm, "get_parameter", Name=name)["Parameter"]["Value"]
                except AwsError as exc:
                    if exc.code == "ParameterNotFound":
                        continue
                    raise
                described = self.call(self.ec2, "describe_images", ImageIds=[value])["Images"]
                images += [_image(i, f"SSM {name}", architecture=arch) for i in described]
                break
        return images

    def instance_profile(self, spec: NodeClassSpec, cluster: str) -> tuple[str | None, str | None]:
        """The instance profile the nodes launch with, and why there is none. A ``role`` gets a profile
        named after the cluster and the NodeClass, created if missing (as Karpenter manages it)."""
        if spec.instance_profile:
            try:
                self.call(self.iam, "get_instance_profile", InstanceProfileName=spec.instance_profile)
            except AwsError as exc:
                return None, f"spec.instanceProfile {spec.instance_profile}: {exc.code}"
            return spec.instance_profile, None
        name = f"{cluster}_{spec.name}"[:128]
        try:
            self.call(self.iam, "get_instance_profile", InstanceProfileName=name)
            return name, None
        except AwsError as exc:
            if exc.code != "NoSuchEntity":
                return None, f"instance profile {name}: {exc.code}"
        try:
            self.call(self.iam, "create_instance_profile", InstanceProfileName=name)
            self.call(self.iam, "add_role_to_instance_profile", InstanceProfileName=name, RoleName=spec.role)
        except AwsError as exc:
            if exc.code not in ("EntityAlreadyExists", "LimitExceeded"):
                return None, f"instance profile {name} for role {spec.role}: {exc.code}: {exc.message}"
        return name, None

    # --- launching and removing -------------------------------------------------------------------------

    def ensure_launch_template(self, name: str, data: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        """Create the launch template unless one of that name exists (names are content hashes)."""
        try:
            self.call(self.ec2, "describe_launch_templates", LaunchTemplateNames=[name])
            return
        except AwsError as exc:
            if "NotFound" not in exc.code and exc.code != "InvalidLaunchTemplateName.NotFoundException":
                raise
        try:
            self.call(
                self.ec2,
                "create_launch_template",
                LaunchTemplateName=name,
                LaunchTemplateData=dict(data),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list(tags.items())}],
            )
        except AwsError as exc:
            if "AlreadyExists" not in exc.code:
                raise

    def instances_tagged(self, key: str, value: str) -> list[dict[str, Any]]:
        """Instances tagged ``key=value`` that are not terminated."""
        reservations = self.pages(
            self.ec2,
            "describe_instances",
            "Reservations",
            Filters=[
                {"Name": f"tag:{key}", "Values": [value]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped", "shutting-down"],
                },
            ],
        )
        return [i for r in reservations for i in r.get("Instances") or []]

    def cluster_instances(self, cluster_tag: str) -> list[dict[str, Any]]:
        """Every instance tagged for this cluster by tenon (any state: terminated ones say they are gone)."""
        reservations = self.pages(
            self.ec2,
            "describe_instances",
            "Reservations",
            Filters=[{"Name": "tag-key", "Values": [cluster_tag]}],
        )
        return [i for r in reservations for i in r.get("Instances") or []]

    def create_fleet(self, request: Mapping[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.call(self.ec2, "create_fleet", **request)
        return answer

    def terminate(self, instance_id: str) -> str | None:
        """TerminateInstances; the instance's new state (None: EC2 does not know it)."""
        try:
            answer = self.call(self.ec2, "terminate_instances", InstanceIds=[instance_id])
        except AwsError as exc:
            if exc.code == "InvalidInstanceID.NotFound":
                return None
            raise
        changes = answer.get("TerminatingInstances") or []
        return str(changes[0]["CurrentState"]["Name"]) if changes else None


def _image(described: Mapping[str, Any], source: str, architecture: str | None = None) -> Image:
    return Image(
        id=str(described["ImageId"]),
        name=str(described.get("Name") or ""),
        architecture=architecture or str(described.get("Architecture") or "x86_64"),
        source=source,
    )


def tag_specifications(tags: Mapping[str, str], kinds: Iterable[str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": tag_list(tags.items())} for kind in kinds]


def user_data_base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
