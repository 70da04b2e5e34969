"""A local AWS for tests and ``tenon up --provider ec2``: moto's server on a free loopback port, with a fault
seam that can refuse capacity.

moto answers EC2, SSM and SQS over HTTP as AWS would, with two gaps that matter to an autoscaler: it never
refuses capacity (its CreateFleet has no ``Errors`` and launches any type), and it has no pricing API. The
price gap is closed inside the launcher (a shipped price table, a documented spot model). The capacity gap is
closed here, **outside the services' code path**: :class:`FaultSeam` wraps moto's WSGI application and, for
each CreateFleet, takes out the overrides whose offering is refused, lets moto launch from the rest, and adds
one ``Errors`` entry per refused override (``InsufficientInstanceCapacity`` by default), exactly the answer
shape AWS gives for an instant fleet. When every override is refused, no instance is launched and the answer
holds only the errors. The services talk to the endpoint as they would to AWS; nothing in them knows the seam
exists.

The seam is driven over HTTP on the same port (so the stack's processes and a test can share it):

* ``POST /_tenon/insufficient-capacity`` with ``{"offerings": [{"instanceType": "m5.large", "zone":
  "us-east-1a", "capacityType": "spot", "code": "InsufficientInstanceCapacity"}]}`` adds refusals (``zone``,
  ``capacityType`` and ``code`` are optional: a missing one matches any);
  ``GET`` lists them and how many overrides each refused; ``DELETE`` clears them;
* ``POST /_tenon/delay`` with ``{"action": "CreateFleet", "seconds": 30}`` holds the answer to every call of
  that action for that long **after** moto has carried it out (the instance exists, the caller has not heard
  so yet): how a test kills a launcher in the middle of CreateFleet. ``seconds: 0`` ends it; ``GET`` lists the
  delays and how many answers each held.

:class:`LocalAws` runs the server in a thread of the calling process (tests); ``python -m devtools.aws --port
N`` runs it as a process of its own (the local stack, through :class:`LocalAwsProcess`).
:func:`aws_environment` is what a process needs to use it and nothing else: the endpoint, a region,
throw-away credentials, and no instance-metadata lookups (so botocore never leaves loopback). :func:`seed`
prepares what a cluster's AWS account would have: subnets and a security group tagged for discovery, and the
interruption queue.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.broker import free_port
from tenon.core.wellknown import AWS_DISCOVERY_TAG

REGION = "us-east-1"
FAKE_ACCESS_KEY = "testing"
FAKE_SECRET_KEY = "testing"
CONTROL_PATH = "/_tenon/insufficient-capacity"
DELAY_PATH = "/_tenon/delay"
DISCOVERY_TAG = AWS_DISCOVERY_TAG
"""The tag the sandbox's subnets and security group carry (``<cluster>``)."""
DEFAULT_CLUSTER = "tenon-sandbox"
DEFAULT_QUEUE = "tenon-sandbox-interruption"
SANDBOX_AWS_ENDPOINT = "TENON_SANDBOX_AWS_ENDPOINT"
"""Tells the sandbox which local AWS's instances become Nodes
(:mod:`devtools.sandbox.controllers.ec2_instances`)."""

log = logging.getLogger("devtools.aws")

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def aws_environment(url: str, region: str = REGION) -> dict[str, str]:
    """The environment a process needs to reach the local AWS at ``url`` and nothing else."""
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_KEY,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


def client(service: str, url: str, region: str = REGION) -> Any:
    """A boto3 client of the local AWS (explicit region and credentials: no lookup leaves loopback)."""
    import boto3

    return boto3.session.Session().client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=FAKE_ACCESS_KEY,
        aws_secret_access_key=FAKE_SECRET_KEY,
    )


# --- the fault seam ---------------------------------------------------------------------------------------


@dataclass
class Refusal:
    """An offering the seam refuses: a missing zone or capacity type matches any."""

    instance_type: str
    zone: str | None = None
    capacity_type: str | None = None
    code: str = "InsufficientInstanceCapacity"
    refused: int = 0

    def matches(self, instance_type: str, zone: str | None, capacity_type: str) -> bool:
        return (
            self.instance_type == instance_type
            and self.zone in (None, zone)
            and self.capacity_type in (None, capacity_type)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "instanceType": self.instance_type,
            "zone": self.zone,
            "capacityType": self.capacity_type,
            "code": self.code,
            "refused": self.refused,
        }


