"""Launch templates, one per (EC2NodeClass, AMI) (pure): the image, the user data with the kubelet's settings,
the security groups, the instance profile, the block devices and the metadata options.

The name is ``karpenter.k8s.aws/<hash of the template's data>``, as Karpenter names its own: a change to the
NodeClass or a new AMI is a new template, and the same data after a restart is the same name, so the launcher
creates a template only when no template of that name exists (and never edits one a fleet may be using).

**User data.** For an AL2023 image (the ``al2023`` alias, or any NodeClass without ``userData`` of its own)
it is nodeadm's ``NodeConfig`` in a MIME multi-part document, as Karpenter writes it: the cluster's name,
endpoint and CA, the kubelet's ``maxPods``, ``clusterDNS``, ``kubeReserved``, ``systemReserved`` and
``evictionHard``, and ``--register-with-taints=karpenter.sh/unregistered:NoExecute`` so nothing lands on the
node before tenon makes it its NodePool's. The NodeClass's own ``userData`` is added as a further part. The
NodePool's labels and taints are not in it (one template serves every NodePool of the NodeClass): tenon sets
them on the Node when it registers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from tenon.core.wellknown import UNREGISTERED_TAINT
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.nodeclass import Image, NodeClassSpec, Resolution, options_hash

BOUNDARY = "//"


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    endpoint: str = ""
    certificate_authority: str = ""
    cidr: str = "10.100.0.0/16"


def _yaml_list(items: list[str], indent: str) -> str:
    return "".join(f"{indent}- {item}\n" for item in items)


def _yaml_map(values: dict[str, Any], indent: str) -> str:
    return "".join(f"{indent}{key}: {json.dumps(value)}\n" for key, value in sorted(values.items()))


def node_config(spec: NodeClassSpec, cluster: ClusterInfo, max_pods: int | None) -> str:
    """nodeadm's NodeConfig for the NodeClass (see the module docstring)."""
    kubelet: dict[str, Any] = {}
    if max_pods is not None:
        kubelet["maxPods"] = max_pods
    if spec.kubelet.cluster_dns:
        kubelet["clusterDNS"] = list(spec.kubelet.cluster_dns)
    for field, values in (
        ("kubeReserved", spec.kubelet.kube_reserved),
        ("systemReserved", spec.kubelet.system_reserved),
        ("evictionHard", spec.kubelet.eviction_hard),
    ):
        if values:
            kubelet[field] = dict(values)
    return (
        "apiVersion: node.eks.aws/v1alpha1\n"
        "kind: NodeConfig\n"
        "spec:\n"
        "  cluster:\n"
        f"    name: {json.dumps(cluster.name)}\n"
        f"    apiServerEndpoint: {json.dumps(cluster.endpoint)}\n"
        f"    certificateAuthority: {json.dumps(cluster.certificate_authority)}\n"
        f"    cidr: {json.dumps(cluster.cidr)}\n"
        "  kubelet:\n"
        "    config:\n"
        + (_yaml_map(kubelet, "      ") if kubelet else "      {}\n")
        + "    flags:\n"
        + _yaml_list([f"--register-with-taints={UNREGISTERED_TAINT}:NoExecute"], "    ")
    )


def user_data(spec: NodeClassSpec, cluster: ClusterInfo) -> str:
    parts = [("application/node.eks.aws", node_config(spec, cluster, spec.kubelet.max_pods))]
    if spec.user_data:
        kind = "application/node.eks.aws" if "kind: NodeConfig" in spec.user_data else "text/x-shellscript"
        parts.append((kind, spec.user_data))
    body = "".join(f"--{BOUNDARY}\nContent-Type: {kind}\n\n{text.rstrip()}\n\n" for kind, text in parts)
    return (
        f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n{body}--{BOUNDARY}--\n'
    )


def _block_devices(spec: NodeClassSpec) -> list[dict[str, Any]]:
    mappings = spec.block_device_mappings or ({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi"}},)
    out = []
    for mapping in mappings:
        ebs = dict(mapping.get("ebs") or {})
        gib = max(1, -(-spec_size_bytes(ebs.get("volumeSize")) // 2**30))
        device: dict[str, Any] = {"VolumeSize": gib, "VolumeType": str(ebs.get("volumeType") or "gp3")}
        device["Encrypted"] = bool(ebs.get("encrypted", True))
        device["DeleteOnTermination"] = bool(ebs.get("deleteOnTermination", True))
        for source, target in (("iops", "Iops"), ("throughput", "Throughput"), ("kmsKeyID", "KmsKeyId")):
            if ebs.get(source) is not None:
                device[target] = ebs[source]
        out.append({"DeviceName": str(mapping.get("deviceName") or "/dev/xvda"), "Ebs": device})
    return out


def spec_size_bytes(value: Any) -> int:
    from tenon.core.quantities import parse_quantity

    return int(parse_quantity(str(value or "20Gi")))


def _metadata(spec: NodeClassSpec) -> dict[str, Any]:
    options = spec.metadata_options
    return {
        "HttpEndpoint": str(options.get("httpEndpoint", "enabled")),
        "HttpProtocolIpv6": str(options.get("httpProtocolIPv6", "disabled")),
        "HttpPutResponseHopLimit": int(options.get("httpPutResponseHopLimit", 1)),
        "HttpTokens": str(options.get("httpTokens", "required")),
    }


def launch_template(
    spec: NodeClassSpec, resolution: Resolution, image: Image, cluster: ClusterInfo
) -> dict[str, Any]:
    """``{"name": ..., "data": LaunchTemplateData}`` for one (NodeClass, image)."""
    data: dict[str, Any] = {
        "ImageId": image.id,
        "UserData": base64.b64encode(user_data(spec, cluster).encode()).decode(),
        "SecurityGroupIds": [g.id for g in resolution.security_groups],
        "BlockDeviceMappings": _block_devices(spec),
        "MetadataOptions": _metadata(spec),
    }
    if resolution.instance_profile:
        data["IamInstanceProfile"] = {"Name": resolution.instance_profile}
    name = f"{names.GROUP}/{options_hash({'nodeClass': spec.name, 'data': data})}"
    return {"name": name, "data": data}
