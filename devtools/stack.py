"""The whole system on one machine: broker, sandbox clusters and every service, each its own process.

:class:`LocalStack` is what ``tenon up`` (and ``make run``) and the end-to-end tests stand on. It starts
``nats-server`` from the wheel, ``tenon sandbox`` (a workload and a management cluster, two kubeconfigs), then
each service as ``tenon run <name>`` (``python -m tenon.cli.main run <name>``) with the environment a
Deployment would give it (``TENON_NATS_URL``, ``TENON_KUBECONFIG``, ``TENON_MANAGEMENT_KUBECONFIG``, its own
``TENON_NATS_USER``/``_PASSWORD``: the broker lets each service publish only the events it owns, see
:mod:`devtools.nats_permissions`), logging JSON lines to ``<run dir>/<service>.log``. Services can be killed
and restarted individually (``kill(name)``, ``start_service(name)``), which is how tests prove crash safety.
``stop()`` ends everything, services first, with SIGTERM and then SIGKILL for stragglers. With
``provider="ec2"`` a local AWS (:class:`devtools.aws.LocalAwsProcess`) starts first, the EC2 services
replace ``launcher-capi``, and the sandbox turns the local AWS's instances into Nodes.

:func:`apply_manifests` creates Kubernetes objects in the right cluster (Cluster API kinds in the management
cluster, everything else in the workload cluster), and :func:`observe` reads the state a person watching the
demo cares about.

Each service serves ``/healthz``, ``/readyz`` and ``/metrics`` on a free loopback port of its own
(``TENON_HEALTH_PORT``, remembered in ``health_ports``); :meth:`LocalStack.scrape_metrics` and
:func:`metric_values` read them, which is how ``tenon up --json`` reports ``metrics``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from devtools.aws import SANDBOX_AWS_ENDPOINT, LocalAwsProcess, aws_environment
from devtools.broker import LOCAL_MAX_PAYLOAD, Broker, LocalNatsServer, free_port
from devtools.nats_permissions import OPERATOR, Identities
from devtools.processes import kill_process, stop_process
from tenon.runtime.kube import Kube, KubeApiError, load_kube
from tenon.runtime.kube.resources import BY_KIND
from tenon.services import SERVICES

MANAGEMENT_KINDS = {"MachineDeployment", "Machine", "MachineSet", "Cluster"}
EC2_SERVICES = ("launcher-ec2", "interruption-handler")
"""Started only with the local AWS (``provider="ec2"``): they need an AWS endpoint and a queue."""
PROVIDER_SERVICES = {
    "capi": tuple(s for s in SERVICES if s not in EC2_SERVICES),
    "ec2": tuple(s for s in SERVICES if s != "launcher-capi"),
}
"""The services of each provider's stack: Cluster API machines, or EC2 instances of the local AWS."""
DEMO_DIR = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "capi-demo"