def refusals_from(document: Mapping[str, Any]) -> list[Refusal]:
    """The refusals a control request asks for; ValueError naming the field when it is malformed."""
    offerings = document.get("offerings")
    if not isinstance(offerings, list):
        raise ValueError("offerings: must be a list")
    out = []
    for index, item in enumerate(offerings):
        if not isinstance(item, Mapping) or not isinstance(item.get("instanceType"), str):
            raise ValueError(f"offerings[{index}].instanceType: must be a string")
        out.append(
            Refusal(
                str(item["instanceType"]),
                item.get("zone") or None,
                item.get("capacityType") or None,
                str(item.get("code") or "InsufficientInstanceCapacity"),
            )
        )
    return out


@dataclass
class Override:
    index: int
    """The override's number in the request (``LaunchTemplateConfigs.<c>.Overrides.<index>``)."""
    config: int
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def instance_type(self) -> str:
        return self.fields.get("InstanceType", "")

    @property
    def zone(self) -> str | None:
        return self.fields.get("AvailabilityZone")


def _overrides(form: Mapping[str, str]) -> dict[tuple[int, int], Override]:
    found: dict[tuple[int, int], Override] = {}
    for key, value in form.items():
        parts = key.split(".")
        if len(parts) == 5 and parts[0] == "LaunchTemplateConfigs" and parts[2] == "Overrides":
            config, index = int(parts[1]), int(parts[3])
            found.setdefault((config, index), Override(index, config)).fields[parts[4]] = value
    return found


def _without(form: Mapping[str, str], refused: set[tuple[int, int]]) -> dict[str, str]:
    """The request without the refused overrides, the others renumbered from 1 within their config."""
    kept = {k: v for k, v in form.items() if not _is_override(k)}
    by_config: dict[int, list[Override]] = {}
    for key, override in sorted(_overrides(form).items()):
        if key not in refused:
            by_config.setdefault(override.config, []).append(override)
    for config, overrides in by_config.items():
        for number, override in enumerate(overrides, start=1):
            for name, value in override.fields.items():
                kept[f"LaunchTemplateConfigs.{config}.Overrides.{number}.{name}"] = value
    return kept


def _is_override(key: str) -> bool:
    parts = key.split(".")
    return len(parts) == 5 and parts[0] == "LaunchTemplateConfigs" and parts[2] == "Overrides"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _error_items(refused: list[tuple[Override, Refusal]], capacity_type: str) -> str:
    items = []
    for override, refusal in refused:
        zone = f"<availabilityZone>{_xml(override.zone)}</availabilityZone>" if override.zone else ""
        items.append(
            "<item><launchTemplateAndOverrides><overrides>"
            f"<instanceType>{_xml(override.instance_type)}</instanceType>{zone}"
            "</overrides></launchTemplateAndOverrides>"
            f"<lifecycle>{_xml(capacity_type)}</lifecycle>"
            f"<errorCode>{_xml(refusal.code)}</errorCode>"
            f"<errorMessage>There is no {_xml(capacity_type)} capacity for {_xml(override.instance_type)} "
            f"in {_xml(override.zone or 'any zone')} (refused by the local AWS's fault seam)</errorMessage>"
            "</item>"
        )
    return "<errorSet>" + "".join(items) + "</errorSet>"


class FaultSeam:
    """WSGI middleware in front of moto: refuses configured offerings in CreateFleet (see the module doc)."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.refusals: list[Refusal] = []
        self.delays: dict[str, float] = {}
        """Action -> seconds its answers are held after moto carried it out."""
        self.held: dict[str, int] = {}

    def refuse(self, refusals: Iterable[Refusal]) -> None:
        with self.lock:
            self.refusals.extend(refusals)

    def clear(self) -> None:
        with self.lock:
            self.refusals.clear()
            self.delays.clear()

    def delay(self, action: str, seconds: float) -> None:
        with self.lock:
            if seconds > 0:
                self.delays[action] = seconds
            else:
                self.delays.pop(action, None)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == CONTROL_PATH:
            return self._control(environ, start_response)
        if environ.get("PATH_INFO") == DELAY_PATH:
            return self._delay_control(environ, start_response)
        form_post = "form-urlencoded" in environ.get("CONTENT_TYPE", "")
        if environ.get("REQUEST_METHOD") != "POST" or not form_post:
            return self.app(environ, start_response)
        body = _read_body(environ)
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if form.get("Action") != "CreateFleet" or not self.refusals:
            answer = self.app(_with_body(environ, body), start_response)
        else:
            answer = self._create_fleet(environ, form, start_response)
        return self._held(str(form.get("Action") or ""), answer)

    def _held(self, action: str, answer: Iterable[bytes]) -> Iterable[bytes]:
        """The answer, once the action's delay (if any) is over: moto has already carried the call out."""
        with self.lock:
            seconds = self.delays.get(action, 0.0)
            if seconds:
                self.held[action] = self.held.get(action, 0) + 1
        if not seconds:
            return answer
        data = b"".join(answer)
        time.sleep(seconds)
        return [data]

    def _refused(self, form: Mapping[str, str]) -> tuple[list[tuple[Override, Refusal]], str]:
        capacity_type = form.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        refused = []
        with self.lock:
            for _, override in sorted(_overrides(form).items()):
                for refusal in self.refusals:
                    if refusal.matches(override.instance_type, override.zone, capacity_type):
                        refusal.refused += 1
                        refused.append((override, refusal))
                        break
        return refused, capacity_type

    def _create_fleet(
        self, environ: dict[str, Any], form: dict[str, str], start_response: StartResponse
    ) -> Iterable[bytes]:
        refused, capacity_type = self._refused(form)
        if not refused:
            return self.app(_with_body(environ, urllib.parse.urlencode(form).encode()), start_response)
        errors = _error_items(refused, capacity_type)
        left = _without(form, {(o.config, o.index) for o, _ in refused})
        if not any(_is_override(k) for k in left):
            xml = (
                '<?xml version="1.0" encoding="utf-8"?>'
                '<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15">'
                f"<fleetId>fleet-{uuid.uuid4()}</fleetId><fleetInstanceSet/>{errors}"
                "<requestId>fault-seam</requestId></CreateFleetResponse>"
            )
            start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))])
            return [xml.encode()]
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], *rest: Any) -> None:
            captured["status"], captured["headers"] = status, headers

        answer = b"".join(self.app(_with_body(environ, urllib.parse.urlencode(left).encode()), capture))
        if captured.get("status", "").startswith("200"):
            answer = answer.replace(b"</CreateFleetResponse>", errors.encode() + b"</CreateFleetResponse>")
        headers = [(k, v) for k, v in captured.get("headers", []) if k.lower() != "content-length"]
        start_response(captured.get("status", "500 Internal Server Error"), [*headers, _length(answer)])
        return [answer]

    def _control(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        status = "200 OK"
        try:
            if method == "POST":
                self.refuse(refusals_from(json.loads(_read_body(environ) or b"{}")))
            elif method == "DELETE":
                self.clear()
            with self.lock:
                payload: dict[str, Any] = {"offerings": [r.describe() for r in self.refusals]}
        except (ValueError, TypeError) as exc:
            status, payload = "400 Bad Request", {"error": str(exc)}
        data = json.dumps(payload).encode()
        start_response(status, [("Content-Type", "application/json"), _length(data)])
        return [data]

    def _delay_control(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status = "200 OK"
        try:
            if environ.get("REQUEST_METHOD") == "POST":
                action, seconds = delay_from(json.loads(_read_body(environ) or b"{}"))
                self.delay(action, seconds)
            with self.lock:
                payload: dict[str, Any] = {
                    "delays": [
                        {"action": a, "seconds": s, "held": self.held.get(a, 0)}
                        for a, s in self.delays.items()
                    ]
                }
        except (ValueError, TypeError) as exc:
            status, payload = "400 Bad Request", {"error": str(exc)}
        data = json.dumps(payload).encode()
        start_response(status, [("Content-Type", "application/json"), _length(data)])
        return [data]


def delay_from(document: Mapping[str, Any]) -> tuple[str, float]:
    """(action, seconds) of a delay control request; ValueError naming the field when it is malformed."""
    action = document.get("action")
    if not isinstance(action, str) or not action:
        raise ValueError("action: must be the name of an EC2 action (CreateFleet)")
    seconds = document.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= 600:
        raise ValueError("seconds: must be a number from 0 to 600")
    return action, float(seconds)


def _length(data: bytes) -> tuple[str, str]:
    return ("Content-Length", str(len(data)))


def _read_body(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    return environ["wsgi.input"].read(length) if length > 0 else b""


def _with_body(environ: dict[str, Any], body: bytes) -> dict[str, Any]:
    return {**environ, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}


# --- the server -------------------------------------------------------------------------------------------


class LocalAws:
    """moto's server behind the fault seam on ``127.0.0.1`` (a free port unless one is given), in a thread."""

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.seam: FaultSeam | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalAws:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        self.seam = FaultSeam(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            "127.0.0.1", self.port, self.seam, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-aws", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def reset(self) -> None:
        """Forget every resource and refusal (moto keeps its accounts per process, not per server: a test
        starts from a clean account this way)."""
        request = urllib.request.Request(self.url + "/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass
        if self.seam is not None:
            self.seam.clear()

    def refuse(self, *refusals: Refusal) -> None:
        assert self.seam is not None, "start the local AWS first"
        self.seam.refuse(refusals)

    def delay(self, action: str, seconds: float) -> None:
        assert self.seam is not None, "start the local AWS first"
        self.seam.delay(action, seconds)

    def __enter__(self) -> LocalAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def refuse_capacity(url: str, offerings: list[dict[str, Any]], timeout: float = 5.0) -> dict[str, Any]:
    """Ask the seam of the local AWS at ``url`` (any process) to refuse these offerings; returns what it
    refuses now."""
    request = urllib.request.Request(
        url + CONTROL_PATH,
        data=json.dumps({"offerings": offerings}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def delay_answers(url: str, action: str, seconds: float, timeout: float = 5.0) -> dict[str, Any]:
    """Ask the seam of the local AWS at ``url`` (any process) to hold ``action``'s answers ``seconds``."""
    request = urllib.request.Request(
        url + DELAY_PATH,
        data=json.dumps({"action": action, "seconds": seconds}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def instance_states(url: str) -> Iterator[tuple[str, str]]:
    """(instance id, state) of every instance the local AWS has (terminated ones too)."""
    ec2 = client("ec2", url)
    for page in ec2.get_paginator("describe_instances").paginate():
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                yield instance["InstanceId"], instance["State"]["Name"]


def live_instances(url: str) -> int:
    """Instances not terminated (pending, running, stopping, stopped, shutting-down)."""
    return sum(1 for _, state in instance_states(url) if state != "terminated")


class LocalAwsProcess:
    """``python -m devtools.aws`` as a child process (the local stack's AWS), logging to ``log_path``."""

    def __init__(self, log_path: Path, cluster: str = DEFAULT_CLUSTER, queue: str = DEFAULT_QUEUE) -> None:
        self.log_path = log_path
        self.cluster = cluster
        self.queue = queue
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LocalAwsProcess:
        """Start it and wait until it has seeded the account (its first line of output)."""
        command = [sys.executable, "-m", "devtools.aws", "--port", str(self.port), "--cluster", self.cluster]
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [*command, "--queue", self.queue],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while b'"queueUrl"' not in self._output():
            if self.process.poll() is not None:
                raise RuntimeError(f"the local AWS exited: {self._output()[-1500:].decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local AWS did not start within {timeout:g} s")
            time.sleep(0.05)
        return self

    def _output(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def stop(self) -> None:
        from devtools.processes import stop_process

        stop_process(self.process)
        self.process = None


@dataclass(frozen=True)
class Seeded:
    cluster: str
    queue_url: str
    subnets: tuple[str, ...]
    security_group: str


EC2_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def seed(url: str, cluster: str = DEFAULT_CLUSTER, queue: str = DEFAULT_QUEUE) -> Seeded:
    """Tag the default VPC's subnets and security group ``karpenter.sh/discovery=<cluster>``, create the
    interruption queue, the nodes' role :func:`node_role` and the EKS cluster (idempotent: each repeats
    harmlessly)."""
    ec2 = client("ec2", url)
    subnets = tuple(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"])
    group = ec2.describe_security_groups(GroupNames=["default"])["SecurityGroups"][0]["GroupId"]
    tags = [{"Key": DISCOVERY_TAG, "Value": cluster}]
    ec2.create_tags(Resources=[*subnets, group], Tags=tags)
    queue_url = client("sqs", url).create_queue(QueueName=queue)["QueueUrl"]
    iam = client("iam", url)
    role = node_role(cluster)
    try:
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(EC2_TRUST_POLICY))
    except iam.exceptions.EntityAlreadyExistsException:
        pass
    eks = client("eks", url)
    try:  # what launcher-ec2 asks for the nodes' endpoint and CA when they are not configured
        eks.create_cluster(
            name=cluster,
            roleArn=f"arn:aws:iam::123456789012:role/{cluster}-cluster",
            resourcesVpcConfig={"subnetIds": list(subnets), "securityGroupIds": [group]},
            kubernetesNetworkConfig={"serviceIpv4Cidr": SERVICE_CIDR},
        )
    except eks.exceptions.ResourceInUseException:
        pass
    return Seeded(cluster, queue_url, subnets, group)


SERVICE_CIDR = "172.20.0.0/16"
"""The local EKS cluster's service CIDR (EKS's default range; not the launcher's own default)."""


def node_role(cluster: str) -> str:
    """The nodes' IAM role (Karpenter's getting-started name), whose instance profile launcher-ec2 makes."""
    return f"KarpenterNodeRole-{cluster}"


DESCRIBED_FIELDS = (
    "InstanceType",
    "VCpuInfo",
    "MemoryInfo",
    "ProcessorInfo",
    "NetworkInfo",
    "GpuInfo",
    "InstanceStorageInfo",
    "Hypervisor",
    "SupportedUsageClasses",
    "SupportedVirtualizationTypes",
)
"""What launcher-ec2's catalog reads of a DescribeInstanceTypes answer (the rest is left out of the copy)."""
NETWORK_FIELDS = (
    "DefaultNetworkCardIndex",
    "NetworkCards",
    "MaximumNetworkInterfaces",
    "Ipv4AddressesPerInterface",
    "EncryptionInTransitSupported",
)


KEPT_BELOW: dict[str, Any] = {
    "VCpuInfo": {"DefaultVCpus": None},
    "ProcessorInfo": {"SupportedArchitectures": None, "Manufacturer": None},
    "InstanceStorageInfo": {"TotalSizeInGB": None},
    "GpuInfo": {"Gpus": {"Name": None, "Manufacturer": None, "Count": None, "MemoryInfo": None}},
    "NetworkInfo": {
        **dict.fromkeys(NETWORK_FIELDS),
        "NetworkCards": {"NetworkCardIndex": None, "MaximumNetworkInterfaces": None},
    },
}
"""The fields kept under each field (None: the whole value); lists are trimmed item by item."""


def _trim(value: Any, kept: dict[str, Any]) -> None:
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, dict):
            continue
        for key in [k for k in item if k not in kept]:
            del item[key]
        for key, below in kept.items():
            if below is not None and key in item:
                _trim(item[key], below)


def described_instance_types(region: str = REGION) -> dict[str, Any]:
    """EC2's instance types and their zones in ``region`` as moto ships them (AWS's own DescribeInstanceTypes
    and DescribeInstanceTypeOfferings answers, collected by moto; Apache-2.0), trimmed to what the catalog
    reads: the data ``tenon simulate`` builds an EC2NodeClass's catalog from, with no AWS at hand."""
    import gzip
    from importlib import metadata, resources

    base = resources.files("moto.ec2.resources")
    types = json.loads(gzip.decompress(base.joinpath("instance_types.json.gz").read_bytes()))
    offerings = base.joinpath(f"instance_type_offerings/availability-zone/{region}.json.gz")
    zones: dict[str, set[str]] = {}
    for offering in json.loads(gzip.decompress(offerings.read_bytes())):
        zones.setdefault(str(offering["InstanceType"]), set()).add(str(offering["Location"]))
    trimmed = []
    for name, described in sorted(types.items()):
        if name not in zones:
            continue
        entry = {k: described[k] for k in DESCRIBED_FIELDS if k in described}
        for key, kept in KEPT_BELOW.items():
            if key in entry:
                _trim(entry[key], kept)
        entry["Zones"] = sorted(zones[name])
        trimmed.append(entry)
    return {
        "region": region,
        "source": f"moto {metadata.version('moto')} (moto/ec2/resources: AWS's DescribeInstanceTypes and "
        "DescribeInstanceTypeOfferings answers as moto collected them; Apache-2.0), trimmed by devtools.aws",
        "instanceTypes": trimmed,
    }


def write_described_instance_types(path: Path, region: str = REGION) -> int:
    """Write :func:`described_instance_types` as JSON, one instance type a line (stable, diffable); how many
    types."""
    document = described_instance_types(region)
    lines = [json.dumps(t, sort_keys=True, separators=(",", ":")) for t in document["instanceTypes"]]
    head = {k: v for k, v in document.items() if k != "instanceTypes"}
    text = json.dumps(head, sort_keys=True)[:-1] + ', "instanceTypes": [\n' + ",\n".join(lines) + "\n]}\n"
    path.write_text(text)
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.aws --port N``: serve until SIGTERM/SIGINT, seeded for ``--cluster``."""
    parser = argparse.ArgumentParser(prog="python -m devtools.aws", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("--queue", default=DEFAULT_QUEUE)
    parser.add_argument(
        "--write-instance-types",
        type=Path,
        metavar="PATH",
        help="write moto's us-east-1 instance types (trimmed JSON) to PATH and exit",
    )
    args = parser.parse_args(argv)
    if args.write_instance_types:
        count = write_described_instance_types(args.write_instance_types)
        print(f"{count} instance types written to {args.write_instance_types}")
        return 0
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    aws = LocalAws(args.port).start()
    seeded = seed(aws.url, args.cluster, args.queue)
    print(json.dumps({"url": aws.url, "queueUrl": seeded.queue_url}), flush=True)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    stopping.wait()
    aws.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