@dataclass
class LocalStack:
    profile: str = "fast"
    time_scale: float = 1.0
    run_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tenon-run-")))
    provider: str = "capi"
    """``capi`` (Cluster API machines in the management cluster) or ``ec2`` (instances of a local AWS, moto's
    server behind :mod:`devtools.aws`'s fault seam; its instances join the workload cluster as Nodes)."""
    services: tuple[str, ...] = ()
    """The services to start (default: the provider's, :data:`PROVIDER_SERVICES`)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    identities: Identities = field(default_factory=Identities)
    """One NATS user per service with the broker permissions of its events (passwords made for this run);
    each service process connects as its own (``identities.env(name)``)."""
    anonymous: str | None = OPERATOR
    """Who a client without credentials is (``tenon tap --server URL``): the operator, who reads and writes
    nothing; None refuses it."""

    def __post_init__(self) -> None:
        if self.provider not in PROVIDER_SERVICES:
            raise ValueError(f"provider {self.provider!r}: expected one of {', '.join(PROVIDER_SERVICES)}")
        self.services = self.services or PROVIDER_SERVICES[self.provider]
        self.aws: LocalAwsProcess | None = None
        self.broker: Broker | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.workload_kubeconfig = self.run_dir / "workload.kubeconfig"
        self.management_kubeconfig = self.run_dir / "management.kubeconfig"
        self.health_ports: dict[str, int] = {}
        """Each service process's /healthz, /readyz and /metrics port (on 127.0.0.1), by its key."""

    @property
    def nats_url(self) -> str:
        assert self.broker is not None
        return self.broker.url

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "TENON_NATS_URL": self.nats_url,
                "TENON_KUBECONFIG": str(self.workload_kubeconfig),
                "TENON_MANAGEMENT_KUBECONFIG": str(self.management_kubeconfig),
                "TENON_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.profile == "fast":
            # the fast profile compresses the cluster's time; disruption's settle period (Karpenter's 15 s
            # validation) is compressed with it, so a demo or a test does not wait on it
            env.setdefault("TENON_DISRUPTION_SETTLE", "1s")
        if self.aws is not None:
            env.update(ec2_environment(self.aws, fast=self.profile == "fast"))
        env.update(self.extra_env)
        return env

    def start(self) -> LocalStack:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.provider == "ec2":
            self.aws = LocalAwsProcess(self.run_dir / "aws.log").start()
        self.broker = self.start_broker()
        self._start_sandbox()
        for name in self.services:
            self.start_service(name)
        return self

    def start_broker(self) -> Broker:
        """nats-server with one user per service (a subclass may start a cluster instead)."""
        return LocalNatsServer(
            store_dir=self.run_dir / "jetstream",
            log_path=self.run_dir / "nats.log",
            max_payload=LOCAL_MAX_PAYLOAD,
            config=self.identities.authorization(anonymous=self.anonymous),
        ).start()

    def _start_sandbox(self) -> None:
        command = [
            sys.executable,
            "-m",
            "tenon.cli.main",
            "sandbox",
            "--port",
            str(free_port()),
            "--management-port",
            str(free_port()),
            "--kubeconfig",
            str(self.workload_kubeconfig),
            "--management-kubeconfig",
            str(self.management_kubeconfig),
            "--profile",
            self.profile,
            "--time-scale",
            str(self.time_scale),
        ]
        self._spawn("sandbox", command)
        deadline = time.monotonic() + 30
        while not (self.workload_kubeconfig.exists() and self.management_kubeconfig.exists()):
            if self.processes["sandbox"].poll() is not None:
                raise RuntimeError(f"the sandbox exited: {self.tail('sandbox')}")
            if time.monotonic() > deadline:
                raise RuntimeError("the sandbox did not write its kubeconfigs within 30 s")
            time.sleep(0.05)

    def start_service(self, name: str, *, replica: int = 1) -> str:
        """Start one replica of a service; returns its key in ``processes`` (``name``, or ``name#2``...)."""
        key = name if replica == 1 else f"{name}#{replica}"
        self.health_ports[key] = free_port()
        env = {
            "TENON_IDENTITY": f"{name}-{replica}-{os.getpid()}",
            "TENON_HEALTH_HOST": "127.0.0.1",
            "TENON_HEALTH_PORT": str(self.health_ports[key]),
            **self.identities.env(name),
        }
        self._spawn(key, [sys.executable, "-m", "tenon.cli.main", "run", name], env)
        return key

    def _spawn(self, name: str, command: list[str], extra: Mapping[str, str] | None = None) -> None:
        env = self.env() if self.broker else dict(os.environ)
        env.update(extra or {})
        log = open(self.run_dir / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    def scrape_metrics(self, timeout: float = 2.0) -> tuple[dict[str, str], dict[str, str]]:
        """Each running service's ``/metrics`` text by key, and why a service had none (not serving, gone)."""
        texts: dict[str, str] = {}
        unavailable: dict[str, str] = {}
        for key, port in self.health_ports.items():
            process = self.processes.get(key)
            if process is None or process.poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
                    texts[key] = response.read().decode()
            except (OSError, ValueError) as exc:
                unavailable[key] = f"no metrics on 127.0.0.1:{port}: {exc}"
        return texts, unavailable

    def kill(self, name: str) -> None:
        """SIGKILL, as a crash would."""
        kill_process(self.processes.pop(name, None))

    def terminate(self, name: str, timeout: float = 15.0) -> None:
        stop_process(self.processes.pop(name, None), timeout)

    def dead_services(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def tail(self, name: str, chars: int = 1500) -> str:
        with contextlib.suppress(OSError):
            return (self.run_dir / f"{name}.log").read_text(errors="replace")[-chars:]
        return ""

    def stop(self) -> None:
        for name in [n for n in self.processes if n != "sandbox"]:
            self.terminate(name)
        self.terminate("sandbox")
        if self.broker is not None:
            self.broker.stop()
        if self.aws is not None:
            self.aws.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ec2_environment(aws: LocalAwsProcess, *, fast: bool) -> dict[str, str]:
    """What the EC2 stack's processes need: the local AWS (and nothing beyond loopback), the cluster's name
    its subnets are tagged with, the interruption queue; the sandbox makes its instances Nodes. The fast
    profile polls instances often (a node's whole life takes seconds there)."""
    env = {
        **aws_environment(aws.url),
        "TENON_AWS_ENDPOINT": aws.url,
        "TENON_CLUSTER_NAME": aws.cluster,
        "TENON_INTERRUPTION_QUEUE": aws.queue,
        SANDBOX_AWS_ENDPOINT: aws.url,
    }
    if fast:
        env["TENON_EC2_POLL"] = "0.5s"
    return env


def metric_values(texts: Iterable[str]) -> dict[str, float]:
    """tenon's and Karpenter's metrics (``tenon_*``, ``karpenter_*``) from Prometheus expositions, by sample
    name, summed over label sets and processes: ``karpenter_nodeclaims_created_total`` is every claim created
    by any service. Histograms contribute their ``_count`` and ``_sum``, not their buckets."""
    values: dict[str, float] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.startswith(("karpenter_", "tenon_")) or sample.name.endswith("_bucket"):
                    continue
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return dict(sorted(values.items()))


def load_manifests(paths: Iterable[Path]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in paths:
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


async def apply_manifests(workload: Kube, management: Kube, documents: Iterable[dict[str, Any]]) -> None:
    """Create each object in its cluster (replace it if it exists)."""
    for doc in documents:
        ref = BY_KIND.get(doc["kind"])
        if ref is None:
            raise ValueError(f"{doc['kind']} {doc['metadata'].get('name')}: kind not supported by apply")
        kube = management if doc["kind"] in MANAGEMENT_KINDS else workload
        namespace = doc["metadata"].get("namespace") or ("default" if ref.namespaced else None)
        try:
            await kube.create(ref, doc, namespace)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            current = await kube.get(ref, doc["metadata"]["name"], namespace)
            replacement = dict(
                doc, metadata={**doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            )
            await kube.replace(ref, replacement)


async def connect(stack: LocalStack) -> tuple[Kube, Kube]:
    return (
        await load_kube(str(stack.workload_kubeconfig)),
        await load_kube(str(stack.management_kubeconfig)),
    )


def demo_manifests(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(infrastructure, workload) of a named demo. ``inflate``: the CAPI NodePool and NodeClass, three member
    MachineDeployments c3-4/c3-8/c3-16 priced in proportion to vCPU, a 100m DaemonSet, then a Deployment
    ``inflate`` of 8 pods x 1 vCPU."""
    if name != "inflate":
        raise ValueError(f"unknown demo {name!r} (known: inflate)")
    infrastructure = load_manifests(
        [DEMO_DIR / "nodepool.yaml", DEMO_DIR / "machinedeployments.yaml", DEMO_DIR / "daemonset.yaml"]
    )
    [deployment] = load_manifests([DEMO_DIR / "workload-eight-1cpu.yaml"])
    deployment["metadata"]["name"] = "inflate"
    labels = {"app": "inflate"}
    deployment["spec"]["selector"] = {"matchLabels": labels}
    deployment["spec"]["template"]["metadata"]["labels"] = labels
    return infrastructure, [deployment]
